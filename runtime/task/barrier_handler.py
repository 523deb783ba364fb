"""Checkpoint barriers at a task's input gate: aligned, unaligned and at-least-once.

One :class:`CheckpointBarrierHandler` per input task sees every barrier and every data-lane
item before the task processes it. By the barrier's :class:`~statekit.runtime.api.checkpoint_config.Alignment`:

* **aligned** (exactly-once, and every savepoint): once a channel delivered barrier N,
  everything behind it on that channel is *stashed*; when every live channel delivered N the
  task snapshots, forwards N, and processes the stash first, in per-channel order. With an
  aligned-checkpoint timeout, an alignment still running at the deadline (trigger time +
  timeout) switches to unaligned, as does one whose barrier arrives already converted.
* **unaligned**: the first barrier of N (normally a priority barrier that overtook the data
  queued before it) makes the task snapshot at once and forward N ahead of its own queued
  output. From then on, every record the task processes from a channel that has not yet
  delivered N is *in flight* — processed normally and also stored; when the channel's
  barrier arrives, the records of that channel still queued before it are stored too without
  waiting for them to be processed. The snapshot plus these records are exactly the effect of
  everything before the barriers on every channel.
* **at-least-once**: channels are never blocked; the task snapshots when the last live
  channel delivered N. Records that arrived behind an early barrier are already in the
  snapshot and are replayed again after a restore — counted twice, never lost. A newer
  checkpoint completing first abandons older ones (declined).

A newer aligned or unaligned barrier overtaking an older checkpoint abandons it (the stash is
released; an older unaligned checkpoint whose in-flight records are incomplete is declined).
The handler owns no state shared with other tasks: it reads its own gate and its own items.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Any, Protocol

from statekit.runtime.api.checkpoint_config import Alignment
from statekit.runtime.checkpoint.barriers import Barrier, PriorityBarrier
from statekit.runtime.exchange.input_gate import InputGate

__all__ = [
    "CheckpointBarrierHandler",
    "BarrierCallbacks",
    "Item",
]

log = logging.getLogger("statekit.runtime")

Item = tuple[int, Any]


class BarrierCallbacks(Protocol):
    """What the handler asks of its task."""

    def snapshot(self, barrier: Barrier, *, unaligned: bool, alignment_ms: int) -> None:
        """Take the synchronous snapshot and forward ``barrier`` (ahead of queued output when unaligned)."""

    def input_done(self, barrier: Barrier) -> None:
        """The input side of ``barrier`` is complete (every in-flight record was stored)."""

    def decline(self, barrier: Barrier, reason: str) -> None:
        """The task gives up its part of ``barrier`` because a newer checkpoint subsumed it."""

    def record_inflight(self, barrier: Barrier, channel: int, records: list[Any]) -> None:
        """Store ``records`` as in flight on ``channel`` (encoded now: the task processes them next)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class CheckpointBarrierHandler:
    """Barrier alignment, unaligned in-flight capture and at-least-once tracking for one gate.

    Attributes:
        live: Channels that have not ended.
        stash: Blocked channel -> items that arrived behind its barrier (aligned).
        pending: Items released from the stash, processed before new gate items.
    """

    def __init__(self, channels: int, gate: InputGate, callbacks: BarrierCallbacks) -> None:
        self.live = set(range(channels))
        self.gate = gate
        self.callbacks = callbacks
        self.stash: dict[int, list[Item]] = {}
        self.pending: collections.deque[Item] = collections.deque()
        self.current: Barrier | None = None
        self.unaligned = False  # the current checkpoint snapshotted unaligned: recording in flight
        self.seen: set[int] = set()
        self.started_ms = 0
        self.last_id = -1
        self.tracked: dict[int, tuple[Barrier, set[int]]] = {}  # at-least-once: id -> (barrier, channels)
        self.last_tracked = -1
        # (channel, records): the unhandled rest of the buffer the task is in the middle of, while it
        # takes priority items between the buffer's slices; before every queued item of its channel
        self.in_hand: tuple[int, list[Any]] | None = None

    # ------------------------------------------------------------ entry points of the task loop

    def on_item(self, channel: int, payload: Any) -> bool:
        """A data-lane item (from the gate or ``pending``): True when the task processes it now."""
        stash = self.stash
        if stash and channel in stash:
            stash[channel].append((channel, payload))
            return False
        if payload.__class__ is list:
            if self.unaligned and channel not in self.seen and channel in self.live:
                assert self.current is not None
                self.callbacks.record_inflight(self.current, channel, payload)
            return True
        if isinstance(payload, Barrier):
            self.on_barrier(channel, payload)
            return False
        return True

    def on_priority(self, channel: int, item: PriorityBarrier) -> None:
        """A barrier that overtook the data of ``channel``."""
        barrier = item.barrier
        if not self._admit(channel, barrier):
            return
        if not self.unaligned:
            self._go_unaligned()
        if channel in self.seen:
            return
        self.seen.add(channel)
        self._store_queued(channel, item.sent - self.gate.received[channel])
        self._check_unaligned_done()

    def on_barrier(self, channel: int, barrier: Barrier) -> None:
        """An in-band barrier arrived on an unblocked channel."""
        if barrier.options.alignment is Alignment.AT_LEAST_ONCE:
            self._track(channel, barrier)
            return
        if not self._admit(channel, barrier):
            return
        self.seen.add(channel)
        if self.unaligned:
            self._check_unaligned_done()
        elif self.seen >= self.live:
            self._complete_aligned()
        else:
            self.stash[channel] = []

    def on_end_of_partition(self, channel: int) -> None:
        """A channel finished; it no longer takes part in any checkpoint."""
        self.live.discard(channel)
        self.stash.pop(channel, None)
        if self.current is not None:
            if self.unaligned:
                self._check_unaligned_done()
            elif self.seen >= self.live:
                self._complete_aligned()
        for checkpoint_id, (_, channels) in sorted(self.tracked.items(), reverse=True):
            if channels >= self.live:
                self._complete_tracked(checkpoint_id)
                break

    def next_deadline_ms(self) -> int | None:
        """When the running alignment times out and turns unaligned (None: it does not)."""
        if self.current is None or self.unaligned:
            return None
        return self.current.deadline_ms

    def check_timeout(self, now_ms: int | None = None) -> None:
        """Switch a timed-out alignment to unaligned."""
        deadline = self.next_deadline_ms()
        if deadline is not None and (now_ms if now_ms is not None else _now_ms()) >= deadline:
            assert self.current is not None
            log.debug("alignment of checkpoint %d timed out: switching to unaligned", self.current.checkpoint_id)
            self._go_unaligned()

    # ------------------------------------------------------------ aligned and unaligned

    def _admit(self, channel: int, barrier: Barrier) -> bool:
        """Make ``barrier`` the current checkpoint if it is new; False for a stale barrier."""
        checkpoint_id = barrier.checkpoint_id
        current = self.current
        if current is not None and checkpoint_id > current.checkpoint_id:
            log.debug("barrier %d overtook %d: checkpoint %d abandoned at this task", checkpoint_id,
                      current.checkpoint_id, current.checkpoint_id)
            self._abandon(f"overtaken by checkpoint {checkpoint_id} before its in-flight records were complete")
            current = None
        if current is None:
            if checkpoint_id <= self.last_id:
                return False  # a barrier of an abandoned or finished checkpoint
            self.current = barrier
            self.seen = set()
            self.unaligned = False
            self.last_id = checkpoint_id
            self.started_ms = _now_ms()
            if barrier.options.alignment is Alignment.UNALIGNED:
                self._go_unaligned()
            return True
        return checkpoint_id == current.checkpoint_id

    def _abandon(self, reason: str) -> None:
        current = self.current
        if current is not None and self.unaligned:
            self.callbacks.decline(current, reason)
        self.current = None
        self.unaligned = False
        self._release()

    def _complete_aligned(self) -> None:
        barrier = self.current
        assert barrier is not None
        self.current = None
        self.callbacks.snapshot(barrier, unaligned=False, alignment_ms=_now_ms() - self.started_ms)
        self._release()
        self.callbacks.input_done(barrier)

    def _go_unaligned(self) -> None:
        """Snapshot now; channels that have not delivered the barrier become in flight."""
        barrier = self.current
        assert barrier is not None
        self.unaligned = True
        self.callbacks.snapshot(barrier, unaligned=True, alignment_ms=_now_ms() - self.started_ms)
        in_hand = self.in_hand
        if in_hand is not None and in_hand[0] in self.live and in_hand[0] not in self.seen:
            self._store(in_hand[0], [in_hand[1]])  # received, not handled: the first in flight of its channel
        self._release()  # behind barriers that already arrived: after the snapshot, not in flight
        for channel in sorted(self.live - self.seen):
            before = self.gate.extract_barrier(channel, barrier.checkpoint_id)
            if before is not None:  # its in-band barrier is queued: store what is before it, now
                self.seen.add(channel)
                self._store(channel, self._pending_of(channel) + before)
        self._check_unaligned_done()

    def _store_queued(self, channel: int, count: int) -> None:
        """Store the records of ``channel`` released but unprocessed, and the next ``count``
        queued in the gate: everything before its barrier not processed yet."""
        self._store(channel, self._pending_of(channel) + self.gate.peek_channel(channel, count))

    def _pending_of(self, channel: int) -> list[Any]:
        return [payload for c, payload in self.pending if c == channel]

    def _store(self, channel: int, payloads: list[Any]) -> None:
        current = self.current
        assert current is not None
        for payload in payloads:
            if payload.__class__ is list and payload:
                self.callbacks.record_inflight(current, channel, payload)

    def _check_unaligned_done(self) -> None:
        barrier = self.current
        if barrier is None or not self.unaligned or not self.seen >= self.live:
            return
        self.current = None
        self.unaligned = False
        self.callbacks.input_done(barrier)

    def _release(self) -> None:
        released = [item for items in self.stash.values() for item in items]
        self.stash = {}
        if released:
            self.pending.extendleft(reversed(released))

    # ------------------------------------------------------------ at-least-once

    def _track(self, channel: int, barrier: Barrier) -> None:
        checkpoint_id = barrier.checkpoint_id
        if checkpoint_id <= self.last_tracked:
            return
        if checkpoint_id not in self.tracked:
            self.tracked[checkpoint_id] = (barrier, set())
            if len(self.tracked) == 1:
                self.started_ms = _now_ms()
        channels = self.tracked[checkpoint_id][1]
        channels.add(channel)
        if channels >= self.live:
            self._complete_tracked(checkpoint_id)

    def _complete_tracked(self, checkpoint_id: int) -> None:
        barrier, _ = self.tracked.pop(checkpoint_id)
        for older in sorted(i for i in self.tracked if i < checkpoint_id):
            stale, _ = self.tracked.pop(older)
            self.callbacks.decline(stale, f"subsumed by checkpoint {checkpoint_id} at this task (at-least-once)")
        self.last_tracked = checkpoint_id
        self.callbacks.snapshot(barrier, unaligned=False, alignment_ms=0)
        self.callbacks.input_done(barrier)
        if self.tracked:
            self.started_ms = _now_ms()

