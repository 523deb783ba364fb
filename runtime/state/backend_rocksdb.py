"""The ``rocksdb`` keyed state backend: state in an embedded RocksDB (through rocksdict).

Layout: one database per operator subtask under the job's working directory; a state entry
is stored under ``state id (u16) | key group (u16) | key length (u32) | key bytes [| user key
bytes]`` (:mod:`statekit.statefmt.native_state`, format ``rocksdb-sst/1``) with the value
serialized by the state's serializer (list state: the framed element bytes of the state file
format), so snapshots copy bytes without decoding values, and the entries of one state in one
key group are one contiguous key range.

Snapshots: the synchronous part creates a RocksDB checkpoint (memtable flush plus hard links
of the immutable SST files: a consistent point-in-time copy, cheap). The asynchronous part
then either

* *canonical* (savepoints, and checkpoints without ``incremental``): streams each state, key
  group by key group, into key-group blocks written through ``write_keyed_file``; or
* *native*: uploads the store's files. In an incremental checkpoint every SST file goes to the
  job's ``shared/`` once: an SST file the base checkpoint (the latest completed one when the
  checkpoint was triggered) already uploaded is referenced, not written again; the other
  files (manifest, options, logs) are private to the checkpoint. A native savepoint copies
  every file into the savepoint directory (self-contained).

Restore from a native snapshot: a subtask whose key-group range is unchanged copies the
store's files and opens them (its next incremental checkpoint reuses the restored
checkpoint's shared files when they belong to this job); after a rescale, each new subtask
opens every old store overlapping its range read-only and copies the entries of its key
groups only.
"""

from __future__ import annotations

import copy
import os
import posixpath
import shutil
import struct
import threading
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import mmh3

from statekit.runtime.api.state import AggregatingState, ListState, MapState, ReducingState, ValueState
from statekit.runtime.checkpoint.storage import SnapshotOutput
from statekit.runtime.state.backend import (
    KeyedSnapshot,
    KeyedStateBackend,
    NativeKeyedSnapshot,
    SnapshotRequest,
    StateHandles,
    SubtaskScope,
    hashable,
    stray_namespace,
)
from statekit.runtime.state.ttl import TtlValue, ttl_serializer, wrap_restored
from statekit.statefmt import layout
from statekit.statefmt.checksum import Crc32
from statekit.statefmt.entries import KeyedStateEntry, MapStateEntry, group_by_key_group
from statekit.statefmt.metadata import StateDescriptor, StateFile, StateKind
from statekit.statefmt.native_state import (
    KEY_PREFIX,
    NATIVE_ROCKSDB_FORMAT,
    NativeFile,
    NativeKeyedState,
    key_group_prefix,
    namespace_bytes,
    native_private_dir,
    shared_file_path,
    split_namespace,
    state_prefix,
)
from statekit.statefmt.native_store import StoreScratch, fetch_store_files, open_store, scan_prefix, store_entries
from statekit.statefmt.paths import SHARED_PREFIX
from statekit.statefmt.serializers import decode_list, encode_list, get_serializer
from statekit.writers.state_writer import write_keyed_file

if TYPE_CHECKING:
    from statekit.runtime.checkpoint.restore import NativeRestoreSource

__all__ = [
    "RocksDBKeyedStateBackend",
]

_GROUP_KEY_LENGTH = struct.Struct(">HI")  # key group u16 | key length u32 (after the state id)
_RESTORE_BATCH = 20_000
_CHUNK = 8 << 20


def _open(path: str) -> Any:
    return open_store(path, read_only=False)


class _StateInfo:
    def __init__(self, descriptor: StateDescriptor, state_id: int) -> None:
        self.descriptor = descriptor
        self.state_id = state_id
        self.prefix = state_prefix(state_id)
        self.value = get_serializer(descriptor.value_serializer, for_write=True, trust_pickle=True)
        if descriptor.ttl_ms is not None:  # values are TtlValues behind their expiry (statekit.runtime.state.ttl)
            self.value = ttl_serializer(self.value)
        self.user_key = get_serializer(descriptor.user_key_serializer or "msgpack", for_write=True, trust_pickle=True)
        self.namespace = get_serializer(descriptor.namespace_serializer, for_write=True, trust_pickle=True)


