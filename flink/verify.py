"""Check that a Flink snapshot is whole: files present with their recorded sizes, sane offsets,
RocksDB blocks that match their checksums.

Flink's ``_metadata`` records no checksums, so this is the strongest offline check possible
without restoring: every referenced file exists and has the size written in ``_metadata``;
key-group and operator-state offsets lie inside their streams; key-group ranges of one
operator stay inside ``[0, max parallelism)`` and do not overlap. RocksDB state (incremental
checkpoints, native savepoints) carries checksums of its own — one per block of every SST
file, one per record of its manifest: every subtask's store whose files are all there is
opened (paranoid checks) and every entry of every column family read with checksum
verification, so a damaged byte in an SST is a ``corrupt`` problem naming the file. Snapshots taken with
compression carry Snappy's CRC-32C per chunk: every compressed key group is decoded and
its checksums checked.

Key-group offsets, as Flink's writers record them (``KeyGroupRangeOffsets`` starts with
every offset 0):
    * the full snapshot writer (canonical savepoints, full RocksDB checkpoints) sets the
      offset of a key group only when it writes an entry of it, in key-group order; an
      empty key group keeps offset 0;
    * the heap snapshot writes every key group (its id, then its states), so every offset
      is set.
So a valid array has its non-zero offsets strictly ascending, each past the backend meta
information and before the end of the stream, and 0 for empty key groups.

Every problem names the operator, the subtask and the file it is about (``_metadata`` for
problems of the metadata itself).
"""

from __future__ import annotations

import importlib.util
import itertools
import posixpath
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass

from statekit.flink.layout import SHARED_DIR, TASKOWNED_DIR
from statekit.flink.model import FlinkOperatorState, KeyedHandleKind, KeyedStateHandle, StreamHandle, StreamHandleKind
from statekit.flink.storage import FlinkFileRef, FlinkSnapshot, referenced_files
from statekit.statefmt.errors import StatekitError

__all__ = ["FlinkProblem", "verify_snapshot", "rocksdb_stores", "moved_hint", "moved_job_dir", "job_counterpart",
           "counterpart_path", "key_group_offset_problem", "JOB_FILE"]

# A non-empty key group holds at least a state id (2 bytes); the offset of one points
# before the last 2 bytes of the stream.
MIN_KEY_GROUP_BYTES = 2
JOB_FILE = re.compile(r"^(?P<job>.*)/(?P<dir>" + SHARED_DIR + "|" + TASKOWNED_DIR + r"|chk-\d+)/(?P<name>[^/]+)$")


@dataclass(frozen=True)
class FlinkProblem:
    """One thing wrong with a snapshot.

    Attributes:
        kind: ``missing``, ``size-mismatch``, ``unsafe-path``, ``unchecked``,
            ``bad-offsets``, ``bad-key-groups``, ``corrupt`` (RocksDB state that fails its
            checksums or does not open), ``bad-compression`` (a Snappy-compressed key group that
            does not decode or fails its CRC-32C) or ``metadata``.
        path: The file (or ``_metadata``) the problem is about.
        message: One line for people; it names the operator, subtask and file.
        operator: The operator's uid or id, when the problem belongs to one.
        subtask: The subtask index, when the problem belongs to one.
        moved_to: For a missing shared file of a moved checkpoint: the file of the same
            name in this job's ``shared/`` directory.
    """

    kind: str
    path: str
    message: str
    operator: str | None = None
    subtask: int | None = None
    moved_to: str | None = None


def _owner(operator: str, subtask: int | None) -> str:
    return f"operator {operator}" + (f" subtask {subtask}" if subtask is not None else " (coordinator)")


def _check_file(ref: FlinkFileRef) -> FlinkProblem | None:
    where = f"{_owner(ref.operator, ref.subtask)}, {ref.role} file"
    if ref.resolved is None:
        kind = "unsafe-path" if ref.relative else "unchecked"
        return FlinkProblem(kind, ref.location, f"{where} {ref.location}: {ref.problem}", ref.operator, ref.subtask)
    location = ref.resolved
    try:
        exists = location.io.isfile(location.path)
        size = location.io.size(location.path) if exists else None
    except OSError as exc:
        return FlinkProblem("unchecked", ref.url, f"{where} {ref.url}: cannot stat: {exc}", ref.operator,
                            ref.subtask)
    if not exists:
        outside = ", outside the snapshot directory" if ref.scope == "external" else ""
        return FlinkProblem("missing", ref.url, f"{where} {ref.location} is missing ({ref.size} bytes{outside})",
                            ref.operator, ref.subtask)
    if size != ref.size:
        return FlinkProblem("size-mismatch", ref.url,
                            f"{where} {ref.url} has {size} bytes, metadata records {ref.size}",
                            ref.operator, ref.subtask)
    return None


