"""The CLI's one seam to the snapshot readers: statekit or Apache Flink, chosen by magic bytes.

``list``, ``inspect``, ``verify``, ``dispose`` and ``keygroup`` reach the readers only
through this module, and ``diff`` asks :func:`diff_flink` first. Each function returns a
typed result (a union naming both engines' result types); ``statekit.cli.render`` holds
the renderer of every one of them.

A path is a *Flink snapshot* when the ``_metadata`` it names starts with Flink's magic
number ``0x4960672d``: the file itself, a snapshot directory holding it, or (inspect and
verify only, as for statekit snapshots) a job directory whose latest complete ``chk-N``
holds it. Everything else goes to the statekit readers unchanged. ``dispose`` never
resolves a job directory: it deletes only what the path names.

Listing a directory lists statekit snapshots as before; when Flink snapshots are among
them (or only Flink snapshots are there), the result is a :class:`SnapshotList` whose rows
say which engine wrote each snapshot.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from statekit.flink.key_group_lookup import (
    DEFAULT_MAX_PARALLELISM,
    KEY_TYPES,
    KeyGroupLookup,
    flink_key_group,
    statekit_key_group,
    with_owning_subtask,
)
from statekit.readers.progress import Advance as Progress
from statekit.statefmt import layout
from statekit.statefmt.errors import BadInputError, MetadataError, NotACheckpointError, StatekitError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.keygroups import check_parallelism, compute_default_max_parallelism

if TYPE_CHECKING:
    from statekit.flink import (
        FlinkCheckpointEntry,
        FlinkDisposeResult,
        FlinkProblem,
        FlinkSnapshotSummary,
    )
    from statekit.flink.rewrite_report import FlinkModifyReport, FlinkRescaleReport
    from statekit.readers.diff import SavepointDiff
    from statekit.readers.inspection import SnapshotInspection
    from statekit.readers.listing import CheckpointList, CheckpointListing
    from statekit.readers.progress import ProgressFactory
    from statekit.readers.verification import VerifyReport
    from statekit.statefmt.keygroups import KeyGroupRange
    from statekit.writers.disposal import DisposalPlan
    from statekit.writers.rescale import RescaleReport
    from statekit.writers.savepoint_modification import ModifyReport

__all__ = [
    "FLINK_MAGIC",
    "KEY_TYPES",
    "list_any",
    "inspect_any",
    "verify_any",
    "dispose_any",
    "diff_flink",
    "lookup_key_group",
    "rescale_any",
    "modify_any",
    "flink_snapshot_path",
    "SnapshotListing",
    "SnapshotList",
    "FlinkInspection",
    "FlinkVerifyReport",
    "FlinkDisposal",
    "KeyGroupLookup",
]

FLINK_MAGIC = bytes.fromhex("4960672d")
_STATEKIT_MAGIC = layout.METADATA_MAGIC


# ----------------------------------------------------------------------------- detection


def _head(io: FileIO, path: str, size: int = 8) -> bytes:
    with io.open_input(io.check_inside(path, posixpath.dirname(path))) as stream:
        return bytes(stream.read(size))


def _check_magic(io: FileIO, path: str) -> bool:
    """True for a Flink ``_metadata``, False for a statekit one (any version, maybe truncated).

    Raises:
        MetadataError: Neither magic number, or the file ends inside one; the message names
            the path and the byte offset.
    """
    head = _head(io, path)
    if head.startswith(FLINK_MAGIC):
        return True
    if head.startswith(_STATEKIT_MAGIC[:-1]):
        return False
    if len(head) < len(_STATEKIT_MAGIC) and (FLINK_MAGIC.startswith(head) or _STATEKIT_MAGIC.startswith(head)):
        raise MetadataError(
            f"truncated _metadata: the file ends at byte offset {len(head)}, inside the magic "
            "number; the snapshot is damaged or was never completed",
            path=io.url(path),
        )
    raise MetadataError(
        f"not a statekit or Apache Flink _metadata file: unknown magic number 0x{head[:4].hex()} "
        "at byte offset 0",
        path=io.url(path),
    )


def flink_snapshot_path(
    url: str, *, allow_job_dir: bool = True, storage_options: Mapping[str, object] | None = None
) -> str | None:
    """The Flink snapshot directory or ``_metadata`` file ``url`` names, or ``None``.

    Args:
        url: A snapshot directory, a ``_metadata`` file or (with ``allow_job_dir``) a job
            directory, as a local path or fsspec URL.
        allow_job_dir: Resolve a job directory to its latest complete ``chk-N``.
        storage_options: fsspec options.

    Returns:
        ``None`` when ``url`` is not a Flink snapshot (the statekit readers then explain why).

    Raises:
        MetadataError: The ``_metadata`` has neither magic number, or is cut inside it.
    """
    io, path = FileIO.for_path(url, None if storage_options is None else dict(storage_options))
    try:
        if not io.exists(path):
            return None
        if not io.isdir(path):
            if posixpath.basename(path) != layout.METADATA_FILE:  # any file name, Flink magic only
                return url if _head(io, path, 4) == FLINK_MAGIC else None
            return url if _check_magic(io, path) else None
        meta = posixpath.join(path, layout.METADATA_FILE)
        if io.isfile(meta):
            return url if _check_magic(io, meta) else None
        if not allow_job_dir:
            return None
        from statekit.readers.snapshot import latest_complete_checkpoint

        latest = latest_complete_checkpoint(io, path)
        if latest is not None and _check_magic(io, posixpath.join(latest, layout.METADATA_FILE)):
            return io.url(latest)
    except OSError:
        return None  # the statekit reader reports the I/O error with its own message
    return None


# ----------------------------------------------------------------------------- listing


@dataclass(frozen=True)
class SnapshotListing:
    """One snapshot directory of a listing that holds Flink snapshots.

    Attributes:
        engine: ``statekit`` or ``flink``: who wrote the snapshot; an incomplete snapshot
            (no ``_metadata``) takes the engine of its siblings, else ``unknown``.
        status: ``complete``, ``incomplete`` (no ``_metadata``) or ``damaged``.
        created_at_ms: Creation time (statekit records it; Flink does not).
        modified: Modification time of ``_metadata`` or the directory (Flink), epoch s.
        age_s: Seconds since creation (statekit) or modification (Flink).
    """

    engine: str
    path: str
    job_id: str
    checkpoint_id: int | None
    status: str
    kind: str
    format: str
    size: int
    created_at_ms: int | None
    modified: float | None
    age_s: float | None
    problem: str = ""

    def to_json(self) -> dict[str, Any]:
        """The row as JSON data."""
        return asdict(self)

    @classmethod
    def from_statekit(cls, row: CheckpointListing) -> SnapshotListing:
        """A row of the statekit listing."""
        return cls("statekit", row.path, row.job_id, row.checkpoint_id, row.status, row.kind,
                   row.format, row.size, row.created_at_ms, None, row.age_s, row.problem)

    @classmethod
    def from_flink(cls, entry: FlinkCheckpointEntry) -> SnapshotListing:
        """A row of the Flink listing."""
        status = "complete" if entry.complete else "damaged" if entry.error else "incomplete"
        problem = entry.error or ("" if entry.complete else "no _metadata")
        return cls("flink", entry.path, entry.job_id or "", entry.checkpoint_id, status,
                   entry.kind, entry.format or "", entry.size, None, entry.modified,
                   entry.age_seconds, problem)


@dataclass(frozen=True)
class SnapshotList:
    """Every snapshot under a directory that holds Flink snapshots (maybe statekit ones too)."""

    path: str
    listings: list[SnapshotListing]

    def to_json(self) -> dict[str, Any]:
        """``{"path", "snapshots": [...]}``, like the statekit listing plus ``engine``."""
        return {"path": self.path, "snapshots": [row.to_json() for row in self.listings]}


def _flink_rows(url: str) -> list[SnapshotListing]:
    from statekit.flink import list_flink_checkpoints

    try:
        return [SnapshotListing.from_flink(e) for e in list_flink_checkpoints(url)]
    except StatekitError:
        return []


def _is_flink_dir(url: str) -> bool:
    """True when the directory's ``_metadata`` starts with Flink's magic number."""
    io, path = FileIO.for_path(url)
    try:
        return _head(io, posixpath.join(path, layout.METADATA_FILE), 4) == FLINK_MAGIC
    except (OSError, StatekitError):
        return False


def list_any(url: str) -> CheckpointList | SnapshotList:
    """Checkpoints and savepoints under ``url``: statekit's listing, with Flink rows filled in.

    Returns:
        The statekit ``CheckpointList`` when no Flink snapshot is there, else a
        :class:`SnapshotList`.
    """
    from statekit.readers.listing import list_checkpoints

    try:
        native = list_checkpoints(url)
    except NotACheckpointError as exc:
        rows = _flink_rows(url)
        if not rows:
            raise exc
        io, path = FileIO.for_path(url)
        return SnapshotList(io.url(path), rows)
    if not any(row.status == "flink" for row in native.listings):
        return native
    flink = {row.path: row for row in _flink_rows(url)}
    native_paths = {row.path for row in native.listings}
    merged: list[SnapshotListing] = []
    for row in native.listings:
        if row.status != "flink":
            merged.append(SnapshotListing.from_statekit(row))
        elif row.path in flink:
            merged.append(flink[row.path])
        else:  # below the depth the Flink listing scans: list the snapshot itself
            merged += _flink_rows(row.path)
    merged += [row for path, row in flink.items()
               if path not in native_paths and (row.status != "damaged" or _is_flink_dir(path))]
    merged = _with_incomplete_engines(merged)
    merged.sort(key=lambda r: (r.job_id, r.kind, r.checkpoint_id or -1, r.path))
    return SnapshotList(native.path, merged)


def _with_incomplete_engines(rows: list[SnapshotListing]) -> list[SnapshotListing]:
    """Incomplete rows (no ``_metadata``) take the engine of their complete siblings.

    A staging folder (``.<name>.inprogress-<hex>``) is statekit's whatever its siblings are.
    """
    from statekit.readers.inventory import is_in_progress_dir

    engines: dict[str, set[str]] = {}
    for row in rows:
        if row.status != "incomplete":
            engines.setdefault(posixpath.dirname(row.path), set()).add(row.engine)
    out = []
    for row in rows:
        if row.status == "incomplete" and not is_in_progress_dir(posixpath.basename(row.path)):
            found = engines.get(posixpath.dirname(row.path), set())
            row = replace(row, engine=next(iter(found)) if len(found) == 1 else "unknown")
        out.append(row)
    return out


# ----------------------------------------------------------------------------- inspect


def _range(kg: KeyGroupRange | None) -> list[int] | None:
    return None if kg is None else [kg.start, kg.end]


def _formula_ranges(max_parallelism: int, parallelism: int) -> list[list[int]]:
    from statekit.statefmt.keygroups import compute_key_group_range_for_operator_index

    try:
        return [_range(compute_key_group_range_for_operator_index(max_parallelism, parallelism, i)) or []
                for i in range(parallelism)]
    except (StatekitError, ValueError, ZeroDivisionError):
        return []


@dataclass(frozen=True)
class FlinkInspection:
    """``inspect`` of a Flink snapshot: the library summary, ready for JSON and rendering."""

    summary: FlinkSnapshotSummary

    def operator_states(self, index: int) -> dict[str, str]:
        """Operator (non-keyed) state names of operator ``index`` and their distribution mode."""
        op = self.summary.operators[index]
        return {s.name: s.mode for sub in op.subtasks for s in sub.operator_states}

    def key_group_ranges(self, index: int) -> list[list[int]]:
        """Flink's key-group range of every subtask of operator ``index`` (by the formula)."""
        op = self.summary.operators[index]
        return _formula_ranges(op.max_parallelism, op.parallelism)

    def to_json(self) -> dict[str, Any]:
        """Every field of the summary, with ranges as ``[start, end]`` lists."""
        s = self.summary
        return {
            "engine": "flink",
            "path": s.path,
            "metadata_path": s.metadata_path,
            "metadata_version": s.metadata_version,
            "checkpoint_id": s.checkpoint_id,
            "kind": s.kind,
            "format": s.format,
            "master_states": s.master_states,
            "metadata_bytes": s.metadata_bytes,
            "bytes": s.bytes,
            "inline_bytes": s.inline_bytes,
            "file_bytes": s.file_bytes,
            "shared_bytes": s.shared_bytes,
            "operators": [self._operator_json(i) for i in range(len(s.operators))],
        }

    def _operator_json(self, index: int) -> dict[str, Any]:
        op = self.summary.operators[index]
        return {
            "label": op.label,
            "uid": op.uid,
            "operator_id": op.operator_id,
            "name": op.name,
            "parallelism": op.parallelism,
            "max_parallelism": op.max_parallelism,
            "key_group_ranges": self.key_group_ranges(index),
            "fully_finished": op.fully_finished,
            "coordinator_bytes": op.coordinator_bytes,
            "bytes": op.bytes,
            "inline_bytes": op.inline_bytes,
            "file_bytes": op.file_bytes,
            "shared_bytes": op.shared_bytes,
            "operator_states": [{"name": n, "mode": m} for n, m in self.operator_states(index).items()],
            "keyed_states": [
                {
                    "name": st.name,
                    "kind": st.kind,
                    "backend_type": st.backend_type,
                    "options": dict(st.options),
                    "serializers": [
                        {"key": ser.key, "snapshot_class": ser.snapshot_class, "short_name": ser.short_name,
                         "nested": list(ser.nested)}
                        for ser in st.serializers
                    ],
                    "problem": st.problem,
                }
                for st in op.keyed_states
            ],
            "keyed_state_problem": op.keyed_state_problem,
            "subtasks": [
                {
                    "index": sub.index,
                    "finished": sub.finished,
                    "key_group_range": _range(sub.key_group_range),
                    "keyed_handle": sub.keyed_handle,
                    "bytes": sub.bytes,
                    "inline_bytes": sub.inline_bytes,
                    "file_bytes": sub.file_bytes,
                    "shared_bytes": sub.shared_bytes,
                    "operator_states": [asdict(o) for o in sub.operator_states],
                    "channel_state_handles": sub.channel_state_handles,
                    "channel_state_bytes": sub.channel_state_bytes,
                }
                for sub in op.subtasks
            ],
        }


