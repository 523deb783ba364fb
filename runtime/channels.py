"""Bounded channels between subtasks, events that travel in them, and record writers.

Every consuming subtask has one :class:`InputGate` with two lanes:

* the *data lane*: a bounded FIFO of ``(channel, payload)`` items, where ``channel`` numbers
  the producing subtask's channel into this gate and ``payload`` is a buffer (a ``list`` of
  records) or an in-band event (barrier, end of input, end of partition). A full gate refuses
  more data (backpressure). Control mails (``channel == MAIL``) enter it past the bound, in
  order with the data;
* the *priority lane*: unbounded, always taken first. Only :class:`PriorityBarrier` travels
  there: the barrier of an unaligned checkpoint, which overtakes the data queued before it.

Counting invariant (what lets a barrier overtake data without losing its place): a producer
counts the data-lane items it delivered on each channel (``RecordWriter.sent``), the gate
counts the items it handed out per channel (``InputGate.received``). A priority barrier
carries its producer's count at the moment it was sent, so the consumer knows that exactly
the items of that channel numbered ``received + 1 .. sent`` were sent before the barrier —
they are in its gate now, because the data lane is FIFO and a gate hands out priority items
first under the same lock.

A :class:`RecordWriter` fills one buffer per output channel and hands it over when full, at
every event, and whenever the producing task runs out of input. It never blocks: a buffer the
consumer's gate cannot take goes to the writer's *backlog*; the task delivers the backlog
between input buffers and takes no new input while it is not empty, so a subtask overdraws
by at most what one input buffer produces — and stays responsive to priority barriers and
mails while backpressured. Keyed exchange routes by key group:
``assign_to_key_group(serialize(key), M)`` then ``compute_operator_index_for_key_group(M, p, kg)``.

Nothing here is shared between tasks but the gate itself, the channel (in a multi-process
runtime a socket pair): barriers, counts and backlogs are values owned by one side.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import mmh3
import msgpack

from statekit.statefmt.serializers import get_serializer

__all__ = [
    "MAIL",
    "VALUE_KEY_SELECTOR",
    "PAIR_EMITTER",
    "ASSIGNING_EMITTER",
    "BATCH_HANDLER",
    "LIST_HANDLER",
    "EMIT_ALL",
    "TimestampedBuffer",
    "BUFFER_SIZE",
    "Alignment",
    "Barrier",
    "PriorityBarrier",
    "EndOfInput",
    "EndOfPartition",
    "CheckpointOptions",
    "InputGate",
    "Partitioning",
    "RecordWriter",
    "ChannelTarget",
    "TaskCancelled",
]

MAIL = -1
BUFFER_SIZE = 512
_ROUTE_CACHE_LIMIT = 1 << 20
# on a timestamped edge's key selector (it takes (value, timestamp) records): the selector of the value
VALUE_KEY_SELECTOR = "value_key_selector"
# on a hash writer's ``emit`` with a VALUE_KEY_SELECTOR: ``emit_pair(value, timestamp)``, which
# sends ``(value, timestamp)`` as ``emit`` does without a tuple to unpack for the key
PAIR_EMITTER = "emit_pair"
# on a hash writer's ``emit`` with a VALUE_KEY_SELECTOR: ``emit_assigned(values, assign, previous,
# highest)``: each value in order with its timestamp ``assign(value, t)`` as an int (``t``: the
# timestamp assigned before it, ``previous`` for the first), as ``emit_pair`` sends it; returns the
# last timestamp and the highest of ``highest`` and the timestamps
ASSIGNING_EMITTER = "emit_assigned"
# on a handler of (value, timestamp) records: ``batch(values, timestamps)``, the same for a whole
# buffer's parallel lists (what TimestampedBuffer.deliver calls instead of one call per record)
BATCH_HANDLER = "batch_handler"
# on a handler of plain records: ``handle_all(records)``, the same for a whole list buffer, in
# order (what a task calls instead of one call per record)
LIST_HANDLER = "list_handler"
# on a source's per-record emitter: ``emit_all(records)``, the same for a whole poll of
# records, in order (what a source task calls instead of one call per record)
EMIT_ALL = "emit_all"
_WAIT_SLICE_S = 0.002


class TaskCancelled(Exception):
    """Raised inside a task whose job is being cancelled or torn down."""


class Alignment(str, Enum):
    """How the barriers of one checkpoint travel and are handled.

    ``ALIGNED``: in-band; a task with several inputs blocks the channels that delivered the
    barrier until all did (exactly-once; also every savepoint). ``UNALIGNED``: the barrier
    overtakes in-flight data (priority lane), which is stored as channel state (exactly-once).
    ``AT_LEAST_ONCE``: in-band, never blocking; a task snapshots when the last barrier arrived.
    """

    ALIGNED = "aligned"
    UNALIGNED = "unaligned"
    AT_LEAST_ONCE = "at-least-once"


@dataclass(frozen=True)
class CheckpointOptions:
    """What a barrier asks for.

    Attributes:
        is_savepoint: Savepoint (never disposed) rather than checkpoint.
        location: Where tasks write their files (None: a checkpoint that is not stored).
        stop: After this snapshot sources stop emitting (stop-with-savepoint).
        drain: Sources emitted end-of-input before this barrier.
        final: The final checkpoint of a bounded job.
        alignment: How barriers travel (:class:`Alignment`).
        aligned_timeout_ms: With ``ALIGNED``: once this long has passed since the trigger, a
            barrier still queued behind data is converted to an unaligned one (None: never).
        native: Keyed state in its backend's native format (incremental for checkpoints when
            the backend supports and the job asks for it), else canonical.
        incremental: Native checkpoints upload only the files the base checkpoint lacks.
        base_checkpoint_id: The latest completed checkpoint when this one was triggered: the
            only one whose shared files an incremental snapshot may reuse.
    """

    is_savepoint: bool = False
    location: Any = None
    stop: bool = False
    drain: bool = False
    final: bool = False
    alignment: Alignment = Alignment.ALIGNED
    aligned_timeout_ms: int | None = None
    native: bool = False
    incremental: bool = False
    base_checkpoint_id: int | None = None

    @property
    def timeoutable(self) -> bool:
        """An aligned barrier that turns unaligned after ``aligned_timeout_ms``."""
        return self.alignment is Alignment.ALIGNED and self.aligned_timeout_ms is not None


@dataclass(frozen=True)
class Barrier:
    """A checkpoint barrier: every record before it belongs to checkpoint ``checkpoint_id``."""

    checkpoint_id: int
    timestamp_ms: int
    options: CheckpointOptions = field(default_factory=CheckpointOptions)

    @property
    def deadline_ms(self) -> int | None:
        """When a timeoutable aligned barrier turns unaligned (None: never)."""
        timeout = self.options.aligned_timeout_ms
        return None if not self.options.timeoutable or timeout is None else self.timestamp_ms + timeout


@dataclass(frozen=True)
class PriorityBarrier:
    """A barrier that overtook data: it belongs after the first ``sent`` data-lane items its
    producer delivered on the channel (the items after the consumer's ``received`` count, up to
    ``sent``, are in flight)."""

    barrier: Barrier
    sent: int


class EndOfInput:
    """The producer's input ended (drained): flush timers and buffered results downstream."""

    __slots__ = ()


