"""The per-record TTL time: a keyed process operator reads the TTL clock once per record
(``ttl.record_timed_handler``) and the heap TTL value handles on that clock use that reading for
every access of the record; outside a record they read the clock themselves."""

from __future__ import annotations

from typing import Any

import pytest

from statekit.runtime.api.state import ValueStateDescriptor
from statekit.runtime.api.ttl import ManualClock, StateTtlConfig, StateTtlConfigBuilder
from statekit.runtime.state.backend import KeyedStateBackend, SubtaskScope
from statekit.runtime.state.registry import create_keyed_backend
from statekit.runtime.state.ttl import RecordTimeHeapTtlValueState, record_timed_handler
from statekit.statefmt.keygroups import compute_key_group_range_for_operator_index

TTL = 100
T0 = 1_000_000


class CountingClock(ManualClock):
    """A manual clock that counts its readings."""

    def __init__(self, now_ms: int) -> None:
        super().__init__(now_ms)
        self.readings = 0

    def __call__(self) -> int:
        self.readings += 1
        return self.now_ms


def backend(clock: ManualClock, kind: str = "hashmap") -> KeyedStateBackend[Any]:
    scope = SubtaskScope("op", 0, 1, 128, "msgpack", compute_key_group_range_for_operator_index(128, 1, 0))
    b = create_keyed_backend(kind, scope)
    b.ttl_clock = clock
    return b


def value_state(b: KeyedStateBackend[Any], builder: StateTtlConfigBuilder | None = None, name: str = "v") -> Any:
    descriptor = ValueStateDescriptor(name)
    descriptor.enable_time_to_live((builder or StateTtlConfig.new_builder(TTL)).build())
    return b.get_state(descriptor)


def handler(b: KeyedStateBackend[Any], process: Any) -> Any:
    handle = record_timed_handler(b, lambda record: record[0], process, None, None)
    assert handle is not None
    return handle


def test_a_record_reads_the_clock_once_and_every_access_of_it_uses_that_reading() -> None:
    clock = CountingClock(T0)
    b = backend(clock)
    state = value_state(b)
    seen = []

    def process(record: Any, ctx: Any, out: Any) -> None:
        seen.append(state.value())
        clock.advance(TTL)  # the clock moves during the record: its accesses keep the record's time
        state.update(record[1])
        seen.append(state.value())

    handle = handler(b, process)
    handle(("a", 1))
    assert clock.readings == 1
    assert b.table_data("v")["a"] == (1, T0 + TTL)  # type: ignore[attr-defined]
    assert seen == [None, 1]
    assert b.record_time is None  # outside a record there is no record time


def test_expiry_is_exact_at_the_record_time() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    state = value_state(b)
    seen = []
    handle = handler(b, lambda record, ctx, out: seen.append(state.value()))
    b.current_key = "a"
    state.update("x")  # outside a record: stamped with the clock, T0 + TTL
    clock.now_ms = T0 + TTL - 1
    handle(("a", None))
    clock.now_ms = T0 + TTL
    handle(("a", None))
    assert seen == ["x", None]
    assert "a" not in b.table_data("v")  # type: ignore[attr-defined]


def test_outside_a_record_the_handle_reads_its_clock() -> None:
    clock = CountingClock(T0)
    b = backend(clock)
    state = value_state(b)
    handler(b, lambda record, ctx, out: state.update(record[1]))(("a", 1))
    clock.advance(TTL)  # e.g. a timer firing later: no record time is left over from the record
    b.current_key = "a"
    assert state.value() is None
    assert clock.readings == 2


def test_the_record_time_is_cleared_when_the_record_fails() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    state = value_state(b)

    def process(record: Any, ctx: Any, out: Any) -> None:
        state.update(record[1])
        raise RuntimeError("user function failed")

    with pytest.raises(RuntimeError):
        handler(b, process)(("a", 1))
    assert b.record_time is None


def test_a_state_on_another_clock_reads_its_own_clock_during_a_record() -> None:
    clock, own = ManualClock(T0), ManualClock(T0 + 5 * TTL)
    b = backend(clock)
    state = value_state(b)
    other = value_state(b, StateTtlConfig.new_builder(TTL).set_ttl_clock(own), "other")
    assert type(state) is RecordTimeHeapTtlValueState and type(other) is not RecordTimeHeapTtlValueState

    def process(record: Any, ctx: Any, out: Any) -> None:
        state.update(record[1])
        other.update(record[1])

    handler(b, process)(("a", 1))
    assert b.table_data("v")["a"] == (1, T0 + TTL)  # type: ignore[attr-defined]
    assert b.table_data("other")["a"] == (1, T0 + 6 * TTL)  # type: ignore[attr-defined]


def test_no_record_time_without_a_heap_value_handle() -> None:
    clock = ManualClock(T0)
    rocks = backend(clock, "rocksdb")
    value_state(rocks)  # the generic handle: it reads the clock per access
    assert record_timed_handler(rocks, lambda r: r, lambda r, c, o: None, None, None) is None
    rocks.close()
    plain = backend(clock)
    plain.get_state(ValueStateDescriptor("v"))
    assert record_timed_handler(plain, lambda r: r, lambda r, c, o: None, None, None) is None