def _no_uids(uids: tuple[str, ...], url: str) -> None:
    if uids:
        raise BadInputError("--uid labels the operators of Apache Flink snapshots; statekit snapshots "
                            "record their uids", path=url)


def inspect_any(url: str, *, skew: bool = True, uids: tuple[str, ...] = ()) -> SnapshotInspection | FlinkInspection:
    """Inspect a statekit or Flink snapshot.

    Args:
        url: Snapshot directory, ``_metadata`` file or job directory.
        skew: statekit: compute the key-group skew view. Flink: read the keyed state names
            from the state streams (``False`` reads nothing but ``_metadata``).
        uids: Flink only: operator uids to label operators with (``--uid``).
    """
    flink = flink_snapshot_path(url)
    if flink is not None:
        from statekit.flink import inspect_flink_snapshot

        return FlinkInspection(inspect_flink_snapshot(flink, read_state_meta=skew, uids=uids))
    _no_uids(uids, url)
    from statekit.readers.inspection import inspect_snapshot

    return inspect_snapshot(url, skew=skew)


# ----------------------------------------------------------------------------- verify


@dataclass
class FlinkVerifyReport:
    """``verify`` of a Flink snapshot: files present with their recorded sizes, sane offsets.

    Attributes:
        path: The snapshot directory.
        metadata_path: Its ``_metadata``.
        files: Distinct referenced files (relative and absolute).
        bytes: Their recorded sizes, summed.
        inline_bytes: State inlined in ``_metadata`` (nothing to check on disk).
        problems: Everything found wrong; empty when the snapshot is whole.
        hint: What to do about the problems, said once (a moved checkpoint: the relocate command).
    """

    path: str
    metadata_path: str
    checkpoint_id: int
    files: int = 0
    bytes: int = 0
    inline_bytes: int = 0
    problems: list[FlinkProblem] = field(default_factory=list)
    hint: str | None = None

    @property
    def ok(self) -> bool:
        """True when nothing is missing, resized, unchecked or inconsistent."""
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        """The report as JSON data."""
        return {"engine": "flink", "path": self.path, "metadata_path": self.metadata_path,
                "checkpoint_id": self.checkpoint_id, "ok": self.ok, "files": self.files,
                "bytes": self.bytes, "inline_bytes": self.inline_bytes,
                "problems": [asdict(p) for p in self.problems], "hint": self.hint}


