"""The event-time hot path reuses the windows of the last timestamp only for assigners that
depend on the timestamp alone; an assigner that looks at the element is asked every time."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from statekit.runtime.api.functions import AggregateFunction
from statekit.runtime.api.side_outputs import OutputTag
from statekit.runtime.api.watermarks import WatermarkStrategy
from statekit.runtime.api.windows.assigners import SlidingEventTimeWindows, TumblingEventTimeWindows, WindowAssigner
from statekit.runtime.api.windows.functions import ProcessWindowFunction
from statekit.runtime.api.windows.triggers import EventTimeTrigger, Trigger
from statekit.runtime.api.windows.windows import TimeWindow, Window
from statekit.runtime.connectors.sinks import CollectSink
from statekit.runtime.connectors.sources import CollectionSource
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.exchange.batch_path import batch_handler, timestamped_handler
from statekit.runtime.operators.base import OperatorContext, Output
from statekit.runtime.operators.windows.window_operator import WindowOperator, WindowSpec


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


class SlidingByElement(SizeFromElement):
    """Sliding windows (size 10, slide 4) the hot path cannot cache: the reference for the
    cached sliding assigner."""

    def assign_windows(self, element: Any, timestamp: int) -> list[Window]:
        return SlidingEventTimeWindows.of(10, 4).assign_windows(element, timestamp)


class Sum(AggregateFunction):
    """Sums the records' last field. ``mode``: ``int`` (an int accumulator); ``none_first``
    (None before the first record); ``none_at_4`` (None, no contents, whenever the sum is 4: an
    int turned into None); ``list`` (the weights in a list: contents that are not an int)."""

    def __init__(self, mode: str = "int") -> None:
        self.mode = mode

    def create_accumulator(self) -> Any:
        return [] if self.mode == "list" else None if self.mode == "none_first" else 0

    def add(self, value: Any, accumulator: Any) -> Any:
        if self.mode == "list":
            return [*accumulator, value[3]]
        if accumulator is None:
            return None if value[3] == 0 else value[3]
        total = accumulator + value[3]
        return None if self.mode == "none_at_4" and total == 4 else total

    def get_result(self, accumulator: Any) -> Any:
        return sum(accumulator) if self.mode == "list" else accumulator

    def merge(self, a: Any, b: Any) -> Any:
        return a + b


def sums(assigner: WindowAssigner, events: list[tuple[Any, int, int]], lateness: int, function: AggregateFunction,
         parallelism: int = 1) -> tuple[list[tuple[Any, int, int, Any]], list[Any]]:
    """(key, window start, window end, sum) per firing, and the late records, of a job over
    ``(key, timestamp, weight)`` records whose watermark follows every record (interval 0) with
    an out-of-orderness of 3. With ``parallelism`` 2 the window subtasks see watermarks with no
    record of their own in between (keys 'a' and 3 go to different subtasks)."""
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
                .aggregate(function, Tag()).uid("windows").set_parallelism(parallelism))
    windowed.sink_to(fired).uid("sink").set_parallelism(1)
    windowed.get_side_output(late).sink_to(dropped).uid("late").set_parallelism(1)
    env.execute("fast path")
    return sorted(fired.values, key=repr), sorted(dropped.values, key=repr)


# runs of equal records: the fast path serves a record whose timestamp (and key) came just before
events_strategy = st.lists(st.tuples(st.sampled_from(["a", "b", 3]), st.integers(0, 40), st.integers(0, 3),
                                     st.integers(1, 3)),
                           max_size=25).map(lambda runs: [(k, t, w) for k, t, w, n in runs for _ in range(n)])
CACHED = {"tumbling": (TumblingEventTimeWindows.of(10), TumblingByElement(10)),
          "sliding": (SlidingEventTimeWindows.of(10, 4), SlidingByElement())}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=events_strategy, lateness=st.sampled_from([0, 6]),
       mode=st.sampled_from(["int", "none_first", "none_at_4", "list"]),
       windows=st.sampled_from(sorted(CACHED)), parallelism=st.sampled_from([1, 2]))
@example(events=[("a", 12, 1), ("a", 14, 1), ("a", 5, 1), ("a", 5, 2)], lateness=6, mode="int",
         windows="tumbling", parallelism=1)
@example(events=[("a", 5, 1), (3, 15, 1), ("a", 5, 1), ("a", 5, 1), ("a", 6, 1)], lateness=6, mode="int",
         windows="tumbling", parallelism=2)
def test_the_fast_path_fires_what_the_general_path_fires(events: list[tuple[Any, int, int]], lateness: int,
                                                         mode: str, windows: str, parallelism: int) -> None:
    """Out-of-order records, late firings within the allowed lateness, dropped records,
    accumulators that are not ints or turn into None, tumbling and sliding windows, and window
    subtasks whose watermark moves between their records: the cached assigner (the fast path,
    windows reused over ``same_windows``) and one the hot path cannot cache (the general path)
    give the same firings and the same late records. The examples: two records of a window the
    watermark passed, within the lateness, each fire — also when the watermark moved on a
    subtask without a record of its own in between (the windows assigned before that watermark,
    and whether they took the fast path, are not reused after it)."""
    cached, general = CACHED[windows]
    fast = sums(cached, events, lateness, Sum(mode), parallelism)
    reference = sums(general, events, lateness, Sum(mode), parallelism)
    assert fast == reference


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


class InPlace(AggregateFunction):
    """Appends each weight to its list in place (``add`` returns the same list), or keeps an
    int sum that turns into None (no contents) whenever it reaches 4."""

    def __init__(self, in_place: bool) -> None:
        self.in_place = in_place

    def create_accumulator(self) -> Any:
        return [] if self.in_place else 0

    def add(self, value: Any, accumulator: Any) -> Any:
        if self.in_place:
            accumulator.append(value[1])
            return accumulator
        total = accumulator + value[1]
        return None if total == 4 else total

    def get_result(self, accumulator: Any) -> Any:
        return accumulator

    def merge(self, a: Any, b: Any) -> Any:
        return a + b


def window_operator(function: AggregateFunction) -> tuple[WindowOperator, Any, list[Any]]:
    """A tumbling (10 ms) event-time window operator subtask on the hashmap backend, its batch
    handler ``(values, timestamps)`` and its output."""
    spec = WindowSpec(TumblingEventTimeWindows.of(10), EventTimeTrigger(), 0, None, "aggregate", function)
    op, out = WindowOperator(spec), []
    op.setup(OperatorContext("w", "w", 0, 1, 128, key_selector=lambda v: v[0]), Output(out.append))
    op.initialize_state()
    op.open()
    timestamped = timestamped_handler(op.element_handler())
    assert timestamped is not None
    return op, batch_handler(timestamped), out


def test_a_snapshot_keeps_the_contents_it_saw_when_the_record_path_changes_them_in_place() -> None:
    """Contents that are not an int never take the fast path: the record path reads them copy
    on write while a snapshot shares the table, so the snapshot keeps what it saw."""
    op, batch, _ = window_operator(InPlace(in_place=True))
    batch([("a", 1), ("a", 2)], [1, 1])  # the second record: the timestamp the first one cached
    snapshot = op.keyed_backend.snapshot()
    try:
        batch([("a", 3), ("a", 4)], [1, 2])
        copies = {table.descriptor.name: data for table, data in snapshot._copies}  # type: ignore[attr-defined]
        live = {slot.descriptor.name: slot.data for slot in op.keyed_backend.slots()}  # type: ignore[union-attr]
        (pair, seen), = copies["window-contents"].items()
        assert seen == [1, 2]
        assert live["window-contents"][pair] == [1, 2, 3, 4]
    finally:
        snapshot.release()


def test_an_int_turned_into_none_removes_the_contents_on_the_fast_path() -> None:
    """``add`` giving None for an int (on the fast path: same timestamp, same key) leaves no
    entry in the table, as ``put(pair, None)`` does on the general path: a snapshot holds none."""
    op, batch, _ = window_operator(InPlace(in_place=False))
    batch([("a", 1), ("a", 3)], [1, 1])  # 1, then 1 + 3 = 4 -> None
    live = {slot.descriptor.name: slot.data for slot in op.keyed_backend.slots()}  # type: ignore[union-attr]
    assert dict(live["window-contents"]) == {}
    batch([("a", 2)], [1])
    assert list(live["window-contents"].values()) == [2]


class Aligned(TumblingEventTimeWindows):
    """A subclass with windows of its own, [0, 3) and [3, 10) in every 10 ms, still by the
    timestamp only: it must not be given its parent's ``same_windows``."""

    def assign_windows(self, element: Any, timestamp: int) -> list[Window]:
        base = timestamp - timestamp % 10
        return [TimeWindow(base, base + 3) if timestamp % 10 < 3 else TimeWindow(base + 3, base + 10)]


class AlignedByElement(Aligned):
    by_timestamp_only = False


def test_a_subclass_with_windows_of_its_own_gets_the_windows_of_each_timestamp() -> None:
    assert Aligned(10).same_windows(4) == (4, 5)
    events = [("a", 4, 1), ("a", 3, 1), ("a", 2, 1), ("a", 30, 1)]
    assert sums(Aligned(10), events, 0, Sum()) == sums(AlignedByElement(10), events, 0, Sum())
