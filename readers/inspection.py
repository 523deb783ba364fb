"""``inspect``: operators, states, parallelism, key-group ranges, sizes and key-group skew.

Sizes and entry counts come from ``_metadata``; the skew view reads each keyed file's
index (footer and index only, never a block). A window operator's window states are
decoded once for the window view (:mod:`statekit.readers.window_state`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.window_state import WindowInspection, inspect_windows
from statekit.statefmt.json_contract import JsonShape
from statekit.statefmt.metadata import OperatorMetadata, StateDescriptor, StateKind

__all__ = ["SnapshotInspection", "OperatorInspection", "StateInspection", "SkewView", "inspect_snapshot"]

HISTOGRAM_BUCKETS = 10


@dataclass(frozen=True)
class SkewView:
    """How evenly bytes spread over key groups: largest vs mean and a compact histogram."""

    key_groups_with_state: int
    max_bytes: int
    mean_bytes: float
    max_key_group: int | None
    ratio: float
    histogram: list[int]  # count of key groups per bucket of [min_bytes, max_bytes]
    min_bytes: int = 0  # the smallest key group (0 when any key group is empty)


@dataclass(frozen=True)
class StateInspection:
    name: str
    kind: str
    value_serializer: str
    value_type: str | None
    user_key_serializer: str | None
    ttl_ms: int | None
    bytes: int
    entries: int
    per_subtask: list[dict[str, int]]
    skew: SkewView | None
    namespace_type: str | None = None  # declared for namespaced (window) state


@dataclass(frozen=True)
class OperatorInspection:
    json_shape: ClassVar[JsonShape] = JsonShape(omit=("states",), extra=("keyed_states", "operator_states"))

    uid: str
    name: str
    parallelism: int
    max_parallelism: int
    key_serializer: str | None
    key_group_ranges: list[list[int]]
    bytes: int
    entries: int
    states: list[StateInspection] = field(default_factory=list)
    windows: WindowInspection | None = None  # a window operator's window states and timers
    # an unaligned checkpoint's in-flight records per subtask: {"subtask", "bytes", "records"}; None when it has none
    in_flight: list[dict[str, int]] | None = None

    @property
    def keyed_states(self) -> list[StateInspection]:
        """The keyed states (a key, a key group per entry)."""
        return [s for s in self.states if StateKind(s.kind).keyed]

    @property
    def operator_states(self) -> list[StateInspection]:
        """The operator (non-keyed) states: list, union and broadcast state."""
        return [s for s in self.states if not StateKind(s.kind).keyed]


@dataclass(frozen=True)
class SnapshotInspection:
    json_shape: ClassVar[JsonShape] = JsonShape(extra=("engine",))

    path: str
    job_id: str
    job_name: str
    checkpoint_id: int
    kind: str
    format: str
    created_at_ms: int
    bytes: int
    entries: int
    operators: list[OperatorInspection]

    @property
    def engine(self) -> str:
        """``statekit``: the snapshot's engine (``flink`` in the documents of Flink snapshots)."""
        return "statekit"


def _in_flight(op: OperatorMetadata) -> list[dict[str, int]] | None:
    """Bytes and records of the in-flight records each subtask stored (unaligned checkpoints)."""
    files = [(s.index, s.channel_state) for s in op.subtasks if s.channel_state is not None]
    if not files:
        return None
    return [{"subtask": index, "bytes": c.size, "records": c.records} for index, c in files]


def inspect_snapshot(url: str, *, skew: bool = True, storage_options: dict[str, Any] | None = None) -> SnapshotInspection:
    reader = SavepointReader.read(url, storage_options=storage_options)
    md = reader.metadata
    view = reader.canonical()  # a native snapshot's sizes and entries are its canonical view's
    operators = []
    for op in md.operators:
        states = [_inspect_state(view, op.uid, d, skew) for d in op.states]
        operators.append(
            OperatorInspection(
                uid=op.uid,
                name=op.name,
                parallelism=op.parallelism,
                max_parallelism=op.max_parallelism,
                key_serializer=op.key_serializer,
                key_group_ranges=[s.key_group_range.to_list() for s in op.subtasks],
                bytes=sum(s.bytes for s in states),
                entries=sum(s.entries for s in states),
                states=states,
                windows=inspect_windows(reader, op.uid),
                in_flight=_in_flight(op),
            )
        )
    return SnapshotInspection(
        path=reader.path,
        job_id=md.job_id,
        job_name=md.job_name,
        checkpoint_id=md.checkpoint_id,
        kind=md.kind.value,
        format=md.format.value,
        created_at_ms=md.created_at_ms,
        bytes=sum(o.bytes for o in operators),
        entries=sum(o.entries for o in operators),
        operators=operators,
    )


def _inspect_state(reader: SavepointReader, uid: str, descriptor: StateDescriptor, skew: bool) -> StateInspection:
    op = reader.operator(uid)
    per_subtask = []
    group_bytes: dict[int, int] = {}
    for subtask in op.subtasks:
        file = subtask.file_of(descriptor.name)
        per_subtask.append({"subtask": subtask.index, "bytes": file.size if file else 0, "entries": file.entries if file else 0})
        if file and skew and descriptor.keyed:
            with reader.open_subtask_file(op, subtask, file) as state_file:
                for entry in state_file.index:
                    group_bytes[entry.key_group] = entry.length
    return StateInspection(
        name=descriptor.name,
        kind=descriptor.kind.value,
        value_serializer=descriptor.value_serializer,
        value_type=descriptor.value_type,
        user_key_serializer=descriptor.user_key_serializer,
        ttl_ms=descriptor.ttl_ms,
        bytes=sum(p["bytes"] for p in per_subtask),
        entries=sum(p["entries"] for p in per_subtask),
        per_subtask=per_subtask,
        skew=_skew(group_bytes, op.max_parallelism) if descriptor.keyed and skew else None,
        namespace_type=descriptor.namespace_type,
    )


def _skew(group_bytes: dict[int, int], max_parallelism: int) -> SkewView:
    """Bytes per key group over all M key groups (empty groups count as 0)."""
    if not group_bytes:
        return SkewView(0, 0, 0.0, None, 0.0, [0] * HISTOGRAM_BUCKETS)
    total = sum(group_bytes.values())
    mean = total / max_parallelism
    max_group = max(group_bytes, key=lambda g: group_bytes[g])
    max_bytes = group_bytes[max_group]
    sizes = [group_bytes.get(g, 0) for g in range(max_parallelism)]
    min_bytes = min(sizes)
    # buckets span [min_bytes, max_bytes]: evenly spread state fills them instead of the top one
    span = max_bytes - min_bytes
    histogram = [0] * HISTOGRAM_BUCKETS
    for size in sizes:
        histogram[min(HISTOGRAM_BUCKETS - 1, (size - min_bytes) * HISTOGRAM_BUCKETS // span) if span else 0] += 1
    return SkewView(len(group_bytes), max_bytes, mean, max_group, max_bytes / mean if mean else 0.0, histogram,
                    min_bytes)