def _verify_flink(url: str, on_file: Progress | None, uids: tuple[str, ...]) -> FlinkVerifyReport:
    from statekit.flink.storage import load_snapshot, referenced_files
    from statekit.flink.verify import moved_hint, verify_snapshot

    snapshot = load_snapshot(url, uids=uids)
    report = FlinkVerifyReport(snapshot.path, snapshot.metadata_path, snapshot.checkpoint_id)
    report.problems = verify_snapshot(snapshot)
    report.hint = moved_hint(snapshot, report.problems)
    seen: set[object] = set()
    for ref in referenced_files(snapshot):
        key = ref.key or ref.location
        if key in seen:
            continue
        seen.add(key)
        report.files += 1
        report.bytes += ref.size
        if on_file is not None:
            on_file(ref.url, ref.size)
    report.inline_bytes = sum(
        h.size for _, _, _, h in snapshot.metadata.stream_handles() if h.is_inline)
    return report


def verify_any(url: str, *, on_file: Progress | None = None,
               uids: tuple[str, ...] = ()) -> VerifyReport | FlinkVerifyReport:
    """Verify a statekit snapshot (every checksum) or a Flink one (every file and size).

    Args:
        url: Snapshot directory, ``_metadata`` file or job directory.
        on_file: Called with each file checked and its size.
        uids: Flink only: operator uids to label operators with in the problems (``--uid``).

    Returns:
        statekit's report, or :class:`FlinkVerifyReport`; both say ``ok``.

    Raises:
        MetadataError: A damaged ``_metadata`` (bad input, exit 2), naming the byte offset.
    """
    flink = flink_snapshot_path(url)
    if flink is not None:
        return _verify_flink(flink, on_file, uids)
    _no_uids(uids, url)
    from statekit.readers.verification import verify_snapshot

    return verify_snapshot(url, on_file=on_file)


