"""Keyed state backends: the seam between state handles and storage, and their registry.

A backend holds the keyed state of one operator subtask. The runtime sets
``current_key`` before each record; handles read and write the state of that key.
A snapshot has a synchronous part (:meth:`KeyedStateBackend.snapshot`, called at the
barrier in the task thread) and an asynchronous part (:meth:`KeyedSnapshot.write`, run
on a snapshot thread while processing continues). Files are written only through
``statekit.writers.state_writer``.

Every backend is a :class:`StateBackendEntry` in this module's registry, the only place
that names them: ``env.set_state_backend``, :class:`RunOptions`, the launcher, job control
and ``statekit run --state-backend`` all read it. An entry declares what its backend needs
(a scratch working directory, an optional package); nothing else special-cases a name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from statekit.runtime.api.state import AggregatingStateDescriptor, ReducingStateDescriptor, ValueStateDescriptor
from statekit.runtime.api.ttl import StateTtlConfig
from statekit.runtime.state.ttl import (
    TtlAggregatingState,
    TtlListState,
    TtlMapState,
    TtlReducingState,
    system_clock,
    ttl_value_state,
)
from statekit.statefmt import layout
from statekit.statefmt.entries import KeyedColumns, StateCodec, group_by_key_group
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.keygroups import KeyGroupRange
from statekit.statefmt.metadata import StateDescriptor, StateFile, StateKind
from statekit.statefmt.native_state import NativeKeyedState

if TYPE_CHECKING:
    from statekit.runtime.api.state import (
        AggregatingState,
        ListState,
        MapState,
        ReducingState,
        State,
        StateDescriptorBase,
        ValueState,
    )
    from statekit.runtime.checkpoint.restore import NativeRestoreSource
    from statekit.runtime.checkpoint.storage import SnapshotOutput

__all__ = [
    "KeyedStateBackend",
    "KeyedSnapshot",
    "NativeKeyedSnapshot",
    "SnapshotRequest",
    "StateSlot",
    "StateHandles",
    "SubtaskScope",
    "DEFAULT_STATE_BACKEND",
    "write_keyed_rows",
    "hashable",
    "check_compatible",
    "rows_of",
    "stray_namespace",
]

DEFAULT_STATE_BACKEND = "hashmap"


@dataclass(frozen=True)
class SubtaskScope:
    """Which operator subtask a backend serves."""

    uid: str
    subtask: int
    parallelism: int
    max_parallelism: int
    key_serializer: str
    key_group_range: KeyGroupRange


class KeyedSnapshot(ABC):
    """The asynchronous part of a keyed snapshot."""

    @abstractmethod
    def write(self, location: SnapshotOutput) -> list[StateFile]:
        """Write one file per non-empty state into ``location``; return them."""

    @abstractmethod
    def release(self) -> None:
        """Give up the snapshot (after writing or when the checkpoint is aborted)."""


class NativeKeyedSnapshot(KeyedSnapshot):
    """The asynchronous part of a native snapshot: the backend's own files.

    Attributes:
        new_shared: Files this snapshot added to the job's ``shared/`` (relative to it).
        bytes_written: Bytes written (shared files reused from the base checkpoint excluded).
    """

    new_shared: list[str]
    bytes_written: int

    @abstractmethod
    def write_native(self, location: SnapshotOutput) -> NativeKeyedState:
        """Write (or reference) the store's files for ``location``; return what ``_metadata`` records."""

    def write(self, location: SnapshotOutput) -> list[StateFile]:
        raise TypeError("a native keyed snapshot is written with write_native")


@dataclass(frozen=True)
class SnapshotRequest:
    """What a barrier asks of a keyed backend.

    Attributes:
        checkpoint_id: The checkpoint.
        native: The backend's native format is wanted (a backend without one writes canonical files).
        incremental: A native checkpoint may reference the shared files of ``base_checkpoint_id``
            instead of writing them again.
        base_checkpoint_id: The latest completed checkpoint when this one was triggered.
    """

    checkpoint_id: int
    native: bool = False
    incremental: bool = False
    base_checkpoint_id: int | None = None


class StateSlot(Protocol):
    """A backend's storage of one state; ``descriptor`` is the latest declared (or restored) one."""

    descriptor: StateDescriptor


SlotT = TypeVar("SlotT", bound=StateSlot)
BackendT = TypeVar("BackendT", bound="KeyedStateBackend[Any]")


