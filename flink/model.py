"""The frozen model of a Flink ``_metadata`` file (Flink's ``CheckpointMetadata`` in Python).

Invariants:
    * Every value is exactly what the file holds; nothing is resolved against a filesystem.
    * ``offset`` fields are byte offsets into the ``_metadata`` file, so a report can point
      at the bytes a value came from.
    * A :class:`StreamHandle` of kind ``FILE`` holds an absolute path/URL as Flink wrote it;
      one of kind ``RELATIVE_FILE`` a path relative to the snapshot directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum

from statekit.statefmt.errors import StateNotFoundError
from statekit.statefmt.keygroups import KeyGroupRange

__all__ = [
    "KeyGroupRange",
    "StreamHandleKind",
    "StreamHandle",
    "NamedStreamHandle",
    "KeyedHandleKind",
    "KeyedStateHandle",
    "DistributionMode",
    "OperatorStateEntry",
    "OperatorStateHandle",
    "ChannelStateHandle",
    "FlinkSubtaskState",
    "FlinkOperatorState",
    "MasterState",
    "CheckpointProperties",
    "FlinkCheckpointMetadata",
]


class StreamHandleKind(str, Enum):
    """How the bytes of a stream handle are stored."""

    BYTE_STREAM = "byte-stream"  # inlined in _metadata
    FILE = "file"  # absolute path or URL
    RELATIVE_FILE = "relative-file"  # relative to the snapshot directory
    KEY_GROUPS = "key-groups"  # a legacy key-groups handle nested as a stream handle


@dataclass(frozen=True)
class StreamHandle:
    """One ``StreamStateHandle``: a run of bytes, inlined or in a file.

    Attributes:
        kind: Where the bytes are.
        size: The state size Flink recorded (bytes).
        offset: Byte offset of the handle's type byte in ``_metadata``.
        path: Absolute path/URL (``FILE``) or relative path (``RELATIVE_FILE``).
        path_offset: Byte offset of the path's 2-byte length prefix (``FILE`` only).
        name: The handle name of an inlined ``BYTE_STREAM`` handle.
        data: The inlined bytes of a ``BYTE_STREAM`` handle.
        key_group_range: Range of a nested ``KEY_GROUPS`` handle.
        key_group_offsets: Per-key-group offsets of a nested ``KEY_GROUPS`` handle.
        delegate: The stream a nested ``KEY_GROUPS`` handle points into.
    """

    kind: StreamHandleKind
    size: int
    offset: int
    path: str | None = None
    path_offset: int | None = None
    name: str | None = None
    data: bytes | None = field(default=None, repr=False)
    key_group_range: KeyGroupRange | None = None
    key_group_offsets: tuple[int, ...] = field(default=(), repr=False)
    delegate: StreamHandle | None = None

    @property
    def is_inline(self) -> bool:
        """True when the bytes live inside ``_metadata``."""
        return self.kind is StreamHandleKind.BYTE_STREAM

    def leaves(self) -> Iterator[StreamHandle]:
        """This handle, or the stream a nested key-groups handle delegates to."""
        if self.kind is StreamHandleKind.KEY_GROUPS:
            if self.delegate is not None:
                yield from self.delegate.leaves()
        else:
            yield self


@dataclass(frozen=True)
class NamedStreamHandle:
    """A stream handle with the local file name it restores to (RocksDB ``HandleAndLocalPath``)."""

    local_path: str
    handle: StreamHandle | None


class KeyedHandleKind(str, Enum):
    """The kinds of keyed state handles."""

    KEY_GROUPS = "key-groups"  # heap/hashmap checkpoint, per-key-group offsets into one stream
    SAVEPOINT_KEY_GROUPS = "savepoint-key-groups"  # canonical savepoint format
    INCREMENTAL = "incremental"  # RocksDB native: shared + private files and a meta stream
    CHANGELOG = "changelog"  # changelog backend: materialized + non-materialized parts
    CHANGELOG_BYTES = "changelog-bytes"  # in-memory changelog changes
    CHANGELOG_FILES = "changelog-files"  # changelog changes in files


@dataclass(frozen=True)
class KeyedStateHandle:
    """One keyed state handle of a subtask.

    Attributes:
        kind: The handle kind.
        type_code: The raw type byte.
        offset: Byte offset of the type byte in ``_metadata``.
        key_group_range: The key groups the handle covers.
        key_group_offsets: Offset of each key group in ``delegate`` (key-groups kinds).
        delegate: The stream holding the key groups (key-groups kinds).
        state_handle_id: Flink's ``StateHandleID`` when written.
        checkpoint_id: The checkpoint that created an incremental handle.
        backend_id: The RocksDB backend UUID of an incremental handle.
        checkpointed_size: Bytes this checkpoint added (incremental v2, changelog).
        meta: The stream with the keyed backend meta information (incremental).
        shared: Shared files (incremental): reused by later checkpoints.
        private: Private files (incremental): MANIFEST, CURRENT, OPTIONS...
        nested: Materialized then non-materialized handles of a changelog handle.
        changelog_streams: ``(offset, handle)`` pairs of a changelog-files handle.
        change_count: Number of in-memory changes (changelog-bytes).
        change_bytes: Bytes of in-memory changes (changelog-bytes).
        materialization_id: Changelog materialization id.
        storage_identifier: Changelog storage identifier.
    """

    kind: KeyedHandleKind
    type_code: int
    offset: int
    key_group_range: KeyGroupRange
    key_group_offsets: tuple[int, ...] = field(default=(), repr=False)
    delegate: StreamHandle | None = None
    state_handle_id: str | None = None
    checkpoint_id: int | None = None
    backend_id: str | None = None
    checkpointed_size: int | None = None
    meta: StreamHandle | None = None
    shared: tuple[NamedStreamHandle, ...] = ()
    private: tuple[NamedStreamHandle, ...] = ()
    nested: tuple[KeyedStateHandle, ...] = ()
    changelog_streams: tuple[tuple[int, StreamHandle | None], ...] = ()
    change_count: int = 0
    change_bytes: int = 0
    materialization_id: int | None = None
    storage_identifier: str | None = None

    def stream_handles(self) -> Iterator[tuple[str, StreamHandle]]:
        """Every stream this handle references, as ``(role, handle)`` pairs.

        Roles: ``data`` (key-groups stream), ``meta``, ``shared``, ``private``, ``changelog``.
        """
        if self.delegate is not None:
            yield from (("data", leaf) for leaf in self.delegate.leaves())
        if self.meta is not None:
            yield from (("meta", leaf) for leaf in self.meta.leaves())
        for role, entries in (("shared", self.shared), ("private", self.private)):
            for entry in entries:
                if entry.handle is not None:
                    yield from ((role, leaf) for leaf in entry.handle.leaves())
        for _, handle in self.changelog_streams:
            if handle is not None:
                yield from (("changelog", leaf) for leaf in handle.leaves())
        for child in self.nested:
            yield from child.stream_handles()


class DistributionMode(str, Enum):
    """How operator state is redistributed on restore (Flink's ``OperatorStateHandle.Mode``)."""

    SPLIT_DISTRIBUTE = "split"
    UNION = "union"
    BROADCAST = "broadcast"


@dataclass(frozen=True)
class OperatorStateEntry:
    """One named operator state inside an operator state handle."""

    name: str
    mode: DistributionMode
    offsets: tuple[int, ...]


@dataclass(frozen=True)
class OperatorStateHandle:
    """A partitionable operator state handle: named states at offsets in one stream."""

    offset: int
    states: tuple[OperatorStateEntry, ...]
    delegate: StreamHandle | None

    @property
    def state_names(self) -> tuple[str, ...]:
        """The names of the states, in file order."""
        return tuple(state.name for state in self.states)


@dataclass(frozen=True)
class ChannelStateHandle:
    """In-flight data of an unaligned checkpoint (one input channel or result subpartition).

    Attributes:
        direction: ``input`` (input channel) or ``output`` (result subpartition).
        merged: True for the merged handle kinds (one handle for many channels).
        subtask_index: The subtask that wrote it.
        gate_or_partition: Gate index (input) or partition index (output); unmerged only.
        channel: Input channel or subpartition index; unmerged only.
        offsets_count: Number of buffer offsets (unmerged) or serialized offset bytes (merged).
        state_size: Bytes of state.
        delegate: Where the bytes are.
    """

    direction: str
    merged: bool
    subtask_index: int
    gate_or_partition: int | None
    channel: int | None
    offsets_count: int
    state_size: int
    delegate: StreamHandle | None


@dataclass(frozen=True)
class FlinkSubtaskState:
    """The state of one subtask of an operator."""

    index: int
    finished: bool = False
    managed_operator_state: OperatorStateHandle | None = None
    raw_operator_state: OperatorStateHandle | None = None
    managed_keyed_state: KeyedStateHandle | None = None
    raw_keyed_state: KeyedStateHandle | None = None
    input_channel_state: tuple[ChannelStateHandle, ...] = ()
    output_channel_state: tuple[ChannelStateHandle, ...] = ()
    ref_checkpoint_id: int | None = None

    @property
    def keyed_handles(self) -> tuple[KeyedStateHandle, ...]:
        """The managed and raw keyed handles that are present."""
        return tuple(h for h in (self.managed_keyed_state, self.raw_keyed_state) if h)

    @property
    def operator_handles(self) -> tuple[OperatorStateHandle, ...]:
        """The managed and raw operator state handles that are present."""
        return tuple(h for h in (self.managed_operator_state, self.raw_operator_state) if h)

    def stream_handles(self) -> Iterator[tuple[str, StreamHandle]]:
        """Every stream of this subtask as ``(role, handle)`` pairs."""
        for keyed in self.keyed_handles:
            yield from keyed.stream_handles()
        for op in self.operator_handles:
            if op.delegate is not None:
                yield from (("operator", leaf) for leaf in op.delegate.leaves())
        for channel in self.input_channel_state + self.output_channel_state:
            if channel.delegate is not None:
                yield from (("channel", leaf) for leaf in channel.delegate.leaves())


@dataclass(frozen=True)
class FlinkOperatorState:
    """The state of one operator (Flink's ``OperatorState``).

    Attributes:
        operator_id: The 16-byte operator id as 32 hex digits.
        name: Operator name (metadata v5+), else ``None``.
        uid: User-set uid (metadata v5+, when set), else ``None``.
        parallelism: Parallelism when the snapshot was taken.
        max_parallelism: Max parallelism (number of key groups).
        coordinator_state: The operator coordinator's state, inlined.
        fully_finished: True when every subtask had finished (no subtask states follow).
        subtasks: The subtask states, in file order.
        offset: Byte offset of the operator's first byte in ``_metadata``.
    """

    operator_id: str
    name: str | None
    uid: str | None
    parallelism: int
    max_parallelism: int
    coordinator_state: StreamHandle | None
    fully_finished: bool
    subtasks: tuple[FlinkSubtaskState, ...]
    offset: int

    @property
    def label(self) -> str:
        """The uid when set, else the operator id."""
        return self.uid or self.operator_id

    @property
    def finished_subtasks(self) -> tuple[int, ...]:
        """Indexes of the subtasks that had finished."""
        return tuple(s.index for s in self.subtasks if s.finished)

    def stream_handles(self) -> Iterator[tuple[int | None, str, StreamHandle]]:
        """Every stream of this operator as ``(subtask, role, handle)`` triples."""
        if self.coordinator_state is not None:
            yield None, "coordinator", self.coordinator_state
        for subtask in self.subtasks:
            for role, handle in subtask.stream_handles():
                yield subtask.index, role, handle


@dataclass(frozen=True)
class MasterState:
    """A master (checkpoint coordinator hook) state: a named, versioned byte payload."""

    name: str
    version: int
    size: int


@dataclass(frozen=True)
class CheckpointProperties:
    """What the Java-serialized ``CheckpointProperties`` trailer (metadata v4+) says.

    Attributes:
        snapshot_type: ``checkpoint`` or ``savepoint`` (from the type's class), or ``None``.
        type_name: The type's name, e.g. ``Checkpoint``, ``Savepoint``, ``Full Checkpoint``.
        format_type: ``CANONICAL`` or ``NATIVE`` for savepoints, else ``None``.
        sharing_files_strategy: For checkpoints, e.g. ``FORWARD_BACKWARD``.
        post_checkpoint_action: For savepoints, e.g. ``NONE``, ``TERMINATE``, ``SUSPEND``.
        flags: The boolean properties (``forced``, ``discardSubsumed``, ...).
        problem: Why the trailer could not be fully decoded, else ``None``.
    """

    snapshot_type: str | None
    type_name: str | None
    format_type: str | None
    sharing_files_strategy: str | None
    post_checkpoint_action: str | None
    flags: dict[str, bool] = field(default_factory=dict)
    problem: str | None = None


@dataclass(frozen=True)
class FlinkCheckpointMetadata:
    """A whole Flink ``_metadata`` file.

    Attributes:
        source: Where the bytes came from (for messages).
        version: The metadata format version (3..7).
        checkpoint_id: The checkpoint id.
        master_states: Master hook states.
        operators: Operator states, in file order.
        properties: The decoded trailer (v4+), else ``None``.
        size: Bytes of the file.
    """

    source: str
    version: int
    checkpoint_id: int
    master_states: tuple[MasterState, ...]
    operators: tuple[FlinkOperatorState, ...]
    properties: CheckpointProperties | None
    size: int

    @property
    def kind(self) -> str | None:
        """``checkpoint`` or ``savepoint`` per the trailer; ``None`` when not known."""
        return self.properties.snapshot_type if self.properties else None

    @property
    def format(self) -> str:
        """``canonical`` or ``native``: per the trailer, else inferred from the handles."""
        props = self.properties
        if props is not None and props.format_type:
            return props.format_type.lower()
        if props is not None and props.snapshot_type == "checkpoint":
            return "native"
        kinds = {
            handle.kind
            for op in self.operators
            for sub in op.subtasks
            for handle in sub.keyed_handles
        }
        if KeyedHandleKind.SAVEPOINT_KEY_GROUPS in kinds:
            return "canonical"
        return "native"

    def operator(self, uid_or_id: str) -> FlinkOperatorState:
        """The operator with this uid or operator id (hex), or else the one operator without a
        uid of this name (SQL operators: ``GroupAggregate[4]``).

        Raises:
            StateNotFoundError: When no operator matches, or several unnamed ones share the name.
        """
        wanted = uid_or_id.lower()
        for op in self.operators:
            if op.uid == uid_or_id or op.operator_id == wanted:
                return op
        named = [op for op in self.operators if op.uid is None and op.name == uid_or_id]
        if len(named) == 1:
            return named[0]
        if named:
            ids = ", ".join(op.operator_id for op in named)
            raise StateNotFoundError(f"{len(named)} operators are named {uid_or_id!r} (ids {ids}): give the id",
                                     path=self.source)
        known = ", ".join(op.label for op in self.operators)
        raise StateNotFoundError(
            f"no operator with uid or id {uid_or_id!r} (known: {known})", path=self.source
        )

    def stream_handles(self) -> Iterator[tuple[FlinkOperatorState, int | None, str, StreamHandle]]:
        """Every stream handle in the file as ``(operator, subtask, role, handle)``."""
        for op in self.operators:
            for subtask, role, handle in op.stream_handles():
                yield op, subtask, role, handle