# ----------------------------------------------------------------------------- dispose


@dataclass(frozen=True)
class FlinkDisposal:
    """``dispose`` of a Flink snapshot: what was (or would be) deleted and what was kept."""

    result: FlinkDisposeResult

    @property
    def files(self) -> tuple[str, ...]:
        """Every file deleted or to delete: exclusive files, then unreferenced shared ones."""
        return self.result.plan.delete_files + self.result.plan.delete_shared

    def to_json(self) -> dict[str, Any]:
        """The plan and the outcome as JSON data (``files`` and ``bytes`` as for statekit)."""
        plan, result = self.result.plan, self.result
        return {
            "engine": "flink",
            "path": plan.snapshot,
            "checkpoint_id": plan.checkpoint_id,
            "kind": plan.kind,
            "dry_run": result.dry_run,
            "disposed": not result.dry_run and not result.failed,
            "files": list(self.files),
            "bytes": plan.bytes_to_free,
            "delete_files": list(plan.delete_files),
            "delete_shared": list(plan.delete_shared),
            "keep_shared": [{"path": p, "referenced_by": list(refs)} for p, refs in plan.keep_shared],
            "keep_exclusive": list(plan.keep_exclusive),
            "keep_external": list(plan.keep_external),
            "missing": list(plan.missing),
            "remove_directory": plan.remove_directory,
            "warnings": list(plan.warnings),
            "deleted": list(result.deleted),
            "failed": [{"path": p, "reason": r} for p, r in result.failed],
        }


