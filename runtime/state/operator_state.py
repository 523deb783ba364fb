"""Operator (non-keyed) state of one subtask: even-split list, union list, broadcast.

Snapshots copy the lists/dicts in the synchronous part (operator state is small by
design: offsets, pending files, broadcast rules); the copies are encoded and written in
the asynchronous part.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from statekit.runtime.api.functions import OperatorStateStore
from statekit.runtime.api.state import BroadcastState, ListState, ListStateDescriptor, MapStateDescriptor
from statekit.runtime.checkpoint.storage import SnapshotOutput
from statekit.runtime.state.backend import check_compatible, hashable
from statekit.statefmt import layout
from statekit.statefmt.entries import StateCodec
from statekit.statefmt.metadata import StateDescriptor, StateFile, StateKind
from statekit.writers.state_writer import write_operator_file

__all__ = [
    "DefaultOperatorStateStore",
    "OperatorStateSnapshot",
]


class _OperatorListState(ListState[Any]):
    def __init__(self, elements: list[Any]) -> None:
        self.elements = elements

    def get(self) -> list[Any]:
        return self.elements

    def add(self, value: Any) -> None:
        self.elements.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        self.elements.extend(values)

    def update(self, values: Iterable[Any]) -> None:
        self.elements[:] = list(values)

    def clear(self) -> None:
        self.elements.clear()


class _BroadcastState(BroadcastState):
    def __init__(self, entries: dict[Any, Any]) -> None:
        self.entries = entries

    def get(self, key: Any) -> Any:
        return self.entries.get(key)

    def contains(self, key: Any) -> bool:
        return key in self.entries

    def items(self) -> list[tuple[Any, Any]]:
        return list(self.entries.items())

    def put(self, key: Any, value: Any) -> None:
        self.entries[key] = value

    def remove(self, key: Any) -> None:
        self.entries.pop(key, None)

    def clear(self) -> None:
        self.entries.clear()


class OperatorStateSnapshot:
    """Copied operator state, written in the asynchronous part."""

    def __init__(self, uid: str, subtask: int, parallelism: int, copies: list[tuple[StateDescriptor, Any]]) -> None:
        self.uid = uid
        self.subtask = subtask
        self.parallelism = parallelism
        self.copies = copies

    def write(self, location: SnapshotOutput) -> list[StateFile]:
        files = []
        for descriptor, data in self.copies:
            codec = StateCodec(descriptor, None, for_write=True, trust_pickle=True)
            relative = layout.state_file_path(self.uid, descriptor.name, self.subtask, self.parallelism)
            batch = codec.encode_operator_elements(data)
            files.append(write_operator_file(location.io, location.directory, relative, descriptor.name, batch))
        return files


class DefaultOperatorStateStore(OperatorStateStore):
    """Operator state of one subtask, restored from redistributed elements."""

    def __init__(self, uid: str, subtask: int, parallelism: int) -> None:
        self.uid = uid
        self.subtask = subtask
        self.parallelism = parallelism
        self._descriptors: dict[str, StateDescriptor] = {}
        self._data: dict[str, Any] = {}
        self._handles: dict[str, Any] = {}

    def restore_state(self, descriptor: StateDescriptor, elements: list[Any]) -> None:
        """Load this subtask's share of a restored state (already redistributed)."""
        self._descriptors[descriptor.name] = descriptor
        if descriptor.kind is StateKind.BROADCAST:
            self._data[descriptor.name] = {hashable(k): v for k, v in elements}
        else:
            self._data[descriptor.name] = list(elements)

    def _register(self, declared: StateDescriptor) -> Any:
        restored = self._descriptors.get(declared.name)
        if restored is not None:
            check_compatible(restored, declared, self.uid)
        self._descriptors[declared.name] = declared
        if declared.name not in self._data:
            self._data[declared.name] = {} if declared.kind is StateKind.BROADCAST else []
        return self._data[declared.name]

    def get_list_state(self, descriptor: ListStateDescriptor) -> ListState[Any]:
        return self._list(descriptor, StateKind.OPERATOR_LIST)

    def get_union_list_state(self, descriptor: ListStateDescriptor) -> ListState[Any]:
        return self._list(descriptor, StateKind.UNION)

    def _list(self, descriptor: ListStateDescriptor, kind: StateKind) -> ListState[Any]:
        handle = self._handles.get(descriptor.name)
        if handle is None:
            handle = _OperatorListState(self._register(descriptor.to_metadata(kind)))
            self._handles[descriptor.name] = handle
        return handle

    def get_broadcast_state(self, descriptor: MapStateDescriptor) -> BroadcastState:
        handle = self._handles.get(descriptor.name)
        if handle is None:
            handle = _BroadcastState(self._register(descriptor.to_metadata(StateKind.BROADCAST)))
            self._handles[descriptor.name] = handle
        return handle

    def descriptors(self) -> list[StateDescriptor]:
        """Every operator state held (registered or restored), in name order."""
        return [self._descriptors[name] for name in sorted(self._descriptors)]

    def snapshot(self) -> OperatorStateSnapshot:
        """Copy every state (synchronous part)."""
        copies: list[tuple[StateDescriptor, Any]] = []
        for descriptor in self.descriptors():
            data = self._data[descriptor.name]
            copies.append((descriptor, dict(data) if isinstance(data, dict) else list(data)))
        return OperatorStateSnapshot(self.uid, self.subtask, self.parallelism, copies)