def _stream_name(snapshot: FlinkSnapshot, stream: StreamHandle | None) -> str:
    if stream is None:
        return "<no stream>"
    leaf = next(stream.leaves(), stream)
    if leaf.kind is StreamHandleKind.BYTE_STREAM:
        return f"{snapshot.metadata_path} (inline stream {leaf.name or '?'})"
    return leaf.path or "?"


def key_group_offset_problem(offsets: tuple[int, ...], size: int) -> str | None:
    """Why a key-group offset array is not one Flink writes, or ``None`` (see the module doc)."""
    previous = 0
    for index, offset in enumerate(offsets):
        if offset == 0:
            continue  # an empty key group
        if not 0 < offset <= size - MIN_KEY_GROUP_BYTES:
            return f"offset {offset} of key group #{index} lies outside the {size}-byte stream"
        if offset <= previous:
            return (f"offset {offset} of key group #{index} is not past the previous non-empty key "
                    f"group's offset {previous}")
        previous = offset
    return None


def _check_key_group_offsets(snapshot: FlinkSnapshot, op: FlinkOperatorState, subtask: int,
                             offsets: tuple[int, ...], stream: StreamHandle | None, start: int) -> list[FlinkProblem]:
    size = stream.size if stream is not None else 0
    detail = key_group_offset_problem(offsets, size)
    if detail is None:
        return []
    detail = re.sub(r"key group #(\d+)", lambda m: f"key group {start + int(m.group(1))}", detail)
    name = _stream_name(snapshot, stream)
    return [FlinkProblem("bad-offsets", name, f"{_owner(op.label, subtask)}, key-group offsets into {name}: {detail}",
                         op.label, subtask)]


def _check_operator_offsets(snapshot: FlinkSnapshot, op: FlinkOperatorState, subtask: int, state: str,
                            offsets: tuple[int, ...], stream: StreamHandle | None) -> list[FlinkProblem]:
    size = stream.size if stream is not None else 0
    bad = [o for o in offsets if not 0 <= o <= size]
    if not bad:
        return []
    name = _stream_name(snapshot, stream)
    return [FlinkProblem("bad-offsets", name,
                         f"{_owner(op.label, subtask)}, operator state {state!r} offsets into {name}: "
                         f"outside the {size}-byte stream: {bad[:5]}", op.label, subtask)]


def _check_operator(snapshot: FlinkSnapshot, op: FlinkOperatorState) -> list[FlinkProblem]:
    problems: list[FlinkProblem] = []
    seen: list[tuple[int, int, int]] = []
    for sub in op.subtasks:
        for handle in sub.keyed_handles:
            kg = handle.key_group_range
            if len(kg) and (kg.start < 0 or kg.end >= op.max_parallelism):
                problems.append(FlinkProblem(
                    "bad-key-groups", snapshot.metadata_path,
                    f"{_owner(op.label, sub.index)}, {snapshot.metadata_path}: key groups {kg.start}..{kg.end} "
                    f"outside [0, {op.max_parallelism - 1}]", op.label, sub.index))
            if handle is sub.managed_keyed_state and len(kg):
                seen.append((kg.start, kg.end, sub.index))
            if handle.kind in (KeyedHandleKind.KEY_GROUPS, KeyedHandleKind.SAVEPOINT_KEY_GROUPS):
                problems += _check_key_group_offsets(snapshot, op, sub.index, handle.key_group_offsets,
                                                     handle.delegate, kg.start)
        for op_handle in sub.operator_handles:
            for state in op_handle.states:
                problems += _check_operator_offsets(snapshot, op, sub.index, state.name, state.offsets,
                                                    op_handle.delegate)
    seen.sort()
    for (_, end, first), (start, _, second) in itertools.pairwise(seen):
        if start <= end:
            problems.append(FlinkProblem(
                "bad-key-groups", snapshot.metadata_path,
                f"operator {op.label} subtasks {first} and {second}, {snapshot.metadata_path}: "
                "key-group ranges overlap", op.label, second))
    return problems


