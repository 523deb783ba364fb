"""A canonical copy of a native snapshot, in private scratch space.

A native snapshot (``format: native``) keeps each keyed subtask's state as the files of its
RocksDB store (:mod:`statekit.statefmt.native_state`). :func:`canonical_copy` turns it into
a canonical snapshot that every canonical reader understands: in a fresh scratch directory
under the system's temporary directory it

* opens each subtask's store read-only (its files symlinked or downloaded into the scratch
  space by :func:`~statekit.statefmt.native_store.fetch_store_files`, each checked against the
  size and CRC-32 ``_metadata`` records first: every path is resolved by the snapshot's own
  checked resolver, so nothing outside the snapshot directory and its job's ``shared/`` is
  ever read), writes one canonical keyed file per state from the
  store's entries, one key group at a time (memory bounded by a key group, the rest on disk),
  and closes the store before the next one opens;
* copies the snapshot's canonical files (operator state, in-flight records) beside them, and
  writes the copy's ``_metadata`` last (other processes on this machine, e.g. Spark's local
  executors, reopen the copy by its path).

The copy's metadata is the snapshot's with ``format: canonical``, the native handles replaced
by the written files. Values are copied as stored (the state's serialized bytes); a TTL
state's value is split into the bytes and the expiry (layout: expiry ``>q`` before the value,
``2**63 - 1`` meaning none; list state: per element), nothing is dropped for being expired.

Invariant: nothing is written outside the scratch directory, which :meth:`CanonicalCopy.close`
removes whole — also when building the copy fails, and at the latest when the copy is garbage
collected or the interpreter exits.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Generator, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from statekit.statefmt import layout
from statekit.statefmt.errors import BadInputError, CorruptStateError, UnsafePathError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.keygroups import key_hash
from statekit.statefmt.metadata import (
    CheckpointMetadata,
    OperatorMetadata,
    SnapshotFormat,
    StateDescriptor,
    StateFile,
    StateKind,
    SubtaskState,
    serialize_metadata,
)
from statekit.statefmt.native_state import NO_EXPIRY, TTL_EXPIRY, split_namespace
from statekit.statefmt.native_store import ReadOnlyStore, StoreScratch, fetch_store_files
from statekit.statefmt.serializers import decode_list, encode_list
from statekit.statefmt.statefile import StateFileWriter

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["CanonicalCopy", "canonical_copy", "native_keyed_table", "serialized_keyed_table", "strip_ttl_value"]

_CHUNK = 8 << 20


class CanonicalCopy:
    """A canonical snapshot in scratch space: ``directory`` holds the files ``metadata`` names."""

    def __init__(self, scratch: StoreScratch, directory: str, metadata: CheckpointMetadata) -> None:
        self.directory = directory
        self.metadata = metadata
        self._finalizer = weakref.finalize(self, scratch.close)

    def close(self) -> None:
        """Remove the scratch directory (idempotent)."""
        self._finalizer()


def canonical_copy(io: FileIO, resolve: Callable[[str], str], metadata: CheckpointMetadata,
                   where: str) -> CanonicalCopy:
    """The canonical copy of the snapshot whose ``_metadata`` is ``metadata`` (see the module).

    Args:
        io: The snapshot's filesystem.
        resolve: A path of ``_metadata`` -> a checked path of ``io`` (raises for unsafe ones).
        metadata: The snapshot's metadata.
        where: The snapshot's URL, for messages.

    Raises:
        BadInputError: rocksdict is missing, or a store has an unknown format.
        CorruptStateError: A file differs from ``_metadata``, or a store does not open or read.
        UnsafePathError / PathNotFoundError: From ``resolve`` or a missing file.
    """
    scratch = StoreScratch(prefix="statekit-view-")
    try:
        directory = scratch.new_dir("canonical")
        builder = _Builder(io, resolve, scratch, directory, where)
        operators = tuple(builder.operator(op) for op in metadata.operators)
        canonical = replace(metadata, format=SnapshotFormat.CANONICAL, operators=operators)
        with open(os.path.join(directory, layout.METADATA_FILE), "wb") as out:  # for readers that reopen it
            out.write(serialize_metadata(canonical))
        return CanonicalCopy(scratch, directory, canonical)
    except BaseException:
        scratch.close()
        raise


class _Builder:
    def __init__(self, io: FileIO, resolve: Callable[[str], str], scratch: StoreScratch, directory: str,
                 where: str) -> None:
        self.io = io
        self.resolve = resolve
        self.scratch = scratch
        self.directory = directory
        self.where = where
        self.stores = 0

    def operator(self, op: OperatorMetadata) -> OperatorMetadata:
        return replace(op, subtasks=tuple(self.subtask(op, st) for st in op.subtasks))

    def subtask(self, op: OperatorMetadata, st: SubtaskState) -> SubtaskState:
        for file in st.files:
            self.copy(file.path)
        if st.channel_state is not None:
            self.copy(st.channel_state.path)
        if st.native is None:
            return st
        written = self.convert(op, st)
        return replace(st, files=st.files + written, native=None)

    def copy(self, relative: str) -> None:
        """Copy one canonical file of the snapshot to the same relative path in the copy."""
        target = self.local_path(relative)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with self.io.open_input(self.resolve(relative)) as source, open(target, "wb") as out:
            while chunk := source.read(_CHUNK):
                out.write(chunk)

    def local_path(self, relative: str) -> str:
        target = os.path.normpath(os.path.join(self.directory, *relative.split("/")))
        if os.path.commonpath([target, self.directory]) != self.directory:
            raise UnsafePathError(f"{relative!r} leads outside the snapshot directory", path=self.where)
        return target

    def convert(self, op: OperatorMetadata, st: SubtaskState) -> tuple[StateFile, ...]:
        """One canonical keyed file per state of the subtask's store (none for an empty state)."""
        assert st.native is not None
        try:
            import rocksdict  # noqa: F401
        except ImportError:
            raise BadInputError("native RocksDB state needs the optional package 'rocksdict', which is not "
                                "installed; pip install 'statekit[rocksdb]'", path=self.where) from None
        self.stores += 1
        store_dir = self.scratch.new_dir(f"store-{self.stores}")
        fetch_store_files(self.io, self.resolve, st.native, store_dir, link=True)
        where = f"{self.where} (operator {op.uid}, subtask {st.index})"
        store = ReadOnlyStore(store_dir, st.native, where)
        try:
            files = []
            for name, state_id in st.native.state_ids:
                file = self.write_state(op, st, op.state(name), store, state_id)
                if file is not None:
                    files.append(file)
            return tuple(files)
        finally:
            store.close()  # the store's iterators are exhausted or closed: it closes exactly once here

    def write_state(self, op: OperatorMetadata, st: SubtaskState, descriptor: StateDescriptor,
                    store: ReadOnlyStore, state_id: int) -> StateFile | None:
        relative = layout.state_file_path(op.uid, descriptor.name, st.index, op.parallelism)
        target = self.local_path(relative)
        blocks = _blocks(store, state_id, st, descriptor, op.max_parallelism)
        try:
            first = next(blocks, None)
            if first is None:
                return None
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as out:
                writer = StateFileWriter(out, layout.FILE_KIND_KEYED, path=relative)
                writer.write_block(*first)
                for key_group, batch in blocks:
                    writer.write_block(key_group, batch)
                summary = writer.finish()
        finally:
            blocks.close()
        return StateFile(descriptor.name, relative, summary.size, summary.checksum, summary.entries)


