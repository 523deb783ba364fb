"""Tasks: one thread per subtask of a job vertex, running its chain of operators.

A task reads its input gate (source tasks: their reader), hands buffers of records to the
head operator, and handles events and mails between buffers — never in the middle of one.
Barriers go to the :class:`~statekit.runtime.task.barrier_handler.CheckpointBarrierHandler`
(aligned, unaligned or at-least-once), which calls back :meth:`Task.snapshot` when the task
takes its snapshot and :meth:`Task.input_done` when its input side of the checkpoint is
complete.

Output never blocks a record: a task whose consumers' gates are full keeps the overflow in
its writers' backlogs and takes no new input until they are delivered. While it waits it
still serves priority barriers (unaligned checkpoints), converts timed-out aligned barriers
queued in its backlog, and — source tasks — handles mails: a backpressured task can take an
unaligned checkpoint at once.

On restore, the in-flight records of the restored checkpoint addressed to this task are
processed first, before any new input.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

from statekit.runtime.api.checkpoint_config import Alignment
from statekit.runtime.checkpoint.barriers import Barrier, PriorityBarrier
from statekit.runtime.checkpoint.channel_state import ChannelSpec, InFlightSnapshot
from statekit.runtime.checkpoint.handles import SubtaskStats
from statekit.runtime.exchange.batch_path import TimestampedBuffer, emit_all_of, list_handler
from statekit.runtime.exchange.events import (
    END_OF_INPUT,
    END_OF_PARTITION,
    EndOfInput,
    EndOfPartition,
    LatencyMarker,
    Watermark,
    WatermarkStatus,
)
from statekit.runtime.exchange.input_gate import MAIL, InputGate, TaskCancelled
from statekit.runtime.exchange.record_writer import RecordWriter
from statekit.runtime.operators.base import StreamOperator
from statekit.runtime.operators.sources import SourceOperator
from statekit.runtime.task.barrier_handler import CheckpointBarrierHandler
from statekit.runtime.task.mails import (
    Cancel,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    Resume,
    Terminate,
    TriggerCheckpoint,
)
from statekit.runtime.task.metrics import TaskMetrics
from statekit.runtime.task.subtask_checkpoint import CheckpointWriter, SubtaskCheckpoint
from statekit.runtime.task.time import TaskTime

if TYPE_CHECKING:
    from statekit.runtime.checkpoint.handles import TaskStateSnapshot
    from statekit.runtime.task.metrics import TaskReport

__all__ = [
    "Task",
    "TaskHost",
    "SOURCE_BATCH",
]

log = logging.getLogger("statekit.runtime")

SOURCE_BATCH = 512
REPLAY_SLICE = 128  # restored in-flight records handled between two looks at the cancel flags
SLICE_S = 0.1  # a buffer that would take longer at the pace of the latest one is handled in slices this long
_OUTPUT_WAIT_S = 0.002


class TaskHost(Protocol):
    """What a task reports to (the execution attempt) and submits snapshots to."""

    started: threading.Event
    cancelled: threading.Event

    def task_ready(self, task: Task) -> None: ...

    def task_failed(self, task: Task, error: BaseException) -> None: ...

    def task_finished(self, task: Task) -> None: ...

    def source_exhausted(self, task: Task) -> None: ...

    def acknowledge_checkpoint(self, task: Task, checkpoint_id: int, snapshot: TaskStateSnapshot) -> None: ...

    def report_metrics(self, report: TaskReport) -> None: ...

    def decline_checkpoint(self, task: Task, checkpoint_id: int, reason: str, *, subsumed: bool,
                           new_shared: list[str] | None = None) -> None: ...


class Task:
    """One subtask of a job vertex: a thread running its operator chain.

    Args:
        input_specs: Per input-gate channel, the edge it belongs to and the producing subtask.
        output_specs: Per writer (in ``operator_writers`` order), per channel, its edge and the
            consuming subtask.
        replay: In-flight records of the restored checkpoint for this task, as ``(operator
            position in the chain, input index, records)``, processed before any new input.
        channel_state_serializer: How in-flight records are stored (``records`` or ``pickle``).
        storage_options: The job's fsspec options (where checkpoints are written).
        buffer_timeout_ms: How long records may wait in the writers' buffers (Flink's buffer
            timeout; a buffer also goes when it is full, and at every event). None: whenever the
            task runs out of input (the in-process default). 0: the writers send every record.
        latency_interval_ms: A source task sends a latency marker this often (None: never).
    """

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
        input_specs: list[ChannelSpec],
        *,
        output_specs: list[list[ChannelSpec]] | None = None,
        replay: list[tuple[int, int, list[Any]]] | None = None,
        channel_state_serializer: str = "records",
        storage_options: dict[str, Any] | None = None,
        buffer_timeout_ms: int | None = None,
        latency_interval_ms: int | None = None,
    ) -> None:
        self.host = host
        self.key = (vertex_id, subtask)
        self.name = f"{name} ({subtask + 1}/{parallelism})"
        self.subtask = subtask
        self.parallelism = parallelism
        self.operators = operators
        self.chained_next = chained_next
        self.operator_writers = operator_writers
        self.writers = [w for ws in operator_writers for w in ws]
        self.gate = gate
        self.input_specs = input_specs
        self.channel_inputs = [spec.input_index for spec in input_specs]
        self.output_specs = output_specs or [[] for _ in self.writers]
        self.replay = replay or []
        self.channel_state_serializer = channel_state_serializer
        self._flush_every_s = None if buffer_timeout_ms is None else buffer_timeout_ms / 1000.0
        self._flush_due = 0.0
        self._marker_every_s = latency_interval_ms / 1000.0 if latency_interval_ms else None
        self._marker_due = 0.0
        self.checkpoint_writer = CheckpointWriter(
            self.name, storage_options,
            lambda checkpoint_id, snapshot: host.acknowledge_checkpoint(self, checkpoint_id, snapshot),
            lambda checkpoint_id, reason, new_shared: host.decline_checkpoint(
                self, checkpoint_id, reason, subsumed=False, new_shared=new_shared),
        )
        self.is_source = isinstance(operators[0], SourceOperator)
        self.thread = threading.Thread(target=self.run, name=self.name, daemon=True)
        self.metrics = TaskMetrics(vertex_id, subtask, self.name, self.writers, host.report_metrics,
                                   source=self.is_source, accumulators=operators[0].ctx.accumulators,
                                   queued=gate.queued)
        self.timer_ops: list[StreamOperator] = []
        self.time = TaskTime(len(input_specs))
        self.metrics.watch(self.time)
        self.handler: CheckpointBarrierHandler | None = None
        self._checkpoints: dict[int, SubtaskCheckpoint] = {}
        self._torn_down = False
        self._running = True
        self._exhausted = False
        self._terminated = False

    def mail(self, mail: Any) -> None:
        """Deliver a control mail (never blocks). A completed checkpoint's notification overtakes
        the queued input (its snapshot was taken before the coordinator could send it), so a
        backpressured sink still commits at once; the other mails keep their place behind the data."""
        if mail.__class__ is NotifyCheckpointComplete:
            self.gate.put_priority_mail(mail)
        else:
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
            self._replay()
            if self.is_source:
                self._run_source()
            else:
                self._run_input()
            self._drain_output()
            self._tear_down()
            self.host.task_finished(self)
        except TaskCancelled:
            self._tear_down()
            self.host.task_finished(self)
        except BaseException as exc:  # noqa: BLE001 - reported to the job master
            self._tear_down()
            self.host.task_failed(self, exc)
        finally:
            self._tear_down()

    def _tear_down(self) -> None:
        """Release pending snapshots, finish the write in progress, close the operators (and
        their state backends), once.

        Runs on the task thread before the task reports its end: a job's ``execute`` returns
        only after every backend is closed, so no native store (RocksDB) is still closing on
        this daemon thread while the interpreter exits (which aborts the process).
        """
        if self._torn_down:
            return
        self._torn_down = True
        for pending in self._checkpoints.values():
            pending.release()
        self._checkpoints.clear()
        self.checkpoint_writer.close()
        self.metrics.report(finished=True)
        for op in self.operators:
            try:
                op.close()
            except Exception as exc:  # noqa: BLE001
                log.warning("%s: closing %s failed: %s", self.name, op.ctx.uid, exc)

    def _initialize(self) -> None:
        self.time.bind(self.operators, self.writers)
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
            targets.extend(self.time.emitter(w) for w in self.operator_writers[i] if w.side_output is None)
            op.output.collect = _fan_out(targets)  # type: ignore[method-assign,assignment]
            op.side_outputs = _side_outputs(self.time, self.operator_writers[i])
            if i > 0 or not self.is_source:
                handlers[i] = op.element_handler()
        self.chain_handlers = handlers
        if not self.is_source:
            head = self.operators[0]
            second = head.element_handler2() if 2 in self.channel_inputs else None
            self.second_handler = second
            self.channel_handlers = self.time.channel_handlers(
                self.channel_inputs, handlers[0], second)  # type: ignore[arg-type]
        self.timer_ops = [op for op in self.operators if op.has_timers]

    # ------------------------------------------------------------ checkpoints (BarrierCallbacks)

    def snapshot(self, barrier: Barrier, *, unaligned: bool, alignment_ms: int) -> None:
        """Take the synchronous snapshot and forward ``barrier`` (ahead of queued output when unaligned)."""
        options = barrier.options
        barrier_ms = int(time.time() * 1000) - alignment_ms  # when the first barrier arrived
        started = time.perf_counter()
        snapshots = [op.snapshot_state(barrier.checkpoint_id, options) for op in self.operators]
        sync_ms = (time.perf_counter() - started) * 1000
        self.metrics.checkpoint_taken(barrier.checkpoint_id, alignment_ms, unaligned, sync_ms)
        head = self.operators[0].ctx
        pending = SubtaskCheckpoint(
            barrier, snapshots,
            InFlightSnapshot(head.uid, self.subtask, self.parallelism, self.channel_state_serializer),
            SubtaskStats(unaligned=unaligned, alignment_ms=alignment_ms, barrier_ms=barrier_ms, sync_ms=sync_ms),
        )
        self._checkpoints[barrier.checkpoint_id] = pending
        if unaligned:
            for index, writer in enumerate(self.writers):
                for channel, records in writer.send_priority_barrier(barrier).items():
                    pending.capture("output", self.output_specs[index][channel], records)
        else:
            for writer in self.writers:
                writer.broadcast_event(barrier)

    def record_inflight(self, barrier: Barrier, channel: int, records: list[Any]) -> None:
        """Store records of input ``channel`` that are in flight for ``barrier``."""
        pending = self._checkpoints.get(barrier.checkpoint_id)
        if pending is not None:
            pending.capture("input", self.input_specs[channel], records)

    def input_done(self, barrier: Barrier) -> None:
        """The input side of ``barrier`` is complete."""
        pending = self._checkpoints.get(barrier.checkpoint_id)
        if pending is not None:
            pending.input_open = False
            self._try_submit(pending)

    def decline(self, barrier: Barrier, reason: str) -> None:
        """A newer checkpoint subsumed ``barrier`` at this task."""
        pending = self._checkpoints.pop(barrier.checkpoint_id, None)
        if pending is not None:
            pending.release()
        self.host.decline_checkpoint(self, barrier.checkpoint_id, reason, subsumed=True)

    def _output_open(self, pending: SubtaskCheckpoint) -> bool:
        """A timeoutable aligned barrier of ``pending`` still waits in an output backlog."""
        return pending.barrier.options.timeoutable and not pending.stats.unaligned and any(
            w.queued_barrier(pending.checkpoint_id) for w in self.writers)

    def _try_submit(self, pending: SubtaskCheckpoint) -> None:
        if pending.input_open or self._output_open(pending):
            return
        del self._checkpoints[pending.checkpoint_id]
        if pending.failure is not None:
            pending.release()
            self.host.decline_checkpoint(self, pending.checkpoint_id, pending.failure, subsumed=False)
            return
        self.checkpoint_writer.submit(pending)

    def _convert_timed_out(self, now_ms: int) -> None:
        """Turn forwarded aligned barriers still queued past their deadline into unaligned ones."""
        for pending in list(self._checkpoints.values()):
            deadline = pending.barrier.deadline_ms
            if deadline is None or now_ms < deadline or pending.stats.unaligned:
                continue
            for index, writer in enumerate(self.writers):
                for channel, records in writer.convert_queued_barrier(pending.barrier).items():
                    pending.capture("output", self.output_specs[index][channel], records)
            self._try_submit(pending)

    def _check_outputs(self) -> None:
        for pending in list(self._checkpoints.values()):
            if not pending.input_open:
                self._try_submit(pending)

    def _next_deadline_ms(self) -> int | None:
        deadlines = [p.barrier.deadline_ms for p in self._checkpoints.values() if not p.stats.unaligned]
        if self.handler is not None:
            deadlines.append(self.handler.next_deadline_ms())
        found = [d for d in deadlines if d is not None]
        return min(found) if found else None

    # ------------------------------------------------------------ output

    def _output_available(self) -> bool:
        for writer in self.writers:
            if writer.pending and not writer.deliver():
                return False
        if self._checkpoints:
            self._check_outputs()
        return True

    def _wait_output(self) -> None:
        """Deliver backlogged output; meanwhile serve priority barriers, timeouts and (sources) mails."""
        started = time.monotonic()
        while not self._output_available():
            if self._cancelled():
                raise TaskCancelled()
            if self.is_source:
                item = self.gate.poll()
                if item is not None:
                    self._source_mail(item[1])
                    continue
            else:
                item = self.gate.poll_priority()
                if item is not None:
                    self._on_priority(item)
                    continue
            now_ms = int(time.time() * 1000)
            if self.handler is not None:
                self.handler.check_timeout(now_ms)
            if self._checkpoints:
                self._convert_timed_out(now_ms)
            for writer in self.writers:
                if writer.pending:
                    writer.wait_for_room(_OUTPUT_WAIT_S)
                    break
            started = self.metrics.waited(started)  # a long wait is reported while it lasts
        self.metrics.add_backpressure(time.monotonic() - started)

    def _cancelled(self) -> bool:
        """The attempt is being cancelled: the task ends at the next buffer, not after its queued input."""
        return self.gate.cancelled.is_set() or self.host.cancelled.is_set()

    def _drain_output(self) -> None:
        """Deliver everything still backlogged (the end of the task)."""
        while any(w.pending for w in self.writers):
            if self._cancelled():
                raise TaskCancelled()
            for writer in self.writers:
                if writer.pending and not writer.deliver():
                    writer.wait_for_room(0.05)

    def _on_priority(self, item: tuple[int, Any]) -> None:
        channel, payload = item
        if channel == MAIL:
            self._notify(payload)
            return
        assert isinstance(payload, PriorityBarrier) and self.handler is not None
        self.handler.on_priority(channel, payload)

    # ------------------------------------------------------------ shared steps

    def _end_input(self) -> None:
        self.time.source_tick(self.operators[0], final=True)
        for op in self.operators:
            op.end_input()
        self.time.end_of_input()
        for writer in self.writers:
            writer.broadcast_event(END_OF_INPUT)

    def _on_latency_marker(self, marker: LatencyMarker) -> None:
        """Forward a latency marker (one channel of each writer), or, without writers, measure it."""
        if self.writers:
            for writer in self.writers:
                writer.emit_latency_marker(marker)
        else:
            self.metrics.latency(int(time.time() * 1000) - marker.created_ms)

    def _maybe_mark_latency(self) -> None:
        """A source task: a latency marker behind what its writers hold, every ``latency_interval_ms``."""
        every = self._marker_every_s
        if every is None:
            return
        now = time.monotonic()
        if now < self._marker_due:
            return
        self._marker_due = now + every
        self._on_latency_marker(LatencyMarker(int(time.time() * 1000), self.key[0], self.subtask))

    def _end_of_partition(self) -> None:
        for writer in self.writers:
            writer.broadcast_event(END_OF_PARTITION)

    def _flush(self) -> None:
        """Out of input: hand over the writers' buffers (with a buffer timeout: when it is due)."""
        every = self._flush_every_s
        if every is None or time.monotonic() >= self._flush_due:
            for writer in self.writers:
                writer.flush()
            if every is not None:
                self._flush_due = time.monotonic() + every
        self.metrics.idle()

    def _flush_if_due(self) -> None:
        """With a buffer timeout: hand over the writers' buffers when it is due (also while busy)."""
        if self._flush_every_s is not None and time.monotonic() >= self._flush_due:
            self._flush()

    def _flush_wait_s(self, wait_s: float | None) -> float | None:
        """``wait_s`` cut to when the buffer timeout is due, if a writer holds records."""
        if self._flush_every_s is None or not any(w.buffered() for w in self.writers):
            return wait_s
        due_s = max(0.0, self._flush_due - time.monotonic())
        return due_s if wait_s is None else min(wait_s, due_s)

    def _notify(self, mail: Any) -> None:
        if isinstance(mail, NotifyCheckpointComplete):
            for op in self.operators:
                op.notify_checkpoint_complete(mail.checkpoint_id)
        elif isinstance(mail, NotifyCheckpointAborted):
            self.checkpoint_writer.abort(mail.checkpoint_id)
            pending = self._checkpoints.pop(mail.checkpoint_id, None)
            if pending is not None:
                pending.release()
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
        reader, emit = head.reader, head.emitter(self.time.element)
        emit_all = emit_all_of(emit)  # the emitter's variant for a whole poll, if any
        gate = self.gate
        self.time.source_tick(head)  # a restored watermark goes out before any record
        while not self._terminated:
            if not self._output_available():
                self._wait_output()
                continue
            item = gate.poll()
            if item is not None:
                self._source_mail(item[1])
                continue
            if not self._running:
                item = gate.take(self._wait_s(None))
                if item is not None:
                    self._source_mail(item[1])
                elif self._checkpoints:
                    self._convert_timed_out(int(time.time() * 1000))
                continue
            records, ended = reader.poll(SOURCE_BATCH)
            if emit_all is not None:
                emit_all(records)
            else:
                for record in records:
                    emit(record)
            self.metrics.count_in(len(records))
            self.time.source_tick(head)
            self._maybe_mark_latency()
            self._flush()
            if ended:
                self._running, self._exhausted = False, True
                self._end_input()
                self.host.source_exhausted(self)
            elif not records:
                item = gate.take(timeout=self._flush_wait_s(reader.idle_wait_s))
                self.time.source_tick(head)
                if item is not None:
                    self._source_mail(item[1])

    def _wait_s(self, due_ms: int | None) -> float | None:
        """Seconds until the earlier of ``due_ms`` and a checkpoint deadline (None: no limit)."""
        deadline = self._next_deadline_ms()
        if deadline is not None and (due_ms is None or deadline < due_ms):
            due_ms = deadline
        return None if due_ms is None else max(0.0, (due_ms - time.time() * 1000) / 1000.0)

    def _source_mail(self, mail: Any) -> None:
        """Handle one mail of a source task."""
        if isinstance(mail, TriggerCheckpoint):
            barrier = mail.barrier
            options = barrier.options
            if options.drain and not self._exhausted:
                self._end_input()
                self._exhausted, self._running = True, False
            self.snapshot(barrier, unaligned=options.alignment is Alignment.UNALIGNED, alignment_ms=0)
            self.input_done(barrier)
            if options.stop:
                self._running = False
        elif isinstance(mail, Terminate):
            self._end_of_partition()
            self._terminated = True
        elif isinstance(mail, Resume):
            self._running = not self._exhausted
        else:
            self._notify(mail)

    # ------------------------------------------------------------ input tasks

    def _replay(self) -> None:
        """Process the restored in-flight records before any new input."""
        replay, self.replay = self.replay, []
        cancelled = self._cancelled
        for position, input_index, records in replay:
            handle = self.second_handler if input_index == 2 else self.chain_handlers[position]
            assert handle is not None
            for start in range(0, len(records), REPLAY_SLICE):
                if cancelled():
                    raise TaskCancelled()
                for record in records[start:start + REPLAY_SLICE]:
                    handle(record)
            if not self._output_available():
                self._drain_output()

    def _handle_in_slices(self, channel: int, payload: list[Any], handle: Callable[[Any], None],
                          many: Callable[[list[Any]], None] | None, size: int) -> None:
        """Hand ``payload`` (a list or :class:`TimestampedBuffer`) of input ``channel`` to its handler
        ``size`` records at a time, in order. Between slices the task hands over the output buffers
        whose buffer timeout is due (a slow operator's output waits one slice beyond the timeout, not
        one whole input buffer) and takes its priority items (see :meth:`_priority_between_slices`);
        it looks at the cancel flags before each slice."""
        timestamped = payload.__class__ is TimestampedBuffer
        for start in range(0, len(payload), size):
            if start:
                self._flush_if_due()
                self._priority_between_slices(channel, payload, start)
            if self._cancelled():
                raise TaskCancelled()
            if timestamped:
                part = TimestampedBuffer()
                part.extend(payload[start:start + size])
                part.timestamps = cast(TimestampedBuffer, payload).timestamps[start:start + size]
                part.deliver(handle)
            elif many is not None:
                many(payload[start:start + size])
            else:
                for record in payload[start:start + size]:
                    handle(record)

    def _priority_between_slices(self, channel: int, payload: list[Any], start: int) -> None:
        """Take the priority items that arrived while ``payload`` of ``channel`` is handled, as
        Flink's mailbox takes them between records: a completed checkpoint's notification, and an
        unaligned barrier, which snapshots now instead of one whole slow buffer later. The records
        of ``payload`` from ``start`` on are not in that snapshot: the handler stores them as in
        flight on ``channel``, ahead of what is queued behind them."""
        gate, handler = self.gate, self.handler
        while (item := gate.poll_priority()) is not None:
            if handler is None or item[1].__class__ is not PriorityBarrier:
                self._on_priority(item)
                continue
            handler.in_hand = (channel, payload[start:])
            try:
                self._on_priority(item)
            finally:
                handler.in_hand = None

    def _run_input(self) -> None:
        gate = self.gate
        handler = CheckpointBarrierHandler(len(self.channel_inputs), gate, self)
        self.handler = handler
        pending = handler.pending
        handlers = self.channel_handlers
        handle_all = [None if h is None else list_handler(h) for h in handlers]
        ended_input: set[int] = set()
        channels = len(self.channel_inputs)
        timer_ops = self.timer_ops
        gate_cancelled, host_cancelled = gate.cancelled.is_set, self.host.cancelled.is_set
        slice_records = 0  # records of a buffer handled between two looks at the cancel flags (0: all)
        # a slice takes about SLICE_S, or the buffer timeout when that is shorter
        slice_s = min(SLICE_S, self._flush_every_s) if self._flush_every_s else SLICE_S
        while True:
            # a cancel mail waits behind the queued data: the flags are seen between any two items
            if gate_cancelled() or host_cancelled():
                raise TaskCancelled()
            if not self._output_available():
                self._wait_output()
                continue
            item: tuple[int, Any] | None
            if pending:
                item = gate.poll_priority() or pending.popleft()
            else:
                item = gate.poll()
                if item is None:
                    self._flush()
                    if not self._output_available():
                        continue
                    item = gate.take(self._flush_wait_s(self._wait_s(self._next_timer() if timer_ops else None)))
                    if item is None:
                        now_ms = int(time.time() * 1000)
                        self._fire_timers()
                        handler.check_timeout(now_ms)
                        if self._checkpoints:
                            self._convert_timed_out(now_ms)
                        continue
            channel, payload = item
            if channel == MAIL:
                self._notify(payload)
                continue
            if payload.__class__ is PriorityBarrier:
                handler.on_priority(channel, payload)
                continue
            if not handler.on_item(channel, payload):
                continue
            if payload.__class__ is list or payload.__class__ is TimestampedBuffer:
                handle = handlers[channel]
                assert handle is not None
                started = time.monotonic()
                if slice_records and len(payload) > slice_records:
                    self._handle_in_slices(channel, payload, handle, handle_all[channel], slice_records)
                elif payload.__class__ is list:
                    many = handle_all[channel]
                    if many is not None:
                        many(payload)
                    else:
                        for record in payload:
                            handle(record)
                else:
                    cast(TimestampedBuffer, payload).deliver(handle)
                took = time.monotonic() - started
                # the records the latest buffer's pace handles in slice_s: a later buffer with more
                # (slow records: a slow sink, a backpressured chain) goes in slices that long, so a
                # cancel is seen, and a due output buffer handed over, within one slice, not one whole
                # buffer; judged by the pace, not by the latest buffer's length (a short buffer of slow
                # records must not let the next long one run whole)
                slice_records = max(1, int(len(payload) * slice_s / took)) if took > 0 else 0
                self.metrics.count_in(len(payload))
                self._flush_if_due()
                if timer_ops:
                    due = self._next_timer()
                    if due is not None and due <= time.time() * 1000:
                        self._fire_timers()
            elif payload.__class__ is Watermark or payload.__class__ is WatermarkStatus:
                self.time.on_input_event(channel, payload)
            elif payload.__class__ is LatencyMarker:
                self._on_latency_marker(payload)
            elif isinstance(payload, EndOfInput):
                ended_input.add(channel)
                if len(ended_input) == channels:
                    self._end_input()
            elif isinstance(payload, EndOfPartition):
                handler.on_end_of_partition(channel)
                self.time.on_channel_end(channel)
                if not handler.live:
                    self._end_of_partition()
                    return


def _side_outputs(time: TaskTime, writers: list[RecordWriter]) -> dict[str, Callable[[Any], None]]:
    """Per side-output tag, what ``ctx.output(tag, value)`` calls (writers of edges that take it)."""
    tags: dict[str, list[Callable[[Any], None]]] = {}
    for writer in writers:
        if writer.side_output is not None:
            tags.setdefault(writer.side_output, []).append(time.emitter(writer))
    return {tag: _fan_out(targets) for tag, targets in tags.items()}


def _fan_out(targets: list[Callable[[Any], None]]) -> Callable[[Any], None]:
    if not targets:
        return lambda value: None
    if len(targets) == 1:
        return targets[0]

    def emit_all(value: Any) -> None:
        for target in targets:
            target(value)

    return emit_all
