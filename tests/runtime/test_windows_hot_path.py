"""The event-time hot path reuses the windows of the last timestamp only for assigners that
depend on the timestamp alone; an assigner that looks at the element is asked every time."""

from __future__ import annotations

from typing import Any

from statekit.runtime.environment import StreamEnvironment
from statekit.runtime.sinks import CollectSink
from statekit.runtime.sources import CollectionSource
from statekit.runtime.watermarks import WatermarkStrategy
from statekit.runtime.windows import TimeWindow, TumblingEventTimeWindows
from statekit.runtime.windows.assigners import WindowAssigner
from statekit.runtime.windows.triggers import EventTimeTrigger, Trigger
from statekit.runtime.windows.windows import Window


class SizeFromElement(WindowAssigner):
    """Tumbling event-time windows whose size is the record's third field."""

    def assign_windows(self, element: Any, timestamp: int) -> list[Window]:
        size = element[2]
        start = timestamp - timestamp % size
        return [TimeWindow(start, start + size)]

    def get_default_trigger(self) -> Trigger:
        return EventTimeTrigger()


def counts(assigner: WindowAssigner, events: list[tuple[str, int, int]]) -> list[tuple[str, int]]:
    """(key, records) per fired window; records are (key, timestamp, size, 1)."""
    env = StreamEnvironment()
    strategy = (WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: v[1])
                .with_watermark_interval(0))
    sink = CollectSink()
    (env.from_source(CollectionSource([(*e, 1) for e in events]), "events", strategy).uid("source").set_parallelism(1)
        .key_by(lambda v: v[0]).window(assigner)
        .reduce(lambda a, b: (a[0], a[1], a[2], a[3] + b[3])).uid("windows")
        .map(lambda v: (v[0], v[3])).uid("pick").sink_to(sink).uid("sink"))
    env.execute("hot path")
    return sorted(sink.values)


def test_an_assigner_that_reads_the_element_is_not_cached_per_timestamp() -> None:
    # same timestamp, different sizes: windows [0, 10) and [0, 100) are different windows
    events = [("a", 5, 10), ("a", 5, 100), ("a", 5, 10), ("a", 50, 100)]
    assert not SizeFromElement.by_timestamp_only
    got = counts(SizeFromElement(), events)
    assert got == [("a", 2), ("a", 2)]


def test_tumbling_windows_of_repeated_timestamps_count_every_record() -> None:
    assert TumblingEventTimeWindows.by_timestamp_only
    # the last ("a", 5) comes after the watermark passed its window: dropped
    events = [("a", 5, 0), ("b", 5, 0), ("a", 5, 0), ("a", 12, 0), ("b", 12, 0), ("b", 12, 0), ("a", 5, 0)]
    got = counts(TumblingEventTimeWindows.of(10), events)
    assert got == [("a", 1), ("a", 2), ("b", 1), ("b", 2)]
