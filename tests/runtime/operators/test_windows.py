"""Windows: every assigner and trigger, window functions, lateness, late-data side output, merging."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

import pytest

from statekit.runtime.api.functions import AggregateFunction
from statekit.runtime.api.side_outputs import OutputTag
from statekit.runtime.api.watermarks import WatermarkStrategy
from statekit.runtime.api.windows.assigners import (
    EventTimeSessionWindows,
    GlobalWindows,
    ProcessingTimeSessionWindows,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from statekit.runtime.api.windows.functions import ProcessWindowFunction
from statekit.runtime.api.windows.triggers import CountTrigger
from statekit.runtime.api.windows.windows import TimeWindow, merge_windows
from statekit.runtime.connectors.sinks import CollectSink
from statekit.runtime.connectors.sources import CollectionSource
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.dataflow.run_options import RunOptions, set_run_options
from statekit.statefmt.errors import BadInputError, JobError

LATE = OutputTag("late")


def strategy(out_of_orderness: int = 0) -> WatermarkStrategy:
    return (WatermarkStrategy.for_bounded_out_of_orderness(out_of_orderness)
            .with_timestamp_assigner(lambda v, ts: v[1]).with_watermark_interval(0))


def keyed(env: StreamEnvironment, events: list[tuple[str, int]], out_of_orderness: int = 0) -> Any:
    return (env.from_source(CollectionSource(events), "events", strategy(out_of_orderness)).uid("source")
            .set_parallelism(1).key_by(lambda v: v[0]))


class Count(AggregateFunction):
    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Any, accumulator: int) -> int:
        return accumulator + 1

    def get_result(self, accumulator: int) -> int:
        return accumulator

    def merge(self, a: int, b: int) -> int:
        return a + b


class Describe(ProcessWindowFunction):
    """(key, start, end, sorted timestamps or the aggregate)."""

    def process(self, key: Any, context: Any, elements: Any, out: Any) -> None:
        window = context.window()
        items = list(elements)
        payload = sorted(e[1] for e in items) if items and isinstance(items[0], (tuple, list)) else items
        out.collect((key, getattr(window, "start", None), getattr(window, "end", None), payload))


@pytest.fixture(autouse=True, params=["hashmap", "rocksdb"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every job of these tests runs on each state backend (window state is namespaced state)."""
    set_run_options(RunOptions(state_backend=request.param))
    try:
        yield request.param
    finally:
        set_run_options(None)


def run(env: StreamEnvironment, stream: Any, late: Any = None) -> tuple[list[Any], list[Any]]:
    main, side = CollectSink(), CollectSink()
    stream.uid("windows").sink_to(main).uid("sink")
    if late is not None:
        stream.get_side_output(LATE).sink_to(side).uid("late-sink")
    env.execute("windows")
    # rocksdb keeps values serialized (msgpack): a reduced tuple comes back as a list
    return sorted(tuple(v) if isinstance(v, list) else v for v in main.values), sorted(side.values)


# ---------------------------------------------------------------- assigners (units)


def test_tumbling_windows_align_to_the_offset() -> None:
    assert TumblingEventTimeWindows.of(10).assign_windows(None, 17) == [TimeWindow(10, 20)]
    assert TumblingEventTimeWindows.of(10, 3).assign_windows(None, 2) == [TimeWindow(-7, 3)]
    assert TumblingEventTimeWindows.of(10).assign_windows(None, -1) == [TimeWindow(-10, 0)]


def test_sliding_windows_hold_a_record_size_over_slide_times() -> None:
    assert SlidingEventTimeWindows.of(30, 10).assign_windows(None, 25) == [
        TimeWindow(20, 50), TimeWindow(10, 40), TimeWindow(0, 30)]


def test_merge_windows_groups_intersecting_sessions() -> None:
    groups = merge_windows([TimeWindow(0, 10), TimeWindow(25, 30), TimeWindow(5, 12)])
    assert groups == [(TimeWindow(0, 12), [TimeWindow(0, 10), TimeWindow(5, 12)]),
                      (TimeWindow(25, 30), [TimeWindow(25, 30)])]


