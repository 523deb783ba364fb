"""Accumulators: each subtask's changes reach the job master as plain values with the task's
reports and are merged by name; CollectSink is built on them (nothing shared by reference)."""

from __future__ import annotations

import copy
from typing import Any

from statekit.runtime import CollectSink, IntCounter, ListAccumulator, MapFunction, RuntimeContext, StreamEnvironment
from statekit.runtime.api.accumulators import merge_accumulator


class _Counting(MapFunction):
    def open(self, runtime_context: RuntimeContext) -> None:
        self.seen = IntCounter()
        self.odd = ListAccumulator()
        runtime_context.add_accumulator("seen", self.seen)
        runtime_context.add_accumulator("odd", self.odd)

    def map(self, value: int) -> int:
        self.seen.add(1)
        if value % 2:
            self.odd.add(value)
        return value * 10


def test_accumulators_of_every_subtask_are_merged() -> None:
    sink = CollectSink()
    env = StreamEnvironment().set_parallelism(3)
    env.from_sequence(1, 1000).uid("numbers").rebalance().map(_Counting()).uid("count").sink_to(sink).uid("sink")
    result = env.execute("accumulators")
    assert result.get_accumulator_result("seen") == 1000
    assert sorted(result.accumulators["odd"]) == list(range(1, 1001, 2))
    assert sorted(sink.values) == [v * 10 for v in range(1, 1001)]
    assert sorted(result.accumulators[CollectSink.accumulator_name("sink")]) == sorted(sink.values)


def test_a_collect_sink_copy_shares_nothing_with_the_original() -> None:
    sink = CollectSink()
    copied = copy.deepcopy(sink)
    assert copied is not sink and copied.values is not sink.values


def test_changes_are_taken_once() -> None:
    counter, items = IntCounter(), ListAccumulator()
    for value in (1, 2, 3):
        counter.add(value)
        items.add(value)
    assert (counter.take_changes(), items.take_changes()) == (6, [1, 2, 3])
    assert (counter.take_changes(), items.take_changes()) == (None, None)
    counter.add(4)
    assert counter.take_changes() == 4
    merged: Any = None
    for change in ([1], [2, 3]):
        merged = merge_accumulator(merged, change)
    assert merged == [1, 2, 3] and merge_accumulator(5, 4) == 9


def test_a_copy_of_a_collect_sink_subclass_keeps_its_class_and_settings() -> None:
    class Slow(CollectSink):
        def __init__(self, delay: float) -> None:
            super().__init__()
            self.delay = delay

    sink = Slow(0.5)
    sink.values.append("mine")
    copied = copy.deepcopy(sink)
    assert type(copied) is Slow and copied.delay == 0.5 and copied.values == []
