"""The ``hashmap`` keyed state backend: Python dicts, asynchronous copy-on-write snapshots.

Each state is a table ``key -> value`` (map state: ``key -> {user key: value}``).

Snapshot invariant: the synchronous part copies every table dict (a C-speed shallow copy)
and marks the tables as *shared*. While a snapshot shares a table, a mutable value (a list,
a user-key map, an accumulator, any list/dict/set value) is copied before its first
in-place change or hand-out and the copy replaces it in the live table (``owned`` remembers
which keys were copied since the snapshot), so the snapshot's view never changes while the
asynchronous part encodes and writes it. Immutable values are replaced, never changed.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable, Iterator
from operator import itemgetter
from typing import Any

from statekit.runtime.api.state import AggregatingState, ListState, MapState, ReducingState, ValueState
from statekit.runtime.checkpoint.storage import SnapshotOutput
from statekit.runtime.state.backend import (
    KeyedSnapshot,
    KeyedStateBackend,
    StateHandles,
    SubtaskScope,
    hashable,
    rows_of,
    stray_namespace,
    write_keyed_rows,
)
from statekit.runtime.state.shared_map import SharedMap
from statekit.runtime.state.ttl import TtlValue, ttl_rows, wrap_restored
from statekit.statefmt.entries import KeyedColumns, KeyedStateEntry, MapStateEntry
from statekit.statefmt.metadata import StateDescriptor, StateFile, StateKind

__all__ = [
    "HashMapKeyedStateBackend",
    "ValuesByPair",
    "MapsByPair",
    "namespaced_columns",
]

_MUTABLE = (list, dict, set, bytearray)
_MISSING: Any = object()


class _Table:
    """One state's data and its copy-on-write bookkeeping."""

    __slots__ = ("data", "descriptor", "owned", "sharing")

    def __init__(self, descriptor: StateDescriptor) -> None:
        self.descriptor = descriptor
        self.data: dict[Any, Any] = {}
        self.owned: set[Any] = set()
        self.sharing = 0

    def own(self, key: Any, value: Any) -> Any:
        """``value`` of ``key`` safe to change in place (copied once while a snapshot shares the
        table; a :class:`SharedMap`, which other keys hold too, always)."""
        if value.__class__ is SharedMap:
            value = self.data[key] = dict(value)
            if self.sharing:
                self.owned.add(key)
            return value
        if not self.sharing or key in self.owned:
            return value
        shallow = self.descriptor.kind in (StateKind.LIST, StateKind.MAP)
        value = copy.copy(value) if shallow else copy.deepcopy(value)
        self.data[key] = value
        self.owned.add(key)
        return value


class _Snapshot(KeyedSnapshot):
    def __init__(self, backend: HashMapKeyedStateBackend, copies: list[tuple[_Table, dict[Any, Any]]]) -> None:
        self._backend = backend
        self._copies = copies
        self._released = False
        # taken in the synchronous part: the time TTL entries expired at are left out
        self._drop_at = {t.descriptor.name: backend.ttl_snapshot_time(t.descriptor.name) for t, _ in copies}

    def write(self, location: SnapshotOutput) -> list[StateFile]:
        files = []
        for table, data in self._copies:
            descriptor = table.descriptor
            rows = (ttl_rows(descriptor.kind, data, self._drop_at[descriptor.name]) if descriptor.ttl_ms is not None
                    else namespaced_columns(descriptor.kind, data) if descriptor.namespaced
                    else rows_of(descriptor.kind, data))
            file = write_keyed_rows(location, self._backend.scope, descriptor, rows)
            if file is not None:
                files.append(file)
        return files

    def release(self) -> None:
        with self._backend.lock:
            if self._released:
                return
            self._released = True
            for table, _ in self._copies:
                table.sharing -= 1
        self._copies = []