class EndOfPartition:
    """The producer will send nothing more on this channel."""

    __slots__ = ()


END_OF_INPUT = EndOfInput()
END_OF_PARTITION = EndOfPartition()


class TimestampedBuffer(list[Any]):
    """A buffer of a keyed exchange whose records are ``(value, timestamp)`` pairs, kept as two
    parallel lists: the values (the list itself) and their ``timestamps``; record ``i`` is
    ``(self[i], self.timestamps[i])``. No pair object exists per record in flight (a tuple per
    record would be a container the garbage collector counts and scans until it is consumed).

    It is not a plain ``list``: a consumer hands it to the channel's handler with
    :meth:`deliver` (a record buffer is ``payload.__class__ is list``)."""

    __slots__ = ("timestamps",)

    def __init__(self) -> None:
        super().__init__()
        self.timestamps: list[Any] = []

    def records(self) -> list[tuple[Any, Any]]:
        """The records as ``(value, timestamp)`` pairs."""
        return list(zip(self, self.timestamps, strict=True))

    def deliver(self, handle: Callable[[Any], None]) -> None:
        """Hand every record, in order, to ``handle`` (a handler of ``(value, timestamp)`` pairs):
        in one call to its :data:`BATCH_HANDLER` when it has one, else one call per pair."""
        batch = getattr(handle, BATCH_HANDLER, None)
        if batch is not None:
            batch(self, self.timestamps)
            return
        for record in zip(self, self.timestamps, strict=True):
            handle(record)


