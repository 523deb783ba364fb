"""Durations: Flink's ``Time`` helper and the one parser of duration strings.

Every duration in the runtime's API is an ``int`` of milliseconds (``Time.seconds(5)`` is
``5000``); every duration on the command line is parsed by :func:`parse_duration`.
"""

from __future__ import annotations

import re

from statekit.statefmt.errors import BadInputError

__all__ = [
    "Time",
    "parse_duration",
]


class Time:
    """Milliseconds of a duration, as Flink spells them: ``TumblingEventTimeWindows.of(Time.seconds(5))``."""

    @staticmethod
    def milliseconds(ms: int) -> int:
        return int(ms)

    @staticmethod
    def seconds(seconds: float) -> int:
        return int(seconds * 1000)

    @staticmethod
    def minutes(minutes: float) -> int:
        return int(minutes * 60_000)

    @staticmethod
    def hours(hours: float) -> int:
        return int(hours * 3_600_000)

    @staticmethod
    def days(days: float) -> int:
        return int(days * 86_400_000)


_DURATION_UNITS: dict[str, float] = {
    "ms": 1, "milli": 1, "millis": 1, "millisecond": 1, "milliseconds": 1,
    "s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000,
    "m": 60_000, "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000,
    "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000, "": 1,
}


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([a-z]*)$")


_MAX_DURATION_MS = 365 * 86_400_000


def parse_duration(text: str, *, what: str = "duration", minimum: int = 1) -> int:
    """Milliseconds of ``200ms``, ``1s``, ``1.5 s``, ``2min``, ``1h`` or a bare number of ms.

    Args:
        minimum: The least duration accepted (0: ``0s`` is a valid duration).

    Raises:
        BadInputError: Not a duration in a known unit, or outside ``minimum`` .. 365 days.
    """
    match = _DURATION.match(text.strip().lower())
    if match is None or match.group(2) not in _DURATION_UNITS:
        raise BadInputError(f"invalid {what} {text!r}; use e.g. 200ms, 1s, 2min or 1h")
    millis = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if not minimum <= millis <= _MAX_DURATION_MS:
        raise BadInputError(f"invalid {what} {text!r}: must be between {minimum} ms and 365 days")
    return int(millis)


