"""Bounded channels between subtasks, events that travel in them, and record writers.

Every consuming subtask has one :class:`InputGate`: a bounded queue of
``(channel, payload)`` items, where ``channel`` numbers the producing subtask's channel
into this gate and ``payload`` is a buffer (a ``list`` of records) or an event. A full
gate blocks its producers (backpressure). Control mails (``channel == MAIL``) bypass the
bound so that checkpoint notifications and cancellation never wait behind data.

A :class:`RecordWriter` fills one buffer per output channel and hands it over when full,
at every event, and whenever the producing task runs out of input (so records do not
wait). Keyed exchange routes by key group: ``assign_to_key_group(serialize(key), M)`` then
``compute_operator_index_for_key_group(M, p, kg)``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import mmh3

from statekit.statefmt.serializers import get_serializer

__all__ = [
    "MAIL",
    "BUFFER_SIZE",
    "Barrier",
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


class TaskCancelled(Exception):
    """Raised inside a task whose job is being cancelled or torn down."""


@dataclass(frozen=True)
class CheckpointOptions:
    """What a barrier asks for.

    Attributes:
        is_savepoint: Savepoint (canonical, never disposed) rather than checkpoint.
        location: Where tasks write their files (None: a checkpoint that is not stored).
        stop: After this snapshot sources stop emitting (stop-with-savepoint).
        drain: Sources emitted end-of-input before this barrier.
        final: The final checkpoint of a bounded job.
    """

    is_savepoint: bool = False
    location: Any = None
    stop: bool = False
    drain: bool = False
    final: bool = False


@dataclass(frozen=True)
class Barrier:
    """A checkpoint barrier: every record before it belongs to checkpoint ``checkpoint_id``."""

    checkpoint_id: int
    timestamp_ms: int
    options: CheckpointOptions = field(default_factory=CheckpointOptions)


class EndOfInput:
    """The producer's input ended (drained): flush timers and buffered results downstream."""

    __slots__ = ()


class EndOfPartition:
    """The producer will send nothing more on this channel."""

    __slots__ = ()


END_OF_INPUT = EndOfInput()
END_OF_PARTITION = EndOfPartition()


class InputGate:
    """The bounded input queue of one subtask."""

    def __init__(self, capacity: int) -> None:
        self._queue: queue.Queue[tuple[int, Any]] = queue.Queue(maxsize=capacity)
        self.cancelled = threading.Event()

    def put(self, item: tuple[int, Any]) -> None:
        """Enqueue a buffer or event; blocks while the gate is full (backpressure)."""
        try:
            self._queue.put_nowait(item)
            return
        except queue.Full:
            pass
        while True:
            if self.cancelled.is_set():
                raise TaskCancelled()
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def put_mail(self, mail: Any) -> None:
        """Enqueue a control mail, ignoring the bound (never blocks)."""
        q = self._queue
        with q.mutex:
            q.queue.append((MAIL, mail))
            q.unfinished_tasks += 1
            q.not_empty.notify()

    def poll(self) -> tuple[int, Any] | None:
        """The next item, or None when the gate is empty."""
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            return None

    def take(self, timeout: float | None = None) -> tuple[int, Any] | None:
        """The next item, waiting up to ``timeout`` seconds (None: until one arrives)."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def cancel(self) -> None:
        """Release producers blocked on this gate (they raise :class:`TaskCancelled`)."""
        self.cancelled.set()


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


class RecordWriter:
    """Buffers records per output channel and hands full buffers to the consumers' gates."""

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
        self._size = buffer_size
        self._partitioning = partitioning
        self._selector = key_selector
        self._serialize = get_serializer(key_serializer, for_write=True).serialize
        self._max_parallelism = max_parallelism
        self._next = start_channel % max(1, self._n)
        self._route_cache: dict[Any, int] = {}
        if partitioning is Partitioning.HASH:
            self._hash_emitter = self._make_hash_emitter()
        self.emit: Callable[[Any], None] = self._emitter()

    def _emitter(self) -> Callable[[Any], None]:
        if self._n == 1 and self._partitioning is not Partitioning.BROADCAST:
            return self._emit_single
        if self._partitioning is Partitioning.HASH:
            return self._hash_emitter
        return {
            Partitioning.FORWARD: self._emit_single,
            Partitioning.REBALANCE: self._emit_rebalance,
            Partitioning.BROADCAST: self._emit_broadcast,
        }[self._partitioning]

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

    def _emit_hash(self, record: Any) -> None:
        self._hash_emitter(record)

    def _make_hash_emitter(self) -> Callable[[Any], None]:
        """The keyed-exchange hot path as a closure over locals (no attribute lookups)."""
        selector = self._selector
        assert selector is not None
        cache = self._route_cache
        buffers = self._buffers
        size = self._size
        route = self.channel_for_key
        flush = self.flush_channel

        def emit(record: Any) -> None:
            key = selector(record)
            try:
                channel = cache[key]
            except KeyError:
                channel = route(key)
                if len(cache) >= _ROUTE_CACHE_LIMIT:
                    cache.clear()
                cache[key] = channel
            except TypeError:  # an unhashable key: route without the cache
                channel = route(key)
            buffer = buffers[channel]
            buffer.append(record)
            if len(buffer) >= size:
                flush(channel)

        return emit

    def _emit_broadcast(self, record: Any) -> None:
        for channel, buffer in enumerate(self._buffers):
            buffer.append(record)
            if len(buffer) >= self._size:
                self.flush_channel(channel)

    def flush_channel(self, channel: int) -> None:
        """Hand the buffer of ``channel`` to its consumer."""
        buffer = self._buffers[channel]
        if buffer:
            self._buffers[channel] = []
            target = self._targets[channel]
            target.gate.put((target.channel, buffer))

    def flush(self) -> None:
        """Hand over every non-empty buffer."""
        for channel, buffer in enumerate(self._buffers):
            if buffer:
                self.flush_channel(channel)

    def broadcast_event(self, event: Any) -> None:
        """Flush, then send ``event`` on every channel (records before it stay before it)."""
        self.flush()
        for target in self._targets:
            target.gate.put((target.channel, event))
