"""Regroup the entries of canonical key-group streams by their key groups under a new max parallelism.

Input: the key-group streams of one operator's subtasks (Flink's full-snapshot layout, see
:mod:`statekit.flink.sources`). Each entry is read once, its key hashed the way Flink assigns
keys (:mod:`statekit.flink.key_hash`), and its bytes appended, already in the output layout,
to the buffer of its *group* — its new key group and state id::

    key length int | new key-group prefix | rest of the key | value length int | value

Only the key-group prefix changes (1 byte up to max parallelism 128, else 2; the
meta-data-follows flag cleared); key, namespace, user key and value bytes are copied as they
are. When the buffers hold more than the memory budget, every buffer is appended to one
temporary spill file as a *run* and emptied, so memory stays bounded by the budget, the read
chunk and the largest single entry, whatever the size of the savepoint.

Output: :meth:`Regrouper.groups` yields the groups of a key-group range in (key group, state
id) order, each as byte chunks — its runs in the order written, then what is still buffered —
with Flink's meta-data-follows flag (0x80 in the first key byte) set on the group's last entry.
:mod:`statekit.flink.streams_writer` frames them into new streams.

Invariant: every entry read is written to exactly one group, the one of
``murmurHash(hashCode(key)) % new max parallelism``; within a group entries keep the order in
which they were read.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

from statekit.flink.key_hash import KeyHasher
from statekit.flink.keygroups import flink_murmur_hash
from statekit.flink.sources import END_OF_KEY_GROUP_MARK, META_FOLLOWS, prefix_bytes
from statekit.statefmt.errors import CorruptStateError
from statekit.statefmt.keygroups import KeyGroupRange

__all__ = ["StreamInput", "Regrouper", "KeyGroupTally", "DEFAULT_MEMORY_BUDGET", "READ_CHUNK"]

DEFAULT_MEMORY_BUDGET = 64 << 20
READ_CHUNK = 1 << 20
MAX_VECTOR_BLOCK = 64 << 20  # larger key groups are read in chunks, one entry at a time
TIMER_TIMESTAMP_BYTES = 8
_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
_STATE_BITS = 16


@dataclass(frozen=True)
class StreamInput:
    """One subtask's key-group stream to regroup.

    Attributes:
        stream: The open stream (seekable).
        source: Its name, for messages.
        offsets: ``(old key group, offset)`` of every non-empty key group, by offset.
        state_ids: The output state id of each of the stream's state ids.
        timers: Output state ids whose keys start with a timer timestamp.
        ends: Where each key group of ``offsets`` ends (default: the next one's offset, the last
            at the end of the stream); given when ``offsets`` is a slice of the stream's.
    """

    stream: IO[bytes]
    source: str
    offsets: tuple[tuple[int, int], ...]
    state_ids: tuple[int, ...]
    timers: frozenset[int]
    ends: tuple[int, ...] | None = None


@dataclass
class KeyGroupTally:
    """Entries and output bytes per new key group (the plan, and the written streams' content)."""

    max_parallelism: int
    entries: list[int] = field(default_factory=list)
    bytes: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.entries = [0] * self.max_parallelism
        self.bytes = [0] * self.max_parallelism

    def in_range(self, key_groups: KeyGroupRange) -> tuple[int, int, int]:
        """(non-empty key groups, entries, bytes) of ``key_groups``."""
        part = range(key_groups.start, key_groups.end + 1)
        return (sum(1 for kg in part if self.entries[kg]), sum(self.entries[kg] for kg in part),
                sum(self.bytes[kg] for kg in part))


class _Chunks:
    """A window of a stream: ``buf[pos:]`` are the unread bytes at stream offset ``base + pos``."""

    __slots__ = ("base", "buf", "pos", "source", "stream")

    def __init__(self, stream: IO[bytes], source: str) -> None:
        self.stream, self.source = stream, source
        self.buf, self.pos, self.base = b"", 0, 0

    def seek(self, offset: int) -> None:
        if self.base <= offset <= self.base + len(self.buf):
            self.pos = offset - self.base
            return
        self.stream.seek(offset)
        self.buf, self.pos, self.base = b"", 0, offset

    def fill(self, size: int, what: str, key_group: int) -> None:
        """Make ``size`` bytes available at ``pos`` (keeping the unread ones), or raise truncated."""
        rest = self.buf[self.pos:]
        more = self.stream.read(max(READ_CHUNK, size - len(rest)))
        self.base += self.pos
        self.buf, self.pos = rest + more, 0
        if len(self.buf) < size:
            raise CorruptStateError(f"truncated: key group {key_group}: {what} needs {size} bytes at byte offset "
                                    f"{self.base}, the stream ends after {len(self.buf)}", path=self.source)


class Regrouper:
    """Entries of one operator, regrouped by (new key group, state id) with bounded memory.

    Args:
        hasher: The Java ``hashCode`` of the operator's keys.
        old_max_parallelism: The max parallelism of the input streams (their key-group prefix).
        max_parallelism: The new max parallelism.
        spill: A new temporary file (read and written) for runs; ``None`` counts only (a plan).
        memory_budget: Bytes of entries buffered before they are spilled.
    """

    def __init__(self, hasher: KeyHasher, old_max_parallelism: int, max_parallelism: int,
                 spill: IO[bytes] | None, memory_budget: int = DEFAULT_MEMORY_BUDGET, *, vectorized: bool = True) -> None:
        self.hasher = hasher
        self.old_max_parallelism = old_max_parallelism
        self.old_prefix = prefix_bytes(old_max_parallelism)
        self.max_parallelism = max_parallelism
        self.vectorized = vectorized
        new_prefix = self.new_prefix = prefix_bytes(max_parallelism)
        self.prefixes = [kg.to_bytes(new_prefix, "big") for kg in range(max_parallelism)]
        self.prefix_delta = new_prefix - self.old_prefix
        self.spill = spill
        self.memory_budget = memory_budget
        self.tally = KeyGroupTally(max_parallelism)
        self.bytes_read = 0
        self._buffers: dict[int, bytearray] = {}
        self._last: dict[int, int] = {}  # group -> offset of its last entry in its buffer
        self._runs: dict[int, list[tuple[int, int, int, int]]] = {}  # group -> (spill offset, length, last, entries)
        self._counts: dict[int, int] = {}  # group -> entries buffered
        self._buffered = 0
        self._spilled = 0

    # ------------------------------------------------------------------ scatter

    def add_stream(self, entries: StreamInput) -> None:
        """Read every entry of one stream into its group.

        Raises:
            CorruptStateError: Damaged or truncated bytes (names the stream, key group and offset).
        """
        chunks = _Chunks(entries.stream, entries.source)
        ends = list(entries.ends) if entries.ends is not None else \
            [offset for _, offset in entries.offsets[1:]] + [self._stream_size(entries) if self.vectorized else 0]
        for (key_group, offset), end in zip(entries.offsets, ends):
            if not (self.vectorized and 0 < end - offset <= MAX_VECTOR_BLOCK and self._add_block(entries, key_group,
                                                                                               offset, end)):
                if self.vectorized:  # the block path moved the stream: start a new window
                    chunks = _Chunks(entries.stream, entries.source)
                chunks.seek(offset)
                self._add_key_group(chunks, key_group, entries)
                self.bytes_read += chunks.base + chunks.pos - offset
            if self._buffered > self.memory_budget:
                self._flush()

    @staticmethod
    def _stream_size(entries: StreamInput) -> int:
        entries.stream.seek(0, 2)
        return entries.stream.tell()

    def _add_block(self, entries: StreamInput, key_group: int, offset: int, end: int) -> bool:
        """One key group at once (:mod:`statekit.flink.fast_regroup`); ``False`` leaves it to the entry path."""
        from statekit.flink.fast_regroup import regroup_block

        entries.stream.seek(offset)
        data = entries.stream.read(end - offset)
        if len(data) != end - offset:
            return False
        return regroup_block(self, data, key_group, entries, f"{entries.source} (key group {key_group})")

    def add_run(self, group: int, data: bytes, last: int, entries: int) -> None:
        """Entries of one group in the output layout (flags clear), ``last`` the offset of the last one."""
        if self.spill is not None:
            buffer = self._buffers.get(group)
            if buffer is None:
                buffer = self._buffers[group] = bytearray()
            self._last[group] = len(buffer) + last
            self._counts[group] = self._counts.get(group, 0) + entries
            buffer += data
            self._buffered += len(data)
        key_group = group >> _STATE_BITS
        self.tally.entries[key_group] += entries
        self.tally.bytes[key_group] += len(data)

    def _state_id(self, chunks: _Chunks, key_group: int, entries: StreamInput) -> int:
        if chunks.pos + 2 > len(chunks.buf):
            chunks.fill(2, "state id", key_group)
        at = chunks.pos
        state = int(_U16.unpack_from(chunks.buf, at)[0])
        chunks.pos = at + 2
        if state >= len(entries.state_ids):
            raise CorruptStateError(f"key group {key_group}: unknown state id {state} at byte offset "
                                    f"{chunks.base + at}", path=entries.source)
        return state

    def _add_key_group(self, chunks: _Chunks, key_group: int, entries: StreamInput) -> None:
        """The entries of one old key group: state id, then entries until the end-of-key-group mark."""
        old_prefix, max_parallelism, hasher = self.old_prefix, self.max_parallelism, self.hasher
        prefixes, delta, unpack = self.prefixes, self.prefix_delta, _I32.unpack_from
        buffers, last, tally_entries, tally_bytes = self._buffers, self._last, self.tally.entries, self.tally.bytes
        counts = self._counts
        keep = self.spill is not None  # else a plan: count only
        cache: dict[bytes, int] = {}  # key bytes -> new key group; entries of one key share a key group
        state = entries.state_ids[self._state_id(chunks, key_group, entries)]
        skip = TIMER_TIMESTAMP_BYTES if state in entries.timers else 0
        while True:
            buf, pos = chunks.buf, chunks.pos
            if pos + 4 > len(buf):
                chunks.fill(4, "key length", key_group)
                buf, pos = chunks.buf, chunks.pos
            key_length = unpack(buf, pos)[0]
            if key_length < old_prefix + skip:
                raise CorruptStateError(f"key group {key_group}: key of {key_length} bytes at byte offset "
                                        f"{chunks.base + pos} is shorter than its prefix", path=entries.source)
            if pos + 8 + key_length > len(buf):
                chunks.fill(8 + key_length, "key", key_group)
                buf, pos = chunks.buf, chunks.pos
            value_length = unpack(buf, pos + 4 + key_length)[0]
            end = pos + 8 + key_length + value_length
            if value_length < 0:
                raise CorruptStateError(f"key group {key_group}: negative value length at byte offset "
                                        f"{chunks.base + pos + 4 + key_length}", path=entries.source)
            if end > len(buf):
                chunks.fill(end - pos, "value", key_group)
                buf, pos = chunks.buf, chunks.pos
                end = pos + 8 + key_length + value_length
            flagged = buf[pos + 4] & META_FOLLOWS
            stored = buf[pos + 4] & ~META_FOLLOWS & 0xFF
            if old_prefix == 2:
                stored = stored << 8 | buf[pos + 5]
            if stored != key_group:
                raise CorruptStateError(f"key in key group {key_group} has a wrong key-group prefix at byte offset "
                                        f"{chunks.base + pos}", path=entries.source)
            key = buf[pos + 4 + old_prefix + skip:pos + 4 + key_length]
            new_group = cache.get(key)
            if new_group is None:
                where = f"{entries.source} (key group {key_group}, entry at byte offset {chunks.base + pos})"
                new_group = flink_murmur_hash(hasher.java_hash(key, 0, where=where)[0]) % max_parallelism
                cache[key] = new_group
            record = _I32.pack(key_length + delta) + prefixes[new_group]
            size = len(record) + end - pos - 4 - old_prefix
            if keep:
                group = new_group << _STATE_BITS | state
                buffer = buffers.get(group)
                if buffer is None:
                    buffer = buffers[group] = bytearray()
                last[group] = len(buffer)
                counts[group] = counts.get(group, 0) + 1
                buffer += record
                buffer += memoryview(buf)[pos + 4 + old_prefix:end]
                self._buffered += size
            tally_entries[new_group] += 1
            tally_bytes[new_group] += size
            chunks.pos = end
            if not flagged:
                continue
            if end + 2 > len(buf):
                chunks.fill(2, "state id or end-of-key-group mark", key_group)
            marker = int(_U16.unpack_from(chunks.buf, chunks.pos)[0])
            if marker == END_OF_KEY_GROUP_MARK:
                chunks.pos += 2
                return
            state = entries.state_ids[self._state_id(chunks, key_group, entries)]
            skip = TIMER_TIMESTAMP_BYTES if state in entries.timers else 0

    def _flush(self) -> None:
        """Append every buffer to the spill file as a run, by group, and empty it (counting only: drop them)."""
        if self.spill is not None:
            for group, buffer in sorted(self._buffers.items()):
                self._runs.setdefault(group, []).append((self._spilled, len(buffer), self._last[group],
                                                         self._counts.get(group, 0)))
                self.spill.write(buffer)
                self._spilled += len(buffer)
        self._buffers.clear()
        self._last.clear()
        self._counts.clear()
        self._buffered = 0

    def flush_if_full(self) -> None:
        """Spill the buffers when they hold more than the memory budget."""
        if self._buffered > self.memory_budget:
            self._flush()

    def flush(self) -> None:
        """Spill every buffer, full or not: afterwards :meth:`spilled_runs` lists every entry."""
        self._flush()

    def spilled_runs(self) -> Iterator[tuple[int, int, int, int, int]]:
        """``(group, offset in the spill file, length, offset of the last entry, entries)`` of every
        spilled run (flags clear), by group, each group's runs in the order written."""
        for group in sorted(self._runs):
            for offset, length, last, entries in self._runs[group]:
                yield group, offset, length, last, entries

    # ------------------------------------------------------------------ gather

    def groups(self, key_groups: KeyGroupRange) -> Iterator[tuple[int, int, Iterator[bytes]]]:
        """``(key group, state id, chunks)`` of every non-empty group in ``key_groups``, in order.

        The chunks of a group are its entries in the output layout; the last entry carries the
        meta-data-follows flag. Consume each group's chunks before asking for the next group.
        """
        low, high = key_groups.start << _STATE_BITS, (key_groups.end + 1) << _STATE_BITS
        present = sorted(g for g in set(self._buffers) | set(self._runs) if low <= g < high)
        for group in present:
            yield group >> _STATE_BITS, group & ((1 << _STATE_BITS) - 1), self._chunks(group)

    def runs(self, key_groups: KeyGroupRange) -> Iterator[tuple[int, bytes, int, int]]:
        """``(group, bytes, offset of the last entry, entries)`` of every run of ``key_groups``, flags
        clear, in order: the input of another :class:`Regrouper` (:meth:`add_run`)."""
        low, high = key_groups.start << _STATE_BITS, (key_groups.end + 1) << _STATE_BITS
        for group in sorted(g for g in set(self._buffers) | set(self._runs) if low <= g < high):
            for offset, length, last, entries in self._runs.get(group, []):
                assert self.spill is not None
                self.spill.seek(offset)
                yield group, self.spill.read(length), last, entries
            buffered = self._buffers.get(group)
            if buffered:
                yield group, bytes(buffered), self._last[group], self._counts.get(group, 0)

    def _chunks(self, group: int) -> Iterator[bytes]:
        runs = self._runs.get(group, [])
        buffered = self._buffers.get(group)
        for index, (offset, length, last, _) in enumerate(runs):
            assert self.spill is not None
            self.spill.seek(offset)
            data = self.spill.read(length)
            if index == len(runs) - 1 and not buffered:
                data = _flagged(data, last)
            yield data
        if buffered:
            buffered[self._last[group] + 4] |= META_FOLLOWS
            yield bytes(buffered)

    @property
    def spilled_bytes(self) -> int:
        """Bytes written to the spill file."""
        return self._spilled


def _flagged(data: bytes, last: int) -> bytes:
    """``data`` with the meta-data-follows flag set in the first key byte of the entry at ``last``."""
    out = bytearray(data)
    out[last + 4] |= META_FOLLOWS
    return bytes(out)
