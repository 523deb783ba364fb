"""``assign_timestamps_and_watermarks`` on a timer (Flink's periodic watermark emission): a subtask
that receives no record still emits its watermark and turns idle, so event-time windows fire
downstream; and every task reports its input and output watermark."""

from __future__ import annotations

import time
from typing import Any

import pytest

from statekit.runtime.api.sources import Source, SourceReader, SourceReaderContext
from statekit.runtime.api.watermarks import WatermarkStrategy
from statekit.runtime.api.windows.assigners import TumblingEventTimeWindows
from statekit.runtime.api.windows.functions import ProcessWindowFunction
from statekit.runtime.connectors.sinks import CollectSink
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.dataflow.job_handle import JobHandle
from statekit.runtime.exchange.events import Watermark, WatermarkStatus
from statekit.runtime.operators.event_time import SourceWatermarks


class ManualClock:
    def __init__(self, now: int = 10_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def at(value: Any, previous: int | None) -> int:
    return int(value[1])


def test_next_tick_is_the_interval_after_records_and_the_idleness_deadline() -> None:
    clock = ManualClock()
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(0).with_timestamp_assigner(at).with_idleness(500)
    watermarks = SourceWatermarks(strategy, clock)
    assert watermarks.next_tick_ms() == 10_500  # no record yet: only the idleness deadline
    emitted: list[Any] = []
    emit = watermarks.assigning(emitted.append, _Element())
    emit(("a", 7_000))
    assert watermarks.next_tick_ms() == 10_000 - strategy.interval_ms + strategy.interval_ms  # due now: a record came
    clock.now = 10_050
    assert watermarks.tick() == [Watermark(6_999)]
    assert watermarks.next_tick_ms() == 10_050 + 500  # the watermark is out: idleness is what is left
    clock.now = 10_550
    assert watermarks.tick() == [WatermarkStatus(idle=True)]
    assert watermarks.next_tick_ms() is None  # idle, nothing to emit: no timer until the next record


class _Element:
    timestamp: int | None = None


class _Reader(SourceReader):
    """Subtask 0 emits ``(key, now)`` records for ever; the other subtasks never emit one."""

    idle_wait_s = 0.02

    def __init__(self, ctx: SourceReaderContext) -> None:
        self.active = ctx.subtask == 0
        self.sequence = 0

    def poll(self, max_records: int) -> tuple[list[Any], bool]:
        if not self.active:
            return [], False
        time.sleep(0.01)
        self.sequence += 1
        now = int(time.time() * 1000)
        return [(f"k{(self.sequence + i) % 4}", now) for i in range(4)], False


class Ticking(Source):
    @property
    def bounded(self) -> bool:
        return False

    def create_reader(self, ctx: SourceReaderContext) -> SourceReader:
        return _Reader(ctx)


class Count(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: Any, out: Any) -> None:
        out.collect((key, context.window().start, sum(1 for _ in elements)))


def _strategy() -> WatermarkStrategy:
    return WatermarkStrategy.for_bounded_out_of_orderness(0).with_timestamp_assigner(at).with_idleness(300)


def _wait_for_windows(handle: JobHandle, sink: CollectSink, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    try:
        while not sink.values:
            assert time.monotonic() < deadline, "no event-time window fired: an idle subtask holds the watermark back"
            assert not handle.status.is_terminal, handle.failure
            time.sleep(0.05)
    finally:
        handle.cancel()
        assert handle.wait(30).is_terminal


@pytest.mark.parametrize("where", ["source task", "input task"])
def test_windows_fire_while_an_assigner_subtask_receives_nothing(where: str) -> None:
    env = StreamEnvironment().set_parallelism(2)
    sink = CollectSink()
    stream = env.from_source(Ticking(), "ticking").uid("source")
    if where == "input task":  # every record to one subtask of the keyed pass-through; the assigner follows it
        stream = stream.set_parallelism(1).key_by(lambda v: "one").map(lambda v: v, "pass").uid("pass")
    (stream.assign_timestamps_and_watermarks(_strategy()).uid("timestamps")
        .key_by(lambda v: v[0]).window(TumblingEventTimeWindows.of(200)).process(Count(), "count").uid("windows")
        .sink_to(sink).uid("sink"))
    handle = env.execute_async(f"idleness in a {where}")
    _wait_for_windows(handle, sink)
    assert all(count > 0 for _, _, count in sink.values)


def test_tasks_report_their_input_and_output_watermarks() -> None:
    env = StreamEnvironment().set_parallelism(2)
    sink = CollectSink()
    (env.from_source(Ticking(), "ticking").uid("source")
        .assign_timestamps_and_watermarks(_strategy()).uid("timestamps")
        .key_by(lambda v: v[0]).window(TumblingEventTimeWindows.of(200)).process(Count(), "count").uid("windows")
        .sink_to(sink).uid("sink"))
    handle = env.execute_async("watermark figures")
    try:
        deadline = time.monotonic() + 30
        while True:
            tasks = handle.task_metrics()
            windows = [t for t in tasks if not t.report.source]
            if windows and all(t.report.input_watermark is not None for t in windows):
                break
            assert time.monotonic() < deadline, [t.report for t in tasks]
            time.sleep(0.05)
        sources = [t for t in tasks if t.report.source]
        assert all(t.report.input_watermark is None for t in sources)  # a source task has no input
        active = [t for t in sources if t.report.subtask == 0]
        assert active and active[0].report.output_watermark is not None
        now = time.time() * 1000
        assert all(now - 60_000 < (t.report.input_watermark or 0) <= now for t in windows)
        assert all(t.to_json()["watermarks"]["input"] == t.report.input_watermark for t in windows)
    finally:
        handle.cancel()
        assert handle.wait(30).is_terminal
