"""Tasks: one thread per subtask of a job vertex, running its chain of operators.

A task reads its input gate (source tasks: their reader), hands buffers of records to
the head operator, and handles events and mails between buffers — never in the middle
of one. Barrier alignment (:class:`BarrierAligner`): once a channel delivered the barrier
of checkpoint N, everything behind it on that channel is stashed until every live
channel delivered barrier N; then the task snapshots (synchronous part), forwards the
barrier, hands the asynchronous part to the coordinator, and processes the stash first,
in per-channel order. The snapshot thus holds exactly the effects of the records before
the barrier on every channel.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from statekit.runtime.channels import (
    END_OF_INPUT,
    END_OF_PARTITION,
    MAIL,
    Barrier,
    EndOfInput,
    EndOfPartition,
    InputGate,
    RecordWriter,
    TaskCancelled,
)
from statekit.runtime.mails import (
    Cancel,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    Resume,
    Terminate,
    TriggerCheckpoint,
)
from statekit.runtime.operators import SourceOperator, StreamOperator

if TYPE_CHECKING:
    from statekit.runtime.operators import OperatorSnapshot

__all__ = ["Task", "BarrierAligner", "TaskHost"]

log = logging.getLogger("statekit.runtime")

SOURCE_BATCH = 512


class TaskHost(Protocol):
    """What a task reports to (the execution attempt) and submits snapshots to."""

    started: threading.Event
    cancelled: threading.Event

    def task_ready(self, task: Task) -> None: ...

    def task_failed(self, task: Task, error: BaseException) -> None: ...

    def task_finished(self, task: Task) -> None: ...

    def source_exhausted(self, task: Task) -> None: ...

    def submit_snapshot(self, task: Task, barrier: Barrier, snapshots: list[OperatorSnapshot]) -> None: ...


class BarrierAligner:
    """Aligns checkpoint barriers over the channels of one input gate.

    Attributes:
        stash: Blocked channel -> items that arrived behind its barrier.
        pending: Items released from the stash, processed before new gate items.
    """

    def __init__(self, channels: int, snapshot: Callable[[Barrier], None]) -> None:
        self.live = set(range(channels))
        self.stash: dict[int, list[tuple[int, Any]]] = {}
        self.pending: collections.deque[tuple[int, Any]] = collections.deque()
        self.snapshot = snapshot
        self.aligning: Barrier | None = None
        self.received: set[int] = set()
        self.last_id = -1

    def on_barrier(self, channel: int, barrier: Barrier) -> None:
        """A barrier arrived on an unblocked channel."""
        checkpoint_id = barrier.checkpoint_id
        current = self.aligning
        if current is not None and checkpoint_id > current.checkpoint_id:
            log.debug("barrier %d overtook %d: alignment of %d abandoned", checkpoint_id,
                      current.checkpoint_id, current.checkpoint_id)
            self._release()
            current = None
        if current is None:
            if checkpoint_id <= self.last_id:
                return  # a barrier of an abandoned checkpoint
            self.aligning = barrier
            self.received = set()
            self.last_id = checkpoint_id
        elif checkpoint_id < current.checkpoint_id:
            return
        self.received.add(channel)
        if self.received >= self.live:
            self._complete()
        else:
            self.stash[channel] = []

    def on_end_of_partition(self, channel: int) -> None:
        """A channel finished; it no longer takes part in alignment."""
        self.live.discard(channel)
        if self.aligning is not None and self.received >= self.live:
            self._complete()

    def _complete(self) -> None:
        barrier = self.aligning
        assert barrier is not None
        self.aligning = None
        self.snapshot(barrier)
        self._release()

    def _release(self) -> None:
        self.aligning = None
        released = [item for items in self.stash.values() for item in items]
        self.stash = {}
        if released:
            self.pending.extendleft(reversed(released))


class Task:
    """One subtask of a job vertex: a thread running its operator chain."""

    def __init__(
        self,
        host: TaskHost,
        vertex_id: int,
        name: str,
        subtask: int,
        parallelism: int,
        operators: list[StreamOperator],
        chained_next: list[list[int]],
        operator_writers: list[list[RecordWriter]],
        gate: InputGate,
        channel_inputs: list[int],
    ) -> None:
        self.host = host
        self.key = (vertex_id, subtask)
        self.name = f"{name} ({subtask + 1}/{parallelism})"
        self.subtask = subtask
        self.operators = operators
        self.chained_next = chained_next
        self.operator_writers = operator_writers
        self.writers = [w for ws in operator_writers for w in ws]
        self.gate = gate
        self.channel_inputs = channel_inputs
        self.is_source = isinstance(operators[0], SourceOperator)
        self.thread = threading.Thread(target=self.run, name=self.name, daemon=True)
        self.timer_ops: list[StreamOperator] = []

    def mail(self, mail: Any) -> None:
        """Deliver a control mail (never blocks)."""
        self.gate.put_mail(mail)

    # ------------------------------------------------------------ lifecycle

    def run(self) -> None:
        try:
            self._initialize()
            self.host.task_ready(self)
            while not self.host.started.wait(0.1):
                if self.host.cancelled.is_set():
                    raise TaskCancelled()
            if self.host.cancelled.is_set():
                raise TaskCancelled()
            if self.is_source:
                self._run_source()
            else:
                self._run_input()
            self.host.task_finished(self)
        except TaskCancelled:
            self.host.task_finished(self)
        except BaseException as exc:  # noqa: BLE001 - reported to the job master
            self.host.task_failed(self, exc)
        finally:
            for op in self.operators:
                try:
                    op.close()
                except Exception as exc:  # noqa: BLE001
                    log.warning("%s: closing %s failed: %s", self.name, op.ctx.uid, exc)

    def _initialize(self) -> None:
        for op in self.operators:
            op.initialize_state()
        for op in reversed(self.operators):
            op.open()
        handlers: list[Callable[[Any], None] | None] = [None] * len(self.operators)
        for i in reversed(range(len(self.operators))):
            op = self.operators[i]
            targets: list[Callable[[Any], None]] = []
            for j in self.chained_next[i]:
                handler = handlers[j]
                assert handler is not None
                targets.append(handler)
            targets.extend(w.emit for w in self.operator_writers[i])
            op.output.collect = _fan_out(targets)  # type: ignore[method-assign,assignment]
            if i > 0 or not self.is_source:
                handlers[i] = op.element_handler()
        if not self.is_source:
            head = self.operators[0]
            second = head.element_handler2() if 2 in self.channel_inputs else None
            first = handlers[0]
            self.channel_handlers = [first if index == 1 else second for index in self.channel_inputs]
        self.timer_ops = [op for op in self.operators if op.timers is not None]

    # ------------------------------------------------------------ shared steps

    def _checkpoint(self, barrier: Barrier) -> None:
        snapshots = [op.snapshot_state(barrier.checkpoint_id, barrier.options.is_savepoint) for op in self.operators]
        for writer in self.writers:
            writer.broadcast_event(barrier)
        self.host.submit_snapshot(self, barrier, snapshots)

    def _end_input(self) -> None:
        for op in self.operators:
            op.end_input()
        for writer in self.writers:
            writer.broadcast_event(END_OF_INPUT)

    def _end_of_partition(self) -> None:
        for writer in self.writers:
            writer.broadcast_event(END_OF_PARTITION)

    def _flush(self) -> None:
        for writer in self.writers:
            writer.flush()

    def _notify(self, mail: Any) -> None:
        if isinstance(mail, NotifyCheckpointComplete):
            for op in self.operators:
                op.notify_checkpoint_complete(mail.checkpoint_id)
        elif isinstance(mail, NotifyCheckpointAborted):
            for op in self.operators:
                op.notify_checkpoint_aborted(mail.checkpoint_id)
        elif isinstance(mail, Cancel):
            raise TaskCancelled()

    def _next_timer(self) -> int | None:
        due = None
        for op in self.timer_ops:
            t = op.next_timer_ms()
            if t is not None and (due is None or t < due):
                due = t
        return due

    def _fire_timers(self) -> None:
        now = int(time.time() * 1000)
        for op in self.timer_ops:
            op.fire_timers(now)

    # ------------------------------------------------------------ source tasks

    def _run_source(self) -> None:
        head = self.operators[0]
        assert isinstance(head, SourceOperator) and head.reader is not None
        reader, emit = head.reader, head.output.collect
        running, exhausted = True, False
        gate = self.gate
        while True:
            item = gate.poll()
            while item is not None:
                outcome = self._source_mail(item[1], running, exhausted)
                if outcome is None:
                    return
                running, exhausted = outcome
                item = gate.poll()
            if running:
                records, ended = reader.poll(SOURCE_BATCH)
                for record in records:
                    emit(record)
                self._flush()
                if ended:
                    running, exhausted = False, True
                    self._end_input()
                    self.host.source_exhausted(self)
                elif not records:
                    item = gate.take(timeout=reader.idle_wait_s)
                    if item is not None:
                        outcome = self._source_mail(item[1], running, exhausted)
                        if outcome is None:
                            return
                        running, exhausted = outcome
            else:
                item = gate.take()
                assert item is not None
                outcome = self._source_mail(item[1], running, exhausted)
                if outcome is None:
                    return
                running, exhausted = outcome

    def _source_mail(self, mail: Any, running: bool, exhausted: bool) -> tuple[bool, bool] | None:
        """Handle one mail; the new (running, exhausted), or None when the task ends."""
        if isinstance(mail, TriggerCheckpoint):
            options = mail.barrier.options
            if options.drain and not exhausted:
                self._end_input()
                exhausted = True
                running = False
            self._checkpoint(mail.barrier)
            if options.stop:
                running = False
        elif isinstance(mail, Terminate):
            self._end_of_partition()
            return None
        elif isinstance(mail, Resume):
            running = not exhausted
        else:
            self._notify(mail)
        return running, exhausted

    # ------------------------------------------------------------ input tasks

    def _run_input(self) -> None:
        gate = self.gate
        aligner = BarrierAligner(len(self.channel_inputs), self._checkpoint)
        self.aligner = aligner
        pending = aligner.pending
        handlers = self.channel_handlers
        ended_input: set[int] = set()
        channels = len(self.channel_inputs)
        timer_ops = self.timer_ops
        while True:
            if pending:
                channel, payload = pending.popleft()
            else:
                item = gate.poll()
                if item is None:
                    self._flush()
                    timeout = None
                    if timer_ops:
                        due = self._next_timer()
                        if due is not None:
                            timeout = max(0.0, (due - time.time() * 1000) / 1000.0)
                    item = gate.take(timeout)
                    if item is None:
                        self._fire_timers()
                        continue
                channel, payload = item
            if channel == MAIL:
                self._notify(payload)
                continue
            stash = aligner.stash
            if stash and channel in stash:
                stash[channel].append((channel, payload))
                continue
            if payload.__class__ is list:
                handle = handlers[channel]
                assert handle is not None
                for record in payload:
                    handle(record)
                if timer_ops:
                    due = self._next_timer()
                    if due is not None and due <= time.time() * 1000:
                        self._fire_timers()
            elif isinstance(payload, Barrier):
                aligner.on_barrier(channel, payload)
            elif isinstance(payload, EndOfInput):
                ended_input.add(channel)
                if len(ended_input) == channels:
                    self._end_input()
            elif isinstance(payload, EndOfPartition):
                aligner.on_end_of_partition(channel)
                if not aligner.live:
                    self._end_of_partition()
                    return


def _fan_out(targets: list[Callable[[Any], None]]) -> Callable[[Any], None]:
    if not targets:
        return lambda value: None
    if len(targets) == 1:
        return targets[0]

    def emit_all(value: Any) -> None:
        for target in targets:
            target(value)

    return emit_all
