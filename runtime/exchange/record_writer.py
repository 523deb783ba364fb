"""Record writers: one per output edge of an operator, buffering records per output channel.

A :class:`RecordWriter` fills one buffer per output channel and hands it over when full, at
every event, and whenever the producing task runs out of input. It never blocks: a buffer the
consumer's gate cannot take goes to the writer's *backlog*; the task delivers the backlog
between input buffers and takes no new input while it is not empty, so a subtask overdraws by
at most what one input buffer produces — and stays responsive to priority barriers and mails
while backpressured. Keyed exchange routes by key group:
``assign_to_key_group(serialize(key), M)`` then ``compute_operator_index_for_key_group(M, p, kg)``.

A writer counts the data-lane items it delivered on each channel (``sent``): a priority barrier
carries that count (see :mod:`statekit.runtime.exchange.input_gate`).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mmh3
import msgpack

from statekit.runtime.checkpoint.barriers import Barrier, PriorityBarrier
from statekit.runtime.exchange.batch_path import (
    TimestampedBuffer,
    value_key_selector,
    with_emit_all,
    with_pair_emitters,
)
from statekit.runtime.exchange.events import LatencyMarker
from statekit.runtime.exchange.input_gate import InputGate, TaskCancelled
from statekit.runtime.exchange.partitioning import Partitioning
from statekit.statefmt.serializers import get_serializer

__all__ = [
    "BUFFER_SIZE",
    "ChannelTarget",
    "RecordWriter",
]

BUFFER_SIZE = 512

# the most records a buffer sized by bytes holds (tiny records would otherwise make huge buffers)
MAX_BUFFER_RECORDS = 8192

# the records of the first buffers of a writer sized by bytes with a channel to another process,
# until a buffer has crossed and measured the bytes a record takes: a probe small enough that even
# large records make no frame far beyond the buffer's bytes
PROBE_BUFFER_RECORDS = 16


_ROUTE_CACHE_LIMIT = 1 << 20


_WAIT_SLICE_S = 0.002


@dataclass(frozen=True)
class ChannelTarget:
    """One output channel: the consumer subtask's gate and this channel's number in it."""

    gate: InputGate
    channel: int


def _measures(target: ChannelTarget) -> bool:
    """Whether ``target``'s gate measures the bytes records take on the wire (a remote channel)."""
    return hasattr(target.gate, "record_bytes")


def _key_bytes(key_serializer: str) -> Callable[[Any], bytes]:
    """The key serializer of one writer. msgpack gets a Packer of this writer's own (the
    same bytes as ``msgpack.packb``, a fifth of its cost per call): a Packer keeps a buffer,
    so it is never shared between writers, whose tasks may run on other threads."""
    if key_serializer == "msgpack":
        return msgpack.Packer(use_bin_type=True, autoreset=True).pack  # type: ignore[no-any-return]
    return get_serializer(key_serializer, for_write=True).serialize


