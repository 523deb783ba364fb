"""A keyed exchange of ``(value, timestamp)`` records to several channels carries them as
TimestampedBuffers (values and timestamps as two parallel lists), the consuming task hands a whole
buffer to the handler's batch variant when it has one (the event-time window handler has), and
what comes out is what the per-record path gives."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from statekit.runtime.api.functions import AggregateFunction
from statekit.runtime.api.side_outputs import OutputTag
from statekit.runtime.api.watermarks import WatermarkStrategy
from statekit.runtime.api.windows.assigners import SlidingEventTimeWindows, TumblingEventTimeWindows
from statekit.runtime.connectors.sinks import CollectSink
from statekit.runtime.connectors.sources import CollectionSource
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.dataflow.graph import edge_key_selector
from statekit.runtime.exchange.batch_path import (
    TimestampedBuffer,
    assigning_emitter,
    batch_handler,
    emit_all_of,
    pair_emitter,
    with_batch_handler,
)
from statekit.runtime.exchange.input_gate import InputGate
from statekit.runtime.exchange.partitioning import Partitioning
from statekit.runtime.exchange.record_writer import ChannelTarget, RecordWriter


def _timestamped_writer(channels: int, buffer_size: int) -> tuple[RecordWriter, list[InputGate]]:
    def value_key(value: Any) -> Any:
        return value[0]

    edge = SimpleNamespace(key_selector=value_key, source=SimpleNamespace(transformation=SimpleNamespace(timestamped=True)))
    gates = [InputGate(1000, 1) for _ in range(channels)]
    writer = RecordWriter([ChannelTarget(gate, 0) for gate in gates], Partitioning.HASH,
                          key_selector=edge_key_selector(edge), buffer_size=buffer_size)
    return writer, gates


def _received(gate: InputGate) -> list[Any]:
    payloads = []
    while (item := gate.poll()) is not None:
        payloads.append(item[1])
    return payloads


def test_a_timestamped_exchange_sends_values_and_timestamps_as_parallel_lists() -> None:
    writer, gates = _timestamped_writer(3, 4)
    emit_pair = pair_emitter(writer.emit)
    records = [((f"k{i % 20}", i), 100 + i) for i in range(80)]
    for i, (value, timestamp) in enumerate(records):
        if i % 2:
            emit_pair(value, timestamp)
        else:
            writer.emit((value, timestamp))  # the tuple emitter of an operator's output
    writer.flush()
    delivered: list[tuple[Any, Any]] = []
    used = 0
    for channel, gate in enumerate(gates):
        payloads = _received(gate)
        used += bool(payloads)
        assert all(p.__class__ is TimestampedBuffer for p in payloads)
        assert all(len(p) == len(p.timestamps) and len(p) <= 4 for p in payloads)
        got = [record for p in payloads for record in p.records()]
        assert all(writer.channel_for_key(value[0]) == channel for value, _ in got)
        delivered.extend(got)
    assert used >= 2 and sorted(delivered) == sorted(records)
    # per channel, in emission order
    for channel in range(len(gates)):
        mine = [r for r in records if writer.channel_for_key(r[0][0]) == channel]
        assert [r for r in delivered if writer.channel_for_key(r[0][0]) == channel] == mine
    assert all(b.__class__ is TimestampedBuffer and not b and not b.timestamps for b in writer._buffers)


def test_the_assigning_emitter_routes_as_the_pair_emitter() -> None:
    by_pair, _ = _timestamped_writer(3, 1_000_000)
    assigning, _ = _timestamped_writer(3, 1_000_000)
    values = [(f"k{i % 17}", (i * 31) % 97) for i in range(300)]
    previous: list[Any] = []

    def assign(value: Any, before: Any) -> Any:
        previous.append(before)
        return float(value[1])

    for value in values:
        pair_emitter(by_pair.emit)(value, value[1])
    last, highest = assigning_emitter(assigning.emit)(values, assign, -1, 50)
    assert [b.records() for b in assigning._buffers] == [b.records() for b in by_pair._buffers]
    assert all(t.__class__ is int for b in assigning._buffers for t in b.timestamps)
    assert previous == [-1] + [v[1] for v in values[:-1]]
    assert (last, highest) == (values[-1][1], 96)
    assert assigning_emitter(assigning.emit)([("a", 1)], assign, 0, 500) == (1, 500)


def test_a_timestamped_exchange_to_one_channel_keeps_pairs_in_plain_buffers() -> None:
    writer, gates = _timestamped_writer(1, 8)
    assert pair_emitter(writer.emit) is None
    writer.emit((("a", 1), 7))
    writer.flush()
    assert _received(gates[0]) == [[(("a", 1), 7)]]


def _buffer(records: list[tuple[Any, Any]]) -> TimestampedBuffer:
    buffer = TimestampedBuffer()
    for value, timestamp in records:
        buffer.append(value)
        buffer.timestamps.append(timestamp)
    return buffer


def test_deliver_calls_the_batch_handler_once_else_the_handler_per_record() -> None:
    records = [("a", 1), ("b", 2), ("c", 3)]
    per_record: list[Any] = []
    batches: list[Any] = []

    def handle(record: Any) -> None:
        per_record.append(record)

    _buffer(records).deliver(handle)
    assert per_record == records

    with_batch_handler(handle, lambda values, timestamps: batches.append((list(values), list(timestamps))))
    per_record.clear()
    _buffer(records).deliver(handle)
    assert per_record == [] and batches == [(["a", "b", "c"], [1, 2, 3])]


class Count(AggregateFunction):
    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Any, accumulator: int) -> int:
        return accumulator + 1

    def get_result(self, accumulator: int) -> int:
        return accumulator

    def merge(self, a: int, b: int) -> int:
        return a + b


def _run(assigner: Any, parallelism: int, lateness: int, kind: str,
         interval_ms: int = 0) -> tuple[list[Any], list[Any]]:
    """(fired results, late records) of a windowed count (``aggregate``: int contents, read from
    the live table) or a sum of timestamps per key (``reduce``: tuple contents, read copy-on-write)."""
    # out of order: every 7th record is 100 ms late, so some fall behind the watermark
    events = [(f"k{i % 11}", i * 2 - (100 if i % 7 == 3 else 0)) for i in range(600)]
    env = StreamEnvironment().set_parallelism(parallelism)
    strategy = (WatermarkStrategy.for_bounded_out_of_orderness(10).with_timestamp_assigner(lambda v, ts: v[1])
                .with_watermark_interval(interval_ms))
    late = OutputTag("late")
    fired, dropped = CollectSink(), CollectSink()
    windowed = (env.from_source(CollectionSource(events), "events", strategy).uid("source").set_parallelism(1)
                .key_by(lambda v: v[0]).window(assigner).allowed_lateness(lateness).side_output_late_data(late))
    windowed = (windowed.aggregate(Count()) if kind == "aggregate"
                else windowed.reduce(lambda a, b: (a[0], a[1] + b[1]))).uid("windows")
    windowed.sink_to(fired).uid("fired")
    windowed.get_side_output(late).sink_to(dropped).uid("late")
    env.execute("timestamped buffers")
    return sorted(fired.values), sorted(dropped.values)


@pytest.mark.parametrize("assigner", [TumblingEventTimeWindows.of(50), SlidingEventTimeWindows.of(50, 20)])
@pytest.mark.parametrize(("lateness", "kind"), [(0, "aggregate"), (15, "aggregate"), (15, "reduce")])
def test_windows_fed_by_whole_buffers_fire_what_the_per_record_path_fires(
        assigner: Any, lateness: int, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    batched: list[int] = []
    deliver = TimestampedBuffer.deliver

    def spy(self: TimestampedBuffer, handle: Any) -> None:
        if batch_handler(handle) is not None:
            batched.append(len(self))
        deliver(self, handle)

    monkeypatch.setattr(TimestampedBuffer, "deliver", spy)
    one = _run(assigner, 1, lateness, kind)  # one window subtask: plain buffers, a call per record
    assert not batched
    two = _run(assigner, 2, lateness, kind)  # a keyed exchange to two subtasks: TimestampedBuffers, batches
    assert sum(batched) == 600
    assert two == one
    fired, late = one
    assert fired and late  # some records were late, the rest fired


def _source_emitter(channels: int) -> tuple[Any, RecordWriter, Any, list[tuple[Any, Any]]]:
    """(per-record emitter of a source's watermarks to a timestamped writer, the writer, the
    watermarks, the (value, previous timestamp) pairs its assigner was called with)."""
    from statekit.runtime.operators.event_time import SourceWatermarks
    from statekit.runtime.task.time import TaskTime

    seen: list[tuple[Any, Any]] = []

    def assign(value: Any, previous: Any) -> Any:
        seen.append((value, previous))
        return float(value[1])  # a float timestamp becomes an int

    writer, _ = _timestamped_writer(channels, 1_000_000)
    writer.timestamped = True
    time = TaskTime(1)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(5).with_timestamp_assigner(assign)
    watermarks = SourceWatermarks(strategy, clock=lambda: 0)
    return watermarks.assigning(time.emitter(writer), time.element, None), writer, watermarks, seen


def test_a_source_emits_a_whole_poll_as_it_emits_each_record() -> None:

    values = [(f"k{i % 13}", (i * 37) % 101) for i in range(200)]  # out of order
    one, one_writer, one_watermarks, one_seen = _source_emitter(3)
    all_, all_writer, all_watermarks, all_seen = _source_emitter(3)
    emit_all = emit_all_of(all_)
    for value in values[:120]:
        one(value)
    for value in values[120:]:
        one(value)
    emit_all(values[:120])
    emit_all([])
    emit_all(values[120:])
    assert [b.records() for b in all_writer._buffers] == [b.records() for b in one_writer._buffers]
    assert sum(len(b) for b in all_writer._buffers) == 200
    assert all(t.__class__ is int for b in all_writer._buffers for t in b.timestamps)
    assert all_seen == one_seen and all_seen[1] == (values[1], values[0][1])
    assert all_watermarks.generator.current_watermark() == one_watermarks.generator.current_watermark() == 100 - 6
    assert all_watermarks.tick() == one_watermarks.tick() != []


def test_a_source_to_one_channel_has_no_whole_poll_emitter() -> None:

    one, _, _, _ = _source_emitter(1)
    assert emit_all_of(one) is None


def test_a_source_task_hands_whole_polls_to_a_keyed_exchange(monkeypatch: pytest.MonkeyPatch) -> None:
    from statekit.runtime.operators.event_time import SourceWatermarks

    polled: list[int] = []
    make = SourceWatermarks._assigning_all

    def spy(self: Any, emit_assigned: Any, element: Any) -> Any:
        emit_all = make(self, emit_assigned, element)

        def counting(values: list[Any]) -> None:
            polled.append(len(values))
            emit_all(values)

        return counting

    monkeypatch.setattr(SourceWatermarks, "_assigning_all", spy)
    # periodic watermarks (with interval 0 a watermark follows each record: records go one by one)
    fired, late = _run(TumblingEventTimeWindows.of(50), 2, 0, "aggregate", interval_ms=200)
    assert sum(polled) == 600 and sum(fired) + len(late) == 600
