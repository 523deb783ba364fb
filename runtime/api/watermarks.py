"""Watermark strategies: how records get event timestamps and how watermarks follow them.

A source (or ``assign_timestamps_and_watermarks``) gives each record a timestamp with the
strategy's timestamp assigner and feeds it to a watermark generator; the generator's watermark
is emitted periodically (every ``interval_ms`` of wall-clock time, 0: after every poll) when it
advanced. A watermark ``W`` promises that no more records with a timestamp ``<= W`` follow (late
records may still come; operators decide what to do). How watermarks travel and combine:
:mod:`statekit.runtime.exchange.events`, :mod:`statekit.runtime.task.time`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from statekit.statefmt.errors import BadInputError

__all__ = [
    "MIN_WATERMARK",
    "MAX_WATERMARK",
    "DEFAULT_WATERMARK_INTERVAL_MS",
    "WatermarkGenerator",
    "BoundedOutOfOrdernessWatermarks",
    "WatermarkStrategy",
]

MIN_WATERMARK = -(1 << 63)


MAX_WATERMARK = (1 << 63) - 1


DEFAULT_WATERMARK_INTERVAL_MS = 200


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


