"""A source's whole poll handed to a keyed exchange (its emitter's ``emit_all`` variant) and a whole input
buffer handed to a keyed process function (its handler's ``list_handler`` variant) give exactly what one
call per record gives: the same channels, buffers and flushes; the same state, outputs and errors."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import statekit.runtime.exchange.record_writer as record_writer_module
import statekit.runtime.task.task as task_module
from statekit.runtime.api.functions import KeyedProcessFunction, RuntimeContext
from statekit.runtime.api.state import ValueStateDescriptor
from statekit.runtime.connectors.sinks import CollectSink
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.exchange.batch_path import emit_all_of, list_handler, with_list_handler
from statekit.runtime.exchange.input_gate import InputGate
from statekit.runtime.exchange.partitioning import Partitioning
from statekit.runtime.exchange.record_writer import ChannelTarget, RecordWriter
from statekit.runtime.operators.one_input import KeyedProcessOperator


def _writer(channels: int, buffer_size: int) -> tuple[RecordWriter, list[InputGate]]:
    gates = [InputGate(100_000, 1) for _ in range(channels)]
    writer = RecordWriter([ChannelTarget(gate, 0) for gate in gates], Partitioning.HASH,
                          key_selector=lambda record: record[0], buffer_size=buffer_size)
    return writer, gates


def _delivered(gates: list[InputGate]) -> list[list[Any]]:
    out = []
    for gate in gates:
        payloads = []
        while (item := gate.poll()) is not None:
            payloads.append(list(item[1]))
        out.append(payloads)
    return out


keys = st.one_of(st.text(max_size=3), st.integers(-5, 5), st.lists(st.integers(0, 3), max_size=2))  # lists: unhashable


@settings(max_examples=60, deadline=None)
@given(st.lists(keys, max_size=120), st.integers(1, 9), st.integers(2, 4), st.integers(0, 120), st.integers(1, 4))
def test_a_whole_poll_is_routed_and_flushed_as_records_one_by_one(
        record_keys: list[Any], buffer_size: int, channels: int, cut: int, cache_limit: int) -> None:
    records = [(key, i) for i, key in enumerate(record_keys)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(record_writer_module, "_ROUTE_CACHE_LIMIT", cache_limit)  # the route cache fills and clears
        one, one_gates = _writer(channels, buffer_size)
        many, many_gates = _writer(channels, buffer_size)
        for record in records:
            one.emit(record)
        emit_all = emit_all_of(many.emit)
        emit_all(records[:cut])
        emit_all([])
        emit_all(records[cut:])
    assert [list(b) for b in many._buffers] == [list(b) for b in one._buffers]
    flushed = _delivered(many_gates)
    assert flushed == _delivered(one_gates)
    many.flush()
    delivered = [r for payloads in flushed + _delivered(many_gates) for p in payloads for r in p]
    assert sorted(delivered, key=lambda r: r[1]) == records


def test_a_source_to_one_channel_has_no_whole_poll_emitter() -> None:
    writer, _ = _writer(1, 4)
    assert emit_all_of(writer.emit) is None


class _RunningCount(KeyedProcessFunction):
    """A running count per key; fails on the record ``"boom"``."""

    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", "int"))

    def process_element(self, value: str, ctx: Any, out: Any) -> None:
        if value == "boom":
            raise ValueError("boom")
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        out.collect((value, count))


def _run(events: list[str], monkeypatch: pytest.MonkeyPatch, whole_buffers: bool) -> tuple[list[Any], int]:
    """The running count over ``events`` at parallelism 2 and how many buffers went to the keyed
    process function's ``list_handler`` variant (``whole_buffers=False``: the task never finds it and
    calls the handler once per record)."""
    calls = [0]
    element_handler = KeyedProcessOperator.element_handler

    def counted(op: KeyedProcessOperator) -> Any:
        handle = element_handler(op)
        many = list_handler(handle)

        def handle_all(values: list[Any]) -> None:
            calls[0] += 1
            many(values)

        with_list_handler(handle, handle_all)
        return handle

    with monkeypatch.context() as patch:
        patch.setattr(KeyedProcessOperator, "element_handler", counted)
        if not whole_buffers:
            patch.setattr(task_module, "list_handler", lambda handle: None)
        sink = CollectSink()
        env = StreamEnvironment().set_parallelism(2)
        (env.from_collection(events, "events").uid("events").key_by(lambda key: key)
            .process(_RunningCount(), "count").uid("count").sink_to(sink, "collect").uid("collect"))
        env.execute("batch paths")
    return sorted(sink.values), calls[0]


def test_a_keyed_process_function_takes_whole_buffers_as_records_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    events = [f"k{(i * 7919) % 97}" for i in range(5000)]
    by_record, none = _run(events, monkeypatch, whole_buffers=False)
    by_buffer, buffers = _run(events, monkeypatch, whole_buffers=True)
    assert none == 0 and buffers > 0
    assert by_buffer == by_record
    assert by_buffer[-1] == ("k96", max(c for k, c in by_record if k == "k96"))
    assert len(by_buffer) == 5000


def test_an_error_in_the_middle_of_a_buffer_fails_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    events = [f"k{i % 13}" for i in range(300)] + ["boom"] + [f"k{i % 13}" for i in range(300)]
    with pytest.raises(Exception, match="boom"):
        _run(events, monkeypatch, whole_buffers=True)


def test_only_the_batch_path_module_attaches_or_reads_variants() -> None:
    """The batch paths are one explicit interface: no other module sets or reads their attributes."""
    import ast
    from pathlib import Path

    import statekit.runtime.exchange.batch_path as batch_path

    attributes = {value for name, value in vars(batch_path).items() if name.startswith("_") and name.isupper()
                  and isinstance(value, str)}
    assert {"list_handler", "batch_handler", "emit_all", "emit_pair", "emit_assigned", "value_key_selector",
            "timestamped_handler"} <= attributes
    runtime = Path(batch_path.__file__).resolve().parents[1]
    found = []
    for path in runtime.rglob("*.py"):
        if path.name == "batch_path.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr") \
                    and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value in attributes:
                found.append(f"{path.relative_to(runtime)}:{node.lineno}")
    assert not found, found
