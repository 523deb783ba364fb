"""Side outputs: OutputTag, ctx.output in process functions, stream.get_side_output."""

from __future__ import annotations

from typing import Any

import pytest

from statekit.runtime.api.functions import KeyedProcessFunction, ProcessFunction
from statekit.runtime.api.side_outputs import OutputTag
from statekit.runtime.connectors.sinks import CollectSink
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.statefmt.errors import BadInputError

EVEN, BIG = OutputTag("even"), OutputTag("big")


class Split(ProcessFunction):
    def process_element(self, value: int, ctx: Any, out: Any) -> None:
        if value % 2 == 0:
            ctx.output(EVEN, value)
        if value > 90:
            ctx.output(BIG, f"big:{value}")
        out.collect(value)


@pytest.mark.parametrize("parallelism", [1, 3])
def test_side_outputs_reach_only_the_streams_of_their_tag(parallelism: int) -> None:
    env = StreamEnvironment().set_parallelism(parallelism)
    main, even, big = CollectSink(), CollectSink(), CollectSink()
    split = env.from_sequence(1, 100).uid("source").process(Split()).uid("split")
    split.sink_to(main).uid("main")
    split.get_side_output(EVEN).map(lambda v: v * 10).uid("times-ten").sink_to(even).uid("even")
    split.get_side_output(BIG).sink_to(big).uid("big")
    env.execute("side outputs")
    assert sorted(main.values) == list(range(1, 101))
    assert sorted(even.values) == [v * 10 for v in range(2, 101, 2)]
    assert sorted(big.values) == sorted(f"big:{v}" for v in range(91, 101))


class Alerts(KeyedProcessFunction):
    def process_element(self, value: tuple[str, int], ctx: Any, out: Any) -> None:
        if value[1] < 0:
            ctx.output(OutputTag("negative"), (ctx.get_current_key(), value[1]))
        else:
            out.collect(value)


def test_keyed_process_functions_emit_side_outputs_by_tag_name() -> None:
    env = StreamEnvironment().set_parallelism(2)
    main, negative = CollectSink(), CollectSink()
    events = [("a", 1), ("b", -2), ("a", -3), ("c", 4)]
    alerts = env.from_collection(events).uid("source").key_by(lambda v: v[0]).process(Alerts()).uid("alerts")
    alerts.sink_to(main).uid("main")
    alerts.get_side_output(OutputTag("negative")).sink_to(negative).uid("negative")
    env.execute("keyed side outputs")
    assert sorted(main.values) == [("a", 1), ("c", 4)]
    assert sorted(negative.values) == [("a", -3), ("b", -2)]


def test_side_outputs_without_a_consumer_are_dropped() -> None:
    env = StreamEnvironment().set_parallelism(1)
    main = CollectSink()
    env.from_sequence(1, 10).uid("source").process(Split()).uid("split").sink_to(main).uid("main")
    env.execute("no consumer")
    assert sorted(main.values) == list(range(1, 11))


def test_bad_tags_are_refused() -> None:
    with pytest.raises(BadInputError):
        OutputTag("")
    env = StreamEnvironment()
    with pytest.raises(BadInputError, match="OutputTag"):
        env.from_sequence(1, 2).process(Split()).get_side_output("even")  # type: ignore[arg-type]