class RecordWriter:
    """Buffers records per output channel and hands them to the consumers' gates, never blocking.

    Attributes:
        sent: Data-lane items delivered into each channel's gate so far.
        pending: Items waiting in the backlog (0: output available).
    """

    def __init__(
        self,
        targets: list[ChannelTarget],
        partitioning: Partitioning,
        *,
        key_selector: Callable[[Any], Any] | None = None,
        key_serializer: str = "msgpack",
        max_parallelism: int = 128,
        start_channel: int = 0,
        buffer_size: int = BUFFER_SIZE,
        buffer_bytes: int | None = None,
    ) -> None:
        self._targets = targets
        self._n = len(targets)
        self._buffers: list[list[Any]] = [[] for _ in targets]
        self._backlog: list[collections.deque[Any]] = [collections.deque() for _ in targets]
        self.sent = [0] * len(targets)
        self.records_out = 0  # records handed to channels (the task's metrics read it)
        self.pending = 0
        self.side_output: str | None = None  # the side-output tag this writer's edge takes
        self.timestamped = False  # records go out as (value, timestamp) pairs
        self._size = buffer_size
        self._buffer_bytes = buffer_bytes  # None: buffers hold buffer_size records, never resized
        if buffer_bytes is not None and any(_measures(target) for target in targets):
            self._size = min(buffer_size, PROBE_BUFFER_RECORDS)
        self._set_size: Callable[[int], None] | None = None  # the hash emitter's, when it has one
        self.partitioning = partitioning
        self._selector = key_selector
        self._serialize = _key_bytes(key_serializer)
        self._max_parallelism = max_parallelism
        self._next = start_channel % max(1, self._n)
        self._route_cache: dict[Any, int] = {}
        self._markers: dict[int, list[LatencyMarker]] = {}  # latency markers waiting for their channel's buffer
        self._marker_channel = start_channel % max(1, self._n)
        self._new_buffer: Callable[[], list[Any]] = list  # what flush_channel starts a channel's next buffer with
        if partitioning is Partitioning.HASH:
            self._hash_emitter = self._make_hash_emitter()
        self.emit: Callable[[Any], None] = self._emitter()

    @property
    def channels(self) -> int:
        return self._n

    def _emitter(self) -> Callable[[Any], None]:
        if self._n == 1 and self.partitioning is not Partitioning.BROADCAST:
            return self._emit_single
        if self.partitioning is Partitioning.HASH:
            return self._hash_emitter
        return {
            Partitioning.FORWARD: self._emit_single,
            Partitioning.REBALANCE: self._emit_rebalance,
            Partitioning.BROADCAST: self._emit_broadcast,
        }[self.partitioning]

    def channel_for_key(self, key: Any) -> int:
        """The consumer subtask that owns ``key`` (by its key group)."""
        key_group = mmh3.hash(self._serialize(key), 0, False) % self._max_parallelism
        return key_group * self._n // self._max_parallelism

    def _emit_single(self, record: Any) -> None:
        buffer = self._buffers[0]
        buffer.append(record)
        if len(buffer) >= self._size:
            self.flush_channel(0)

    def _emit_rebalance(self, record: Any) -> None:
        channel = self._next
        self._next = channel + 1 if channel + 1 < self._n else 0
        buffer = self._buffers[channel]
        buffer.append(record)
        if len(buffer) >= self._size:
            self.flush_channel(channel)

    def _make_hash_emitter(self) -> Callable[[Any], None]:
        """The keyed-exchange hot path as a closure over locals (no attribute lookups)."""
        selector = self._selector
        assert selector is not None
        cache = self._route_cache
        buffers = self._buffers
        size = self._size
        route = self.channel_for_key
        flush = self.flush_channel

        def set_size(records: int) -> None:
            nonlocal size
            size = records

        self._set_size = set_size

        lookup = cache.get

        def cached_route(key: Any) -> int:
            """The channel of a hashable key the cache does not hold, now cached (a full cache
            starts over): called on a key's first records only, off the hot path."""
            channel = route(key)
            if len(cache) >= _ROUTE_CACHE_LIMIT:
                cache.clear()
            cache[key] = channel
            return channel

        def emit(record: Any) -> None:
            key = selector(record)
            try:
                channel = lookup(key)  # a miss is None, not a raised KeyError (a key's first records)
            except TypeError:  # an unhashable key: route without the cache
                channel = route(key)
            else:
                if channel is None:
                    channel = cached_route(key)
            buffer = buffers[channel]
            buffer.append(record)
            if len(buffer) >= size:
                flush(channel)

        def emit_all(records: list[Any]) -> None:
            """``emit`` of every record in order, the body inlined: a call less per record."""
            for record in records:
                key = selector(record)
                try:
                    channel = lookup(key)
                except TypeError:
                    channel = route(key)
                else:
                    if channel is None:
                        channel = cached_route(key)
                buffer = buffers[channel]
                buffer.append(record)
                if len(buffer) >= size:
                    flush(channel)

        with_emit_all(emit, emit_all)
        value_selector = value_key_selector(selector)
        if value_selector is None or self._n < 2:
            return emit
        # a timestamped edge to several channels: its buffers are TimestampedBuffers
        self._new_buffer = TimestampedBuffer
        buffers[:] = [TimestampedBuffer() for _ in buffers]

        def emit_pair(value: Any, timestamp: int) -> None:
            """``emit((value, timestamp))`` on a timestamped edge, keyed by ``value`` directly."""
            key = value_selector(value)
            try:
                channel = lookup(key)
            except TypeError:
                channel = route(key)
            else:
                if channel is None:
                    channel = cached_route(key)
            buffer = buffers[channel]
            buffer.append(value)
            buffer.timestamps.append(timestamp)  # type: ignore[attr-defined]
            if len(buffer) >= size:
                flush(channel)

        def emit_assigned(values: list[Any], assign: Callable[[Any, Any], Any], previous: Any,
                          highest: int) -> tuple[Any, int]:
            """``emit_pair`` for each value with its assigned timestamp, in one loop (a source's poll)."""
            for value in values:
                timestamp = assign(value, previous)
                if timestamp.__class__ is not int:
                    timestamp = int(timestamp)
                if timestamp > highest:
                    highest = timestamp
                previous = timestamp
                key = value_selector(value)
                try:
                    channel = lookup(key)
                except TypeError:
                    channel = route(key)
                else:
                    if channel is None:
                        channel = cached_route(key)
                buffer = buffers[channel]
                buffer.append(value)
                buffer.timestamps.append(timestamp)  # type: ignore[attr-defined]
                if len(buffer) >= size:
                    flush(channel)
            return previous, highest

        def emit_record(record: tuple[Any, int]) -> None:
            emit_pair(record[0], record[1])

        return with_pair_emitters(emit_record, emit_pair, emit_assigned)

    def _emit_broadcast(self, record: Any) -> None:
        for channel, buffer in enumerate(self._buffers):
            buffer.append(record)
            if len(buffer) >= self._size:
                self.flush_channel(channel)

    # ------------------------------------------------------------ delivery

    def _send(self, channel: int, payload: Any) -> None:
        """Deliver ``payload`` now if the gate has room and nothing is queued before it, else queue it."""
        backlog = self._backlog[channel]
        if not backlog:
            target = self._targets[channel]
            if target.gate.offer((target.channel, payload)):
                self.sent[channel] += 1
                return
        backlog.append(payload)
        self.pending += 1

    def flush_channel(self, channel: int) -> None:
        """Hand the buffer of ``channel`` to its consumer (or to the backlog), then the latency
        markers that rode with it."""
        buffer = self._buffers[channel]
        if buffer:
            self._buffers[channel] = self._new_buffer()
            self.records_out += len(buffer)
            self._send(channel, buffer)
            if self._buffer_bytes is not None:
                self._fit_size(channel)
        if self._markers:
            for marker in self._markers.pop(channel, ()):
                self._send(channel, marker)

    def _fit_size(self, channel: int) -> None:
        """Buffers of ``buffer_bytes``: the records a buffer holds follow the bytes a record took
        on the wire, as the channel's remote gate measured them (a local gate measures nothing)."""
        measured: float | None = getattr(self._targets[channel].gate, "record_bytes", None)
        if not measured or self._buffer_bytes is None:
            return
        size = min(MAX_BUFFER_RECORDS, max(1, int(self._buffer_bytes / measured)))
        if abs(size - self._size) * 8 > self._size:  # off by more than an eighth
            self._size = size
            if self._set_size is not None:
                self._set_size(size)

    @property
    def buffer_records(self) -> int:
        """Records a buffer holds before it is handed over."""
        return self._size

    def emit_latency_marker(self, marker: LatencyMarker) -> None:
        """Send ``marker`` on one channel (in turn): behind the records its buffer holds now, when
        that buffer goes (at once when it is empty)."""
        channel = self._marker_channel
        self._marker_channel = (channel + 1) % max(1, self._n)
        if self._buffers[channel]:
            self._markers.setdefault(channel, []).append(marker)
        else:
            self._send(channel, marker)

    def buffered(self) -> bool:
        """Whether a channel's buffer holds records (or markers wait) not handed over yet."""
        return bool(self._markers) or any(self._buffers)

    @property
    def backlog_items(self) -> int:
        """Items (buffers, events) waiting for room in their consumers' gates."""
        return self.pending

    def flush(self) -> None:
        """Hand over every non-empty buffer."""
        for channel, buffer in enumerate(self._buffers):
            if buffer:
                self.flush_channel(channel)

    def broadcast_event(self, event: Any) -> None:
        """Flush, then send ``event`` on every channel (records before it stay before it)."""
        self.flush()
        for channel in range(self._n):
            self._send(channel, event)

    def deliver(self) -> bool:
        """Move backlogged items into their gates while they have room; True when none is left."""
        if not self.pending:
            return True
        for channel, backlog in enumerate(self._backlog):
            target = self._targets[channel]
            while backlog and target.gate.offer((target.channel, backlog[0])):
                backlog.popleft()
                self.pending -= 1
                self.sent[channel] += 1
        return not self.pending

    def wait_for_room(self, timeout: float = _WAIT_SLICE_S) -> None:
        """Wait up to ``timeout`` seconds for room in the gate of the first backlogged channel."""
        for channel, backlog in enumerate(self._backlog):
            if backlog:
                gate = self._targets[channel].gate
                if gate.cancelled.is_set():
                    raise TaskCancelled()
                gate.wait_for_room(timeout)
                return

    # ------------------------------------------------------------ barriers that overtake

    def _backlog_records(self, channel: int, stop_at: Barrier | None = None) -> list[Any] | None:
        """The records queued on ``channel`` (backlog, then the open buffer unless ``stop_at``
        bounds them), or None when an in-band event other than ``stop_at`` is among them."""
        records: list[Any] = []
        for payload in self._backlog[channel]:
            if payload is stop_at:
                return records
            if payload.__class__ is LatencyMarker:
                continue  # not state: overtaken like a record, delivered later
            if payload.__class__ is not list:
                return None  # an event, or a TimestampedBuffer (event time has no unaligned checkpoints)
            records.extend(payload)
        if stop_at is not None:
            return None
        buffer = self._buffers[channel]
        records.extend(buffer.records() if isinstance(buffer, TimestampedBuffer) else buffer)
        return records

    def send_priority_barrier(self, barrier: Barrier) -> dict[int, list[Any]]:
        """Send ``barrier`` ahead of every queued record, on every channel.

        Returns, per channel, the records it overtook (the backlog and the open buffer): the
        output channel state of the checkpoint. As in Flink, barriers never overtake on a
        forward or broadcast exchange (its in-flight records could not be redistributed at
        another parallelism): there, and on a channel whose backlog holds another in-band
        event (which a barrier cannot overtake), the barrier goes in-band and no entry is made.
        """
        overtaken: dict[int, list[Any]] = {}
        if self.partitioning in (Partitioning.FORWARD, Partitioning.BROADCAST):
            self.broadcast_event(barrier)
            return overtaken
        for channel in range(self._n):
            records = self._backlog_records(channel)
            if records is None:
                self.flush_channel(channel)
                self._send(channel, barrier)
                continue
            overtaken[channel] = records
            target = self._targets[channel]
            target.gate.put_priority((target.channel, PriorityBarrier(barrier, self.sent[channel])))
        return overtaken

    def queued_barrier(self, checkpoint_id: int) -> bool:
        """Whether the in-band barrier of ``checkpoint_id`` still waits in a backlog."""
        return any(isinstance(p, Barrier) and p.checkpoint_id == checkpoint_id
                   for backlog in self._backlog if backlog for p in backlog)

    def convert_queued_barrier(self, barrier: Barrier) -> dict[int, list[Any]]:
        """Turn the in-band ``barrier`` still in backlogs into priority barriers (its alignment
        timed out). Returns, per converted channel, the records it overtook."""
        overtaken: dict[int, list[Any]] = {}
        if self.partitioning in (Partitioning.FORWARD, Partitioning.BROADCAST):
            return overtaken
        for channel, backlog in enumerate(self._backlog):
            queued = next((p for p in backlog if p is barrier), None)
            if queued is None:
                continue
            records = self._backlog_records(channel, stop_at=queued)
            if records is None:
                continue
            backlog.remove(queued)
            self.pending -= 1
            overtaken[channel] = records
            target = self._targets[channel]
            target.gate.put_priority((target.channel, PriorityBarrier(barrier, self.sent[channel])))
        return overtaken


