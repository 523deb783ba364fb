"""Event time: record timestamps, watermarks, watermark strategies and their propagation.

Model (Flink's): a source (or ``assign_timestamps_and_watermarks``) gives each record a
timestamp with the strategy's timestamp assigner and feeds it to a watermark generator; the
generator's watermark is emitted periodically (every ``interval_ms`` of wall-clock time, 0:
after every poll) when it advanced. A watermark ``W`` promises that no more records with a
timestamp ``<= W`` follow (late records may still come; operators decide what to do).

Records travel between tasks as ``(value, timestamp)`` pairs on edges downstream of a timestamp
assigner (a plain tuple: the consuming task knows per input channel whether its records carry
timestamps, and a tuple of untracked objects leaves the garbage collector's lists at its first
collection, so records in flight do not grow the old generations); watermarks and idleness as
:class:`Watermark` and :class:`WatermarkStatus` events in the channels' data lane, in order with
the records (nothing is shared between tasks). A task's watermark is the minimum over its live, active input channels
(:class:`WatermarkValve`); it only moves forward. End of input sends ``MAX_WATERMARK``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from statekit.runtime.channels import ASSIGNING_EMITTER, BATCH_HANDLER, EMIT_ALL, PAIR_EMITTER, VALUE_KEY_SELECTOR
from statekit.statefmt.errors import BadInputError

__all__ = [
    "MIN_WATERMARK",
    "MAX_WATERMARK",
    "DEFAULT_WATERMARK_INTERVAL_MS",
    "Watermark",
    "WatermarkStatus",
    "ElementTime",
    "WatermarkGenerator",
    "BoundedOutOfOrdernessWatermarks",
    "WatermarkStrategy",
    "WatermarkValve",
    "SourceWatermarks",
    "emit_timestamped",
    "timestamped_writer_emit",
    "with_timestamped_handler",
    "EMIT_ALL",
]

MIN_WATERMARK = -(1 << 63)
MAX_WATERMARK = (1 << 63) - 1
DEFAULT_WATERMARK_INTERVAL_MS = 200


@dataclass(frozen=True)
class Watermark:
    """Event time has reached ``timestamp`` on the channel it travels in."""

    timestamp: int


@dataclass(frozen=True)
class WatermarkStatus:
    """The channel went idle (``idle``: excluded from the minimum) or active again."""

    idle: bool


class ElementTime:
    """The timestamp of the record a task is processing (one per task, set before each call)."""

    __slots__ = ("timestamp",)

    def __init__(self) -> None:
        self.timestamp: int | None = None


# ---------------------------------------------------------------- generators and strategies


class WatermarkGenerator:
    """Tracks event timestamps and says what the watermark is."""

    def on_event(self, value: Any, timestamp: int) -> None:
        """A record with ``timestamp`` was read."""

    def current_watermark(self) -> int:
        """The watermark to emit periodically (MIN_WATERMARK: none yet)."""
        return MIN_WATERMARK

    def max_timestamp(self) -> int:
        """The state a restore needs (the highest timestamp seen)."""
        return MIN_WATERMARK

    def restore(self, max_timestamp: int) -> None:
        """Continue from a snapshot's :meth:`max_timestamp`."""


class BoundedOutOfOrdernessWatermarks(WatermarkGenerator):
    """Watermark ``max timestamp - out_of_orderness - 1`` (Flink's BoundedOutOfOrdernessWatermarks)."""

    def __init__(self, out_of_orderness_ms: int) -> None:
        self.out_of_orderness_ms = out_of_orderness_ms
        self._max = MIN_WATERMARK + out_of_orderness_ms + 1

    def on_event(self, value: Any, timestamp: int) -> None:
        if timestamp > self._max:
            self._max = timestamp

    def current_watermark(self) -> int:
        return self._max - self.out_of_orderness_ms - 1

    def max_timestamp(self) -> int:
        return self._max

    def restore(self, max_timestamp: int) -> None:
        self._max = max(self._max, max_timestamp)


def _record_timestamp(value: Any, previous: int | None) -> int:
    """The default assigner: the timestamp the record already has."""
    if previous is None:
        raise BadInputError(
            "a record has no timestamp; give the watermark strategy a timestamp assigner "
            "(WatermarkStrategy...with_timestamp_assigner(lambda value, ts: ...))"
        )
    return previous


