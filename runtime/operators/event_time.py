"""Event time where records get it: timestamps assigned at a source (or an assigner operator),
the record timestamp a task's operators see, and handlers of ``(value, timestamp)`` records.

Records travel between tasks as ``(value, timestamp)`` pairs on edges downstream of a timestamp
assigner (a plain tuple: the consuming task knows per input channel whether its records carry
timestamps, and a tuple of untracked objects leaves the garbage collector's lists at its first
collection, so records in flight do not grow the old generations). :class:`SourceWatermarks`
runs a :class:`~statekit.runtime.api.watermarks.WatermarkStrategy` for one subtask.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from statekit.runtime.api.watermarks import MIN_WATERMARK, BoundedOutOfOrdernessWatermarks, WatermarkStrategy
from statekit.runtime.exchange.batch_path import assigning_emitter, pair_emitter, with_emit_all
from statekit.runtime.exchange.events import Watermark, WatermarkStatus

__all__ = [
    "ElementTime",
    "SourceWatermarks",
    "emit_timestamped",
    "timestamped_writer_emit",
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
        emit_pair = pair_emitter(writer_emit)
        emit_assigned = assigning_emitter(writer_emit)
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
                with_emit_all(emit_pair_timestamped, self._assigning_all(emit_assigned, element))
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

    def next_tick_ms(self) -> int | None:
        """Wall-clock ms when :meth:`tick` may have an event due without a new record (the
        periodic emission of a watermark that advanced, or idleness); None: not before one."""
        due: list[int] = []
        interval = self.strategy.interval_ms
        if interval and (self._records or self.generator.current_watermark() > self.emitted):
            due.append(self.last_emit_ms + interval)
        if self.strategy.idleness_ms is not None and not self.idle:
            due.append(self.last_record_ms + self.strategy.idleness_ms)
        return min(due) if due else None

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