def job_counterpart(snapshot: FlinkSnapshot, location: str) -> str | None:
    """Where a file Flink wrote under its old job directory sits in this job directory, if it does.

    ``<old job>/shared/<name>`` (and ``taskowned/``) maps to this job's ``shared/<name>``,
    ``<old job>/chk-N/<name>`` to this snapshot's ``<name>`` when this is ``chk-N``.
    """
    path = counterpart_path(snapshot, location)
    return None if path is None or snapshot.job_dir is None else snapshot.job_dir.io.url(path)


def counterpart_path(snapshot: FlinkSnapshot, location: str) -> str | None:
    """:func:`job_counterpart` as a path of the job directory's filesystem."""
    job = snapshot.job_dir
    match = JOB_FILE.match(location)
    if job is None or match is None:
        return None
    folder, name = match.group("dir"), match.group("name")
    if folder.startswith("chk-"):
        if folder != posixpath.basename(snapshot.directory.path):
            return None
        path = posixpath.join(snapshot.directory.path, name)
    else:
        path = posixpath.join(job.path, folder, name)
    return path if job.io.isfile(path) else None


def moved_job_dir(snapshot: FlinkSnapshot, locations: list[str]) -> tuple[str, str] | None:
    """``(old job directory as written, this job directory)`` when the checkpoint was moved.

    A checkpoint was moved when every one of the missing ``locations`` (absolute paths as
    written) lies in one old job directory and a file of the same name sits at the same
    place of this job directory (see :func:`job_counterpart`).
    """
    job = snapshot.job_dir
    if job is None or not locations:
        return None
    old_jobs = set()
    for location in locations:
        match = JOB_FILE.match(location)
        if match is None or job_counterpart(snapshot, location) is None:
            return None
        old_jobs.add(match.group("job"))
    if len(old_jobs) != 1:
        return None
    return old_jobs.pop(), job.url


def _moved(snapshot: FlinkSnapshot, problems: list[FlinkProblem], refs: dict[str, FlinkFileRef]) -> list[FlinkProblem]:
    """Missing files of a moved checkpoint, explained with the fix."""
    missing = [refs[p.path] for p in problems if p.kind == "missing" and p.path in refs]
    moved = moved_job_dir(snapshot, [r.location for r in missing if r.scope == "external"])
    if moved is None:
        return problems
    out = []
    for problem in problems:
        ref = refs.get(problem.path)
        if problem.kind == "missing" and ref is not None and ref.scope == "external":
            here = job_counterpart(snapshot, ref.location)
            problem = FlinkProblem(problem.kind, problem.path, f"{problem.message}; {here} is that file here",
                                   problem.operator, problem.subtask, here)
        out.append(problem)
    return out


def moved_hint(snapshot: FlinkSnapshot, problems: list[FlinkProblem]) -> str | None:
    """One line for a moved checkpoint (said once, not per file): where it was moved from and
    the command that rewrites its paths; ``None`` unless :func:`verify_snapshot` found one."""
    if not any(p.moved_to for p in problems):
        return None
    refs = {ref.url: ref for ref in referenced_files(snapshot)}
    locations = [refs[p.path].location for p in problems if p.moved_to and p.path in refs]
    moved = moved_job_dir(snapshot, locations)
    if moved is None:
        return None
    old, new = moved
    return (f"the checkpoint was moved from {old} to {new}: rewrite its paths with "
            f"`statekit relocate {snapshot.path} --auto --force`")


def verify_snapshot(snapshot: FlinkSnapshot, *, operators: Collection[str] | None = None) -> list[FlinkProblem]:
    """Every problem found in an opened snapshot; empty when it is whole.

    Args:
        snapshot: The opened snapshot.
        operators: Only the state of these operators (by label: uid, or operator id); default all.
    """
    def wanted(label: str) -> bool:
        return operators is None or label in operators

    problems: list[FlinkProblem] = []
    checked: set[tuple[tuple[str, str] | str, int]] = set()
    refs: dict[str, FlinkFileRef] = {}
    for ref in referenced_files(snapshot):
        if not wanted(ref.operator):
            continue
        key = (ref.key or ref.location, ref.size)
        if key in checked:
            continue
        checked.add(key)
        problem = _check_file(ref)
        if problem is not None:
            problems.append(problem)
            refs[problem.path] = ref
    problems = _moved(snapshot, problems, refs)
    for op in snapshot.metadata.operators:
        if wanted(op.label):
            problems += _check_operator(snapshot, op)
    if not problems:
        for op in snapshot.metadata.operators:
            if wanted(op.label):
                problems += _check_compressed(snapshot, op)
    return problems + _check_rocksdb_stores(snapshot, problems, wanted)