@dataclass(frozen=True)
class WatermarkStrategy:
    """How records get timestamps and how watermarks follow them.

    Attributes:
        out_of_orderness_ms: How late (in event time) a record may be and still be on time.
        timestamp_assigner: ``f(value, previous_timestamp) -> epoch ms`` (or ``f(value)``).
        idleness_ms: A source subtask without records for this long (wall clock) is idle:
            downstream tasks leave it out of their watermark minimum until it emits again.
        interval_ms: Periodic emission interval (0: after every record).
    """

    out_of_orderness_ms: int = 0
    timestamp_assigner: Callable[..., int] | None = None
    idleness_ms: int | None = None
    interval_ms: int = DEFAULT_WATERMARK_INTERVAL_MS

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness_ms: int) -> WatermarkStrategy:
        """Watermarks that trail the highest timestamp seen by ``max_out_of_orderness_ms``."""
        if max_out_of_orderness_ms < 0:
            raise BadInputError(f"out-of-orderness must be >= 0 ms, got {max_out_of_orderness_ms}")
        return WatermarkStrategy(out_of_orderness_ms=int(max_out_of_orderness_ms))

    @staticmethod
    def for_monotonous_timestamps() -> WatermarkStrategy:
        """Timestamps never decrease: the watermark is the highest timestamp seen minus 1 ms."""
        return WatermarkStrategy(out_of_orderness_ms=0)

    def with_timestamp_assigner(self, assigner: Callable[..., int]) -> WatermarkStrategy:
        """Extract each record's timestamp with ``assigner(value, previous_timestamp)`` (or ``assigner(value)``)."""
        if not callable(assigner):
            raise BadInputError("a timestamp assigner must be callable")
        return replace(self, timestamp_assigner=assigner)

    def with_idleness(self, idleness_ms: int) -> WatermarkStrategy:
        """Mark a source subtask idle after ``idleness_ms`` without records."""
        if idleness_ms <= 0:
            raise BadInputError(f"idleness must be > 0 ms, got {idleness_ms}")
        return replace(self, idleness_ms=int(idleness_ms))

    def with_watermark_interval(self, interval_ms: int) -> WatermarkStrategy:
        """Emit watermarks every ``interval_ms`` (0: after every record)."""
        if interval_ms < 0:
            raise BadInputError(f"the watermark interval must be >= 0 ms, got {interval_ms}")
        return replace(self, interval_ms=int(interval_ms))

    def create_watermark_generator(self) -> WatermarkGenerator:
        return BoundedOutOfOrdernessWatermarks(self.out_of_orderness_ms)

    def create_timestamp_assigner(self) -> Callable[[Any, int | None], int]:
        assigner = self.timestamp_assigner
        if assigner is None:
            return _record_timestamp
        try:
            import inspect

            takes_two = len(inspect.signature(assigner).parameters) >= 2
        except (TypeError, ValueError):
            takes_two = True
        if takes_two:
            return assigner
        return lambda value, previous: assigner(value)


# ---------------------------------------------------------------- the source side


