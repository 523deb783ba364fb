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
from functools import partial
from typing import Any

from statekit.runtime.api.watermarks import MIN_WATERMARK, BoundedOutOfOrdernessWatermarks, WatermarkStrategy
from statekit.runtime.exchange.batch_path import ASSIGNING_EMITTER, BATCH_HANDLER, EMIT_ALL, PAIR_EMITTER
from statekit.runtime.exchange.events import Watermark, WatermarkStatus

__all__ = [
    "ElementTime",
    "SourceWatermarks",
    "emit_timestamped",
    "timestamped_writer_emit",
    "with_timestamped_handler",
    "TIMESTAMPED_HANDLER",
]







class ElementTime:
    """The timestamp of the record a task is processing (one per task, set before each call)."""

    __slots__ = ("timestamp",)

    def __init__(self) -> None:
        self.timestamp: int | None = None


# ---------------------------------------------------------------- generators and strategies










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




# ---------------------------------------------------------------- inside a task




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
    timestamps)``: the same for a whole :class:`~statekit.runtime.exchange.batch_path.TimestampedBuffer`
    (its :data:`~statekit.runtime.exchange.batch_path.BATCH_HANDLER`)."""
    setattr(handle, TIMESTAMPED_HANDLER, timestamped)
    if batch is not None:
        setattr(timestamped, BATCH_HANDLER, batch)
    return handle