def _blocks(store: ReadOnlyStore, state_id: int, st: SubtaskState, descriptor: StateDescriptor,
            max_parallelism: int) -> Generator[tuple[int, pa.RecordBatch], None, None]:
    """(key group, sorted batch) of one state, one key group at a time, key groups ascending."""

    from statekit.statefmt.entries import group_by_key_group

    for key_group in st.key_group_range:
        table = native_keyed_table(store.entries(state_id, key_group), descriptor, None, store.where)
        if table is not None:
            yield from group_by_key_group(table, max_parallelism)


def native_keyed_table(entries: Iterable[tuple[bytes, bytes, bytes]], descriptor: StateDescriptor,
                       drop_at: int | None, where: str) -> pa.Table | None:
    """The keyed table (ready for ``group_by_key_group``) of one state's store entries
    (:func:`~statekit.statefmt.native_store.store_entries`), None when none is left: the namespace
    split off the rest of a namespaced state's store key, the user key of map state, a TTL
    value split into its bytes and expiry — entries expired at ``drop_at`` left out (None: none).

    Raises:
        CorruptStateError: A namespaced state's store key without a whole namespace (naming ``where``).
    """
    is_map, namespaced = descriptor.kind is StateKind.MAP, descriptor.namespaced
    ttl = descriptor.ttl_ms is not None
    keys: list[bytes] = []
    namespaces: list[bytes] = []
    user_keys: list[bytes | None] = []
    values: list[bytes] = []
    expiries: list[int | None] = []
    for key, rest, value in entries:
        expiry = None
        if ttl:
            stripped = strip_ttl_value(descriptor.kind, value, drop_at)
            if stripped is None:
                continue
            value, expiry = stripped
        if namespaced:
            try:
                namespace, rest = split_namespace(rest)
            except ValueError as exc:
                raise CorruptStateError(f"state {descriptor.name!r}: {exc}", path=where) from None
            namespaces.append(namespace)
        keys.append(key)
        user_keys.append(rest if is_map else None)
        values.append(value)
        expiries.append(expiry)
    if not keys:
        return None
    return serialized_keyed_table(keys, user_keys, values, expiries, namespaces if namespaced else None)


