"""Check that a Flink snapshot is whole: files present with their recorded sizes, sane offsets.

Flink records no checksums, so this is the strongest offline check possible without
restoring: every referenced file exists and has the size written in ``_metadata``;
key-group and operator-state offsets lie inside their streams; key-group ranges of one
operator stay inside ``[0, max parallelism)`` and do not overlap.

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

import itertools
import posixpath
import re
from dataclasses import dataclass

from statekit.flink.layout import SHARED_DIR, TASKOWNED_DIR
from statekit.flink.model import FlinkOperatorState, KeyedHandleKind, StreamHandle, StreamHandleKind
from statekit.flink.storage import FlinkFileRef, FlinkSnapshot, referenced_files

__all__ = ["FlinkProblem", "verify_snapshot", "moved_hint", "moved_job_dir", "job_counterpart", "key_group_offset_problem"]

# A non-empty key group holds at least a state id (2 bytes); the offset of one points
# before the last 2 bytes of the stream.
MIN_KEY_GROUP_BYTES = 2
JOB_FILE = re.compile(r"^(?P<job>.*)/(?P<dir>" + SHARED_DIR + "|" + TASKOWNED_DIR + r"|chk-\d+)/(?P<name>[^/]+)$")


@dataclass(frozen=True)
class FlinkProblem:
    """One thing wrong with a snapshot.

    Attributes:
        kind: ``missing``, ``size-mismatch``, ``unsafe-path``, ``unchecked``,
            ``bad-offsets``, ``bad-key-groups`` or ``metadata``.
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
    return job.io.url(path) if job.io.isfile(path) else None


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


def verify_snapshot(snapshot: FlinkSnapshot) -> list[FlinkProblem]:
    """Every problem found in an opened snapshot; empty when it is whole."""
    problems: list[FlinkProblem] = []
    checked: set[tuple[tuple[str, str] | str, int]] = set()
    refs: dict[str, FlinkFileRef] = {}
    for ref in referenced_files(snapshot):
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
        problems += _check_operator(snapshot, op)
    return problems