def rocksdb_stores(snapshot: FlinkSnapshot) -> list[tuple[FlinkOperatorState, int, KeyedStateHandle]]:
    """(operator, subtask, handle) of every subtask whose keyed state is a RocksDB store."""
    return [(op, sub.index, handle) for op in snapshot.metadata.operators for sub in op.subtasks
            for handle in sub.keyed_handles if handle.kind is KeyedHandleKind.INCREMENTAL]


def _check_rocksdb_stores(snapshot: FlinkSnapshot, found: list[FlinkProblem],
                          wanted: Callable[[str], bool]) -> list[FlinkProblem]:
    """Read every (wanted) RocksDB store whose subtask has no problem yet, checksums verified."""
    problems: list[FlinkProblem] = []
    troubled = {(p.operator, p.subtask) for p in found}
    stores = [(op, subtask, handle) for op, subtask, handle in rocksdb_stores(snapshot)
              if wanted(op.label) and (op.label, subtask) not in troubled]  # a missing or resized file: reported
    if stores and importlib.util.find_spec("rocksdict") is None:  # nothing can be said about the blocks
        op, subtask, _ = stores[0]
        return [FlinkProblem("unchecked", snapshot.metadata_path, f"{len(stores)} RocksDB stores not checked: reading "
                             "them needs rocksdict: pip install 'statekit[rocksdb]'", op.label, subtask)]
    for op, subtask, handle in stores:
        try:
            _read_store(snapshot, op, subtask, handle)
        except StatekitError as exc:
            message = str(exc)
            named = [url for url in _store_file_urls(snapshot, handle) if url in message]
            problems.append(FlinkProblem("corrupt", named[0] if named else snapshot.metadata_path, message,
                                         op.label, subtask))
    return problems


def _check_compressed(snapshot: FlinkSnapshot, op: FlinkOperatorState) -> list[FlinkProblem]:
    """Snappy-compressed key groups (snapshot compression): every chunk decodes and matches its CRC-32C.

    Only keyed state streams whose header sets the compression flag are read; uncompressed
    ones carry no checksum to check.
    """
    from statekit.flink.sources import HeapSource, StreamSource, keyed_sources

    stream_kinds = (KeyedHandleKind.SAVEPOINT_KEY_GROUPS, KeyedHandleKind.KEY_GROUPS)
    if not any(sub.managed_keyed_state is not None and sub.managed_keyed_state.kind in stream_kinds
               for sub in op.subtasks):
        return []
    problems = []
    try:
        sources = list(keyed_sources(snapshot, op, purpose="verifying compressed key groups"))
    except (StatekitError, OSError):
        return []  # the header is not readable: inspect names why; files and offsets were checked
    for source in sources:
        if not isinstance(source, (StreamSource, HeapSource)) or not source.meta.compressed:
            continue
        try:
            for _ in source.key_groups(snapshot):
                pass
        except (StatekitError, OSError) as exc:
            problems.append(FlinkProblem("bad-compression", source.source,
                                         f"{_owner(op.label, source.subtask)}: {exc}", op.label, source.subtask))
    return problems


def _store_file_urls(snapshot: FlinkSnapshot, handle: KeyedStateHandle) -> list[str]:
    """The snapshot's files of a store as messages name them (path, URL), then ``_metadata`` (inline bytes)."""
    from statekit.flink.storage import resolve_stream

    urls = []
    for named in handle.shared + handle.private:
        leaf = next(named.handle.leaves(), named.handle) if named.handle is not None else None
        if leaf is None or leaf.kind not in (StreamHandleKind.FILE, StreamHandleKind.RELATIVE_FILE):
            continue
        try:
            location = resolve_stream(snapshot, leaf)
        except StatekitError:
            continue
        urls += [location.path, location.url]
    return urls + [snapshot.metadata_path]


def _read_store(snapshot: FlinkSnapshot, op: FlinkOperatorState, subtask: int, handle: KeyedStateHandle) -> None:
    """Open a subtask's store and read every entry of every column family (block checksums verified).

    Raises:
        CorruptStateError: A block fails its checksum, or the store does not open (naming the
            snapshot's file when RocksDB names it).
        StatekitError: A file that cannot be materialized (missing, unsafe).
    """
    from statekit.flink.rocksdb import column_families, column_family_entries, materialized_rocksdb, open_rocksdb

    where = f"RocksDB state of {_owner(op.label, subtask)}"
    with materialized_rocksdb(snapshot, handle) as files:
        families = column_families(files, source=where)
        with open_rocksdb(files, source=where) as db:
            for family in families:
                for _ in column_family_entries(db, family, source=where, files=files):
                    pass