class InputGate:
    """The input of one subtask: a bounded data lane and a priority lane (see the module doc).

    Args:
        capacity: Data-lane items (buffers, events, mails) the gate holds before refusing data.
        channels: Number of input channels (their data-lane items are counted).
    """

    def __init__(self, capacity: int, channels: int = 0) -> None:
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)
        self._data: collections.deque[tuple[int, Any]] = collections.deque()
        self._priority: collections.deque[tuple[int, Any]] = collections.deque()
        self.capacity = capacity
        self.received: collections.Counter[int] = collections.Counter(dict.fromkeys(range(channels), 0))
        self.cancelled = threading.Event()

    # ------------------------------------------------------------ producers

    def offer(self, item: tuple[int, Any]) -> bool:
        """Enqueue a data-lane item if there is room; never blocks."""
        with self._lock:
            if len(self._data) >= self.capacity:
                return False
            self._data.append(item)
            self._not_empty.notify()
            return True

    def put(self, item: tuple[int, Any]) -> None:
        """Enqueue a data-lane item; blocks while the gate is full (backpressure)."""
        while not self.put_timeout(item, 0.1):
            if self.cancelled.is_set():
                raise TaskCancelled()

    def put_timeout(self, item: tuple[int, Any], timeout: float) -> bool:
        """Enqueue a data-lane item, waiting up to ``timeout`` seconds for room."""
        with self._lock:
            if len(self._data) >= self.capacity:
                self._not_full.wait(timeout)
                if len(self._data) >= self.capacity:
                    return False
            self._data.append(item)
            self._not_empty.notify()
            return True

    def wait_for_room(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds until the data lane has room."""
        with self._lock:
            if len(self._data) >= self.capacity:
                self._not_full.wait(timeout)

    def put_mail(self, mail: Any) -> None:
        """Enqueue a control mail into the data lane, past the bound (never blocks)."""
        with self._lock:
            self._data.append((MAIL, mail))
            self._not_empty.notify()

    def put_priority(self, item: tuple[int, Any]) -> None:
        """Enqueue a priority item (a :class:`PriorityBarrier`); taken before any data."""
        with self._lock:
            self._priority.append(item)
            self._not_empty.notify()

    # ------------------------------------------------------------ the consumer

    def _next(self) -> tuple[int, Any] | None:
        if self._priority:
            return self._priority.popleft()
        if self._data:
            item = self._data.popleft()
            if item[0] >= 0:
                self.received[item[0]] += 1
            self._not_full.notify()
            return item
        return None

    def poll(self) -> tuple[int, Any] | None:
        """The next item (priority first), or None when the gate is empty."""
        with self._lock:
            return self._next()

    def take(self, timeout: float | None = None) -> tuple[int, Any] | None:
        """The next item (priority first), waiting up to ``timeout`` seconds (None: until one arrives)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while True:
                item = self._next()
                if item is not None:
                    return item
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._not_empty.wait(remaining)

    def poll_priority(self) -> tuple[int, Any] | None:
        """The next priority item, if any (data stays queued)."""
        with self._lock:
            return self._priority.popleft() if self._priority else None

    def has_priority(self) -> bool:
        with self._lock:
            return bool(self._priority)

    def has_items(self) -> bool:
        with self._lock:
            return bool(self._priority or self._data)

    def peek_channel(self, channel: int, count: int) -> list[Any]:
        """The payloads of the next ``count`` data-lane items of ``channel``, left in place."""
        found: list[Any] = []
        if count <= 0:
            return found
        with self._lock:
            for item_channel, payload in self._data:
                if item_channel == channel:
                    found.append(payload)
                    if len(found) == count:
                        break
        return found

    def extract_barrier(self, channel: int, checkpoint_id: int) -> list[Any] | None:
        """Take the in-band barrier of ``checkpoint_id`` out of ``channel``'s queued data.

        Returns the payloads of that channel queued before it (left in place), or None when the
        barrier is not in the gate. The barrier counts as handed out.
        """
        with self._lock:
            before: list[Any] = []
            for position, (item_channel, payload) in enumerate(self._data):
                if item_channel != channel:
                    continue
                if isinstance(payload, Barrier) and payload.checkpoint_id == checkpoint_id:
                    del self._data[position]
                    self.received[channel] += 1
                    self._not_full.notify()
                    return before
                before.append(payload)
        return None

    def cancel(self) -> None:
        """Release producers blocked on this gate (they raise :class:`TaskCancelled`)."""
        self.cancelled.set()
        with self._lock:
            self._not_full.notify_all()
            self._not_empty.notify_all()


class Partitioning(str, Enum):
    """How records of an edge are distributed over the consumer's subtasks."""

    FORWARD = "forward"
    REBALANCE = "rebalance"
    HASH = "hash"
    BROADCAST = "broadcast"


@dataclass(frozen=True)
class ChannelTarget:
    """One output channel: the consumer subtask's gate and this channel's number in it."""

    gate: InputGate
    channel: int


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
        self.partitioning = partitioning
        self._selector = key_selector
        self._serialize = _key_bytes(key_serializer)
        self._max_parallelism = max_parallelism
        self._next = start_channel % max(1, self._n)
        self._route_cache: dict[Any, int] = {}
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

        setattr(emit, EMIT_ALL, emit_all)
        value_selector = getattr(selector, VALUE_KEY_SELECTOR, None)
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

        setattr(emit_record, PAIR_EMITTER, emit_pair)
        setattr(emit_record, ASSIGNING_EMITTER, emit_assigned)
        return emit_record

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
        """Hand the buffer of ``channel`` to its consumer (or to the backlog)."""
        buffer = self._buffers[channel]
        if buffer:
            self._buffers[channel] = self._new_buffer()
            self.records_out += len(buffer)
            self._send(channel, buffer)

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