@dataclass(frozen=True)
class StateHandles(Generic[BackendT, SlotT]):
    """A backend's handle class for each keyed state kind.

    Each is called with the backend, the state's slot and what its kind needs: the default
    (value state), the reduce function (reducing), the aggregate function (aggregating).
    """

    value_state: Callable[[BackendT, SlotT, Any], ValueState[Any]]
    list_state: Callable[[BackendT, SlotT], ListState[Any]]
    map_state: Callable[[BackendT, SlotT], MapState[Any]]
    reducing_state: Callable[[BackendT, SlotT, Callable[[Any, Any], Any]], ReducingState[Any]]
    aggregating_state: Callable[[BackendT, SlotT, Any], AggregatingState[Any]]


class KeyedStateBackend(ABC, Generic[SlotT]):
    """Keyed state of one operator subtask, kept in one slot (``SlotT``) per state.

    The base owns what every backend shares: the slots by state name, the compatibility
    check between a restored and a declared state, one handle per state name, and the
    switch from a descriptor's :class:`StateKind` to the backend's handle of that kind.
    A backend supplies its slots (:meth:`new_slot`), its handle classes (``handle_types``),
    restore, snapshot and key iteration.

    Attributes:
        scope: The subtask served.
        working_dir: A local scratch directory of this execution attempt when the backend's
            registry entry declares ``needs_working_dir`` (the job master creates and
            removes it), else None.
        current_key: The key whose state the handles read and write.
        ttl_clock: The clock (epoch ms) of states with TTL whose config names none.
        record_clock: The clock of the heap TTL value handles that take the per-record time
            (:func:`statekit.runtime.state.ttl.record_timed_handler`), None while there is none.
        record_time: That clock's reading for the record being processed, None outside one.
    """

    current_key: Any
    handle_types: ClassVar[StateHandles[Any, Any]]
    # the backend snapshots and restores TtlValues with their expiry (statekit.runtime.state.ttl)
    supports_ttl: ClassVar[bool] = False
    # the backend keeps namespaced state (handles with set_current_namespace, :meth:`namespaces`)
    supports_namespaces: ClassVar[bool] = False

    def __init__(self, scope: SubtaskScope, *, working_dir: str | None = None) -> None:
        self.scope = scope
        self.working_dir = working_dir
        self.current_key = None
        self._slots: dict[str, SlotT] = {}
        self._handles: dict[str, State] = {}
        self._ttl: dict[str, StateTtlConfig] = {}
        self.ttl_clock: Callable[[], int] = system_clock
        self.record_clock: Callable[[], int] | None = None
        self.record_time: int | None = None

    # ------------------------------------------------------------ shared by every backend

    def get_state(self, descriptor: StateDescriptorBase) -> State:
        """The handle of ``descriptor`` (created once, bound to restored state of that name)."""
        handle = self._handles.get(descriptor.name)
        if handle is None:
            if descriptor.namespace_type is not None:
                if not self.supports_namespaces:
                    raise BadInputError(f"operator {self.scope.uid!r}: state {descriptor.name!r} has a namespace "
                                        f"(window state), which the {type(self).__name__} state backend does "
                                        "not support; use hashmap or rocksdb")
                if descriptor.ttl_config is not None:
                    raise BadInputError(f"operator {self.scope.uid!r}: state {descriptor.name!r} has a namespace "
                                        "and a TTL; namespaced (window) state cannot expire")
            slot = self.declare(descriptor.to_metadata())
            config = descriptor.ttl_config
            new = self._new_handle if config is None else self._new_ttl_handle
            handle = self._handles[descriptor.name] = new(descriptor, slot)
        return handle

    def _new_ttl_handle(self, descriptor: StateDescriptorBase, slot: SlotT) -> State:
        """A TTL handle over the backend's handle of the state's TtlValues (:mod:`statekit.runtime.state.ttl`)."""
        config, name, types = descriptor.ttl_config, descriptor.name, self.handle_types
        assert config is not None
        if not self.supports_ttl:
            raise BadInputError(f"operator {self.scope.uid!r}: state {name!r} has a TTL, which the "
                                f"{type(self).__name__} state backend does not support; use hashmap or rocksdb")
        self._ttl[name] = config
        kind = descriptor.kind
        if kind is StateKind.LIST:
            return TtlListState(self, name, config, types.list_state(self, slot))
        if kind is StateKind.MAP:
            return TtlMapState(self, name, config, types.map_state(self, slot))
        raw = types.value_state(self, slot, None)
        if kind is StateKind.VALUE:
            assert isinstance(descriptor, ValueStateDescriptor)
            return ttl_value_state(self, name, config, raw, descriptor.default, self.heap_table(slot))
        if kind is StateKind.REDUCING:
            assert isinstance(descriptor, ReducingStateDescriptor) and descriptor.reduce_function
            return TtlReducingState(self, name, config, raw, descriptor.reduce_function)
        assert isinstance(descriptor, AggregatingStateDescriptor)
        return TtlAggregatingState(self, name, config, raw, descriptor.aggregate_function)

    def heap_table(self, slot: SlotT) -> dict[Any, Any] | None:
        """The live ``key -> stored value`` dict of a slot without namespace when the backend keeps
        it on the heap, replaces stored values rather than changing them in place, and copies the
        dict in a snapshot's synchronous part (TTL value handles then use it directly), else None."""
        return None

    def ttl_snapshot_time(self, state: str) -> int | None:
        """The time entries of ``state`` expired at are left out of a canonical snapshot taken now
        (None: none are; the state has no TTL or no full-snapshot cleanup)."""
        config = self._ttl.get(state)
        if config is None or not config.cleanup_full_snapshot:
            return None
        return (config.clock or self.ttl_clock)()

    def _new_handle(self, descriptor: StateDescriptorBase, slot: SlotT) -> State:
        kind, types, scope = descriptor.kind, self.handle_types, self.handle_scope(slot)
        if kind is StateKind.VALUE:
            assert isinstance(descriptor, ValueStateDescriptor)
            return types.value_state(scope, slot, descriptor.default)
        if kind is StateKind.LIST:
            return types.list_state(scope, slot)
        if kind is StateKind.MAP:
            return types.map_state(scope, slot)
        if kind is StateKind.REDUCING:
            assert isinstance(descriptor, ReducingStateDescriptor) and descriptor.reduce_function
            return types.reducing_state(scope, slot, descriptor.reduce_function)
        assert isinstance(descriptor, AggregatingStateDescriptor)
        return types.aggregating_state(scope, slot, descriptor.aggregate_function)

    def handle_scope(self, slot: SlotT) -> Any:
        """What a handle of ``slot`` is built with (the backend itself unless the backend scopes
        namespaced handles through a view of it)."""
        return self

    def declare(self, declared: StateDescriptor) -> SlotT:
        """The slot of ``declared``: new, or the existing one after :func:`check_compatible`."""
        slot = self._slots.get(declared.name)
        if slot is None:
            slot = self._slots[declared.name] = self.new_slot(declared)
        else:
            check_compatible(slot.descriptor, declared, self.scope.uid)
            slot.descriptor = declared
        return slot

    def restored_slot(self, descriptor: StateDescriptor) -> SlotT:
        """The slot restored entries of ``descriptor`` go to (the existing one, unchecked, or new)."""
        return self._slots.get(descriptor.name) or self.declare(descriptor)

    def slot(self, state: str) -> SlotT | None:
        """The slot of the state named ``state``, if any."""
        return self._slots.get(state)

    def slots(self) -> list[SlotT]:
        """Every slot, in state-name order."""
        return [self._slots[name] for name in sorted(self._slots)]

    def descriptors(self) -> list[StateDescriptor]:
        """Every state this backend holds (registered or restored), in name order."""
        return [slot.descriptor for slot in self.slots()]

    # ------------------------------------------------------------ what a backend supplies

    @abstractmethod
    def new_slot(self, descriptor: StateDescriptor) -> SlotT:
        """Empty storage for the state ``descriptor`` (called once per state name)."""

    @abstractmethod
    def restore_state(self, descriptor: StateDescriptor, entries: Iterable[Any]) -> None:
        """Load restored entries (``KeyedStateEntry``/``MapStateEntry``) of one state."""

    @abstractmethod
    def snapshot(self) -> KeyedSnapshot:
        """The synchronous part of a snapshot: a consistent view of every state."""

    @abstractmethod
    def keys(self, state: str) -> Iterator[Any]:
        """The keys that have a value in ``state`` (in any namespace), each once."""

    def namespaces(self, state: str) -> Iterator[tuple[Any, Any]]:
        """``(key, namespace)`` of every namespace holding a value of the namespaced ``state``
        (a listed copy: the caller may change the state while iterating)."""
        raise NotImplementedError(f"{type(self).__name__} has no namespaced state")

    def native_snapshot(self, request: SnapshotRequest) -> NativeKeyedSnapshot | None:
        """The synchronous part of a native snapshot, or None: the backend has no native format
        (the caller then takes a canonical :meth:`snapshot`)."""
        return None

    def restore_native(self, sources: list[NativeRestoreSource]) -> bool:
        """Restore keyed state from native snapshot files, or return False: the backend cannot
        (the caller then restores canonical entries through :meth:`restore_state`)."""
        return False

    def close(self) -> None:
        """Release resources."""


