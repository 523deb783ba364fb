"""Check that a Flink snapshot is whole: files present with their recorded sizes, sane offsets.

Flink records no checksums, so this is the strongest offline check possible without
restoring: every referenced file exists and has the size written in ``_metadata``;
key-group and operator-state offsets lie inside their streams; key-group ranges of one
operator stay inside ``[0, max parallelism)`` and do not overlap.
"""

from __future__ import annotations

from dataclasses import dataclass

from statekit.flink.model import FlinkOperatorState, KeyedHandleKind, StreamHandle
from statekit.flink.storage import FlinkFileRef, FlinkSnapshot, referenced_files

__all__ = ["FlinkProblem", "verify_snapshot"]


@dataclass(frozen=True)
class FlinkProblem:
    """One thing wrong with a snapshot.

    Attributes:
        kind: ``missing``, ``size-mismatch``, ``unsafe-path``, ``unchecked``,
            ``bad-offsets`` or ``bad-key-groups``.
        path: The file (or ``_metadata``) the problem is about.
        message: One line for people.
        operator: The operator's uid or id, when the problem belongs to one.
        subtask: The subtask index, when the problem belongs to one.
    """

    kind: str
    path: str
    message: str
    operator: str | None = None
    subtask: int | None = None


def _check_file(ref: FlinkFileRef) -> FlinkProblem | None:
    where = f"{ref.role} file of {ref.operator}" + (
        f" subtask {ref.subtask}" if ref.subtask is not None else ""
    )
    if ref.resolved is None:
        kind = "unsafe-path" if ref.relative else "unchecked"
        return FlinkProblem(kind, ref.location, f"{where}: {ref.problem}", ref.operator, ref.subtask)
    location = ref.resolved
    try:
        exists = location.io.isfile(location.path)
        size = location.io.size(location.path) if exists else None
    except OSError as exc:
        return FlinkProblem("unchecked", ref.url, f"{where}: cannot stat: {exc}", ref.operator,
                            ref.subtask)
    if not exists:
        return FlinkProblem(
            "missing", ref.url,
            f"missing {where}: {ref.location} ({ref.size} bytes"
            + (", outside the snapshot directory)" if ref.scope == "external" else ")"),
            ref.operator, ref.subtask,
        )
    if size != ref.size:
        return FlinkProblem(
            "size-mismatch", ref.url,
            f"{where}: {ref.url} has {size} bytes, metadata records {ref.size}",
            ref.operator, ref.subtask,
        )
    return None


def _check_offsets(
    snapshot: FlinkSnapshot, op: FlinkOperatorState, subtask: int, what: str,
    offsets: tuple[int, ...], stream: StreamHandle | None, *, ordered: bool,
) -> list[FlinkProblem]:
    size = stream.size if stream is not None else 0
    bad = [o for o in offsets if not 0 <= o <= size]
    unordered = ordered and any(b < a for a, b in zip(offsets, offsets[1:]))
    if not bad and not unordered:
        return []
    detail = f"offsets outside the {size}-byte stream: {bad[:5]}" if bad else "offsets not ascending"
    return [FlinkProblem("bad-offsets", snapshot.metadata_path, f"{what}: {detail}", op.label, subtask)]


def _check_operator(snapshot: FlinkSnapshot, op: FlinkOperatorState) -> list[FlinkProblem]:
    problems: list[FlinkProblem] = []
    seen: list[tuple[int, int, int]] = []
    for sub in op.subtasks:
        for handle in sub.keyed_handles:
            kg = handle.key_group_range
            if len(kg) and (kg.start < 0 or kg.end >= op.max_parallelism):
                problems.append(FlinkProblem(
                    "bad-key-groups", snapshot.metadata_path,
                    f"key groups {kg.start}..{kg.end} outside [0, {op.max_parallelism - 1}]",
                    op.label, sub.index))
            if handle is sub.managed_keyed_state and len(kg):
                seen.append((kg.start, kg.end, sub.index))
            if handle.kind in (KeyedHandleKind.KEY_GROUPS, KeyedHandleKind.SAVEPOINT_KEY_GROUPS):
                problems += _check_offsets(snapshot, op, sub.index, "key-group offsets",
                                           handle.key_group_offsets, handle.delegate, ordered=True)
        for op_handle in sub.operator_handles:
            for state in op_handle.states:
                problems += _check_offsets(snapshot, op, sub.index,
                                           f"operator state {state.name!r}", state.offsets,
                                           op_handle.delegate, ordered=False)
    seen.sort()
    for (_, end, first), (start, _, second) in zip(seen, seen[1:]):
        if start <= end:
            problems.append(FlinkProblem(
                "bad-key-groups", snapshot.metadata_path,
                f"key-group ranges of subtasks {first} and {second} overlap", op.label))
    return problems


def verify_snapshot(snapshot: FlinkSnapshot) -> list[FlinkProblem]:
    """Every problem found in an opened snapshot; empty when it is whole."""
    problems: list[FlinkProblem] = []
    checked: set[tuple[tuple[str, str] | str, int]] = set()
    for ref in referenced_files(snapshot):
        key = (ref.key or ref.location, ref.size)
        if key in checked:
            continue
        checked.add(key)
        problem = _check_file(ref)
        if problem is not None:
            problems.append(problem)
    for op in snapshot.metadata.operators:
        problems += _check_operator(snapshot, op)
    return problems
