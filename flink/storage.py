"""Where a Flink snapshot's bytes live: its directory, ``_metadata`` and referenced files.

Resolution rules (Flink's filesystem checkpoint storage):
    * a relative file handle is relative to the directory that holds ``_metadata``;
    * an absolute file handle is a Flink ``Path``: ``file:/x``, ``file:///x`` and ``/x`` are
      local files; other schemes (``s3://``, ``hdfs://`` ...) go through fsspec;
    * a file is *exclusive* when it lies inside the snapshot directory, *shared* when it lies
      in the job's ``shared/`` directory (``<job-dir>/shared``, for ``chk-N`` snapshots), and
      *external* otherwise.

A checkpoint copied to another place still names its files by their old absolute paths.
Opened for reading *in place* (``in_place=True``: inspect, verify, export, diff, report), an
absolute path ``<old job dir>/{shared,taskowned,chk-N}/<name>`` whose file is missing where
it says is read from the same place of this checkpoint's job directory when a file is there
(never outside it); the snapshot's :attr:`FlinkSnapshot.moved` names both directories so
that the command says so once. Writing a fixed ``_metadata`` stays ``relocate --auto``'s.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from statekit.flink.layout import CHECKPOINT_DIR_PATTERN, METADATA_FILE, SHARED_DIR
from statekit.flink.metadata import is_flink_metadata, read_flink_metadata
from statekit.flink.model import FlinkCheckpointMetadata, StreamHandle, StreamHandleKind
from statekit.statefmt.errors import (
    BadInputError,
    CorruptStateError,
    IncompleteCheckpointError,
    NotACheckpointError,
    PathNotFoundError,
    StatekitError,
    UnsafePathError,
)
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.layout import MAX_METADATA_BYTES
from statekit.statefmt.paths import check_relative_path

__all__ = [
    "FlinkSnapshot",
    "FlinkFileRef",
    "FileLocation",
    "load_snapshot",
    "referenced_files",
    "resolve_absolute",
    "read_stream_bytes",
    "read_stream_ranges",
    "resolve_stream",
    "moved_note",
]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(.*)$")


@dataclass(frozen=True)
class FileLocation:
    """A resolved file: the filesystem seam and the path inside it."""

    io: FileIO = field(compare=False, repr=False)
    protocol: str
    path: str

    @property
    def url(self) -> str:
        """A user-facing name of the file."""
        return str(self.io.url(self.path))


@dataclass(frozen=True)
class FlinkSnapshot:
    """An opened Flink checkpoint or savepoint: its location and parsed ``_metadata``.

    Attributes:
        path: The snapshot directory (user-facing URL or local path).
        metadata_path: The ``_metadata`` file.
        metadata: The parsed metadata.
        directory: The snapshot directory as a :class:`FileLocation`.
        storage_options: fsspec options used to open it (reused for same-scheme files).
        uids: Operator uids the user named (``--uid``); operators whose id is the hash of one
            carry it as their uid (see :mod:`statekit.flink.uids`).
        in_place: Read the files of a moved checkpoint from its own job directory.
        moved: ``(old job directory as written, this job directory)`` when files are read in place.
    """

    path: str
    metadata_path: str
    metadata: FlinkCheckpointMetadata
    directory: FileLocation = field(repr=False, compare=False)
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    uids: tuple[str, ...] = ()
    in_place: bool = False
    moved: tuple[str, str] | None = None

    @property
    def job_dir(self) -> FileLocation | None:
        """The job directory holding ``shared/`` when this is a ``chk-N`` checkpoint."""
        name = posixpath.basename(self.directory.path)
        if not CHECKPOINT_DIR_PATTERN.match(name):
            return None
        return FileLocation(self.directory.io, self.directory.protocol,
                            posixpath.dirname(self.directory.path))

    @property
    def checkpoint_id(self) -> int:
        """The checkpoint id from the metadata."""
        return int(self.metadata.checkpoint_id)


@dataclass(frozen=True)
class FlinkFileRef:
    """A file a snapshot references.

    Attributes:
        location: The path as written in ``_metadata`` (relative or absolute).
        url: The resolved file name shown to users.
        size: The size Flink recorded.
        relative: True for a relative file handle.
        scope: ``exclusive``, ``shared`` or ``external`` (see the module docstring).
        role: ``data``, ``meta``, ``shared``, ``private``, ``operator``, ``channel``,
            ``changelog`` or ``coordinator``.
        operator: The operator's uid or id.
        subtask: The subtask index (``None`` for coordinator state).
        resolved: The resolved location, or ``None`` when it cannot be resolved.
        problem: Why it cannot be resolved (unsafe relative path, unknown filesystem).
        moved_from: The path as written, when the file is read in place from this job directory.
    """

    location: str
    url: str
    size: int
    relative: bool
    scope: str
    role: str
    operator: str
    subtask: int | None
    resolved: FileLocation | None = field(default=None, compare=False, repr=False)
    problem: str | None = None
    moved_from: str | None = None

    @property
    def key(self) -> tuple[str, str] | None:
        """Identity of the resolved file (protocol, path), for reference counting."""
        return (self.resolved.protocol, self.resolved.path) if self.resolved else None


def _protocol(io: FileIO) -> str:
    return "file" if io.is_local else io.protocol


def load_snapshot(path: str, *, storage_options: dict[str, Any] | None = None, uids: Iterable[str] = (),
                  strict_uids: bool = True, in_place: bool = False) -> FlinkSnapshot:
    """Open a snapshot directory or its ``_metadata`` file and parse the metadata.

    Args:
        path: The snapshot directory or its ``_metadata``, local or an fsspec URL.
        storage_options: fsspec options.
        uids: Operator uids to label operators with (metadata v3/v4 records none).
        strict_uids: Refuse a uid that names no operator of the snapshot.
        in_place: Read a moved checkpoint's files from its own job directory (read-only commands).

    Raises:
        BadInputError: With ``strict_uids``, a uid that names no operator.
        PathNotFoundError: Nothing at ``path``.
        IncompleteCheckpointError: A ``chk-N`` directory without ``_metadata``.
        NotACheckpointError: A directory without ``_metadata`` or a non-Flink ``_metadata``.
        MetadataError: A damaged Flink ``_metadata``.
    """
    options = dict(storage_options or {})
    io, fs_path = FileIO.for_path(path, options)
    if not io.exists(fs_path):
        raise PathNotFoundError("no such file or directory", path=path)
    if io.isdir(fs_path):
        directory, meta_path = fs_path, posixpath.join(fs_path, METADATA_FILE)
        if not io.isfile(meta_path):
            if CHECKPOINT_DIR_PATTERN.match(posixpath.basename(fs_path)):
                raise IncompleteCheckpointError(
                    "checkpoint directory has no _metadata: the checkpoint never completed",
                    path=path,
                )
            raise NotACheckpointError(
                "no _metadata here: not a Flink checkpoint or savepoint directory", path=path
            )
    else:
        directory, meta_path = posixpath.dirname(fs_path), fs_path
    data = io.read_bytes(io.check_inside(meta_path, directory), limit=MAX_METADATA_BYTES)
    if not is_flink_metadata(data[:4]):
        raise NotACheckpointError("not a Flink _metadata file (wrong magic number)",
                                  path=io.url(meta_path))
    metadata = read_flink_metadata(data, source=io.url(meta_path))
    names = tuple(dict.fromkeys(uids))
    if names:
        from statekit.flink.uids import label_operators, operator_id_for_uid, unmatched_uids

        unmatched = unmatched_uids(metadata, names)
        if unmatched and strict_uids:
            raise BadInputError(f"--uid {unmatched[0]!r} (operator id {operator_id_for_uid(unmatched[0])}) "
                                "names no operator of this snapshot", path=io.url(directory))
        metadata = label_operators(metadata, names)
    location = FileLocation(io, _protocol(io), directory)
    snapshot = FlinkSnapshot(io.url(directory), io.url(meta_path), metadata, location, options, names, in_place)
    if in_place:
        from dataclasses import replace

        snapshot = replace(snapshot, moved=_moved_job(snapshot))
    return snapshot


def moved_note(snapshot: FlinkSnapshot) -> str | None:
    """The one line a read-only command prints when it reads a moved checkpoint in place."""
    if snapshot.moved is None:
        return None
    old, new = snapshot.moved
    return (f"moved checkpoint: its _metadata names files under {old}; read from the same places in {new} "
            "(`statekit relocate --auto` writes a _metadata that names them)")


def _moved_job(snapshot: FlinkSnapshot) -> tuple[str, str] | None:
    """``(old job dir, this job dir)`` when some external file of a ``chk-N`` is read in place."""
    if snapshot.job_dir is None:
        return None
    for ref in referenced_files(snapshot):
        if ref.moved_from is not None:
            from statekit.flink.verify import JOB_FILE

            match = JOB_FILE.match(ref.moved_from)
            if match is not None:
                return match.group("job"), snapshot.job_dir.url
    return None


def _flink_path_parts(path: str) -> tuple[str | None, str]:
    match = _SCHEME.match(path)
    if match is None or len(match.group(1)) == 1:  # no scheme, or a Windows drive letter
        return None, path
    scheme, rest = match.group(1).lower(), match.group(2)
    if scheme == "file":
        if rest.startswith("//"):
            rest = "/" + rest[2:].split("/", 1)[1] if "/" in rest[2:] else "/"
        return "file", posixpath.normpath(rest) if rest else "/"
    return scheme, path


def resolve_absolute(snapshot: FlinkSnapshot, path: str) -> FileLocation:
    """Resolve an absolute Flink path to a filesystem and a path inside it.

    Raises:
        BadInputError: No fsspec filesystem can open the path's scheme.
    """
    scheme, rest = _flink_path_parts(path)
    if scheme in (None, "file"):
        io, fs_path = FileIO.for_path(rest)
        return FileLocation(io, "file", fs_path)
    options = snapshot.storage_options if scheme == snapshot.directory.protocol else None
    try:
        io, fs_path = FileIO.for_path(rest, options)
    except StatekitError:
        raise
    except Exception as exc:  # fsspec raises assorted errors for unknown or broken schemes
        raise BadInputError(f"cannot open filesystem for {scheme!r}: {exc}", path=path) from exc
    return FileLocation(io, _protocol(io), fs_path)


def _scope(snapshot: FlinkSnapshot, location: FileLocation) -> str:
    directory = snapshot.directory
    if location.protocol == directory.protocol:
        if location.path.startswith(directory.path.rstrip("/") + "/"):
            return "exclusive"
        job = snapshot.job_dir
        if job is not None:
            shared = posixpath.join(job.path, SHARED_DIR) + "/"
            if location.path.startswith(shared):
                return "shared"
    return "external"


def _ref(snapshot: FlinkSnapshot, handle: StreamHandle, role: str, operator: str,
         subtask: int | None) -> FlinkFileRef:
    path = handle.path or ""
    relative = handle.kind is StreamHandleKind.RELATIVE_FILE
    try:
        if relative:
            check_relative_path(path, source=snapshot.metadata_path)
            directory = snapshot.directory
            location = FileLocation(directory.io, directory.protocol,
                                    posixpath.join(directory.path, path))
        else:
            location = resolve_absolute(snapshot, path)
        scope = _scope(snapshot, location)
        moved_from = None
        if scope == "external" and not relative and snapshot.in_place:
            here = _in_place(snapshot, path, location)
            if here is not None:
                location, scope, moved_from = here, _scope(snapshot, here), path
        _check_links(snapshot, location, scope)
    except (UnsafePathError, BadInputError) as exc:
        return FlinkFileRef(path, path, handle.size, relative, "external", role, operator,
                            subtask, None, str(exc))
    return FlinkFileRef(path, location.url, handle.size, relative, scope,
                        role, operator, subtask, location, moved_from=moved_from)


def _in_place(snapshot: FlinkSnapshot, path: str, location: FileLocation) -> FileLocation | None:
    """The file of a moved checkpoint at the same place of its own job directory, if it is there
    and the file where ``path`` says is not."""
    from statekit.flink.verify import counterpart_path

    try:
        if location.io.isfile(location.path):
            return None
    except OSError:
        pass
    found = counterpart_path(snapshot, path)
    job = snapshot.job_dir
    if found is None or job is None:
        return None
    candidate = FileLocation(job.io, job.protocol, found)
    job.io.check_inside(candidate.path, job.path)
    return candidate


def _check_links(snapshot: FlinkSnapshot, location: FileLocation, scope: str) -> None:
    """An exclusive or shared file must stay in its directory once symlinks are resolved."""
    if scope == "exclusive":
        location.io.check_inside(location.path, snapshot.directory.path)
    elif scope == "shared" and snapshot.job_dir is not None:
        location.io.check_inside(location.path, posixpath.join(snapshot.job_dir.path, SHARED_DIR))


def referenced_files(snapshot: FlinkSnapshot) -> list[FlinkFileRef]:
    """Every file reference of the snapshot, in metadata order (a file may repeat)."""
    refs = []
    for op, subtask, role, handle in snapshot.metadata.stream_handles():
        if handle.kind in (StreamHandleKind.FILE, StreamHandleKind.RELATIVE_FILE):
            refs.append(_ref(snapshot, handle, role, op.label, subtask))
    return refs


def read_stream_bytes(
    snapshot: FlinkSnapshot, handle: StreamHandle, *, offset: int = 0, length: int | None = None
) -> bytes:
    """Read at most ``length`` bytes (default: to the end) at ``offset`` of a stream handle.

    Raises:
        PathNotFoundError: The referenced file does not exist.
        UnsafePathError: A relative path that escapes the snapshot directory.
        BadInputError: A handle without bytes or an unknown filesystem.
        CorruptStateError: A file whose size is not the one its handle records, an offset
            outside the stream or a negative length (they come from ``_metadata``: never trusted).
    """
    return next(read_stream_ranges(snapshot, handle, [(offset, length)]))


def read_stream_ranges(
    snapshot: FlinkSnapshot, handle: StreamHandle, ranges: Iterable[tuple[int, int | None]]
) -> Iterator[bytes]:
    """The bytes of each ``(offset, at most length, or None for "to the end")`` range, one open for all.

    Every range must start inside the stream — of the size its handle records, which a file must
    have — and a read stops at its end, so no offset or length read from ``_metadata`` makes a
    read past the stream (or an allocation of its size).

    Raises:
        As :func:`read_stream_bytes`.
    """
    if handle.kind is StreamHandleKind.BYTE_STREAM:
        data = handle.data or b""
        for offset, length in ranges:
            end = _range_end(offset, length, len(data), snapshot.metadata_path)
            yield data[offset:end]
        return
    if handle.kind is StreamHandleKind.KEY_GROUPS and handle.delegate is not None:
        yield from read_stream_ranges(snapshot, handle.delegate, ranges)
        return
    location = resolve_stream(snapshot, handle)
    with location.io.open_input(location.path) as stream:
        size = _size_of(stream)
        if size != handle.size:
            raise CorruptStateError(f"{size} bytes, _metadata records {handle.size} (truncated or replaced)",
                                    path=location.url)
        for offset, length in ranges:
            end = _range_end(offset, length, size, location.url)
            stream.seek(offset)
            data = stream.read(end - offset)
            if len(data) != end - offset:
                raise CorruptStateError(f"the file ended after {offset + len(data)} of {size} bytes "
                                        "while it was read", path=location.url)
            yield bytes(data)


def _range_end(offset: int, length: int | None, size: int, where: str) -> int:
    """The end of at most ``length`` bytes at ``offset`` (None: to the end) of a ``size``-byte
    stream: a read stops at the end of the stream, as a file's read does.

    Raises:
        CorruptStateError: The offset lies outside the stream, or the length is negative.
    """
    if not 0 <= offset <= size or (length is not None and length < 0):
        shown = "to the end" if length is None else f"{length} bytes"
        raise CorruptStateError(f"{shown} at offset {offset} of the {size}-byte stream: an offset or length in "
                                "_metadata is damaged", path=where)
    return size if length is None else min(offset + length, size)


def _size_of(stream: Any) -> int:
    size = getattr(stream, "size", None)
    if isinstance(size, int):
        return size
    position = stream.tell()
    end = int(stream.seek(0, 2))
    stream.seek(position)
    return end


def resolve_stream(snapshot: FlinkSnapshot, handle: StreamHandle) -> FileLocation:
    """The file of a file stream handle, inside the snapshot directory or its job's ``shared/``.

    Raises:
        BadInputError: An inline handle, or a path that cannot be resolved.
        UnsafePathError: A file outside the snapshot directory and its job's ``shared/``.
    """
    if handle.kind not in (StreamHandleKind.FILE, StreamHandleKind.RELATIVE_FILE):
        raise BadInputError(f"a {handle.kind.value} handle has no file", path=snapshot.metadata_path)
    ref = _ref(snapshot, handle, "data", "?", None)
    if ref.resolved is None:
        raise BadInputError(ref.problem or "cannot resolve state file", path=ref.location)
    if ref.scope == "external":
        raise UnsafePathError(
            "state file outside the snapshot directory and its job's shared/ directory; refusing "
            "to read it (a moved checkpoint: rewrite its paths with `statekit relocate --auto`)",
            path=ref.url,
        )
    return ref.resolved