class _Snapshot(KeyedSnapshot):
    """A canonical snapshot: key-group blocks streamed from the checkpoint copy."""

    def __init__(self, backend: RocksDBKeyedStateBackend, path: str, states: list[_StateInfo]) -> None:
        self.backend = backend
        self.path = path
        self.states = states
        # taken in the synchronous part: the time TTL entries expired at are left out
        self.drop_at = {s.descriptor.name: backend.ttl_snapshot_time(s.descriptor.name) for s in states}

    def write(self, location: SnapshotOutput) -> list[StateFile]:
        scope = self.backend.scope
        db = open_store(self.path)
        files = []
        try:
            for info in self.states:
                blocks = self._blocks(db, info)
                try:
                    first = next(blocks, None)
                    if first is None:
                        continue
                    relative = layout.state_file_path(scope.uid, info.descriptor.name, scope.subtask,
                                                      scope.parallelism)
                    files.append(write_keyed_file(location.io, location.directory, relative, info.descriptor.name,
                                                  _chain(first, blocks)))
                finally:
                    blocks.close()  # drops its store iterator before the store closes
        finally:
            db.close()
        return files

    def _blocks(self, db: Any, info: _StateInfo) -> Generator[tuple[int, Any], None, None]:
        """(key group, sorted batch) of one state, one key group at a time."""
        from statekit.statefmt.native_canonical import native_keyed_table

        scope, descriptor = self.backend.scope, info.descriptor
        drop_at = self.drop_at[descriptor.name]
        for key_group in scope.key_group_range:
            entries = store_entries(db, info.state_id, key_group, self.path)
            table = native_keyed_table(entries, descriptor, drop_at, self.path)
            if table is not None:
                yield from group_by_key_group(table, scope.max_parallelism)

    def release(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _chain(first: tuple[int, Any], rest: Iterator[tuple[int, Any]]) -> Iterator[tuple[int, Any]]:
    yield first
    yield from rest


def _upload(location: SnapshotOutput, local: str, target: str) -> str:
    """Copy a local file to ``target`` of the location's filesystem; its CRC-32."""
    running = Crc32()
    with open(local, "rb") as source, location.io.open_output(target) as out:
        while chunk := source.read(_CHUNK):
            running.update(chunk)
            out.write(chunk)
    return running.checksum


class _NativeSnapshot(NativeKeyedSnapshot):
    """A native snapshot: the checkpoint copy's files, SST files shared when incremental."""

    def __init__(self, backend: RocksDBKeyedStateBackend, path: str, request: SnapshotRequest,
                 reuse: dict[str, NativeFile]) -> None:
        self.backend = backend
        self.path = path
        self.request = request
        self.reuse = reuse
        self.state_ids = tuple(sorted((s.descriptor.name, s.state_id) for s in backend.slots()))
        self.new_shared = []
        self.bytes_written = 0

    def write_native(self, location: SnapshotOutput) -> NativeKeyedState:
        scope = self.backend.scope
        shared_root = location.shared_directory if self.request.incremental else None
        private = native_private_dir(scope.uid, scope.subtask, scope.parallelism)
        files: list[NativeFile] = []
        for name in sorted(os.listdir(self.path)):
            local = os.path.join(self.path, name)
            size = os.path.getsize(local)
            if shared_root is not None and name.endswith(".sst"):
                files.append(self._shared(location, shared_root, name, local, size))
                continue
            relative = f"{private}/{name}"
            checksum = _upload(location, local, posixpath.join(location.directory, relative))
            self.bytes_written += size
            files.append(NativeFile(name, relative, size, checksum))
        if shared_root is not None:
            self.backend.record_uploads(self.request.checkpoint_id, [f for f in files if f.shared])
        return NativeKeyedState(NATIVE_ROCKSDB_FORMAT, self.state_ids, tuple(files))

    def _shared(self, location: SnapshotOutput, shared_root: str, name: str, local: str,
                size: int) -> NativeFile:
        known = self.reuse.get(name)
        if known is not None and known.size == size:
            return NativeFile(name, known.path, known.size, known.checksum)
        relative = shared_file_path(self.backend.scope.uid, uuid.uuid4().hex)
        checksum = _upload(location, local, posixpath.join(shared_root, relative))
        self.new_shared.append(relative)
        self.bytes_written += size
        return NativeFile(name, SHARED_PREFIX + relative, size, checksum)

    def release(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _encode(info: _StateInfo, value: Any) -> bytes:
    if info.descriptor.kind is StateKind.LIST:
        return encode_list([info.value.serialize(v) for v in value])
    return info.value.serialize(value)


class _Handle:
    def __init__(self, backend: RocksDBKeyedStateBackend, info: _StateInfo) -> None:
        self.backend = backend  # the store is always reached through it: restore replaces it, close ends it
        self.info = info
        self.dumps: Callable[[Any], bytes] = info.value.serialize
        self.loads: Callable[[bytes], Any] = info.value.deserialize
        # the current namespace's store-key part (empty for the void namespace) and its value
        self._namespace: Any = None
        self._namespace_bytes = b""

    def _key(self) -> bytes:
        return self.info.prefix + self.backend.key_bytes() + self._namespace_bytes

    def set_current_namespace(self, namespace: Any) -> None:
        if not self.info.descriptor.namespaced:
            raise TypeError(f"state {self.info.descriptor.name!r} has no namespace")
        if namespace is not self._namespace:
            self._namespace_bytes = namespace_bytes(self.info.namespace.serialize(namespace))
            self._namespace = namespace

    def clear(self) -> None:
        self.backend.db.delete(self._key())


class _ValueState(_Handle, ValueState[Any]):
    def __init__(self, backend: RocksDBKeyedStateBackend, info: _StateInfo, default: Any) -> None:
        super().__init__(backend, info)
        self.default = default

    def value(self) -> Any:
        data = self.backend.db.get(self._key())
        if data is None:
            return copy.deepcopy(self.default) if self.default is not None else None
        return self.loads(data)

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
        else:
            self.backend.db.put(self._key(), self.dumps(value))


class _ListState(_Handle, ListState[Any]):
    def get(self) -> list[Any]:
        data = self.backend.db.get(self._key())
        return [] if data is None else [self.loads(e) for e in decode_list(data)]

    def add(self, value: Any) -> None:
        self.add_all([value])

    def add_all(self, values: Iterable[Any]) -> None:
        new = [self.dumps(v) for v in values]
        if not new:
            return
        key = self._key()
        db = self.backend.db
        data = db.get(key)
        db.put(key, encode_list((decode_list(data) if data is not None else []) + new))

    def update(self, values: Iterable[Any]) -> None:
        encoded = [self.dumps(v) for v in values]
        if encoded:
            self.backend.db.put(self._key(), encode_list(encoded))
        else:
            self.clear()


class _MapState(_Handle, MapState[Any]):
    def _user_key(self, user_key: Any) -> bytes:
        return self._key() + self.info.user_key.serialize(user_key)

    def get(self, user_key: Any) -> Any:
        data = self.backend.db.get(self._user_key(user_key))
        return None if data is None else self.loads(data)

    def put(self, user_key: Any, value: Any) -> None:
        self.backend.db.put(self._user_key(user_key), self.dumps(value))

    def put_all(self, entries: dict[Any, Any]) -> None:
        for user_key, value in entries.items():
            self.put(user_key, value)

    def remove(self, user_key: Any) -> None:
        self.backend.db.delete(self._user_key(user_key))

    def contains(self, user_key: Any) -> bool:
        return self.backend.db.get(self._user_key(user_key)) is not None

    def items(self) -> list[tuple[Any, Any]]:
        prefix = self._key()
        n = len(prefix)
        load_key = self.info.user_key.deserialize
        return [(hashable(load_key(k[n:])), self.loads(v)) for k, v in scan_prefix(self.backend.db, prefix)]

    def clear(self) -> None:
        db = self.backend.db
        for key, _ in list(scan_prefix(db, self._key())):
            db.delete(key)

    def is_empty(self) -> bool:
        return next(iter(scan_prefix(self.backend.db, self._key())), None) is None


class _ReducingState(_Handle, ReducingState[Any]):
    def __init__(self, backend: RocksDBKeyedStateBackend, info: _StateInfo, reduce: Callable[[Any, Any], Any]) -> None:
        super().__init__(backend, info)
        self.reduce = reduce

    def get(self) -> Any:
        data = self.backend.db.get(self._key())
        return None if data is None else self.loads(data)

    def add(self, value: Any) -> None:
        current = self.get()
        self.backend.db.put(self._key(), self.dumps(value if current is None else self.reduce(current, value)))


class _AggregatingState(_Handle, AggregatingState[Any]):
    def __init__(self, backend: RocksDBKeyedStateBackend, info: _StateInfo, function: Any) -> None:
        super().__init__(backend, info)
        self.function = function

    def _accumulator(self) -> Any:
        data = self.backend.db.get(self._key())
        return None if data is None else self.loads(data)

    def get(self) -> Any:
        accumulator = self._accumulator()
        return None if accumulator is None else self.function.get_result(accumulator)

    def add(self, value: Any) -> None:
        accumulator = self._accumulator()
        if accumulator is None:
            accumulator = self.function.create_accumulator()
        self.backend.db.put(self._key(), self.dumps(self.function.add(value, accumulator)))


class RocksDBKeyedStateBackend(KeyedStateBackend[_StateInfo]):
    """Keyed state in an embedded RocksDB; values are kept serialized.

    The database lives under ``working_dir`` (the system temp directory without one).
    """

    handle_types = StateHandles(_ValueState, _ListState, _MapState, _ReducingState, _AggregatingState)
    supports_ttl = True
    supports_namespaces = True  # a namespaced state's store key carries the namespace after the key

    def __init__(self, scope: SubtaskScope, *, working_dir: str | None = None) -> None:
        super().__init__(scope, working_dir=working_dir)
        import tempfile

        base = working_dir or tempfile.gettempdir()
        self.directory = os.path.join(base, f"{scope.uid[:40]}-{scope.subtask}-{uuid.uuid4().hex[:8]}")
        os.makedirs(self.directory, exist_ok=True)
        self.db_path = os.path.join(self.directory, "db")
        self.db = _open(self.db_path)
        self.key_serializer = get_serializer(scope.key_serializer, for_write=True, trust_pickle=True)
        self._serialize_key = self.key_serializer.serialize
        self._max_parallelism = scope.max_parallelism
        self._last_key: Any = object()
        self._last_key_bytes = b""
        self._next_id = 0
        self._uploads: dict[int, dict[str, NativeFile]] = {}
        self._uploads_lock = threading.Lock()
        self._closed = False

    def key_bytes(self) -> bytes:
        """``key group | length | serialized current key`` (cached for repeated access to one key)."""
        key = self.current_key
        if key is not self._last_key:
            data = self._serialize_key(key)
            key_group = mmh3.hash(data, 0, False) % self._max_parallelism
            self._last_key_bytes = _GROUP_KEY_LENGTH.pack(key_group, len(data)) + data
            self._last_key = key
        return self._last_key_bytes

    def new_slot(self, descriptor: StateDescriptor) -> _StateInfo:
        info = _StateInfo(descriptor, self._next_id)
        self._next_id += 1
        return info

    def restore_state(self, descriptor: StateDescriptor, entries: Iterable[Any]) -> None:
        from rocksdict import WriteBatch

        info = self.restored_slot(descriptor)
        namespaced = descriptor.namespaced
        serialize_key = self._serialize_key
        batch, pending = WriteBatch(raw_mode=True), 0
        for entry in entries:
            data = serialize_key(entry.key)
            key_group = mmh3.hash(data, 0, False) % self._max_parallelism
            key = info.prefix + _GROUP_KEY_LENGTH.pack(key_group, len(data)) + data
            if namespaced:
                key += namespace_bytes(info.namespace.serialize(entry.namespace))
            elif entry.namespace is not None:
                raise stray_namespace(descriptor, self.scope.uid)
            ttl = info.descriptor.ttl_ms is not None
            if isinstance(entry, MapStateEntry):
                value = TtlValue(entry.value, entry.expiry) if ttl else entry.value
                batch.put(key + info.user_key.serialize(entry.user_key), info.value.serialize(value))
            else:
                assert isinstance(entry, KeyedStateEntry)
                batch.put(key, _encode(info, wrap_restored(info.descriptor.kind, entry.value, entry.expiry)
                                       if ttl else entry.value))
            pending += 1
            if pending >= _RESTORE_BATCH:
                self.db.write(batch)
                batch, pending = WriteBatch(raw_mode=True), 0
        if pending:
            self.db.write(batch)

    # ------------------------------------------------------------ snapshots

    def _checkpoint_copy(self) -> str:
        from rocksdict import Checkpoint

        path = os.path.join(self.directory, f"snapshot-{uuid.uuid4().hex[:8]}")
        Checkpoint(self.db).create_checkpoint(path)
        return path

    def snapshot(self) -> KeyedSnapshot:
        return _Snapshot(self, self._checkpoint_copy(), self.slots())

    def native_snapshot(self, request: SnapshotRequest) -> NativeKeyedSnapshot | None:
        reuse: dict[str, NativeFile] = {}
        if request.incremental:
            with self._uploads_lock:
                base = request.base_checkpoint_id
                for checkpoint_id in [i for i in self._uploads if base is None or i < base]:
                    del self._uploads[checkpoint_id]  # older than the base: never reused again
                reuse = dict(self._uploads.get(base, {})) if base is not None else {}
        return _NativeSnapshot(self, self._checkpoint_copy(), request, reuse)

    def record_uploads(self, checkpoint_id: int, files: list[NativeFile]) -> None:
        """Remember the shared files of ``checkpoint_id``: a later checkpoint whose base it is reuses them."""
        with self._uploads_lock:
            self._uploads[checkpoint_id] = {f.name: f for f in files}

    # ------------------------------------------------------------ native restore

    def restore_native(self, sources: list[NativeRestoreSource]) -> bool:
        if any(s.handle.format != NATIVE_ROCKSDB_FORMAT for s in sources):
            return False
        if len(sources) == 1 and sources[0].old_range == self.scope.key_group_range:
            self._restore_whole(sources[0])
        else:
            self._restore_key_groups(sources)
        return True

    def _restore_whole(self, source: NativeRestoreSource) -> None:
        """The store's files become this subtask's database (its key-group range is unchanged)."""
        self.db.close()
        shutil.rmtree(self.db_path, ignore_errors=True)
        fetch_store_files(source.io, source.resolve, source.handle, self.db_path, link=False)
        self.db = _open(self.db_path)
        for name, state_id in source.handle.state_ids:
            self._restore_slot(source.descriptors[name], state_id)
        if source.shared_reusable:
            self.record_uploads(source.checkpoint_id, [f for f in source.handle.files if f.shared])

    def _restore_key_groups(self, sources: list[NativeRestoreSource]) -> None:
        """Copy the entries of this subtask's key groups out of every overlapping old store."""
        from rocksdict import WriteBatch

        with StoreScratch(prefix="statekit-restore-") as scratch:
            for source in sources:
                store = scratch.open(source.io, source.resolve, source.handle, source.where)
                for name, old_id in source.handle.state_ids:
                    new_id = self._restore_slot(source.descriptors[name], None).state_id
                    new_prefix = state_prefix(new_id)
                    batch, pending = WriteBatch(raw_mode=True), 0
                    for key_group in source.key_groups:
                        for raw, value in scan_prefix(store.db, key_group_prefix(old_id, key_group)):
                            batch.put(new_prefix + raw[2:], value)
                            pending += 1
                            if pending >= _RESTORE_BATCH:
                                self.db.write(batch)
                                batch, pending = WriteBatch(raw_mode=True), 0
                    if pending:
                        self.db.write(batch)

    def _restore_slot(self, descriptor: StateDescriptor, state_id: int | None) -> _StateInfo:
        """The slot of a restored state: an existing one, or new with ``state_id`` (None: the next)."""
        slot = self.slot(descriptor.name)
        if slot is not None:
            return slot
        if state_id is None:
            return self.restored_slot(descriptor)
        info = self._slots[descriptor.name] = _StateInfo(descriptor, state_id)
        self._next_id = max(self._next_id, state_id + 1)
        return info

    # ------------------------------------------------------------ keys, close

    def keys(self, state: str) -> Iterator[Any]:
        info = self.slot(state)
        if info is None:
            return iter(())
        seen: list[Any] = []
        last = None
        start = KEY_PREFIX.size
        for raw, _ in scan_prefix(self.db, info.prefix):
            length = KEY_PREFIX.unpack_from(raw, 0)[2]
            data = raw[start:start + length]
            if data != last:
                seen.append(hashable(self.key_serializer.deserialize(data)))
                last = data
        return iter(seen)

    def namespaces(self, state: str) -> Iterator[tuple[Any, Any]]:
        info = self.slot(state)
        if info is None or not info.descriptor.namespaced:
            return iter(())
        pairs: list[tuple[Any, Any]] = []
        last = None
        start = KEY_PREFIX.size
        load_key, load_namespace = self.key_serializer.deserialize, info.namespace.deserialize
        for raw, _ in scan_prefix(self.db, info.prefix):
            length = KEY_PREFIX.unpack_from(raw, 0)[2]
            namespace, _ = split_namespace(raw[start + length:])
            pair = raw[start:start + length], namespace
            if pair != last:
                pairs.append((hashable(load_key(pair[0])), hashable(load_namespace(namespace))))
                last = pair
        return iter(pairs)

    def close(self) -> None:
        """Close the store exactly once (on the task thread, at the task's end), then delete it."""
        if self._closed:
            return
        self._closed = True
        try:
            self.db.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)