# -- helpers of the backends -----------------------------------------------------------------


def check_compatible(restored: StateDescriptor, declared: StateDescriptor, uid: str) -> None:
    """Refuse a declared state whose kind or serializers differ from the restored one."""
    if restored.kind is not declared.kind:
        raise BadInputError(
            f"operator {uid!r}: state {declared.name!r} was restored as {restored.kind.value} state "
            f"but the job declares {declared.kind.value} state; rename the state or migrate it "
            "offline (statekit modify)"
        )
    if restored.namespace_type != declared.namespace_type:
        raise BadInputError(
            f"operator {uid!r}: state {declared.name!r} was restored with namespace type "
            f"{restored.namespace_type or 'none'} but the job declares {declared.namespace_type or 'none'}; "
            "rename the state or migrate it offline"
        )
    if (restored.ttl_ms is None) != (declared.ttl_ms is None):
        had, has = ("with", "without") if restored.ttl_ms is not None else ("without", "with")
        raise BadInputError(
            f"operator {uid!r}: state {declared.name!r} was restored {had} TTL but the job declares it {has} "
            "TTL; keep TTL enabled (or disabled) for the state, or rename it"
        )
    for field in ("value_serializer", "user_key_serializer"):
        old, new = getattr(restored, field), getattr(declared, field)
        if old is not None and new is not None and old != new:
            raise BadInputError(
                f"operator {uid!r}: state {declared.name!r} was written with the {old!r} serializer "
                f"but the job declares {new!r}; keep the serializer or migrate the state offline"
            )


