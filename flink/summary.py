"""The ``inspect`` view of a Flink snapshot: operators, states, key groups and bytes.

Byte accounting per subtask: ``inline`` bytes live inside ``_metadata`` (byte-stream
handles); ``shared`` bytes are files of a RocksDB incremental handle's shared list;
``file`` bytes are every other file (exclusive state, private RocksDB files, operator and
channel state). ``bytes`` is their sum.

Keyed state names come from the keyed backend meta information of the first subtask that
has keyed state (all subtasks register the same states). Source operators list the splits
their readers held (:mod:`statekit.flink.source_splits`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from statekit.flink.model import (
    FlinkOperatorState,
    FlinkSubtaskState,
    KeyedHandleKind,
    KeyedStateHandle,
    KeyGroupRange,
    StreamHandle,
)
from statekit.flink.source_splits import SourceSplit, source_splits
from statekit.flink.sql_operators import SqlOperatorView
from statekit.flink.state_meta import FlinkStateMeta, read_keyed_backend_meta
from statekit.flink.storage import FlinkSnapshot, moved_note, read_stream_bytes
from statekit.statefmt.errors import StatekitError
from statekit.statefmt.json_contract import JsonShape
from statekit.statefmt.keygroups import compute_key_group_range_for_operator_index

__all__ = [
    "FlinkOperatorStateSummary",
    "FlinkOperatorStateMode",
    "FlinkSubtaskSummary",
    "FlinkOperatorSummary",
    "FlinkSnapshotSummary",
    "summarize_snapshot",
    "keyed_state_meta",
]

MAX_HEADER_BYTES = 4 << 20


@dataclass(frozen=True)
class FlinkOperatorStateSummary:
    """One named operator state of a subtask: distribution mode and partition count."""

    name: str
    mode: str
    partitions: int


@dataclass(frozen=True)
class FlinkOperatorStateMode:
    """One named operator state of an operator (over its subtasks) and its distribution mode."""

    name: str
    mode: str


@dataclass(frozen=True)
class FlinkSubtaskSummary:
    """Sizes and state of one subtask."""

    index: int
    finished: bool
    key_group_range: KeyGroupRange | None
    keyed_handle: str | None
    bytes: int
    inline_bytes: int
    file_bytes: int
    shared_bytes: int
    operator_states: tuple[FlinkOperatorStateSummary, ...]
    channel_state_handles: int
    channel_state_bytes: int


@dataclass(frozen=True)
class FlinkOperatorSummary:
    """One operator: identity, parallelism, states and sizes."""

    json_shape: ClassVar[JsonShape] = JsonShape(
        rename={"splits": "source_splits", "splits_problem": "source_splits_problem"},
        extra=("label", "key_group_ranges", "operator_states"))

    operator_id: str
    uid: str | None
    name: str | None
    parallelism: int
    max_parallelism: int
    fully_finished: bool
    coordinator_bytes: int
    subtasks: tuple[FlinkSubtaskSummary, ...]
    keyed_states: tuple[FlinkStateMeta, ...]
    keyed_state_problem: str | None
    bytes: int
    inline_bytes: int
    file_bytes: int
    shared_bytes: int
    splits: tuple[SourceSplit, ...] = ()
    splits_problem: str | None = None

    @property
    def label(self) -> str:
        """The uid when set, else the operator id."""
        return self.uid or self.operator_id

    @property
    def key_group_ranges(self) -> tuple[KeyGroupRange, ...]:
        """Flink's key-group range of every subtask (by the formula; none for a bad parallelism)."""
        try:
            return tuple(compute_key_group_range_for_operator_index(self.max_parallelism, self.parallelism, i)
                         for i in range(self.parallelism))
        except (StatekitError, ValueError, ZeroDivisionError):
            return ()

    @property
    def operator_states(self) -> tuple[FlinkOperatorStateMode, ...]:
        """The operator (non-keyed) states across subtasks, each with its distribution mode."""
        modes = {s.name: s.mode for sub in self.subtasks for s in sub.operator_states}
        return tuple(FlinkOperatorStateMode(name, mode) for name, mode in modes.items())

    @property
    def operator_state_names(self) -> tuple[str, ...]:
        """Names of the operator (non-keyed) states across subtasks."""
        names = {s.name: None for sub in self.subtasks for s in sub.operator_states}
        return tuple(names)


@dataclass(frozen=True)
class FlinkSnapshotSummary:
    """The whole ``inspect`` view."""

    json_shape: ClassVar[JsonShape] = JsonShape(extra=("engine",))

    path: str
    metadata_path: str
    metadata_version: int
    checkpoint_id: int
    kind: str | None
    format: str
    master_states: int
    metadata_bytes: int
    operators: tuple[FlinkOperatorSummary, ...]
    bytes: int
    inline_bytes: int
    file_bytes: int
    shared_bytes: int
    moved: str | None = None
    sql_operators: tuple[SqlOperatorView, ...] = ()  # with a compiled plan (inspect --compiled-plan)

    @property
    def engine(self) -> str:
        """``flink``: the snapshot's engine."""
        return "flink"


def _sizes(sub: FlinkSubtaskState) -> tuple[int, int, int]:
    inline = file = shared = 0
    for role, handle in sub.stream_handles():
        if handle.is_inline:
            inline += handle.size
        elif role == "shared":
            shared += handle.size
        else:
            file += handle.size
    return inline, file, shared