@pytest.mark.parametrize("build", [
    lambda: TumblingEventTimeWindows.of(0),
    lambda: TumblingEventTimeWindows.of(10, 10),
    lambda: SlidingEventTimeWindows.of(10, -1),
    lambda: EventTimeSessionWindows.with_gap(0),
    lambda: CountTrigger.of(0),
])
def test_bad_window_settings_are_refused(build: Any) -> None:
    with pytest.raises(BadInputError):
        build()


# ---------------------------------------------------------------- event time


def test_tumbling_event_time_reduce_counts_per_window() -> None:
    events = [(k, t) for t in range(0, 100, 3) for k in "ab"]
    env = StreamEnvironment().set_parallelism(2)
    result, _ = run(env, keyed(env, events).window(TumblingEventTimeWindows.of(20))
                    .reduce(lambda a, b: (a[0], max(a[1], b[1]))))
    expected = sorted((k, max(t for t in range(0, 100, 3) if t // 20 == w)) for k in "ab" for w in range(5))
    assert result == expected


def test_sliding_event_time_aggregate_with_a_window_function() -> None:
    events = [("k", t) for t in range(0, 60, 5)]
    env = StreamEnvironment().set_parallelism(2)
    result, _ = run(env, keyed(env, events).window(SlidingEventTimeWindows.of(20, 10)).aggregate(Count(), Describe()))
    counts = {(start, end): payload for _, start, end, payload in result}
    assert counts == {(-10, 10): [2], (0, 20): [4], (10, 30): [4], (20, 40): [4], (30, 50): [4],
                      (40, 60): [4], (50, 70): [2]}


def test_session_windows_merge_out_of_order_records() -> None:
    # 0 and 20 are separate sessions (gap 10) until 10 arrives (late but within out-of-orderness)
    events = [("a", 0), ("a", 20), ("a", 10), ("a", 50), ("b", 40), ("a", 58)]
    env = StreamEnvironment().set_parallelism(3)
    result, _ = run(env, keyed(env, events, out_of_orderness=30).window(EventTimeSessionWindows.with_gap(10))
                    .process(Describe()))
    assert result == [("a", 0, 30, [0, 10, 20]), ("a", 50, 68, [50, 58]), ("b", 40, 50, [40])]


def test_session_windows_merge_aggregates_and_count_triggers() -> None:
    events = [("a", 0), ("a", 8), ("a", 4), ("a", 100)]
    env = StreamEnvironment().set_parallelism(1)
    result, _ = run(env, keyed(env, events, out_of_orderness=50).window(EventTimeSessionWindows.with_gap(5))
                    .aggregate(Count(), Describe()))
    assert result == [("a", 0, 13, [3]), ("a", 100, 105, [1])]


def test_late_records_go_to_the_side_output_and_lateness_fires_again() -> None:
    events = [("a", 1), ("a", 12), ("a", 25), ("a", 5), ("a", 31), ("a", 8), ("a", 45), ("a", 9)]
    env = StreamEnvironment().set_parallelism(1)
    stream = (keyed(env, events).window(TumblingEventTimeWindows.of(10)).allowed_lateness(20)
              .side_output_late_data(LATE).aggregate(Count(), Describe()))
    result, late = run(env, stream, late=True)
    # [0,10) fires at watermark 11 (count 1), again for 5 (watermark 24 < cleanup 9+20: count 2),
    # is dropped at watermark 30 (>= 29): 8 and 9 then are late.
    assert [r for r in result if r[1] == 0] == [("a", 0, 10, [1]), ("a", 0, 10, [2])]
    assert late == [("a", 8), ("a", 9)]
    assert ("a", 10, 20, [1]) in result and ("a", 40, 50, [1]) in result


def test_without_lateness_late_records_are_dropped() -> None:
    events = [("a", 1), ("a", 30), ("a", 2)]
    env = StreamEnvironment().set_parallelism(1)
    result, _ = run(env, keyed(env, events).window(TumblingEventTimeWindows.of(10)).aggregate(Count()))
    assert result == [1, 1]


def test_event_time_windows_need_timestamps() -> None:
    env = StreamEnvironment().set_parallelism(1)
    stream = env.from_collection([("a", 1)]).key_by(lambda v: v[0]).window(TumblingEventTimeWindows.of(10)).aggregate(Count())
    stream.uid("windows").sink_to(CollectSink()).uid("sink")
    with pytest.raises(Exception, match="without a timestamp"):
        env.execute("no timestamps")


# ---------------------------------------------------------------- processing time and global windows


@pytest.mark.parametrize("assigner", [
    TumblingProcessingTimeWindows.of(3_600_000),
    SlidingProcessingTimeWindows.of(3_600_000, 3_600_000),
    ProcessingTimeSessionWindows.with_gap(3_600_000),
])
def test_processing_time_windows_fire_at_end_of_input(assigner: Any) -> None:
    events = [(k, i) for i in range(50) for k in "xyz"]
    env = StreamEnvironment().set_parallelism(2)
    stream = env.from_collection(events).key_by(lambda v: v[0]).window(assigner).aggregate(Count(), Describe())
    result, _ = run(env, stream)
    per_key = collections.Counter()
    for key, _, _, payload in result:
        per_key[key] += payload[0]
    assert per_key == {"x": 50, "y": 50, "z": 50}


def test_count_windows_fire_every_n_records_per_key() -> None:
    events = [(k, i) for i in range(7) for k in "ab"]
    env = StreamEnvironment().set_parallelism(2)
    source = env.from_collection(events).set_parallelism(1)  # one reader: records of a key stay in order
    result, _ = run(env, source.key_by(lambda v: v[0]).count_window(3).process(Describe()))
    assert result == [("a", None, None, [0, 1, 2]), ("a", None, None, [3, 4, 5]),
                      ("b", None, None, [0, 1, 2]), ("b", None, None, [3, 4, 5])]


def test_global_window_with_a_non_purging_count_trigger_keeps_growing() -> None:
    events = [("a", i) for i in range(4)]
    env = StreamEnvironment().set_parallelism(1)
    stream = (env.from_collection(events).key_by(lambda v: v[0]).window(GlobalWindows.create())
              .trigger(CountTrigger.of(2)).reduce(lambda a, b: (a[0], a[1] + b[1])))
    result, _ = run(env, stream)
    assert result == [("a", 1), ("a", 6)]


def test_misconfigured_windows_are_refused() -> None:
    env = StreamEnvironment()
    keyed_stream = env.from_collection([1]).key_by(lambda v: v)
    with pytest.raises(BadInputError, match="allowed lateness"):
        keyed_stream.window(TumblingProcessingTimeWindows.of(10)).allowed_lateness(5)

    class NoMerge(AggregateFunction):
        def create_accumulator(self) -> int:
            return 0

        def add(self, value: Any, accumulator: int) -> int:
            return accumulator + 1

        def get_result(self, accumulator: int) -> int:
            return accumulator

    with pytest.raises(BadInputError, match="merge"):
        keyed_stream.window(EventTimeSessionWindows.with_gap(5)).aggregate(NoMerge())
    with pytest.raises(BadInputError, match="WindowAssigner"):
        keyed_stream.window(10)


# ---------------------------------------------------------------- assign_timestamps_and_watermarks, restores


def test_assign_timestamps_and_watermarks_downstream_of_a_plain_source() -> None:
    events = [("a", t) for t in (1, 12, 25, 5, 31)]
    env = StreamEnvironment().set_parallelism(1)
    stream = (env.from_collection(events).uid("source").map(lambda v: v, "identity").uid("identity")
              .assign_timestamps_and_watermarks(strategy()).uid("timestamps")
              .key_by(lambda v: v[0]).window(TumblingEventTimeWindows.of(10)).side_output_late_data(LATE)
              .aggregate(Count(), Describe()))
    result, late = run(env, stream, late=True)
    assert result == [("a", 0, 10, [1]), ("a", 10, 20, [1]), ("a", 20, 30, [1]), ("a", 30, 40, [1])]
    assert late == [("a", 5)]


def test_session_windows_merge_across_a_restore_at_another_parallelism(tmp_path: Any, backend: str) -> None:
    import time as clock

    from statekit.readers.savepoint_reader import SavepointReader
    from statekit.runtime.connectors.sources import FileSource
    from statekit.runtime.dataflow.job_handle import JobStatus

    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a.txt").write_text("a\t0\na\t20\nb\t100\n", encoding="utf-8")
    sink = CollectSink()

    def build(env: StreamEnvironment, watch: bool) -> None:
        lines = (WatermarkStrategy.for_bounded_out_of_orderness(1_000).with_watermark_interval(0)
                 .with_timestamp_assigner(lambda line, ts: int(line.split("\t")[1])))
        parsed = (env.from_source(FileSource(str(inputs), watch=watch), "lines", lines).uid("source")
                  .map(lambda line: (line.split("\t")[0], int(line.split("\t")[1])), "parse").uid("parse"))
        (parsed.key_by(lambda v: v[0]).window(EventTimeSessionWindows.with_gap(10)).process(Describe())
            .uid("windows").sink_to(sink).uid("sink"))

    env = StreamEnvironment().set_parallelism(2)
    env.enable_checkpointing(50, checkpoint_storage=str(tmp_path / "chk"))
    build(env, watch=True)
    handle = env.execute_async("sessions, first part")
    deadline = clock.monotonic() + 20
    savepoint = None
    while clock.monotonic() < deadline:  # wait until the three records are in window state
        clock.sleep(0.3)
        if handle.status is not JobStatus.RUNNING:
            continue
        # rocksdb: a native savepoint (its store files), read offline through the canonical view
        try:
            savepoint = handle.trigger_savepoint(str(tmp_path / "sp"), stop=False,
                                                 native=backend == "rocksdb").result(30)
        except JobError as exc:  # its tasks are still starting (as Flink, the trigger is refused)
            assert "is starting or restarting" in str(exc)
            continue
        if len(list(SavepointReader.read(savepoint).read_keyed_state("windows", "window-contents"))) == 3:
            break
    handle.cancel()
    handle.wait(30)
    assert savepoint is not None and sink.values == []
    reader = SavepointReader.read(savepoint)
    assert reader.metadata.format.value == ("native" if backend == "rocksdb" else "canonical")
    # offline, a window is the namespace [start, end] of its contents and of its timers
    contents = sorted((e.key, list(e.namespace), [list(x) for x in e.value])
                      for e in reader.read_keyed_state("windows", "window-contents"))
    assert contents == [("a", [0, 10], [["a", 0]]), ("a", [20, 30], [["a", 20]]), ("b", [100, 110], [["b", 100]])]
    timers = sorted((e.key, list(e.namespace), list(e.user_key))
                    for e in reader.read_keyed_state("windows", "_window_timers"))
    assert timers == [("a", [0, 10], [0, 9]), ("a", [20, 30], [0, 29]), ("b", [100, 110], [0, 109])]
    sessions = sorted((e.key, e.value) for e in reader.read_keyed_state("windows", "window-merging-set"))
    assert sessions == [("a", [[0, 10], [20, 30]]), ("b", [[100, 110]])]
    (inputs / "b.txt").write_text("a\t10\n", encoding="utf-8")  # bridges the two sessions of a
    set_run_options(RunOptions(parallelism=3, restore_path=savepoint, state_backend=backend))
    try:
        env = StreamEnvironment()
        build(env, watch=False)
        env.execute("sessions, second part")
    finally:
        set_run_options(None)
    assert sorted(sink.values) == [("a", 0, 30, [0, 10, 20]), ("b", 100, 110, [100])]


def test_global_windows_never_fire_without_a_trigger() -> None:
    env = StreamEnvironment().set_parallelism(1)
    stream = env.from_collection([("a", 1), ("a", 2)]).key_by(lambda v: v[0]).window(GlobalWindows.create()).aggregate(Count())
    result, _ = run(env, stream)
    assert result == []
