"""Event time: watermark strategies, generators, the input valve, and watermarks in running jobs."""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

import pytest

from statekit.readers.savepoint_reader import SavepointReader
from statekit.runtime.api.functions import KeyedProcessFunction
from statekit.runtime.api.watermarks import MAX_WATERMARK, WatermarkStrategy
from statekit.runtime.connectors.sinks import CollectSink
from statekit.runtime.connectors.sources import CollectionSource
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.dataflow.run_options import RunOptions, set_run_options
from statekit.runtime.exchange.events import Watermark, WatermarkStatus
from statekit.runtime.operators.event_time import SourceWatermarks
from statekit.runtime.task.time import WatermarkValve
from statekit.statefmt.errors import BadInputError


class ManualClock:
    def __init__(self, now: int = 1_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def by_second(value: Any, previous: int | None) -> int:
    return int(value[1])


# ---------------------------------------------------------------- strategies and generators


def test_bounded_out_of_orderness_trails_the_highest_timestamp() -> None:
    generator = WatermarkStrategy.for_bounded_out_of_orderness(5).create_watermark_generator()
    assert generator.current_watermark() < -(1 << 62)
    for ts in (10, 30, 20):
        generator.on_event(None, ts)
    assert generator.current_watermark() == 30 - 5 - 1


def test_monotonous_timestamps_trail_by_one_ms() -> None:
    generator = WatermarkStrategy.for_monotonous_timestamps().create_watermark_generator()
    generator.on_event(None, 100)
    assert generator.current_watermark() == 99


@pytest.mark.parametrize("build", [
    lambda: WatermarkStrategy.for_bounded_out_of_orderness(-1),
    lambda: WatermarkStrategy.for_monotonous_timestamps().with_idleness(0),
    lambda: WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("ts"),  # type: ignore[arg-type]
    lambda: WatermarkStrategy.for_monotonous_timestamps().with_watermark_interval(-5),
])
def test_bad_strategy_settings_are_refused(build: Any) -> None:
    with pytest.raises(BadInputError):
        build()


def test_one_argument_assigners_are_accepted() -> None:
    assign = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v: v * 2)
    assert assign.create_timestamp_assigner()(21, None) == 42


def test_records_without_timestamp_need_an_assigner() -> None:
    assign = WatermarkStrategy.for_monotonous_timestamps().create_timestamp_assigner()
    assert assign("x", 7) == 7
    with pytest.raises(BadInputError, match="timestamp assigner"):
        assign("x", None)


def test_periodic_emission_only_when_the_interval_passed_and_the_watermark_advanced() -> None:
    clock = ManualClock()
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(10).with_timestamp_assigner(by_second)
    source = SourceWatermarks(strategy, clock)
    seen: list[Any] = []
    from statekit.runtime.operators.event_time import ElementTime

    element = ElementTime()
    emit = source.assigning(seen.append, element)
    emit(("a", 100))
    assert element.timestamp == 100 and seen == [("a", 100)]
    assert source.tick() == [Watermark(89)]  # the first tick emits at once
    emit(("a", 150))
    assert source.tick() == []  # interval (200 ms) not passed
    clock.now += 200
    assert source.tick() == [Watermark(139)]
    clock.now += 200
    assert source.tick() == []  # did not advance
    emit(("b", 50))  # out of order: no change
    clock.now += 200
    assert source.tick() == []


def test_idleness_marks_the_source_idle_then_active_again() -> None:
    clock = ManualClock()
    strategy = (WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(by_second)
                .with_idleness(1_000).with_watermark_interval(0))
    source = SourceWatermarks(strategy, clock)
    from statekit.runtime.operators.event_time import ElementTime

    emit = source.assigning(lambda v: None, ElementTime())
    emit(("a", 5))
    assert source.tick() == [Watermark(4)]
    clock.now += 999
    assert source.tick() == []
    clock.now += 1
    assert source.tick() == [WatermarkStatus(idle=True)]
    assert source.tick() == []
    emit(("a", 9))
    assert source.tick() == [WatermarkStatus(idle=False), Watermark(8)]


# ---------------------------------------------------------------- the valve


def test_valve_is_the_minimum_over_channels_and_never_goes_back() -> None:
    valve = WatermarkValve(3)
    assert valve.on_watermark(0, 10) is None
    assert valve.on_watermark(1, 20) is None
    assert valve.on_watermark(2, 5) == 5
    assert valve.on_watermark(2, 30) == 10
    assert valve.on_watermark(0, 40) == 20
    assert valve.on_watermark(1, 1) is None  # a channel going back changes nothing
    assert valve.current == 20


def test_idle_channels_are_left_out_of_the_minimum() -> None:
    valve = WatermarkValve(2)
    assert valve.on_watermark(0, 100) is None  # channel 1 holds it back
    assert valve.on_status(1, True) == (100, None)
    assert valve.on_status(0, True) == (None, True)  # every channel idle: the task is idle
    assert valve.on_status(0, False) == (None, False)
    # channel 1 becomes active again: it may not pull the watermark back
    assert valve.on_status(1, False) == (None, None)
    assert valve.on_watermark(1, 50) is None and valve.current == 100
    assert valve.on_watermark(1, 150) is None
    assert valve.on_watermark(0, 200) == 150


def test_ended_channels_are_left_out() -> None:
    valve = WatermarkValve(2)
    valve.on_watermark(0, 70)
    assert valve.on_end(1) == 70


