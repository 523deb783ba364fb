"""Input gates: the input of one subtask, fed by its channels (one per producing subtask and edge).

Every consuming subtask has one :class:`InputGate` with two lanes:

* the *data lane*: a bounded FIFO of ``(channel, payload)`` items, where ``channel`` numbers
  the producing subtask's channel into this gate and ``payload`` is a buffer (a ``list`` of
  records) or an in-band event (barrier, end of input, end of partition). A full gate refuses
  more data (backpressure). Control mails (``channel == MAIL``) enter it past the bound, in
  order with the data;
* the *priority lane*: unbounded, always taken first. The barrier of an unaligned checkpoint
  (:class:`PriorityBarrier`) travels there, overtaking the data queued before it, and so do the
  mails that must not wait behind queued data (a completed checkpoint's notification: a sink
  commits at once, as Flink's mailbox runs it between records).

Counting invariant (what lets a barrier overtake data without losing its place): a producer
counts the data-lane items it delivered on each channel (``RecordWriter.sent``), the gate
counts the items it handed out per channel (``InputGate.received``). A priority barrier
carries its producer's count at the moment it was sent, so the consumer knows that exactly
the items of that channel numbered ``received + 1 .. sent`` were sent before the barrier —
they are in its gate now, because the data lane is FIFO and a gate hands out priority items
first under the same lock.

Nothing here is shared between tasks but the gate itself, the channel (in a multi-process
runtime a socket pair): barriers, counts and backlogs are values owned by one side.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

from statekit.runtime.checkpoint.barriers import Barrier, PriorityBarrier

__all__ = [
    "MAIL",
    "InputGate",
    "TaskCancelled",
]

MAIL = -1


class TaskCancelled(Exception):
    """Raised inside a task whose job is being cancelled or torn down."""


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
        # channels whose producer runs in another process: called (outside the lock) for every
        # data-lane item of the channel the consumer takes — a credit back to the producer
        self._remote: dict[int, Callable[[], None]] = {}

    def set_remote(self, channel: int, on_taken: Callable[[], None]) -> None:
        """``channel``'s producer is in another process: ``on_taken()`` after each of its items is taken."""
        self._remote[channel] = on_taken

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

    def put_remote(self, item: tuple[int, Any]) -> None:
        """Enqueue a data-lane item of a remote channel: past the bound (its producer sends only
        as many items as it holds credits for, so the items of a remote channel stay bounded)."""
        with self._lock:
            self._data.append(item)
            self._not_empty.notify()

    def put_mail(self, mail: Any) -> None:
        """Enqueue a control mail into the data lane, past the bound (never blocks)."""
        with self._lock:
            self._data.append((MAIL, mail))
            self._not_empty.notify()

    def put_priority_mail(self, mail: Any) -> None:
        """Enqueue a control mail into the priority lane: taken before any queued data."""
        with self._lock:
            self._priority.append((MAIL, mail))
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
            item = self._next()
        if item is not None and self._remote:
            self._taken(item)
        return item

    def _taken(self, item: tuple[int, Any]) -> None:
        on_taken = self._remote.get(item[0])
        if on_taken is not None and item[1].__class__ is not PriorityBarrier:
            on_taken()

    def take(self, timeout: float | None = None) -> tuple[int, Any] | None:
        """The next item (priority first), waiting up to ``timeout`` seconds (None: until one arrives)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while True:
                item = self._next()
                if item is not None:
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._not_empty.wait(remaining)
        if self._remote:
            self._taken(item)
        return item

    def poll_priority(self) -> tuple[int, Any] | None:
        """The next priority item, if any (data stays queued)."""
        with self._lock:
            return self._priority.popleft() if self._priority else None

    def queued(self) -> int:
        """Items queued in the data lane now (buffers, events, mails)."""
        return len(self._data)

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
                    break
                before.append(payload)
            else:
                return None
        on_taken = self._remote.get(channel)
        if on_taken is not None:
            on_taken()
        return before

    def cancel(self) -> None:
        """Release producers blocked on this gate (they raise :class:`TaskCancelled`)."""
        self.cancelled.set()
        with self._lock:
            self._not_full.notify_all()
            self._not_empty.notify_all()


