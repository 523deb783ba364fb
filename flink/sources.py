"""Where a subtask's keyed entries come from: a canonical key-group stream or RocksDB files.

Each :class:`KeyedSource` yields the raw entries ``(key group, key, value, where)`` of one
state of one subtask, in key-group order, restricted to wanted key groups:

* :class:`StreamSource` — canonical savepoints (and full RocksDB checkpoints, which share
  the format): one key-group stream per subtask, after the keyed backend meta information.
  At each non-zero key-group offset::

      state id short
      repeated: key bytes (int length + bytes) | value bytes (int length + bytes)
          when the key's first byte has bit 0x80 set, meta data follows:
          a short — 0xFFFF ends the key group, anything else is the next state id

  A key starts with its key group (1 byte when max parallelism <= 128, else 2) with the
  0x80 flag cleared; a mismatch with the key group of the offset is damage. Key groups are
  read one at a time with ranged reads, so memory stays bounded by the largest key group.
* :class:`RocksDBSource` — incremental checkpoints and native savepoints: the subtask's
  RocksDB files, materialized and opened read-only (:mod:`statekit.flink.rocksdb`), one
  column family per state; the meta information is in the handle's meta stream.
* :class:`HeapSource` — heap (hashmap) checkpoints (``HeapSnapshotStrategy``): after the
  meta information, every key group at its offset::

      key group int
      per state: state id short | entry count int | entries by the state's serializers

  The entries of a state carry no lengths, so every state of the operator must decode
  for any of them to be read.

With snapshot compression (the header's flag) each key group is a Snappy framed stream
(:mod:`statekit.flink.compression`): the whole key group in a full snapshot, each state's
part after the key group id in a heap checkpoint. :meth:`StreamSource.key_groups` yields
the key groups uncompressed, so byte offsets in messages count inside the key group.

Every source yields decoded entries (:meth:`KeyedSource.decoded`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from statekit.flink.compression import decompress_framed
from statekit.flink.cursor import ByteCursor
from statekit.flink.decoding import (
    FlinkKeyedEntry,
    FlinkStateDecoder,
    decode_entry,
    flink_state_decoder,
    read_heap_state,
)
from statekit.flink.model import FlinkOperatorState, KeyedHandleKind, KeyedStateHandle, StreamHandle
from statekit.flink.rocksdb import column_family_entries, materialized_rocksdb, open_rocksdb
from statekit.flink.state_meta import KeyedBackendMeta, read_keyed_backend_meta
from statekit.flink.storage import FlinkSnapshot, read_stream_bytes, read_stream_ranges
from statekit.flink.summary import MAX_HEADER_BYTES
from statekit.statefmt.errors import BadInputError, CorruptStateError

__all__ = ["KeyedSource", "StreamSource", "RocksDBSource", "HeapSource", "keyed_sources", "prefix_bytes", "key_group_of",
           "END_OF_KEY_GROUP_MARK", "META_FOLLOWS"]

END_OF_KEY_GROUP_MARK = 0xFFFF
META_FOLLOWS = 0x80
RawEntry = tuple[int, bytes, bytes, str]  # key group, key, value, where (for messages)


def prefix_bytes(max_parallelism: int) -> int:
    """Bytes of the key-group prefix of a composite key (Flink's ``computeRequiredBytesInKeyGroupPrefix``)."""
    return 2 if max_parallelism > 128 else 1


def key_group_of(key: bytes, prefix: int) -> int:
    """The key group in the prefix of a composite key (meta-data flag cleared)."""
    value = key[0] & ~META_FOLLOWS & 0xFF
    return (value << 8 | key[1]) if prefix == 2 else value


def _source_name(stream: StreamHandle) -> str:
    leaf = next(stream.leaves(), stream)
    return leaf.path or leaf.name or "<inline>"


@dataclass(frozen=True)
class KeyedSource:
    """The keyed state of one subtask: its handle, meta information and where it is."""

    subtask: int
    handle: KeyedStateHandle
    source: str
    meta: KeyedBackendMeta

    def entries(self, snapshot: FlinkSnapshot, state: str, prefix: int,
                wanted: set[int] | None) -> Iterator[RawEntry]:
        """The raw entries (composite key and value bytes) of ``state`` in the ``wanted`` key groups."""
        raise NotImplementedError

    def decoded(self, snapshot: FlinkSnapshot, decoder: FlinkStateDecoder, prefix: int,
                wanted: set[int] | None) -> Iterator[FlinkKeyedEntry]:
        """The decoded entries of ``decoder``'s state in the ``wanted`` key groups (all when ``None``)."""
        for key_group, key, value, where in self.entries(snapshot, decoder.state, prefix, wanted):
            yield decode_entry(decoder, key_group, key, value, prefix, where, self.subtask)


def _truncated(what: str, key_group: int, at: int, source: str) -> CorruptStateError:
    return CorruptStateError(f"truncated: key group {key_group}: {what} at byte offset {at}", path=source)


def key_group_entries(data: bytes, key_group: int, names: tuple[str, ...], prefix: int, source: str,
                      base: int) -> Iterator[tuple[str, bytes, bytes, int]]:
    """(state name, key, value, file offset) of every entry of one canonical key group's bytes.

    The hot loop of canonical reading: plain slicing instead of a cursor, same checks.
    """
    size = len(data)
    if size < 2:
        raise _truncated("state id needs 2 bytes", key_group, base, source)
    state_id, pos = int.from_bytes(data[:2], "big"), 2
    while True:
        if state_id >= len(names):
            raise CorruptStateError(f"key group {key_group}: unknown state id {state_id} "
                                    f"at byte offset {base + pos - 2}", path=source)
        at = pos
        fields = []
        for what in ("key", "value"):
            length = int.from_bytes(data[pos:pos + 4], "big", signed=True)
            if pos + 4 > size or length < 0 or pos + 4 + length > size:
                raise _truncated(f"{what} of {length} bytes does not fit", key_group, base + pos, source)
            fields.append(data[pos + 4:pos + 4 + length])
            pos += 4 + length
        key, value = fields
        if len(key) < prefix or key_group_of(key, prefix) != key_group:
            raise CorruptStateError(f"key in key group {key_group} has a wrong key-group prefix "
                                    f"at byte offset {base + at}", path=source)
        yield names[state_id], key, value, base + at
        if key[0] & META_FOLLOWS:
            if pos + 2 > size:
                raise _truncated("state id or end-of-key-group mark needs 2 bytes", key_group, base + pos, source)
            marker, pos = int.from_bytes(data[pos:pos + 2], "big"), pos + 2
            if marker == END_OF_KEY_GROUP_MARK:
                return
            state_id = marker


@dataclass(frozen=True)
class StreamSource(KeyedSource):
    """A canonical key-group stream (canonical savepoints, full RocksDB checkpoints)."""

    @property
    def delegate(self) -> StreamHandle:
        """The stream holding the key groups."""
        assert self.handle.delegate is not None
        return self.handle.delegate

    def key_groups(self, snapshot: FlinkSnapshot, wanted: set[int] | None = None) -> Iterator[tuple[int, int, bytes]]:
        """(key group, file offset, bytes) of every non-empty (wanted) key group, one open for all."""
        starts = sorted((offset, kg) for kg, offset in zip(self.handle.key_group_range, self.handle.key_group_offsets)
                        if offset)
        spans = [(kg, offset, (starts[i + 1][0] - offset) if i + 1 < len(starts) else None)
                 for i, (offset, kg) in enumerate(starts) if wanted is None or kg in wanted]
        data = read_stream_ranges(snapshot, self.delegate, [(offset, length) for _, offset, length in spans])
        for (key_group, offset, _), chunk in zip(spans, data):
            yield key_group, offset, self._uncompressed(chunk, key_group)

    def _uncompressed(self, chunk: bytes, key_group: int) -> bytes:
        if not self.meta.compressed:
            return chunk
        return decompress_framed(chunk, source=self.source, what=f"key group {key_group}")

    def entries(self, snapshot: FlinkSnapshot, state: str, prefix: int,
                wanted: set[int] | None) -> Iterator[RawEntry]:
        names = tuple(s.name for s in self.meta.states)
        for key_group, offset, data in self.key_groups(snapshot, wanted):
            for name, key, value, at in key_group_entries(data, key_group, names, prefix, self.source, offset):
                if name == state:
                    yield key_group, key, value, (f"{self.source} (state {state!r}, key group {key_group}, "
                                                  f"entry at byte offset {at})")


@dataclass(frozen=True)
class RocksDBSource(KeyedSource):
    """A subtask's RocksDB files (incremental checkpoints, native savepoints)."""

    def entries(self, snapshot: FlinkSnapshot, state: str, prefix: int,
                wanted: set[int] | None) -> Iterator[RawEntry]:
        start = None
        if wanted is not None:
            first = min(wanted & set(self.handle.key_group_range), default=None)
            if first is None:
                return
            start = first.to_bytes(prefix, "big")
        last = max(wanted) if wanted is not None else None
        where = f"RocksDB state of subtask {self.subtask} ({self.source})"
        with materialized_rocksdb(snapshot, self.handle) as files, open_rocksdb(files, source=where) as db:
            for key, value in column_family_entries(db, state, start=start, source=where, files=files):
                if len(key) < prefix:
                    raise CorruptStateError(f"state {state!r}: key {key.hex()} shorter than its key-group prefix",
                                            path=where)
                key_group = key_group_of(key, prefix)
                if last is not None and key_group > last:
                    return
                if wanted is None or key_group in wanted:
                    yield key_group, key, value, f"{where} (state {state!r}, key group {key_group})"


@dataclass(frozen=True)
class HeapSource(StreamSource):
    """A heap (hashmap) checkpoint's key-group stream."""

    def _uncompressed(self, chunk: bytes, key_group: int) -> bytes:
        if not self.meta.compressed:
            return chunk  # the key group id, then one framed stream per state:
        return chunk[:4] + decompress_framed(chunk[4:], source=self.source, what=f"key group {key_group}")

    def decoded(self, snapshot: FlinkSnapshot, decoder: FlinkStateDecoder, prefix: int,
                wanted: set[int] | None) -> Iterator[FlinkKeyedEntry]:
        decoders = {}
        for index, meta in enumerate(self.meta.states):
            try:
                decoders[index] = (decoder if meta.name == decoder.state
                                   else flink_state_decoder(self.meta, meta.name, source=self.source))
            except BadInputError as exc:
                raise BadInputError(f"heap checkpoint: every state of a key group must decode to reach the "
                                    f"others, and {exc}", path=self.source) from None
        for key_group, offset, data in self.key_groups(snapshot, wanted):
            cur = ByteCursor(data, source=f"{self.source} (key group {key_group} at byte offset {offset})",
                             error=CorruptStateError)
            at = cur.pos
            if cur.i32("key group") != key_group:
                raise cur.error(f"heap key group {key_group} starts with another key group's id", at=at)
            while cur.remaining:
                at = cur.pos
                state_id = cur.u16("state id")
                if state_id not in decoders:
                    raise cur.error(f"unknown state id {state_id}", at=at)
                found = decoders[state_id]
                yield from read_heap_state(found, cur, key_group, self.subtask, found.state == decoder.state)


def _is_heap(snapshot: FlinkSnapshot, handle: KeyedStateHandle) -> bool:
    """True for the heap layout (each key group starts with its own id), not the full-snapshot one."""
    first = next(((kg, o) for kg, o in zip(handle.key_group_range, handle.key_group_offsets) if o), None)
    if first is None or handle.delegate is None:
        return False
    head = read_stream_bytes(snapshot, handle.delegate, offset=first[1], length=4)
    return len(head) == 4 and int.from_bytes(head, "big") == first[0] and all(handle.key_group_offsets)


def _meta(snapshot: FlinkSnapshot, stream: StreamHandle, length: int | None) -> tuple[KeyedBackendMeta, str]:
    source = _source_name(stream)
    meta = read_keyed_backend_meta(read_stream_bytes(snapshot, stream, length=length), source=source)
    if not meta.states:
        raise CorruptStateError(meta.problem or "no state meta information", path=source)
    return meta, source


def keyed_sources(snapshot: FlinkSnapshot, op: FlinkOperatorState, purpose: str = "decoding state",
                  wanted: set[int] | None = None) -> Iterator[KeyedSource]:
    """The keyed state of every subtask of ``op`` (only those holding a ``wanted`` key group).

    Raises:
        BadInputError: A handle kind that cannot be decoded (heap checkpoints, changelog).
    """
    for subtask in op.subtasks:
        handle = subtask.managed_keyed_state
        if handle is None:
            continue
        if wanted is not None and wanted.isdisjoint(handle.key_group_range):
            continue
        stream_kinds = (KeyedHandleKind.SAVEPOINT_KEY_GROUPS, KeyedHandleKind.KEY_GROUPS)
        if handle.kind in stream_kinds and handle.delegate is not None:
            first = min((o for o in handle.key_group_offsets if o), default=None)
            meta, source = _meta(snapshot, handle.delegate, first)
            heap = handle.kind is KeyedHandleKind.KEY_GROUPS and _is_heap(snapshot, handle)
            yield (HeapSource if heap else StreamSource)(subtask.index, handle, source, meta)
        elif handle.kind is KeyedHandleKind.INCREMENTAL and handle.meta is not None:
            meta, source = _meta(snapshot, handle.meta, MAX_HEADER_BYTES)
            yield RocksDBSource(subtask.index, handle, source, meta)
        else:
            raise BadInputError(
                f"{purpose} needs a canonical savepoint or RocksDB state (incremental checkpoint, native "
                f"savepoint); {op.label} subtask {subtask.index} has a {handle.kind.value} handle",
                path=snapshot.path)