def serialized_keyed_table(keys: list[bytes], user_keys: list[bytes | None], values: list[bytes],
                           expiries: list[int | None], namespaces: list[bytes] | None = None) -> pa.Table:
    """Keyed entries whose keys, namespaces, user keys and values are already serialized, as a
    keyed table ready for ``group_by_key_group`` (``namespaces`` None: the void namespace)."""
    import pyarrow as pa

    from statekit.statefmt.statefile import keyed_schema

    return pa.table([
        pa.array([key_hash(k) for k in keys], pa.uint32()),
        pa.array(keys, pa.binary()),
        pa.array(namespaces if namespaces is not None else [b""] * len(keys), pa.binary()),
        pa.array(user_keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.array(expiries, pa.int64()),
    ], schema=keyed_schema())


def _split_expiry(data: bytes) -> tuple[int | None, bytes]:
    (expiry,) = TTL_EXPIRY.unpack_from(data, 0)
    return (None if expiry == NO_EXPIRY else expiry), data[TTL_EXPIRY.size:]


def strip_ttl_value(kind: StateKind, data: bytes, drop_at: int | None) -> tuple[bytes, int | None] | None:
    """A TTL state's stored value as a state file holds it: (value bytes, expiry), or None when it
    expired at ``drop_at`` (None: nothing is dropped). List state: its live elements, framed,
    and the latest of their expiries (None when one never expires)."""
    if kind is not StateKind.LIST:
        expiry, value = _split_expiry(data)
        return None if drop_at is not None and expiry is not None and expiry <= drop_at else (value, expiry)
    live = [(expiry, value) for expiry, value in map(_split_expiry, decode_list(data))
            if drop_at is None or expiry is None or expiry > drop_at]
    if not live:
        return None
    expiries = [expiry for expiry, _ in live]
    latest = None if any(e is None for e in expiries) else max(e for e in expiries if e is not None)
    return encode_list([value for _, value in live]), latest
