"""Window assigners (Flink's): which windows a record belongs to, and their default trigger."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from statekit.runtime.api.windows.triggers import EventTimeTrigger, NeverTrigger, ProcessingTimeTrigger, Trigger
from statekit.runtime.api.windows.windows import GlobalWindow, TimeWindow, Window
from statekit.statefmt.errors import BadInputError

__all__ = [
    "WindowAssigner",
    "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows",
    "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows",
    "EventTimeSessionWindows",
    "ProcessingTimeSessionWindows",
    "GlobalWindows",
]


def _positive(what: str, ms: int) -> int:
    if not isinstance(ms, int) or isinstance(ms, bool) or ms <= 0:
        raise BadInputError(f"the window {what} must be a positive number of milliseconds, got {ms!r}")
    return ms


class WindowAssigner(ABC):
    """Assigns each record (by its timestamp) to zero or more windows."""

    is_event_time: bool = True
    is_merging: bool = False
    # whether assign_windows depends on the timestamp only (never on the element), so the
    # windows of a timestamp may be reused for the next records of ``same_windows`` timestamps
    by_timestamp_only: bool = False

    @abstractmethod
    def assign_windows(self, element: Any, timestamp: int) -> list[Window]:
        """The windows of ``element`` with ``timestamp`` (event or processing time)."""

    @abstractmethod
    def get_default_trigger(self) -> Trigger:
        """The trigger used unless ``.trigger(...)`` sets another."""

    def same_windows(self, timestamp: int) -> tuple[int, int]:
        """``[first, end)``: the timestamps around ``timestamp`` that get the windows it gets (of an
        assigner ``by_timestamp_only``); at least ``timestamp`` itself."""
        return timestamp, timestamp + 1


class _Tumbling(WindowAssigner):
    by_timestamp_only = True

    def __init__(self, size_ms: int, offset_ms: int = 0) -> None:
        self.size = _positive("size", size_ms)
        if not 0 <= offset_ms < size_ms:
            raise BadInputError(f"a window offset must be in [0, size), got {offset_ms}")
        self.offset = offset_ms

    def assign_windows(self, element: Any, timestamp: int) -> list[Window]:
        start = timestamp - (timestamp - self.offset) % self.size
        return [TimeWindow(start, start + self.size)]

    def same_windows(self, timestamp: int) -> tuple[int, int]:
        if type(self).assign_windows is not _Tumbling.assign_windows:  # a subclass's own windows
            return super().same_windows(timestamp)
        start = timestamp - (timestamp - self.offset) % self.size
        return start, start + self.size


class TumblingEventTimeWindows(_Tumbling):
    """Fixed, non-overlapping event-time windows of ``size_ms`` (shifted by ``offset_ms``)."""

    @staticmethod
    def of(size_ms: int, offset_ms: int = 0) -> TumblingEventTimeWindows:
        return TumblingEventTimeWindows(size_ms, offset_ms)

    def get_default_trigger(self) -> Trigger:
        return EventTimeTrigger()


class TumblingProcessingTimeWindows(_Tumbling):
    """Fixed, non-overlapping wall-clock windows of ``size_ms``."""

    is_event_time = False

    @staticmethod
    def of(size_ms: int, offset_ms: int = 0) -> TumblingProcessingTimeWindows:
        return TumblingProcessingTimeWindows(size_ms, offset_ms)

    def get_default_trigger(self) -> Trigger:
        return ProcessingTimeTrigger()


class _Sliding(WindowAssigner):
    by_timestamp_only = True

    def __init__(self, size_ms: int, slide_ms: int, offset_ms: int = 0) -> None:
        self.size = _positive("size", size_ms)
        self.slide = _positive("slide", slide_ms)
        if not 0 <= offset_ms < slide_ms:
            raise BadInputError(f"a window offset must be in [0, slide), got {offset_ms}")
        self.offset = offset_ms

    def assign_windows(self, element: Any, timestamp: int) -> list[Window]:
        last = timestamp - (timestamp - self.offset) % self.slide
        windows: list[Window] = []
        start = last
        while start > timestamp - self.size:
            windows.append(TimeWindow(start, start + self.size))
            start -= self.slide
        return windows

    def same_windows(self, timestamp: int) -> tuple[int, int]:
        if type(self).assign_windows is not _Sliding.assign_windows:  # a subclass's own windows
            return super().same_windows(timestamp)
        # the windows of t start at the s = offset (mod slide) with t - size < s <= t: the same
        # last start while t stays in [last, last + slide), the same first start while t - size
        # stays in [first - slide, first)
        last = timestamp - (timestamp - self.offset) % self.slide
        first = last - (last - (timestamp - self.size) - 1) // self.slide * self.slide
        return max(last, first - self.slide + self.size), min(last + self.slide, first + self.size)


class SlidingEventTimeWindows(_Sliding):
    """Event-time windows of ``size_ms`` starting every ``slide_ms`` (a record is in several)."""

    @staticmethod
    def of(size_ms: int, slide_ms: int, offset_ms: int = 0) -> SlidingEventTimeWindows:
        return SlidingEventTimeWindows(size_ms, slide_ms, offset_ms)

    def get_default_trigger(self) -> Trigger:
        return EventTimeTrigger()


class SlidingProcessingTimeWindows(_Sliding):
    """Wall-clock windows of ``size_ms`` starting every ``slide_ms``."""

    is_event_time = False

    @staticmethod
    def of(size_ms: int, slide_ms: int, offset_ms: int = 0) -> SlidingProcessingTimeWindows:
        return SlidingProcessingTimeWindows(size_ms, slide_ms, offset_ms)

    def get_default_trigger(self) -> Trigger:
        return ProcessingTimeTrigger()


class _Session(WindowAssigner):
    is_merging = True

    def __init__(self, gap_ms: int) -> None:
        self.gap = _positive("session gap", gap_ms)

    def assign_windows(self, element: Any, timestamp: int) -> list[Window]:
        return [TimeWindow(timestamp, timestamp + self.gap)]


class EventTimeSessionWindows(_Session):
    """Event-time sessions: windows of records less than ``gap_ms`` apart merge."""

    @staticmethod
    def with_gap(gap_ms: int) -> EventTimeSessionWindows:
        return EventTimeSessionWindows(gap_ms)

    def get_default_trigger(self) -> Trigger:
        return EventTimeTrigger()


class ProcessingTimeSessionWindows(_Session):
    """Wall-clock sessions with ``gap_ms`` of inactivity between them."""

    is_event_time = False

    @staticmethod
    def with_gap(gap_ms: int) -> ProcessingTimeSessionWindows:
        return ProcessingTimeSessionWindows(gap_ms)

    def get_default_trigger(self) -> Trigger:
        return ProcessingTimeTrigger()


class GlobalWindows(WindowAssigner):
    """Every record in one window per key; it fires only by a custom trigger (e.g. CountTrigger)."""

    is_event_time = False

    @staticmethod
    def create() -> GlobalWindows:
        return GlobalWindows()

    def assign_windows(self, element: Any, timestamp: int) -> list[Window]:
        return [GlobalWindow()]

    def get_default_trigger(self) -> Trigger:
        return NeverTrigger()
