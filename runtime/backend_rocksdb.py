"""The ``rocksdb`` keyed state backend: state in an embedded RocksDB (through rocksdict).

Layout: one database per operator subtask under the job's working directory; a state
entry is stored under ``state id (u16) | key length (u32) | key bytes [| user key bytes]``
with the value serialized by the state's serializer (list state: the framed element
bytes of the state file format), so snapshots copy bytes without decoding values.

Snapshot: the synchronous part creates a RocksDB checkpoint (memtable flush plus hard
links of the immutable SST files: a consistent point-in-time copy, cheap); the
asynchronous part opens that copy read-only, streams each state into key-group blocks and
writes them through ``write_keyed_file``, then deletes the copy.
"""

from __future__ import annotations

import os
import shutil
import struct
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from statekit.runtime.backend import KeyedSnapshot, KeyedStateBackend, SubtaskScope, check_compatible, hashable
from statekit.runtime.checkpoint_storage import CheckpointStorageLocation
from statekit.runtime.state import (
    AggregatingState,
    AggregatingStateDescriptor,
    ListState,
    MapState,
    ReducingState,
    ReducingStateDescriptor,
    State,
    StateDescriptorBase,
    ValueState,
    ValueStateDescriptor,
)
from statekit.statefmt import layout
from statekit.statefmt.entries import KeyedStateEntry, MapStateEntry, group_by_key_group
from statekit.statefmt.metadata import StateDescriptor, StateFile, StateKind
from statekit.statefmt.serializers import decode_list, encode_list, get_serializer
from statekit.writers.state_writer import write_keyed_file

__all__ = ["RocksDBKeyedStateBackend"]

_STATE_ID = struct.Struct(">H")
_KEY_LENGTH = struct.Struct(">I")


def _open(path: str, *, read_only: bool = False) -> Any:
    from rocksdict import AccessType, Options, Rdict

    if read_only:
        return Rdict(path, Options(raw_mode=True), access_type=AccessType.read_only())
    return Rdict(path, Options(raw_mode=True))