def namespaced_columns(kind: StateKind, data: dict[Any, Any]) -> KeyedColumns:
    """The rows of a namespaced table (``(key, namespace) -> value``, map state: ``-> {user key:
    value}``) as key, namespace[, user key] and value columns, in the table's order (the order
    :func:`~statekit.runtime.state.backend.rows_of` gives them). Window state, where a map holds one
    timer per (key, window) and tables hold tens of thousands of pairs, is split at C speed."""
    pairs = list(data)
    keys = list(map(itemgetter(0), pairs))
    namespaces = list(map(itemgetter(1), pairs))
    if kind is not StateKind.MAP:
        return KeyedColumns(keys, list(data.values()), namespaces)
    maps = list(data.values())
    if set(map(len, maps)) <= {1}:  # one user key per map: no row of a pair's map to repeat
        user_keys = list(map(next, map(iter, maps)))
        return KeyedColumns(keys, list(map(dict.__getitem__, maps, user_keys)), namespaces, user_keys)
    rows = [(key, namespace, user_key, value) for (key, namespace), entries in data.items()
            for user_key, value in entries.items()]
    return KeyedColumns([r[0] for r in rows], [r[3] for r in rows], [r[1] for r in rows], [r[2] for r in rows])


class _NamespaceScope:
    """A namespaced handle's view of the backend: its ``current_key`` is the table key
    ``(current key, current namespace)``."""

    __slots__ = ("_backend", "namespace")

    def __init__(self, backend: HashMapKeyedStateBackend) -> None:
        self._backend = backend
        self.namespace: Any = None

    @property
    def current_key(self) -> tuple[Any, Any]:
        return self._backend.current_key, self.namespace


class ValuesByPair:
    """A namespaced value (or reducing/aggregating) state's table addressed by explicit
    ``(key, namespace)`` pairs — the table's own keys — instead of the current key and namespace:
    the window operator's per-record path, which builds the pair once for several states.

    The copy-on-write invariant of the module holds: a mutable value a snapshot shares is
    copied before it is handed out.
    """

    __slots__ = ("_data", "_table")

    def __init__(self, table: _Table) -> None:
        self._table = table
        self._data = table.data

    @property
    def data(self) -> dict[Any, Any]:
        """The live table itself, for a caller's hot path: reading an immutable value (an int, a
        str, a tuple) from it is :meth:`get` and storing one that is not None is :meth:`put`;
        anything else goes through those methods (copy-on-write)."""
        return self._data

    def get(self, pair: tuple[Any, Any]) -> Any:
        """The value of ``pair`` (None: none), safe to change in place."""
        value = self._data.get(pair)
        if value is not None and self._table.sharing and value.__class__ in _MUTABLE:
            return self._table.own(pair, value)
        return value

    def put(self, pair: tuple[Any, Any], value: Any) -> None:
        """Set the value of ``pair`` (None: remove it)."""
        if value is None:
            self._data.pop(pair, None)
        else:
            self._data[pair] = value

    def pop(self, pair: tuple[Any, Any]) -> Any:
        """Remove the value of ``pair`` and return it (None: none). A snapshot keeps its own view:
        the value leaves the live table, which the snapshot does not share."""
        return self._data.pop(pair, None)


class MapsByPair:
    """A namespaced map state's table addressed by explicit ``(key, namespace)`` pairs (see
    :class:`ValuesByPair`)."""

    __slots__ = ("_data", "_table")

    def __init__(self, table: _Table) -> None:
        self._table = table
        self._data = table.data

    def put(self, pair: tuple[Any, Any], user_key: Any, value: Any) -> None:
        """Set ``user_key`` of the map of ``pair``."""
        current = self._data.get(pair)
        if current is None:
            self._data[pair] = {user_key: value}
        else:
            self._table.own(pair, current)[user_key] = value

    def put_shared(self, pair: tuple[Any, Any], shared: SharedMap) -> None:
        """Set the entries of ``shared`` in the map of ``pair``; a pair without a map holds
        ``shared`` itself (no map of its own until it is changed)."""
        current = self._data.get(pair)
        if current is None:
            self._data[pair] = shared
        else:
            self._table.own(pair, current).update(shared)

    def remove(self, pair: tuple[Any, Any], user_key: Any) -> None:
        """Remove ``user_key`` of the map of ``pair`` (no-op when absent); an emptied map goes."""
        current = self._data.get(pair)
        if current is None or user_key not in current:
            return
        if len(current) == 1:
            del self._data[pair]  # the live table lets go of the map; a snapshot's copy keeps it whole
        else:
            del self._table.own(pair, current)[user_key]

    def clear(self, pair: tuple[Any, Any]) -> None:
        """Remove the map of ``pair``."""
        self._data.pop(pair, None)