def dispose_any(url: str, *, dry_run: bool = False, force: bool = False) -> DisposalPlan | FlinkDisposal:
    """Dispose of a statekit or Flink snapshot (only the directory or ``_metadata`` named).

    Nothing is opened before the path is checked: a snapshot path that is itself a
    symbolic link, or a ``_metadata`` that is one, is refused first.

    Args:
        url: A snapshot directory, its ``_metadata``, or a statekit staging folder.
        dry_run: Only report what would be deleted: exactly what a real run deletes.
        force: Dispose a statekit staging folder (``.<name>.inprogress-<hex>``) even though it
            changed within the last 10 minutes; Flink snapshots are never staged.

    Raises:
        BadInputError: A symbolic link, or a file the snapshot cannot account for: nothing
            is deleted.
        StatekitError: A deletion failed part-way (the message names it and what is left).
    """
    from statekit.readers.inventory import refuse_linked_path

    io, path = FileIO.for_path(url)
    refuse_linked_path(io, path)
    refuse_linked_path(io, posixpath.join(path, layout.METADATA_FILE))
    flink = flink_snapshot_path(url, allow_job_dir=False)
    if flink is None:
        from statekit.writers.disposal import dispose_snapshot

        return dispose_snapshot(url, dry_run=dry_run, force=force)
    from statekit.flink import dispose_flink_snapshot

    result = dispose_flink_snapshot(flink, dry_run)
    if result.failed:
        where, reason = result.failed[0]
        done = len(result.deleted)
        if done == 0:
            raise StatekitError(f"dispose failed, nothing deleted: {where}: {reason}", path=result.plan.snapshot)
        raise StatekitError(
            f"dispose incomplete: deleted {done} file(s), then {where}: {reason}; _metadata went first, "
            "so nothing restores from what is left: delete the rest by hand",
            path=result.plan.snapshot,
        )
    return FlinkDisposal(result)