class SourceWatermarks:
    """Timestamps and watermarks of one source subtask (or assigner operator subtask).

    :meth:`assigning` wraps the emit function: each record gets its timestamp (into the
    task's :class:`ElementTime`) and feeds the generator. :meth:`tick` returns the events
    due now: a watermark when the interval passed and it advanced, idleness changes.

    Args:
        clock: Wall-clock milliseconds (injectable for tests).
    """

    def __init__(self, strategy: WatermarkStrategy, clock: Callable[[], int] | None = None) -> None:
        self.strategy = strategy
        self.generator = strategy.create_watermark_generator()
        self.assigner = strategy.create_timestamp_assigner()
        self.clock = clock or (lambda: int(time.time() * 1000))
        now = self.clock()
        self.emitted = MIN_WATERMARK
        self.last_emit_ms = now - strategy.interval_ms  # a restored watermark goes out at the first tick
        self.last_record_ms = now
        self.idle = False
        self._records = False

    def assigning(self, collect: Callable[[Any], None], element: ElementTime,
                  forward: Callable[[Any], None] | None = None) -> Callable[[Any], None]:
        """``collect`` with timestamps assigned; with interval 0 and ``forward``, the due
        watermark events go to ``forward`` after every record."""
        emit = self._assigning(collect, element)
        if forward is None or self.strategy.interval_ms:
            return emit
        tick = self.tick

        def emit_and_tick(value: Any) -> None:
            emit(value)
            for event in tick():
                forward(event)

        return emit_and_tick

    def _assigning(self, collect: Callable[[Any], None], element: ElementTime) -> Callable[[Any], None]:
        """``collect`` with each record's timestamp assigned (into ``element``) and fed to the generator."""
        assign, generator = self.assigner, self.generator
        writer_emit = timestamped_writer_emit(collect)
        if type(generator) is not BoundedOutOfOrdernessWatermarks or writer_emit is None:
            on_event = generator.on_event

            def emit(value: Any) -> None:
                timestamp = assign(value, element.timestamp)
                if timestamp.__class__ is not int:
                    timestamp = int(timestamp)
                element.timestamp = timestamp
                on_event(value, timestamp)
                self._records = True
                collect(value)

            return emit
        bounded = generator
        emit_pair = getattr(writer_emit, PAIR_EMITTER, None)
        emit_assigned = getattr(writer_emit, ASSIGNING_EMITTER, None)
        if emit_pair is not None:
            def emit_pair_timestamped(value: Any) -> None:
                """``emit_timestamped`` to a hash writer that keys the value without a pair to unpack."""
                timestamp = assign(value, element.timestamp)
                if timestamp.__class__ is not int:
                    timestamp = int(timestamp)
                element.timestamp = timestamp
                if timestamp > bounded._max:
                    bounded._max = timestamp
                self._records = True
                emit_pair(value, timestamp)

            if emit_assigned is not None:
                setattr(emit_pair_timestamped, EMIT_ALL, self._assigning_all(emit_assigned, element))
            return emit_pair_timestamped

        def emit_timestamped(value: Any) -> None:
            """The common case inlined: the bounded generator's ``on_event`` and the wrapping of the
            record for the timestamped writer it goes to."""
            timestamp = assign(value, element.timestamp)
            if timestamp.__class__ is not int:
                timestamp = int(timestamp)
            element.timestamp = timestamp
            if timestamp > bounded._max:
                bounded._max = timestamp
            self._records = True
            writer_emit((value, timestamp))

        return emit_timestamped

    def _assigning_all(self, emit_assigned: Callable[[list[Any], Any, Any, int], tuple[Any, int]],
                       element: ElementTime) -> Callable[[list[Any]], None]:
        """``emit_all(values)``: what the per-record emitter to a hash writer's ``emit_pair`` does
        for each value in turn (each assignment sees the timestamp assigned before it; the
        generator sees every timestamp), through the writer's ``emit_assigned``."""
        assign, bounded = self.assigner, self.generator
        assert isinstance(bounded, BoundedOutOfOrdernessWatermarks)

        def emit_all(values: list[Any]) -> None:
            if values:
                element.timestamp, bounded._max = emit_assigned(values, assign, element.timestamp, bounded._max)
                self._records = True

        return emit_all

    def tick(self, force: bool = False) -> list[Any]:
        """The events due now (in order); ``force``: the watermark whatever the interval."""
        now = self.clock()
        events: list[Any] = []
        if self._records:
            self._records = False
            self.last_record_ms = now
            if self.idle:
                self.idle = False
                events.append(WatermarkStatus(idle=False))
        elif not self.idle and self.strategy.idleness_ms is not None and \
                now - self.last_record_ms >= self.strategy.idleness_ms:
            self.idle = True
            return [WatermarkStatus(idle=True)]
        if force or now - self.last_emit_ms >= self.strategy.interval_ms:
            self.last_emit_ms = now
            watermark = self.generator.current_watermark()
            if watermark > self.emitted:
                self.emitted = watermark
                events.append(Watermark(watermark))
        return events

    def snapshot(self) -> list[int]:
        """What a restore needs: the generator's highest timestamp (none before the first record)."""
        if self.generator.current_watermark() <= MIN_WATERMARK and self.emitted == MIN_WATERMARK:
            return []
        return [self.generator.max_timestamp()]

    def restore(self, max_timestamp: int) -> None:
        self.generator.restore(max_timestamp)


# ---------------------------------------------------------------- the consumer side


