"""Windows: a time interval ``[start, end)``, or the one global window.

Both are tuples, so a window is its own state key: it is stored as the msgpack array
``[start, end]`` (the global window as ``[]``) and decodes back with :func:`window_of`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from statekit.runtime.api.watermarks import MAX_WATERMARK

__all__ = [
    "TimeWindow",
    "GlobalWindow",
    "Window",
    "window_of",
    "merge_windows",
]


class TimeWindow(NamedTuple):
    """Event or processing time ``[start, end)`` in epoch milliseconds."""

    start: int
    end: int

    def max_timestamp(self) -> int:
        """The last timestamp inside the window (``end - 1``)."""
        return self.end - 1

    def intersects(self, other: TimeWindow) -> bool:
        """Overlapping or adjacent (session windows that touch merge)."""
        return self.start <= other.end and self.end >= other.start

    def cover(self, other: TimeWindow) -> TimeWindow:
        """The smallest window covering both."""
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))

    @staticmethod
    def get_window_start_with_offset(timestamp: int, offset: int, size: int) -> int:
        """The start of the size-``size`` window containing ``timestamp`` (Flink's formula)."""
        remainder = (timestamp - offset) % size
        return timestamp - remainder


class GlobalWindow(NamedTuple):
    """The single window of :class:`GlobalWindows` (all of time)."""

    def max_timestamp(self) -> int:
        return MAX_WATERMARK


Window = TimeWindow | GlobalWindow


def window_of(stored: Any) -> Window:
    """A window from its stored form (a list or tuple of 0 or 2 ints)."""
    if isinstance(stored, (TimeWindow, GlobalWindow)):
        return stored
    if len(stored) == 0:
        return GlobalWindow()
    start, end = stored
    return TimeWindow(int(start), int(end))


def merge_windows(windows: list[TimeWindow]) -> list[tuple[TimeWindow, list[TimeWindow]]]:
    """Groups of intersecting windows: (their cover, the members), in start order."""
    groups: list[tuple[TimeWindow, list[TimeWindow]]] = []
    for window in sorted(windows):
        if groups and groups[-1][0].intersects(window):
            cover, members = groups[-1]
            groups[-1] = (cover.cover(window), [*members, window])
        else:
            groups.append((window, [window]))
    return groups
