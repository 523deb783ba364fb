"""The event-time window pipeline's fast paths do what the general paths do: a timestamped hash
edge's pair emitter routes as its tuple emitter, the window handler's direct table access keeps
the backend's copy-on-write, and the inlined end-of-window firing emits what the general firing
emits, with the window's max timestamp."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from statekit.runtime.api.functions import AggregateFunction, ProcessFunction
from statekit.runtime.api.state import ValueStateDescriptor
from statekit.runtime.api.watermarks import WatermarkStrategy
from statekit.runtime.api.windows.assigners import SlidingEventTimeWindows, TumblingEventTimeWindows
from statekit.runtime.api.windows.functions import ProcessWindowFunction
from statekit.runtime.connectors.sinks import CollectSink
from statekit.runtime.connectors.sources import CollectionSource
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.dataflow.graph import edge_key_selector
from statekit.runtime.exchange.batch_path import pair_emitter, value_key_selector
from statekit.runtime.exchange.input_gate import InputGate
from statekit.runtime.exchange.partitioning import Partitioning
from statekit.runtime.exchange.record_writer import ChannelTarget, RecordWriter
from statekit.runtime.operators.windows.state_access import values_by_pair
from statekit.runtime.state.backend import SubtaskScope
from statekit.runtime.state.backend_hashmap import ValuesByPair
from statekit.runtime.state.registry import create_keyed_backend
from statekit.statefmt.keygroups import compute_key_group_range_for_operator_index


def _writer(selector: Any) -> RecordWriter:
    targets = [ChannelTarget(InputGate(16, 3), i) for i in range(3)]
    return RecordWriter(targets, Partitioning.HASH, key_selector=selector, buffer_size=1_000_000)


def test_a_timestamped_edge_selector_names_the_value_selector() -> None:
    def value_key(value: Any) -> Any:
        return value[0]

    edge = SimpleNamespace(key_selector=value_key, source=SimpleNamespace(transformation=SimpleNamespace(timestamped=True)))
    selector = edge_key_selector(edge)
    assert selector is not None and value_key_selector(selector) is value_key
    assert selector((("k", 1), 5)) == "k"
    edge.source.transformation.timestamped = False
    assert edge_key_selector(edge) is value_key


def test_the_pair_emitter_routes_and_buffers_as_the_tuple_emitter() -> None:
    def value_key(value: Any) -> Any:
        return value[0]

    edge = SimpleNamespace(key_selector=value_key, source=SimpleNamespace(transformation=SimpleNamespace(timestamped=True)))
    by_tuple, by_pair = _writer(edge_key_selector(edge)), _writer(edge_key_selector(edge))
    emit_pair = pair_emitter(by_pair.emit)
    records = [((f"k{i % 7}", i), i * 10) for i in range(50)] + [(([1, 2], 0), 3)]  # an unhashable key too
    for value, timestamp in records:
        by_tuple.emit((value, timestamp))
        emit_pair(value, timestamp)
    pairs = [buffer.records() for buffer in by_pair._buffers]  # type: ignore[attr-defined]
    assert pairs == [buffer.records() for buffer in by_tuple._buffers]  # type: ignore[attr-defined]
    assert sum(map(len, pairs)) == len(records)


def test_a_plain_selector_has_no_pair_emitter() -> None:
    assert pair_emitter(_writer(lambda value: value).emit) is None


class ListCount(AggregateFunction):
    """A mutable accumulator: the records' timestamps in a list."""

    def create_accumulator(self) -> list[int]:
        return []

    def add(self, value: Any, accumulator: list[int]) -> list[int]:
        accumulator.append(value[1])
        return accumulator

    def get_result(self, accumulator: list[int]) -> list[int]:
        return list(accumulator)


def test_the_live_table_s_mutable_values_are_read_copy_on_write_while_a_snapshot_shares_it() -> None:
    scope = SubtaskScope("w", 0, 1, 128, "msgpack", compute_key_group_range_for_operator_index(128, 1, 0))
    backend = create_keyed_backend("hashmap", scope)
    contents = backend.get_state(ValueStateDescriptor("window-contents", namespace_type="list<int>"))
    values = values_by_pair(backend, contents)  # type: ignore[arg-type]
    assert isinstance(values, ValuesByPair)
    table = values.data
    pair = ("k", (0, 10))
    values.put(pair, [1])
    snapshot = backend.snapshot()
    shared = table[pair]
    # what the handler does for a value that is not an int: the copy-on-write read
    current = values.get(pair)
    current.append(2)
    table[pair] = current
    assert shared == [1] and table[pair] == [1, 2]
    snapshot.release()


class Stamp(ProcessFunction):
    """(value, the record's timestamp) — the timestamp a window gave its result."""

    def process_element(self, value: Any, ctx: Any, out: Any) -> None:
        out.collect((value, ctx.timestamp()))


class Count(AggregateFunction):
    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Any, accumulator: int) -> int:
        return accumulator + 1

    def get_result(self, accumulator: int) -> int:
        return accumulator


class KeyAndCount(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: Any, out: Any) -> None:
        for count in elements:
            out.collect(count)


@pytest.mark.parametrize("assigner", [TumblingEventTimeWindows.of(20), SlidingEventTimeWindows.of(20, 10)])
def test_inlined_end_of_window_firing_emits_what_a_window_function_sees(assigner: Any) -> None:
    events = [(k, t) for t in range(0, 100, 3) for k in "abc"]

    def fired(with_function: bool) -> list[Any]:
        env = StreamEnvironment().set_parallelism(2)
        strategy = WatermarkStrategy.for_bounded_out_of_orderness(5).with_timestamp_assigner(lambda v, ts: v[1])
        windowed = env.from_source(CollectionSource(events), "events", strategy).key_by(lambda v: v[0]).window(assigner)
        stream = windowed.aggregate(Count(), KeyAndCount()) if with_function else windowed.aggregate(Count())
        sink = CollectSink()
        stream.process(Stamp()).sink_to(sink)
        env.execute("fast firing")
        return sorted(sink.values)

    inlined = fired(False)
    assert inlined == fired(True)
    assert len(inlined) == (15 if isinstance(assigner, TumblingEventTimeWindows) else 33)
    assert all((stamp + 1) % 10 == 0 for _, stamp in inlined)  # each result carries its window's max timestamp