class WatermarkValve:
    """A task's input watermark: the minimum over live, active channels; never decreasing.

    An idle channel is left out; when every live channel is idle the task is idle (its
    status goes downstream). A channel that ended (end of partition) is left out for good.
    """

    def __init__(self, channels: int) -> None:
        self.watermarks = [MIN_WATERMARK] * channels
        self.idle = [False] * channels
        self.ended = [False] * channels
        self.current = MIN_WATERMARK
        self.task_idle = False

    def _active(self) -> list[int]:
        return [c for c in range(len(self.watermarks)) if not self.idle[c] and not self.ended[c]]

    def on_watermark(self, channel: int, watermark: int) -> int | None:
        """A watermark of ``channel``; returns the task's new watermark if it advanced."""
        if watermark > self.watermarks[channel]:
            self.watermarks[channel] = watermark
        if self.idle[channel]:
            self.idle[channel] = False
        return self._advance()

    def on_status(self, channel: int, idle: bool) -> tuple[int | None, bool | None]:
        """An idleness change of ``channel``: (new watermark or None, new task status or None)."""
        self.idle[channel] = idle
        return self._advance(), self._status()

    def on_end(self, channel: int) -> int | None:
        """``channel`` ended: left out of the minimum from now on."""
        self.ended[channel] = True
        return self._advance()

    def _status(self) -> bool | None:
        live = [c for c in range(len(self.watermarks)) if not self.ended[c]]
        idle = bool(live) and all(self.idle[c] for c in live)
        if idle == self.task_idle:
            return None
        self.task_idle = idle
        return idle

    def _advance(self) -> int | None:
        active = self._active()
        if not active:
            return None
        new = min(self.watermarks[c] for c in active)
        if new > self.current:
            self.current = new
            return new
        return None


# ---------------------------------------------------------------- inside a task


class TaskTime:
    """Event time of one task: the record timestamp its operators see, its input valve, and
    how records and watermarks leave it. Owned by the task thread (nothing is shared).

    Attributes:
        timestamped_channels: Per input channel, whether its records are ``(value, timestamp)`` pairs.
        enabled: The job uses event time (the task forwards watermarks and, at end of input,
            ``MAX_WATERMARK``).
    """

    def __init__(self, channels: int) -> None:
        self.element = ElementTime()
        self.valve = WatermarkValve(channels)
        self.timestamped_channels: list[bool] = [False] * channels
        self.enabled = False
        self.operators: list[Any] = []
        self.writers: list[Any] = []

    def bind(self, operators: list[Any], writers: list[Any]) -> None:
        """Give every operator of the chain this task's element time."""
        self.operators = operators
        self.writers = writers
        for op in operators:
            op.element_time = self.element
            op.emit_watermark = self._forwarder(operators.index(op) + 1)

    def _forwarder(self, start: int) -> Callable[[Any], None]:
        return lambda event: self.forward(event, start)

    def emitter(self, writer: Any) -> Callable[[Any], None]:
        """What an operator calls to hand a record to ``writer`` (timestamped when its edge is:
        ``partial(emit_timestamped, writer.emit, element)``, see :func:`timestamped_writer_emit`)."""
        emit: Callable[[Any], None] = writer.emit
        if not getattr(writer, "timestamped", False):
            return emit
        return partial(emit_timestamped, emit, self.element)

    def channel_handlers(self, inputs: list[int], first: Callable[[Any], None],
                         second: Callable[[Any], None] | None) -> list[Callable[[Any], None] | None]:
        """Per input channel (``inputs``: its input index, 1 or 2), the record handler: ``first``
        or ``second``, taking the ``(value, timestamp)`` pairs of a channel that carries them (and,
        in a task with such channels, clearing the element time for a record of one that does not)."""
        plain = {1: first, 2: second}
        if not any(self.timestamped_channels):
            return [plain[index] for index in inputs]
        paired = {index: self.unwrapping(handle) for index, handle in plain.items() if handle is not None}
        untimed = {index: self._untimed(handle) for index, handle in plain.items() if handle is not None}
        return [(paired if timestamped else untimed).get(index)
                for index, timestamped in zip(inputs, self.timestamped_channels, strict=True)]

    def _untimed(self, handle: Callable[[Any], None]) -> Callable[[Any], None]:
        element = self.element

        def untimed(record: Any) -> None:
            element.timestamp = None
            handle(record)

        return untimed

    def unwrapping(self, handle: Callable[[Any], None]) -> Callable[[Any], None]:
        """``handle`` for ``(value, timestamp)`` records: its own variant for them (see
        :func:`with_timestamped_handler`), else one that sets the task's element time first."""
        own = getattr(handle, TIMESTAMPED_HANDLER, None)
        if own is not None:
            return own  # type: ignore[no-any-return]
        element = self.element

        def unwrap(record: Any) -> None:
            element.timestamp = record[1]
            handle(record[0])

        return unwrap

    def forward(self, event: Any, start: int = 0) -> None:
        """Advance operators ``start..`` to a watermark (firing their timers), then send ``event`` on."""
        if event.__class__ is Watermark:
            for op in self.operators[start:]:
                op.process_watermark(event.timestamp)
                if getattr(op, "stops_watermarks", False) and event.timestamp != MAX_WATERMARK:
                    return  # an assigner downstream in the chain makes its own watermarks
        for writer in self.writers:
            writer.broadcast_event(event)

    def on_input_event(self, channel: int, event: Any) -> None:
        """A watermark or status arrived on ``channel``."""
        if event.__class__ is Watermark:
            advanced = self.valve.on_watermark(channel, event.timestamp)
            if advanced is not None:
                self.forward(Watermark(advanced))
            return
        advanced, status = self.valve.on_status(channel, event.idle)
        if status is not None:
            self.forward(WatermarkStatus(status))
        if advanced is not None:
            self.forward(Watermark(advanced))

    def on_channel_end(self, channel: int) -> None:
        advanced = self.valve.on_end(channel)
        if advanced is not None and self.enabled:
            self.forward(Watermark(advanced))

    def source_tick(self, head: Any, *, final: bool = False) -> None:
        """Emit the watermark events a source's strategy has due (``final``: its current
        watermark whatever the interval, before end of input)."""
        watermarks = getattr(head, "watermarks", None)
        if watermarks is not None:
            for event in watermarks.tick(force=final):
                self.forward(event, 1)

    def end_of_input(self) -> None:
        """The maximum watermark goes downstream before end of input."""
        if self.enabled:
            for writer in self.writers:
                writer.broadcast_event(Watermark(MAX_WATERMARK))