# ----------------------------------------------------------------------------- diff


def diff_flink(a: str, b: str, *, operator: str | None = None, state: str | None = None, keys: bool = False,
               limit: int = 20, output: str | None = None, engine: str = "local", uids: tuple[str, ...] = (),
               value_types: dict[str, str] | None = None) -> SavepointDiff | None:
    """Diff two Apache Flink snapshots, or ``None`` when neither is one (statekit's diff runs then).

    Raises:
        BadInputError: Only one side is a Flink snapshot; Flink options (``--uid``,
            ``--value-type``) for statekit snapshots; ``-o`` or ``--engine spark`` for Flink ones.
    """
    flink_a, flink_b = flink_snapshot_path(a), flink_snapshot_path(b)
    if flink_a is None and flink_b is None:
        if uids or value_types:
            raise BadInputError("--uid and --value-type apply to Apache Flink snapshots", path=a)
        return None
    if flink_a is None or flink_b is None:
        raise BadInputError("one snapshot is Apache Flink's and the other statekit's: diff compares two of a kind",
                            path=a if flink_a is None else b)
    if output is not None or engine != "local":
        raise BadInputError("a diff of Flink snapshots runs on the local engine and lists differences with "
                            "--keys; -o and --engine spark apply to statekit snapshots", path=a)
    from statekit.flink.diff import FlinkDiffRequest, diff_flink_snapshots

    request = FlinkDiffRequest(operator, state, keys, limit, value_types)
    return diff_flink_snapshots(flink_a, flink_b, request, uids=uids)


# ----------------------------------------------------------------------------- keygroup


def lookup_key_group(
    key: str,
    *,
    key_type: str = "string",
    flink: bool = False,
    max_parallelism: int | None = None,
    parallelism: int | None = None,
    key_serializer: str = "msgpack",
) -> KeyGroupLookup:
    """The key group of ``key`` in statekit or Flink and, with ``parallelism``, the subtask that owns it.

    Args:
        key: The key as text.
        key_type: How to read ``key``: one of :data:`KEY_TYPES`.
        flink: Compute Flink's key group (Java ``hashCode`` of a ``key_type`` object)
            instead of statekit's (murmur3_32 of the key serialized by ``key_serializer``).
        max_parallelism: Number of key groups; default Flink's default for
            ``parallelism`` (at least 128), or 128.
        parallelism: Also compute the owning subtask at this parallelism.
        key_serializer: statekit only: the serializer of the operator's keys.

    Raises:
        BadInputError: Unreadable key, unknown key type or serializer, bad parallelism.
        SerializationError: The serializer cannot encode the key.

    Example:
        >>> lookup_key_group("42", key_type="int", flink=True).key_group
        29
    """
    if max_parallelism is None:
        max_parallelism = (compute_default_max_parallelism(parallelism) if parallelism
                           else DEFAULT_MAX_PARALLELISM)
    check_parallelism(parallelism if parallelism is not None else 1, max_parallelism)
    lookup = (flink_key_group(key, key_type, max_parallelism) if flink
              else statekit_key_group(key, key_type, max_parallelism, key_serializer))
    return lookup if parallelism is None else with_owning_subtask(lookup, parallelism)