# ---------------------------------------------------------------- in jobs


class FireAt(KeyedProcessFunction):
    """Registers an event-time timer at each record's timestamp; emits (key, timer, watermark)."""

    def process_element(self, value: Any, ctx: Any, out: Any) -> None:
        ctx.timer_service().register_event_time_timer(ctx.timestamp())

    def on_timer(self, timestamp: int, ctx: Any, out: Any) -> None:
        out.collect((ctx.get_current_key(), timestamp, ctx.timer_service().current_watermark()))


def _events() -> list[tuple[str, int]]:
    return [(k, t) for t in range(0, 300, 10) for k in "abcd"]


def test_event_time_timers_fire_when_the_watermark_passes_them(tmp_path: Path) -> None:
    env = StreamEnvironment().set_parallelism(3)
    strategy = (WatermarkStrategy.for_bounded_out_of_orderness(25).with_timestamp_assigner(by_second)
                .with_watermark_interval(0))
    sink = CollectSink()
    (env.from_source(CollectionSource(_events()), "events", strategy).uid("source").set_parallelism(2)
        .map(lambda v: v, "identity").uid("map")
        .key_by(lambda v: v[0]).process(FireAt()).uid("timers")
        .sink_to(sink).uid("sink"))
    env.execute("timers")
    fired = sorted(sink.values)
    assert [(k, t) for k, t, _ in fired] == sorted((k, t) for k, t in _events())
    # a timer fires once the watermark reached it: the max watermark at the end, or earlier
    assert all(w >= t for _, t, w in fired)
    assert any(w == MAX_WATERMARK for _, _, w in fired)


class _Op:
    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def process_watermark(self, watermark: int) -> None:
        self.log.append(("op", watermark))


class _Writer:
    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def broadcast_event(self, event: Any) -> None:
        self.log.append(("out", event))


def test_a_task_forwards_the_minimum_of_its_channels_after_its_operators() -> None:
    from statekit.runtime.task.time import TaskTime

    log: list[Any] = []
    time = TaskTime(2)
    time.bind([_Op(log)], [_Writer(log)])  # type: ignore[list-item]
    time.on_input_event(0, Watermark(50))
    assert log == []
    time.on_input_event(1, Watermark(30))
    assert log == [("op", 30), ("out", Watermark(30))]
    log.clear()
    time.on_input_event(1, WatermarkStatus(idle=True))  # the idle channel no longer holds it back
    assert log == [("op", 50), ("out", Watermark(50))]
    log.clear()
    time.on_input_event(0, WatermarkStatus(idle=True))  # every input idle: the task is idle
    assert log == [("out", WatermarkStatus(idle=True))]


def test_source_watermark_state_is_in_its_snapshot(tmp_path: Path) -> None:
    env = StreamEnvironment().set_parallelism(1)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(7).with_timestamp_assigner(by_second)
    (env.from_source(CollectionSource(_events()), "events", strategy).uid("source")
        .key_by(lambda v: v[0]).process(FireAt()).uid("timers").sink_to(CollectSink()).uid("sink"))
    set_run_options(RunOptions(savepoint_on_finish=str(tmp_path / "sp")))
    try:
        env.execute("snapshot")
    finally:
        set_run_options(None)
    (path,) = glob.glob(str(tmp_path / "sp" / "savepoint-*"))
    assert SavepointReader.read(path).read_union_state("source", "_watermark") == [290]


def test_subtasks_without_records_leave_no_watermark_state() -> None:
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(by_second)
    source = SourceWatermarks(strategy, ManualClock())
    assert source.snapshot() == []
    restored = SourceWatermarks(strategy, ManualClock())
    restored.restore(500)
    assert restored.tick() == [Watermark(499)]  # before any record of the restored run


def test_unaligned_checkpoints_are_refused_with_event_time(tmp_path: Path) -> None:
    env = StreamEnvironment().set_parallelism(1)
    env.enable_checkpointing(100, checkpoint_storage=str(tmp_path / "chk")).enable_unaligned_checkpoints()
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(by_second)
    (env.from_source(CollectionSource(_events()), "events", strategy).uid("source")
        .key_by(lambda v: v[0]).process(FireAt()).uid("timers").sink_to(CollectSink()).uid("sink"))
    with pytest.raises(BadInputError, match="unaligned checkpoints do not support event time"):
        env.execute("unaligned")


def test_a_task_reading_timestamped_and_plain_channels_gives_each_record_its_own_timestamp() -> None:
    """Records cross timestamped channels as (value, timestamp) pairs; a task knows per channel
    which carry them, so a value that is itself a pair is never taken for one, and a record of a
    plain channel has no timestamp."""
    from statekit.runtime.api.functions import ProcessFunction

    class Stamp(ProcessFunction):
        def process_element(self, value: Any, ctx: Any, out: Any) -> None:
            out.collect((value, ctx.timestamp()))

    env = StreamEnvironment().set_parallelism(2)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: v[1] * 10)
    timed = env.from_source(CollectionSource([("t", i) for i in range(20)]), "timed", strategy).uid("timed")
    plain = env.from_collection([("p", i) for i in range(20)], "plain").uid("plain")
    sink = CollectSink()
    timed.union(plain).process(Stamp()).uid("stamp").sink_to(sink).uid("sink")
    env.execute("mixed channels")
    assert sorted(sink.values) == sorted([(("t", i), i * 10) for i in range(20)] + [(("p", i), None) for i in range(20)])