def _scan(db: Any, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of every entry whose key starts with ``prefix``, in key order."""
    it = db.iter()
    it.seek(prefix)
    while it.valid():
        key = it.key()
        if not key.startswith(prefix):
            break
        yield key, it.value()
        it.next()


class _StateInfo:
    def __init__(self, descriptor: StateDescriptor, state_id: int) -> None:
        self.descriptor = descriptor
        self.prefix = _STATE_ID.pack(state_id)
        self.value = get_serializer(descriptor.value_serializer, for_write=True, trust_pickle=True)
        self.user_key = get_serializer(descriptor.user_key_serializer or "msgpack", for_write=True, trust_pickle=True)


class _Snapshot(KeyedSnapshot):
    def __init__(self, backend: RocksDBKeyedStateBackend, path: str, states: list[_StateInfo]) -> None:
        self.backend = backend
        self.path = path
        self.states = states

    def write(self, location: CheckpointStorageLocation) -> list[StateFile]:
        import pyarrow as pa

        from statekit.statefmt.keygroups import key_hash
        from statekit.statefmt.statefile import keyed_schema

        scope = self.backend.scope
        db = _open(self.path, read_only=True)
        files = []
        try:
            for info in self.states:
                keys: list[bytes] = []
                user_keys: list[bytes | None] = []
                values: list[bytes] = []
                is_map = info.descriptor.kind is StateKind.MAP
                offset = len(info.prefix)
                for raw, value in _scan(db, info.prefix):
                    (length,) = _KEY_LENGTH.unpack_from(raw, offset)
                    start = offset + _KEY_LENGTH.size
                    keys.append(raw[start:start + length])
                    user_keys.append(raw[start + length:] if is_map else None)
                    values.append(value)
                if not keys:
                    continue
                table = pa.table([
                    pa.array([key_hash(k) for k in keys], pa.uint32()),
                    pa.array(keys, pa.binary()),
                    pa.array([b""] * len(keys), pa.binary()),
                    pa.array(user_keys, pa.binary()),
                    pa.array(values, pa.binary()),
                    pa.array([None] * len(keys), pa.int64()),
                ], schema=keyed_schema())
                relative = layout.state_file_path(scope.uid, info.descriptor.name, scope.subtask, scope.parallelism)
                files.append(write_keyed_file(location.io, location.directory, relative, info.descriptor.name,
                                              group_by_key_group(table, scope.max_parallelism)))
        finally:
            db.close()
        return files

    def release(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


class RocksDBKeyedStateBackend(KeyedStateBackend):
    """Keyed state in an embedded RocksDB; values are kept serialized."""

    name = "rocksdb"

    def __init__(self, scope: SubtaskScope, *, working_dir: str | None = None) -> None:
        super().__init__(scope)
        import tempfile

        base = working_dir or tempfile.gettempdir()
        self.directory = os.path.join(base, f"{scope.uid[:40]}-{scope.subtask}-{uuid.uuid4().hex[:8]}")
        os.makedirs(self.directory, exist_ok=True)
        self.db = _open(os.path.join(self.directory, "db"))
        self.key_serializer = get_serializer(scope.key_serializer, for_write=True, trust_pickle=True)
        self._states: dict[str, _StateInfo] = {}
        self._handles: dict[str, State] = {}
        self._last_key: Any = object()
        self._last_key_bytes = b""
        self._lock = threading.Lock()

    def key_bytes(self) -> bytes:
        """``length | serialized current key`` (cached for repeated access to one key)."""
        key = self.current_key
        if key is not self._last_key:
            data = self.key_serializer.serialize(key)
            self._last_key_bytes = _KEY_LENGTH.pack(len(data)) + data
            self._last_key = key
        return self._last_key_bytes

    def _info(self, declared: StateDescriptor) -> _StateInfo:
        info = self._states.get(declared.name)
        if info is None:
            info = self._states[declared.name] = _StateInfo(declared, len(self._states))
        else:
            check_compatible(info.descriptor, declared, self.scope.uid)
            info.descriptor = declared
        return info

    def get_state(self, descriptor: StateDescriptorBase) -> State:
        handle = self._handles.get(descriptor.name)
        if handle is not None:
            return handle
        info = self._info(descriptor.to_metadata())
        kind = descriptor.kind
        if kind is StateKind.VALUE:
            assert isinstance(descriptor, ValueStateDescriptor)
            handle = _ValueState(self, info, descriptor.default)
        elif kind is StateKind.LIST:
            handle = _ListState(self, info)
        elif kind is StateKind.MAP:
            handle = _MapState(self, info)
        elif kind is StateKind.REDUCING:
            assert isinstance(descriptor, ReducingStateDescriptor) and descriptor.reduce_function
            handle = _ReducingState(self, info, descriptor.reduce_function)
        else:
            assert isinstance(descriptor, AggregatingStateDescriptor)
            handle = _AggregatingState(self, info, descriptor.aggregate_function)
        self._handles[descriptor.name] = handle
        return handle

    def restore_state(self, descriptor: StateDescriptor, entries: Iterable[Any]) -> None:
        from rocksdict import WriteBatch

        info = self._states.get(descriptor.name) or self._info(descriptor)
        batch = WriteBatch(raw_mode=True)
        serialize_key = self.key_serializer.serialize
        for entry in entries:
            data = serialize_key(entry.key)
            key = info.prefix + _KEY_LENGTH.pack(len(data)) + data
            if isinstance(entry, MapStateEntry):
                batch.put(key + info.user_key.serialize(entry.user_key), info.value.serialize(entry.value))
            else:
                assert isinstance(entry, KeyedStateEntry)
                batch.put(key, _encode(info, entry.value))
        self.db.write(batch)

    def descriptors(self) -> list[StateDescriptor]:
        return [self._states[name].descriptor for name in sorted(self._states)]

    def snapshot(self) -> KeyedSnapshot:
        from rocksdict import Checkpoint

        path = os.path.join(self.directory, f"snapshot-{uuid.uuid4().hex[:8]}")
        Checkpoint(self.db).create_checkpoint(path)
        return _Snapshot(self, path, [self._states[name] for name in sorted(self._states)])

    def keys(self, state: str) -> Iterator[Any]:
        info = self._states.get(state)
        if info is None:
            return iter(())
        seen: list[Any] = []
        last = None
        offset = len(info.prefix)
        for raw, _ in _scan(self.db, info.prefix):
            (length,) = _KEY_LENGTH.unpack_from(raw, offset)
            data = raw[offset + _KEY_LENGTH.size:offset + _KEY_LENGTH.size + length]
            if data != last:
                seen.append(hashable(self.key_serializer.deserialize(data)))
                last = data
        return iter(seen)

    def close(self) -> None:
        try:
            self.db.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


def _encode(info: _StateInfo, value: Any) -> bytes:
    if info.descriptor.kind is StateKind.LIST:
        return encode_list([info.value.serialize(v) for v in value])
    return info.value.serialize(value)


class _Handle:
    def __init__(self, backend: RocksDBKeyedStateBackend, info: _StateInfo) -> None:
        self.backend = backend
        self.info = info
        self.db = backend.db
        self.dumps: Callable[[Any], bytes] = info.value.serialize
        self.loads: Callable[[bytes], Any] = info.value.deserialize

    def _key(self) -> bytes:
        return self.info.prefix + self.backend.key_bytes()

    def clear(self) -> None:
        self.db.delete(self._key())


class _ValueState(_Handle, ValueState[Any]):
    def __init__(self, backend: RocksDBKeyedStateBackend, info: _StateInfo, default: Any) -> None:
        super().__init__(backend, info)
        self.default = default

    def value(self) -> Any:
        data = self.db.get(self._key())
        if data is None:
            import copy

            return copy.deepcopy(self.default)
        return self.loads(data)

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
        else:
            self.db.put(self._key(), self.dumps(value))


class _ListState(_Handle, ListState[Any]):
    def get(self) -> list[Any]:
        data = self.db.get(self._key())
        return [] if data is None else [self.loads(e) for e in decode_list(data)]

    def add(self, value: Any) -> None:
        self.add_all([value])

    def add_all(self, values: Iterable[Any]) -> None:
        new = [self.dumps(v) for v in values]
        if not new:
            return
        key = self._key()
        data = self.db.get(key)
        self.db.put(key, encode_list((decode_list(data) if data is not None else []) + new))

    def update(self, values: Iterable[Any]) -> None:
        encoded = [self.dumps(v) for v in values]
        if encoded:
            self.db.put(self._key(), encode_list(encoded))
        else:
            self.clear()


class _MapState(_Handle, MapState[Any]):
    def _user_key(self, user_key: Any) -> bytes:
        return self._key() + self.info.user_key.serialize(user_key)

    def get(self, user_key: Any) -> Any:
        data = self.db.get(self._user_key(user_key))
        return None if data is None else self.loads(data)

    def put(self, user_key: Any, value: Any) -> None:
        self.db.put(self._user_key(user_key), self.dumps(value))

    def put_all(self, entries: dict[Any, Any]) -> None:
        for user_key, value in entries.items():
            self.put(user_key, value)

    def remove(self, user_key: Any) -> None:
        self.db.delete(self._user_key(user_key))

    def contains(self, user_key: Any) -> bool:
        return self.db.get(self._user_key(user_key)) is not None

    def items(self) -> list[tuple[Any, Any]]:
        prefix = self._key()
        n = len(prefix)
        load_key = self.info.user_key.deserialize
        return [(hashable(load_key(k[n:])), self.loads(v)) for k, v in _scan(self.db, prefix)]

    def clear(self) -> None:
        for key, _ in list(_scan(self.db, self._key())):
            self.db.delete(key)

    def is_empty(self) -> bool:
        return next(iter(_scan(self.db, self._key())), None) is None


class _ReducingState(_Handle, ReducingState[Any]):
    def __init__(self, backend: RocksDBKeyedStateBackend, info: _StateInfo, reduce: Callable[[Any, Any], Any]) -> None:
        super().__init__(backend, info)
        self.reduce = reduce

    def get(self) -> Any:
        data = self.db.get(self._key())
        return None if data is None else self.loads(data)

    def add(self, value: Any) -> None:
        current = self.get()
        self.db.put(self._key(), self.dumps(value if current is None else self.reduce(current, value)))


class _AggregatingState(_Handle, AggregatingState[Any]):
    def __init__(self, backend: RocksDBKeyedStateBackend, info: _StateInfo, function: Any) -> None:
        super().__init__(backend, info)
        self.function = function

    def _accumulator(self) -> Any:
        data = self.db.get(self._key())
        return None if data is None else self.loads(data)

    def get(self) -> Any:
        accumulator = self._accumulator()
        return None if accumulator is None else self.function.get_result(accumulator)

    def add(self, value: Any) -> None:
        accumulator = self._accumulator()
        if accumulator is None:
            accumulator = self.function.create_accumulator()
        self.db.put(self._key(), self.dumps(self.function.add(value, accumulator)))