# ----------------------------------------------------------------------------- rescale, modify


def rescale_any(path: str, output: str | None, *, parallelism: int | None = None,
                operator_parallelism: Mapping[str, int] | None = None, max_parallelism: int | None = None,
                dry_run: bool = False, spill_dir: str | None = None, memory_budget: int = 96 << 20,
                progress: ProgressFactory | None = None) -> RescaleReport | FlinkRescaleReport:
    """Rescale a statekit savepoint, or change the max parallelism of a canonical Flink savepoint.

    A Flink savepoint keeps its parallelism: Flink redistributes its keyed and operator state
    when a job restores it at another one, so ``-p``/``--operator`` are refused for it.

    Raises:
        BadInputError: ``-p``/``--operator`` or no ``--max-parallelism`` for a Flink savepoint,
            and everything :func:`statekit.writers.rescale.rescale_savepoint` or
            :func:`statekit.flink.rewrite.rescale_flink_savepoint` refuses.
    """
    flink = flink_snapshot_path(path, allow_job_dir=False)
    if flink is None:
        from statekit.writers.rescale import rescale_savepoint

        return rescale_savepoint(path, output, parallelism=parallelism, operator_parallelism=operator_parallelism,
                                 max_parallelism=max_parallelism, dry_run=dry_run, spill_dir=spill_dir,
                                 memory_budget=memory_budget, progress=progress)
    if parallelism is not None or operator_parallelism:
        raise BadInputError("-p/--operator: Flink redistributes keyed and operator state itself when a job restores a "
                            "savepoint at another parallelism (up to its max parallelism); rescale of a Flink "
                            "savepoint changes --max-parallelism only", path=path)
    if max_parallelism is None:
        raise BadInputError("give --max-parallelism M: the new number of key groups of the Flink savepoint", path=path)
    from statekit.flink.rewrite import rescale_flink_savepoint

    return rescale_flink_savepoint(flink, output, max_parallelism=max_parallelism, dry_run=dry_run,
                                   spill_dir=spill_dir, memory_budget=memory_budget, progress=progress)


def modify_any(path: str, output: str | None, *, remove_operators: tuple[str, ...] = (),
               rename_uids: tuple[tuple[str, str], ...] = (), remove_states: tuple[tuple[str, str], ...] = (),
               dry_run: bool = False, progress: ProgressFactory | None = None) -> ModifyReport | FlinkModifyReport:
    """Remove operators (or states) and rename uids of a statekit or Flink savepoint.

    Raises:
        BadInputError: ``--remove-state`` for a Flink savepoint, and everything
            :func:`statekit.writers.savepoint_modification.modify_savepoint` or
            :func:`statekit.flink.rewrite.modify_flink_savepoint` refuses.
    """
    flink = flink_snapshot_path(path, allow_job_dir=False)
    if flink is None:
        from statekit.writers.savepoint_modification import modify_savepoint

        return modify_savepoint(path, output, remove_operators=remove_operators, rename_uids=rename_uids,
                                remove_states=remove_states, dry_run=dry_run, progress=progress)
    if remove_states:
        raise BadInputError("--remove-state: a Flink savepoint's keyed states share one stream per subtask, which "
                            "modify does not rewrite; remove the whole operator, or drop the state in the job "
                            "(Flink ignores state no descriptor asks for)", path=path)
    from statekit.flink.rewrite import modify_flink_savepoint

    return modify_flink_savepoint(flink, output, remove_operators=remove_operators, rename_uids=rename_uids,
                                  dry_run=dry_run, progress=progress)