def _subtask(sub: FlinkSubtaskState) -> FlinkSubtaskSummary:
    inline, file, shared = _sizes(sub)
    keyed = sub.managed_keyed_state or sub.raw_keyed_state
    channels = sub.input_channel_state + sub.output_channel_state
    return FlinkSubtaskSummary(
        index=sub.index,
        finished=sub.finished,
        key_group_range=keyed.key_group_range if keyed else None,
        keyed_handle=keyed.kind.value if keyed else None,
        bytes=inline + file + shared,
        inline_bytes=inline,
        file_bytes=file,
        shared_bytes=shared,
        operator_states=tuple(
            FlinkOperatorStateSummary(s.name, s.mode.value, len(s.offsets))
            for handle in sub.operator_handles
            for s in handle.states
        ),
        channel_state_handles=len(channels),
        channel_state_bytes=sum(c.state_size for c in channels),
    )


def _meta_stream(handle: KeyedStateHandle) -> tuple[StreamHandle | None, int | None]:
    """The stream holding the backend meta information and how many bytes to read."""
    if handle.kind in (KeyedHandleKind.KEY_GROUPS, KeyedHandleKind.SAVEPOINT_KEY_GROUPS):
        first = next((o for o in handle.key_group_offsets if o > 0), None)
        return handle.delegate, min(first or MAX_HEADER_BYTES, MAX_HEADER_BYTES)
    if handle.kind is KeyedHandleKind.INCREMENTAL:
        return handle.meta, MAX_HEADER_BYTES
    for child in handle.nested:
        stream, length = _meta_stream(child)
        if stream is not None:
            return stream, length
    return None, None


def keyed_state_meta(
    snapshot: FlinkSnapshot, op: FlinkOperatorState
) -> tuple[tuple[FlinkStateMeta, ...], str | None]:
    """The keyed states an operator registered, and a problem string when unreadable."""
    handle = next((h for sub in op.subtasks for h in sub.keyed_handles), None)
    if handle is None:
        return (), None
    stream, length = _meta_stream(handle)
    if stream is None:
        return (), f"{handle.kind.value} handle has no meta information stream"
    try:
        data = read_stream_bytes(snapshot, stream, length=length)
        meta = read_keyed_backend_meta(data, source=stream.path or stream.name or "<inline>")
    except (StatekitError, OSError) as exc:
        return (), f"cannot read keyed state meta information: {exc}"
    problems = [meta.problem] if meta.problem else []
    problems += [f"{s.name}: {s.problem}" for s in meta.states if s.problem]
    return meta.states, "; ".join(problems) or None


def _operator(snapshot: FlinkSnapshot, op: FlinkOperatorState, read_meta: bool) -> FlinkOperatorSummary:
    subtasks = tuple(_subtask(sub) for sub in op.subtasks)
    states, problem = keyed_state_meta(snapshot, op) if read_meta else ((), None)
    splits: list[SourceSplit] = []
    splits_problem = None
    if read_meta:
        try:
            splits = source_splits(snapshot, op)
        except (StatekitError, OSError) as exc:
            splits_problem = f"cannot read the source splits: {exc}"
    coordinator = op.coordinator_state.size if op.coordinator_state else 0
    inline = sum(s.inline_bytes for s in subtasks) + coordinator
    file = sum(s.file_bytes for s in subtasks)
    shared = sum(s.shared_bytes for s in subtasks)
    return FlinkOperatorSummary(
        operator_id=op.operator_id,
        uid=op.uid,
        name=op.name,
        parallelism=op.parallelism,
        max_parallelism=op.max_parallelism,
        fully_finished=op.fully_finished,
        coordinator_bytes=coordinator,
        subtasks=subtasks,
        keyed_states=states,
        keyed_state_problem=problem,
        bytes=inline + file + shared,
        inline_bytes=inline,
        file_bytes=file,
        shared_bytes=shared,
        splits=tuple(splits),
        splits_problem=splits_problem,
    )


def summarize_snapshot(snapshot: FlinkSnapshot, *, read_state_meta: bool = True) -> FlinkSnapshotSummary:
    """Build the ``inspect`` view of an opened snapshot.

    Args:
        snapshot: The opened snapshot.
        read_state_meta: Also read keyed state names from the state streams (one small read
            per keyed operator); ``False`` reads nothing beyond ``_metadata``.
    """
    metadata = snapshot.metadata
    operators = tuple(_operator(snapshot, op, read_state_meta) for op in metadata.operators)
    return FlinkSnapshotSummary(
        path=snapshot.path,
        metadata_path=snapshot.metadata_path,
        metadata_version=metadata.version,
        checkpoint_id=metadata.checkpoint_id,
        kind=metadata.kind,
        format=metadata.format,
        master_states=len(metadata.master_states),
        metadata_bytes=metadata.size,
        operators=operators,
        bytes=sum(o.bytes for o in operators),
        inline_bytes=sum(o.inline_bytes for o in operators),
        file_bytes=sum(o.file_bytes for o in operators),
        shared_bytes=sum(o.shared_bytes for o in operators),
        moved=moved_note(snapshot),
    )