class _KeyedHandle:
    __slots__ = ("_backend", "_data", "_table")

    def __init__(self, backend: HashMapKeyedStateBackend | _NamespaceScope, table: _Table) -> None:
        self._backend = backend  # a namespaced state's handle holds a _NamespaceScope
        self._table = table
        self._data = table.data

    def clear(self) -> None:
        self._data.pop(self._backend.current_key, None)

    def set_current_namespace(self, namespace: Any) -> None:
        scope = self._backend
        if not isinstance(scope, _NamespaceScope):
            raise TypeError(f"state {self._table.descriptor.name!r} has no namespace")
        scope.namespace = hashable(namespace)

    def _namespaced_table(self) -> _Table:
        if not isinstance(self._backend, _NamespaceScope):
            raise TypeError(f"state {self._table.descriptor.name!r} has no namespace")
        return self._table


class _ValueState(_KeyedHandle, ValueState[Any]):
    __slots__ = ("_default",)

    def __init__(self, backend: HashMapKeyedStateBackend | _NamespaceScope, table: _Table, default: Any) -> None:
        super().__init__(backend, table)
        self._default = default

    def value(self) -> Any:
        key = self._backend.current_key
        value = self._data.get(key, _MISSING)
        if value is _MISSING:
            default = self._default
            return copy.deepcopy(default) if default.__class__ in _MUTABLE else default
        if self._table.sharing and value.__class__ in _MUTABLE:
            return self._table.own(key, value)
        return value

    def update(self, value: Any) -> None:
        if value is None:
            self._data.pop(self._backend.current_key, None)
        else:
            self._data[self._backend.current_key] = value

    def by_pair(self) -> ValuesByPair:
        """This namespaced state's table by explicit ``(key, namespace)`` pairs."""
        return ValuesByPair(self._namespaced_table())


class _ListState(_KeyedHandle, ListState[Any]):
    __slots__ = ()

    def _owned(self) -> list[Any] | None:
        key = self._backend.current_key
        current = self._data.get(key)
        return None if current is None else self._table.own(key, current)

    def get(self) -> list[Any]:
        current = self._owned()
        return current if current is not None else []

    def add(self, value: Any) -> None:
        current = self._owned()
        if current is None:
            self._data[self._backend.current_key] = [value]
        else:
            current.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        values = list(values)
        if not values:
            return
        current = self._owned()
        if current is None:
            self._data[self._backend.current_key] = values
        else:
            current.extend(values)

    def update(self, values: Iterable[Any]) -> None:
        values = list(values)
        if values:
            self._data[self._backend.current_key] = values
        else:
            self._data.pop(self._backend.current_key, None)


class _MapState(_KeyedHandle, MapState[Any]):
    __slots__ = ()

    def _map(self, create: bool) -> dict[Any, Any] | None:
        key = self._backend.current_key
        current = self._data.get(key)
        if current is None:
            if not create:
                return None
            current = self._data[key] = {}
            return current
        return self._table.own(key, current) if create else current  # type: ignore[no-any-return]

    def get(self, user_key: Any) -> Any:
        current = self._map(False)
        return None if current is None else current.get(user_key)

    def put(self, user_key: Any, value: Any) -> None:
        current = self._map(True)
        assert current is not None
        current[user_key] = value

    def put_all(self, entries: dict[Any, Any]) -> None:
        current = self._map(True)
        assert current is not None
        current.update(entries)

    def remove(self, user_key: Any) -> None:
        if self._map(False) is None:
            return
        current = self._map(True)
        assert current is not None
        current.pop(user_key, None)
        if not current:
            self._data.pop(self._backend.current_key, None)

    def contains(self, user_key: Any) -> bool:
        current = self._map(False)
        return current is not None and user_key in current

    def items(self) -> list[tuple[Any, Any]]:
        current = self._map(False)
        return list(current.items()) if current else []

    def is_empty(self) -> bool:
        return not self._map(False)

    def by_pair(self) -> MapsByPair:
        """This namespaced state's table by explicit ``(key, namespace)`` pairs."""
        return MapsByPair(self._namespaced_table())


