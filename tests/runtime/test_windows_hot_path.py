"""The event-time hot path reuses the windows of the last timestamp only for assigners that
depend on the timestamp alone; an assigner that looks at the element is asked every time."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from statekit.runtime.environment import StreamEnvironment
from statekit.runtime.functions import AggregateFunction
from statekit.runtime.side_outputs import OutputTag
from statekit.runtime.sinks import CollectSink
from statekit.runtime.sources import CollectionSource
from statekit.runtime.watermarks import WatermarkStrategy
from statekit.runtime.windows import (
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
)
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


class TumblingByElement(SizeFromElement):
    """Tumbling windows of a fixed size that the hot path cannot cache per timestamp: every
    record takes the general path (the reference for the fast path)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def assign_windows(self, element: Any, timestamp: int) -> list[Window]:
        start = timestamp - timestamp % self.size
        return [TimeWindow(start, start + self.size)]


class Sum(AggregateFunction):
    """Sums the records' last field; its accumulator is an int, or None before the first record
    when ``none_first`` (a value the fast path must hand back to the general path)."""

    def __init__(self, none_first: bool = False) -> None:
        self.none_first = none_first

    def create_accumulator(self) -> Any:
        return None if self.none_first else 0

    def add(self, value: Any, accumulator: Any) -> Any:
        if accumulator is None:
            return None if value[3] == 0 else value[3]
        return accumulator + value[3]

    def get_result(self, accumulator: Any) -> Any:
        return accumulator

    def merge(self, a: Any, b: Any) -> Any:
        return a + b


def sums(assigner: WindowAssigner, events: list[tuple[str, int, int]], lateness: int,
         function: AggregateFunction) -> tuple[list[tuple[str, int, int, Any]], list[Any]]:
    """(key, window start, window end, sum) per firing, and the late records, of a job over
    ``(key, timestamp, weight)`` records whose watermark follows every record (interval 0) with
    an out-of-orderness of 3."""
    env = StreamEnvironment()
    strategy = (WatermarkStrategy.for_bounded_out_of_orderness(3).with_timestamp_assigner(lambda v, ts: v[1])
                .with_watermark_interval(0))
    late = OutputTag("late")
    fired, dropped = CollectSink(), CollectSink()

    class Tag(ProcessWindowFunction):
        def process(self, key: Any, context: Any, elements: Any, out: Any) -> None:
            for total in elements:
                out.collect((key, context.window().start, context.window().end, total))

    windowed = (env.from_source(CollectionSource([(k, t, 0, w) for k, t, w in events]), "events", strategy)
                .uid("source").set_parallelism(1)
                .key_by(lambda v: v[0]).window(assigner).allowed_lateness(lateness).side_output_late_data(late)
                .aggregate(function, Tag()).uid("windows"))
    windowed.sink_to(fired).uid("sink")
    windowed.get_side_output(late).sink_to(dropped).uid("late")
    env.execute("fast path")
    return sorted(fired.values, key=repr), sorted(dropped.values)


# runs of equal records: the fast path serves a record whose timestamp (and key) came just before
events_strategy = st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 40), st.integers(0, 3), st.integers(1, 3)),
                           max_size=25).map(lambda runs: [(k, t, w) for k, t, w, n in runs for _ in range(n)])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=events_strategy, lateness=st.sampled_from([0, 6]), none_first=st.booleans())
@example(events=[("a", 12, 1), ("a", 14, 1), ("a", 5, 1), ("a", 5, 2)], lateness=6, none_first=False)
def test_the_fast_path_fires_what_the_general_path_fires(events: list[tuple[str, int, int]], lateness: int,
                                                         none_first: bool) -> None:
    """Out-of-order records, late firings within the allowed lateness, dropped records and
    accumulators that are not ints: the cached tumbling assigner (fast path) and one the hot
    path cannot cache (general path) give the same firings and the same late records. (The
    example: two records of a window the watermark passed, within the lateness, each fire.)"""
    fast = sums(TumblingEventTimeWindows.of(10), events, lateness, Sum(none_first))
    general = sums(TumblingByElement(10), events, lateness, Sum(none_first))
    assert fast == general


@given(size=st.integers(1, 25), slide=st.integers(1, 25), offset=st.integers(0, 24), timestamp=st.integers(-80, 80),
       sliding=st.booleans())
def test_same_windows_is_the_whole_run_of_timestamps_with_the_same_windows(size: int, slide: int, offset: int,
                                                                          timestamp: int, sliding: bool) -> None:
    """The hot path reuses a timestamp's windows for every timestamp of ``same_windows``: each of
    them gets the same windows, and the timestamps just outside get others."""
    assigner: WindowAssigner = (SlidingEventTimeWindows.of(size, slide, offset % slide) if sliding
                                else TumblingEventTimeWindows.of(size, offset % size))
    first, end = assigner.same_windows(timestamp)
    assert first <= timestamp < end
    windows = assigner.assign_windows(None, timestamp)
    assert all(assigner.assign_windows(None, t) == windows for t in range(first, end))
    assert assigner.assign_windows(None, first - 1) != windows
    assert assigner.assign_windows(None, end) != windows


def test_an_assigner_that_reads_the_element_has_windows_of_one_timestamp() -> None:
    assert SizeFromElement().same_windows(7) == (7, 8)