def write_keyed_rows(
    location: SnapshotOutput,
    scope: SubtaskScope,
    descriptor: StateDescriptor,
    rows: list[Any] | KeyedColumns,
) -> StateFile | None:
    """Encode rows of one state, group them by key group, write one file (None if no rows)."""
    # imported here, not at the top: the CLI reads the registry and must not load the IO stack
    from statekit.writers.state_writer import write_keyed_file

    if not rows:
        return None
    codec = StateCodec(descriptor, scope.key_serializer, for_write=True, trust_pickle=True)
    table = codec.encode_keyed_rows(rows)
    relative = layout.state_file_path(scope.uid, descriptor.name, scope.subtask, scope.parallelism)
    return write_keyed_file(
        location.io, location.directory, relative, descriptor.name,
        group_by_key_group(table, scope.max_parallelism),
    )


def stray_namespace(descriptor: StateDescriptor, uid: str) -> BadInputError:
    """The error for a restored entry with a namespace in a state that declares none (its
    namespaces would merge into one value per key)."""
    return BadInputError(f"operator {uid!r}: state {descriptor.name!r} has entries with a namespace but its "
                         "descriptor declares no namespace_type; rewrite the savepoint with the namespace type "
                         "declared (statekit bootstrap --namespace-column does)")


def hashable(value: Any) -> Any:
    """Decoded keys as dict keys: msgpack arrays (lists) become tuples, recursively."""
    if isinstance(value, list):
        return tuple(hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((hashable(k), hashable(v)) for k, v in value.items()))
    return value


def rows_of(kind: StateKind, data: dict[Any, Any], *, namespaced: bool = False) -> list[Any] | KeyedColumns:
    """Rows for ``StateCodec.encode_keyed_rows`` from a key -> value (or user-key map) dict;
    ``namespaced``: the dict's keys are ``(key, namespace)`` pairs. A plain key -> value dict
    becomes its key and value columns directly (no tuple per entry)."""
    if namespaced:
        if kind is StateKind.MAP:
            return [(key, namespace, user_key, value) for (key, namespace), entries in data.items()
                    for user_key, value in entries.items()]
        return [(key, namespace, value) for (key, namespace), value in data.items()]
    if kind is StateKind.MAP:
        return [(key, user_key, value) for key, entries in data.items() for user_key, value in entries.items()]
    return KeyedColumns(list(data), list(data.values()))