def emit_timestamped(emit: Callable[[Any], None], element: ElementTime, value: Any) -> None:
    """Hand ``value`` with the current record timestamp to a timestamped writer's ``emit``."""
    emit((value, element.timestamp))


def timestamped_writer_emit(collect: Callable[[Any], None]) -> Callable[[Any], None] | None:
    """The writer's ``emit`` when ``collect`` is a :meth:`TaskTime.emitter` of a timestamped
    writer (so a caller that knows the timestamp may wrap the record itself), else None."""
    if isinstance(collect, partial) and collect.func is emit_timestamped:
        return collect.args[0]  # type: ignore[no-any-return]
    return None


# the attribute of a record handler naming its variant for (value, timestamp) records
TIMESTAMPED_HANDLER = "timestamped_handler"


def with_timestamped_handler(handle: Callable[[Any], None], timestamped: Callable[[Any], None],
                             batch: Callable[[list[Any], list[Any]], None] | None = None) -> Callable[[Any], None]:
    """``handle`` (which takes plain records and reads their timestamp from the task's
    :class:`ElementTime`), marked with ``timestamped``: the same handler for records as
    ``(value, timestamp)`` pairs, which a task calls for its channels that carry them instead
    (it sets no ElementTime: the handler uses the record's timestamp). ``batch(values,
    timestamps)``: the same for a whole :class:`~statekit.runtime.channels.TimestampedBuffer`
    (its :data:`~statekit.runtime.channels.BATCH_HANDLER`)."""
    setattr(handle, TIMESTAMPED_HANDLER, timestamped)
    if batch is not None:
        setattr(timestamped, BATCH_HANDLER, batch)
    return handle


def edge_key_selector(edge: Any) -> Callable[[Any], Any] | None:
    """The key selector of an edge's writer (it sees ``(value, timestamp)`` records on timestamped edges)."""
    selector = edge.key_selector
    if selector is None or not edge.source.transformation.timestamped:
        return selector  # type: ignore[no-any-return]

    def record_key(record: tuple[Any, Any]) -> Any:
        return selector(record[0])

    setattr(record_key, VALUE_KEY_SELECTOR, selector)  # a writer keys (value, timestamp) pairs by it
    return record_key


def configure_task_time(task: Any, graph: Any, vertex: Any) -> None:
    """Which input channels of ``task`` carry timestamps, and whether the job uses event time."""
    flags: list[bool] = []
    for edge in vertex.inputs:
        width = 1 if edge.partitioning.value == "forward" else edge.source.parallelism
        flags.extend([bool(edge.source.transformation.timestamped)] * width)
    task.time.timestamped_channels = flags
    task.time.enabled = any(op.transformation.timestamped for op in graph.operators)


def check_event_time_checkpoints(transformations: list[Any], unaligned: bool) -> None:
    """Refuse unaligned checkpoints in a job with event time (its in-flight records carry
    timestamps and watermarks, which channel state does not store)."""
    if unaligned and any(t.timestamped for t in transformations):
        raise BadInputError(
            "unaligned checkpoints do not support event time (timestamped records and watermarks "
            "in flight); use aligned checkpoints for a job with a WatermarkStrategy"
        )