class _ReducingState(_KeyedHandle, ReducingState[Any]):
    __slots__ = ("_reduce",)

    def __init__(self, backend: HashMapKeyedStateBackend | _NamespaceScope, table: _Table,
                 reduce: Callable[[Any, Any], Any]) -> None:
        super().__init__(backend, table)
        self._reduce = reduce

    def get(self) -> Any:
        return self._data.get(self._backend.current_key)

    def add(self, value: Any) -> None:
        key = self._backend.current_key
        current = self._data.get(key)
        self._data[key] = value if current is None else self._reduce(current, value)


class _AggregatingState(_KeyedHandle, AggregatingState[Any]):
    __slots__ = ("_function",)

    def __init__(self, backend: HashMapKeyedStateBackend | _NamespaceScope, table: _Table, function: Any) -> None:
        super().__init__(backend, table)
        self._function = function

    def get(self) -> Any:
        accumulator = self._data.get(self._backend.current_key)
        return None if accumulator is None else self._function.get_result(accumulator)

    def add(self, value: Any) -> None:
        key = self._backend.current_key
        accumulator = self._data.get(key)
        if accumulator is None:
            accumulator = self._function.create_accumulator()
        else:
            accumulator = self._table.own(key, accumulator)
        self._data[key] = self._function.add(value, accumulator)


class HashMapKeyedStateBackend(KeyedStateBackend[_Table]):
    """Keyed state in dicts on the heap."""

    handle_types = StateHandles(_ValueState, _ListState, _MapState, _ReducingState, _AggregatingState)
    supports_ttl = True
    supports_namespaces = True  # a namespaced state's table is keyed by (key, namespace)

    def __init__(self, scope: SubtaskScope, *, working_dir: str | None = None) -> None:
        super().__init__(scope, working_dir=working_dir)
        self.lock = threading.Lock()

    def new_slot(self, descriptor: StateDescriptor) -> _Table:
        return _Table(descriptor)

    def handle_scope(self, slot: _Table) -> HashMapKeyedStateBackend | _NamespaceScope:
        return _NamespaceScope(self) if slot.descriptor.namespaced else self

    def restore_state(self, descriptor: StateDescriptor, entries: Iterable[Any]) -> None:
        data = self.restored_slot(descriptor).data
        ttl = descriptor.ttl_ms is not None  # a TTL state keeps TtlValues (statekit.runtime.state.ttl)
        namespaced = descriptor.namespaced

        def table_key(entry: KeyedStateEntry | MapStateEntry) -> Any:
            key = hashable(entry.key)
            if namespaced:
                return key, hashable(entry.namespace)
            if entry.namespace is not None:
                raise stray_namespace(descriptor, self.scope.uid)
            return key

        if descriptor.kind is StateKind.MAP:
            for entry in entries:
                assert isinstance(entry, MapStateEntry)
                value = TtlValue(entry.value, entry.expiry) if ttl else entry.value
                data.setdefault(table_key(entry), {})[hashable(entry.user_key)] = value
        else:
            for entry in entries:
                assert isinstance(entry, KeyedStateEntry)
                value = wrap_restored(descriptor.kind, entry.value, entry.expiry) if ttl else entry.value
                data[table_key(entry)] = value

    def snapshot(self) -> KeyedSnapshot:
        with self.lock:
            copies = []
            for table in self.slots():
                copies.append((table, table.data.copy()))
                table.sharing += 1
                table.owned = set()
        return _Snapshot(self, copies)

    def heap_table(self, slot: _Table) -> dict[Any, Any] | None:
        return None if slot.descriptor.namespaced else slot.data

    def keys(self, state: str) -> Iterator[Any]:
        table = self.slot(state)
        if table is None:
            return iter([])
        if table.descriptor.namespaced:
            return iter(list(dict.fromkeys(key for key, _ in table.data)))
        return iter(list(table.data))

    def namespaces(self, state: str) -> Iterator[tuple[Any, Any]]:
        table = self.slot(state)
        return iter(list(table.data) if table is not None and table.descriptor.namespaced else [])

    def table_data(self, state: str) -> dict[Any, Any]:
        """The live ``key -> value`` dict of one state (tests and debugging)."""
        return self._slots[state].data