def test_a_job_reads_the_ttl_clock_once_per_record() -> None:
    """A keyed process function's read-modify-write of a TTL value state: n records, n readings."""
    from jobs_for_checkpoints import run_with

    from statekit.runtime.api.functions import KeyedProcessFunction, RuntimeContext
    from statekit.runtime.connectors.sinks import CollectSink
    from statekit.runtime.dataflow.environment import StreamEnvironment
    from statekit.runtime.dataflow.job_handle import JobStatus
    from statekit.runtime.dataflow.run_options import RunOptions

    clock = CountingClock(T0)
    n = 500

    class TtlCount(KeyedProcessFunction):
        def open(self, ctx: RuntimeContext) -> None:
            descriptor = ValueStateDescriptor("count", "int")
            descriptor.enable_time_to_live(StateTtlConfig.new_builder(TTL).set_ttl_clock(clock).build())
            self.count = ctx.get_state(descriptor)

        def process_element(self, value: int, ctx: Any, out: Any) -> None:
            count = (self.count.value() or 0) + 1  # type: ignore[attr-defined]
            self.count.update(count)  # type: ignore[attr-defined]
            out.collect(count)

    sink = CollectSink()
    env = StreamEnvironment().set_parallelism(1)
    (env.from_sequence(1, n).uid("numbers")
        .key_by(lambda v: v % 10)
        .process(TtlCount()).uid("counter")
        .sink_to(sink).uid("sink"))
    result = run_with(env, RunOptions(), "ttl record time")
    assert result.status is JobStatus.FINISHED
    assert sorted(sink.values) == sorted(c for _ in range(10) for c in range(1, n // 10 + 1))
    assert clock.readings == n


def test_a_value_of_an_unhashable_class_is_handed_out_as_it_is() -> None:
    class Unhashable(type):
        def __eq__(cls, other: object) -> bool:
            return cls is other

        __hash__ = None  # type: ignore[assignment]

    class Odd(metaclass=Unhashable):
        pass

    clock = ManualClock(T0)
    b = backend(clock)
    state = value_state(b)
    b.current_key = "a"
    odd = Odd()
    state.update(odd)
    assert state.value() is odd
    state.update([1])
    copied = state.value()
    copied.append(2)
    assert state.value() == [1]  # a mutable value is a copy


class FakeTime:
    """``time.time`` standing still until moved (seconds, a float, as ``time.time`` returns)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self) -> float:
        return self.seconds


def test_on_the_wall_clock_a_record_gets_the_current_millisecond(monkeypatch: pytest.MonkeyPatch) -> None:
    import statekit.runtime.state.ttl as ttl_module
    from statekit.runtime.state.ttl import system_clock

    fake = FakeTime(1_700_000_000.25)
    monkeypatch.setattr(ttl_module, "_time", fake)
    scope = SubtaskScope("op", 0, 1, 128, "msgpack", compute_key_group_range_for_operator_index(128, 1, 0))
    b = create_keyed_backend("hashmap", scope)
    state = value_state(b)
    assert b.record_clock is system_clock
    times = []
    handle = handler(b, lambda record, ctx, out: (times.append(b.record_time), state.update(record[1])))
    stamps = []
    for seconds in (1_700_000_000.25, 1_700_000_000.2505,  # one millisecond
                    1_700_000_000.2515,  # the next one
                    1_699_999_999.5):  # the clock stepped back: the time follows it
        fake.seconds = seconds
        handle(("a", seconds))
        assert times[-1] == system_clock()
        assert b.table_data("v")["a"] == (seconds, system_clock() + TTL)  # type: ignore[attr-defined]
        stamps.append(b.table_data("v")["a"][1] - TTL)  # type: ignore[attr-defined]
    assert stamps == [1_700_000_000_250, 1_700_000_000_250, 1_700_000_000_251, 1_699_999_999_500]
    assert times[0] is times[1]  # one int object per millisecond
    seen = []
    reader = handler(b, lambda record, ctx, out: seen.append(state.value()))
    expiry = 1_699_999_999_500 + TTL
    fake.seconds = (expiry - 0.01) / 1000  # the last moment before the expiry
    reader(("a", None))
    fake.seconds = (expiry + 0.01) / 1000
    reader(("a", None))
    assert seen == [1_699_999_999.5, None]


def test_during_a_record_an_entry_restored_without_expiry_never_expires() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    state = value_state(b)
    b.table_data("v")["a"] = ("kept", None)  # type: ignore[attr-defined]  # as a restore leaves it
    seen = []
    handle = handler(b, lambda record, ctx, out: seen.append(state.value()))
    clock.advance(100 * TTL)
    handle(("a", None))
    assert seen == ["kept"] and b.table_data("v")["a"] == ("kept", None)  # type: ignore[attr-defined]
