"""A third keyed state backend written the way a new one is added: one registry entry
(``TOY``) plus its own module (this file), nothing else.

Dict-backed and deliberately plain: a snapshot deep-copies every state synchronously.
It declares ``needs_working_dir`` so the job master hands it a scratch directory; each
instance records the directory it got in ``WORKING_DIRS`` (checked by the tests). The tests
load this file by its path, in their process and in a fresh ``statekit`` process.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable, Iterator
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
    write_keyed_rows,
)
from statekit.runtime.state.registry import StateBackendEntry
from statekit.statefmt.entries import KeyedStateEntry, MapStateEntry
from statekit.statefmt.metadata import StateDescriptor, StateFile

WORKING_DIRS: list[str] = []


class _Table:
    def __init__(self, descriptor: StateDescriptor) -> None:
        self.descriptor = descriptor
        self.data: dict[Any, Any] = {}


class _Snapshot(KeyedSnapshot):
    def __init__(self, scope: SubtaskScope, copies: list[tuple[StateDescriptor, dict[Any, Any]]]) -> None:
        self.scope = scope
        self.copies = copies

    def write(self, location: SnapshotOutput) -> list[StateFile]:
        written = (write_keyed_rows(location, self.scope, d, rows_of(d.kind, data)) for d, data in self.copies)
        return [file for file in written if file is not None]

    def release(self) -> None:
        self.copies = []


class _Handle:
    def __init__(self, backend: ToyKeyedStateBackend, table: _Table) -> None:
        self.backend = backend
        self.data = table.data

    def get_raw(self, default: Any = None) -> Any:
        return self.data.get(self.backend.current_key, default)

    def set_raw(self, value: Any) -> None:
        self.data[self.backend.current_key] = value

    def clear(self) -> None:
        self.data.pop(self.backend.current_key, None)


class _Value(_Handle, ValueState[Any]):
    def __init__(self, backend: ToyKeyedStateBackend, table: _Table, default: Any) -> None:
        super().__init__(backend, table)
        self.default = default

    def value(self) -> Any:
        return self.get_raw(copy.deepcopy(self.default))

    def update(self, value: Any) -> None:
        self.clear() if value is None else self.set_raw(value)


class _List(_Handle, ListState[Any]):
    def get(self) -> list[Any]:
        return list(self.get_raw([]))

    def add(self, value: Any) -> None:
        self.add_all([value])

    def add_all(self, values: Iterable[Any]) -> None:
        self.update(self.get() + list(values))

    def update(self, values: Iterable[Any]) -> None:
        values = list(values)
        self.set_raw(values) if values else self.clear()


class _Map(_Handle, MapState[Any]):
    def get(self, user_key: Any) -> Any:
        return self.get_raw({}).get(user_key)

    def put(self, user_key: Any, value: Any) -> None:
        self.put_all({user_key: value})

    def put_all(self, entries: dict[Any, Any]) -> None:
        self.set_raw({**self.get_raw({}), **entries})

    def remove(self, user_key: Any) -> None:
        rest = {k: v for k, v in self.get_raw({}).items() if k != user_key}
        self.set_raw(rest) if rest else self.clear()

    def contains(self, user_key: Any) -> bool:
        return user_key in self.get_raw({})

    def items(self) -> list[tuple[Any, Any]]:
        return list(self.get_raw({}).items())


class _Reducing(_Handle, ReducingState[Any]):
    def __init__(self, backend: ToyKeyedStateBackend, table: _Table, reduce: Callable[[Any, Any], Any]) -> None:
        super().__init__(backend, table)
        self.reduce = reduce

    def get(self) -> Any:
        return self.get_raw()

    def add(self, value: Any) -> None:
        current = self.get_raw()
        self.set_raw(value if current is None else self.reduce(current, value))


class _Aggregating(_Handle, AggregatingState[Any]):
    def __init__(self, backend: ToyKeyedStateBackend, table: _Table, function: Any) -> None:
        super().__init__(backend, table)
        self.function = function

    def get(self) -> Any:
        accumulator = self.get_raw()
        return None if accumulator is None else self.function.get_result(accumulator)

    def add(self, value: Any) -> None:
        accumulator = copy.deepcopy(self.get_raw())
        if accumulator is None:
            accumulator = self.function.create_accumulator()
        self.set_raw(self.function.add(value, accumulator))


class ToyKeyedStateBackend(KeyedStateBackend[_Table]):
    """Keyed state in plain dicts; snapshots are deep copies."""

    handle_types = StateHandles(_Value, _List, _Map, _Reducing, _Aggregating)

    def __init__(self, scope: SubtaskScope, *, working_dir: str | None = None) -> None:
        super().__init__(scope, working_dir=working_dir)
        if working_dir is not None:
            assert os.path.isdir(working_dir), working_dir
            WORKING_DIRS.append(working_dir)

    def new_slot(self, descriptor: StateDescriptor) -> _Table:
        return _Table(descriptor)

    def restore_state(self, descriptor: StateDescriptor, entries: Iterable[Any]) -> None:
        data = self.restored_slot(descriptor).data
        for entry in entries:
            if isinstance(entry, MapStateEntry):
                data.setdefault(hashable(entry.key), {})[hashable(entry.user_key)] = entry.value
            else:
                assert isinstance(entry, KeyedStateEntry)
                data[hashable(entry.key)] = entry.value

    def snapshot(self) -> KeyedSnapshot:
        return _Snapshot(self.scope, [(t.descriptor, copy.deepcopy(t.data)) for t in self.slots()])

    def keys(self, state: str) -> Iterator[Any]:
        table = self.slot(state)
        return iter(list(table.data) if table else [])


TOY = StateBackendEntry("toy", ToyKeyedStateBackend, needs_working_dir=True)
