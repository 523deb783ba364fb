"""The fast paths of the record-time heap TTL value handle (``RecordTimeHeapTtlValueState``) and of
the wall-clock record handler (``ttl.record_timed_handler``): each gives exactly what the general
path gives, at its edges (a stamp reused across records and outside them, ``None``, values whose
class is not what ``type`` says, the float bounds of a millisecond)."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

import pytest

import statekit.runtime.state.ttl as ttl_module
from statekit.runtime.api.state import ValueStateDescriptor
from statekit.runtime.api.ttl import ManualClock, StateTtlConfig
from statekit.runtime.exchange.batch_path import list_handler
from statekit.runtime.state.backend import KeyedStateBackend, SubtaskScope
from statekit.runtime.state.registry import create_keyed_backend
from statekit.runtime.state.ttl import RecordTimeHeapTtlValueState, record_timed_handler
from statekit.statefmt.keygroups import compute_key_group_range_for_operator_index

TTL = 100
T0 = 1_000_000


def backend(clock: Any) -> KeyedStateBackend[Any]:
    scope = SubtaskScope("op", 0, 1, 128, "msgpack", compute_key_group_range_for_operator_index(128, 1, 0))
    b = create_keyed_backend("hashmap", scope)
    b.ttl_clock = clock
    return b


def value_state(b: KeyedStateBackend[Any], default: Any = None) -> Any:
    descriptor = ValueStateDescriptor("v", default=default)
    descriptor.enable_time_to_live(StateTtlConfig.new_builder(TTL).build())
    state = b.get_state(descriptor)
    assert type(state) is RecordTimeHeapTtlValueState
    return state


def run(b: KeyedStateBackend[Any], key: Any, process: Any) -> None:
    """One record of ``key`` through the record handler, ``process()`` as its function."""
    handle = record_timed_handler(b, lambda record: record, lambda value, ctx, out: process(), None, None)
    assert handle is not None
    handle(key)


def table(b: KeyedStateBackend[Any]) -> dict[Any, Any]:
    return b.table_data("v")  # type: ignore[attr-defined, no-any-return]


# -- update ---------------------------------------------------------------------------------------


def test_a_write_outside_a_record_after_records_stamps_its_own_clock_reading() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    state = value_state(b)
    run(b, "a", lambda: state.update(1))  # stamps T0 + TTL for the record time T0
    clock.advance(50)
    b.current_key = "a"
    state.update(2)  # no record time: the clock, not the last record's stamp
    assert table(b)["a"] == (2, T0 + 50 + TTL)
    clock.advance(10)
    state.update(3)  # nor the last write's outside a record
    assert table(b)["a"] == (3, T0 + 60 + TTL)


def test_records_at_one_time_share_the_stamp_and_a_new_time_gets_a_new_one() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    state = value_state(b)
    run(b, "a", lambda: state.update(1))
    run(b, "b", lambda: state.update(2))
    assert table(b)["a"][1] is table(b)["b"][1] and table(b)["b"] == (2, T0 + TTL)
    clock.now_ms = T0 + 7  # another int object, another time
    run(b, "a", lambda: state.update(3))
    assert table(b)["a"] == (3, T0 + 7 + TTL)
    clock.now_ms = int(str(T0 + 7))  # an equal time as another object: stamped afresh, the same expiry
    run(b, "b", lambda: state.update(4))
    assert table(b)["b"] == (4, T0 + 7 + TTL)


def test_none_written_during_a_record_clears_the_entry() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    state = value_state(b, default="none")

    def process() -> None:
        state.update(1)  # stamps the record time: the next write of the record could reuse it
        state.update(None)

    run(b, "a", process)
    assert "a" not in table(b)
    seen: list[Any] = []
    run(b, "a", lambda: seen.append(state.value()))
    assert seen == ["none"]


# -- value ----------------------------------------------------------------------------------------


class ClaimsToBeAList:
    """An object whose ``__class__`` says list (as a proxy's may): read as a mutable value."""

    def __init__(self, items: list[int]) -> None:
        self.items = items

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return list

    def __deepcopy__(self, memo: dict[int, Any]) -> ClaimsToBeAList:
        return ClaimsToBeAList(list(self.items))


class Text(str):
    """A str subclass: neither a builtin class nor a mutable one, handed out as it is."""


@pytest.mark.parametrize("stored, same", [
    (7, True), ("seven", True), (7.5, True), (b"7", True), ((7, [8]), True), (frozenset({7}), True),
    (True, True), (Text("seven"), True),
    ([7], False), ({"seven": 7}, False), ({7}, False), (bytearray(b"7"), False), (ClaimsToBeAList([7]), False),
])
def test_a_live_value_read_during_a_record_is_the_stored_one_unless_mutable(stored: Any, same: bool) -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    state = value_state(b)
    seen: list[Any] = []
    run(b, "a", lambda: state.update(stored))
    clock.advance(TTL - 1)  # still live
    run(b, "a", lambda: seen.append(state.value()))
    assert (seen[0] is stored) is same
    if not same:
        assert type(seen[0]) is type(stored)  # a deep copy
    assert table(b)["a"][0] is stored


def test_a_read_during_a_record_at_the_expiry_removes_the_entry() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    state = value_state(b, default=0)
    run(b, "a", lambda: state.update(5))
    seen: list[Any] = []
    clock.now_ms = T0 + TTL - 1
    run(b, "a", lambda: seen.append(state.value()))
    clock.now_ms = T0 + TTL
    run(b, "a", lambda: seen.append(state.value()))
    assert seen == [5, 0] and "a" not in table(b)


def test_a_read_outside_a_record_reads_the_clock() -> None:
    clock = ManualClock(T0)
    b = backend(clock)
    state = value_state(b)
    run(b, "a", lambda: state.update(5))
    b.current_key = "a"
    clock.now_ms = T0 + TTL - 1
    assert state.value() == 5
    clock.now_ms = T0 + TTL
    assert state.value() is None and "a" not in table(b)


# -- the wall-clock record handler ----------------------------------------------------------------


class FakeTime:
    """``time.time`` standing still until moved; counts its readings."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.readings = 0

    def __call__(self) -> float:
        self.readings += 1
        return self.seconds


def test_the_millisecond_window_is_exactly_the_floats_of_that_millisecond() -> None:
    rng = random.Random(12)
    for i in range(20_000):
        t = rng.uniform(1.5e9, 2.0e9) if i % 2 else rng.uniform(0.0, 5.0)
        ms, lo, hi = ttl_module._millisecond_window(t)
        assert ms == int(t * 1000.0)
        if ms <= 0:
            assert lo == hi  # empty: no float is assumed to read as 0
            continue
        assert lo <= t < hi
        assert int(lo * 1000.0) == ms and int(math.nextafter(lo, 0.0) * 1000.0) == ms - 1
        assert int(math.nextafter(hi, 0.0) * 1000.0) == ms and int(hi * 1000.0) == ms + 1


@pytest.mark.parametrize("seconds", [1_700_000_000.25, 1_700_000_000.2505, 1_234_567_890.0019, 0.0005, 5e-324])
def test_the_wall_clock_handler_gives_the_system_clock_reading_at_the_window_bounds(
        monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    fake = FakeTime(seconds)
    monkeypatch.setattr(ttl_module, "_time", fake)
    b = backend(ttl_module.system_clock)
    value_state(b)
    times: list[Any] = []
    handle = record_timed_handler(b, lambda record: record, lambda v, c, o: times.append(b.record_time), None, None)
    assert handle is not None
    ms, lo, hi = ttl_module._millisecond_window(seconds)
    below = math.nextafter(lo, 0.0)
    for t in (seconds, lo, math.nextafter(hi, 0.0), hi, seconds, below, seconds):  # in, out, back
        fake.seconds = t
        handle("a")
        assert times[-1] == ttl_module.system_clock(), t
    assert fake.readings == 2 * 7  # one reading per record (and one per check here)
    assert times[0] is times[1] is times[2] or ms <= 0  # one int object per millisecond


# -- a whole buffer on the wall clock (list handler) -----------------------------------------------


class SteppingTime(FakeTime):
    """``time.time`` that moves ``step`` seconds after each reading."""

    def __init__(self, seconds: float, step: float) -> None:
        super().__init__(seconds)
        self.step = step

    def __call__(self) -> float:
        now = super().__call__()
        self.seconds += self.step
        return now


def buffer_handler(b: KeyedStateBackend[Any], process: Any) -> Any:
    handle = record_timed_handler(b, lambda record: record, process, None, None)
    assert handle is not None
    many = list_handler(handle)
    assert callable(many)
    return many


def test_a_buffer_shares_readings_over_spans_that_double_while_the_millisecond_holds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeTime(1_700_000_000.5)
    monkeypatch.setattr(ttl_module, "_time", fake)
    b = backend(ttl_module.system_clock)
    value_state(b)
    seen: list[tuple[Any, Any]] = []
    many = buffer_handler(b, lambda v, c, o: seen.append((b.current_key, b.record_time)))
    many(list(range(300)))
    assert [key for key, _ in seen] == list(range(300))  # every record, in order, as its own key
    assert {t for _, t in seen} == {1_700_000_000_500}
    # spans 1, 2, 4, ..., 64, then 64 each: one reading per span
    assert fake.readings == len([1, 2, 4, 8, 16, 32, 64, 64, 64, 45])
    assert b.record_time is None
    many(list(range(128)))  # the span persists across buffers
    assert fake.readings == 10 + 2


def test_a_span_that_took_milliseconds_is_divided_by_them(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = SteppingTime(1_700_000_000.0005, 0.0)  # mid-millisecond: float steps stay in theirs
    monkeypatch.setattr(ttl_module, "_time", fake)
    b = backend(ttl_module.system_clock)
    value_state(b)
    spans: dict[Any, int] = {}
    many = buffer_handler(b, lambda v, c, o: spans.__setitem__(b.record_time, spans.get(b.record_time, 0) + 1))
    many(list(range(127)))  # spans 1..64 at one millisecond: the span is 64 now
    fake.step = 0.004  # from here every reading is 4 ms after the one before
    spans.clear()
    many(list(range(64 + 16 + 4 + 1 + 1 + 1)))
    # the first reading of a buffer is compared with none; then 64 records took 4 ms: 64 // 4 = 16, ...
    assert sorted(spans.values(), reverse=True) == [64, 16, 4, 1, 1, 1]
    times = sorted(spans)
    assert all(later - earlier == 4 for earlier, later in itertools.pairwise(times))


def test_the_wait_between_buffers_does_not_shorten_the_span(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeTime(1_700_000_000.0)
    monkeypatch.setattr(ttl_module, "_time", fake)
    b = backend(ttl_module.system_clock)
    value_state(b)
    many = buffer_handler(b, lambda v, c, o: None)
    many(list(range(127)))
    fake.seconds += 3_600.0  # an hour idle before the next buffer
    readings = fake.readings
    many(list(range(128)))
    assert fake.readings - readings == 2  # spans of 64 still


def test_a_buffer_gives_the_state_the_per_record_path_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same records through the buffer handler and through one call per record, at clocks
    that give each span's reading to every record of it: equal tables, equal outputs."""
    results = []
    for whole in (True, False):
        fake = SteppingTime(1_700_000_000.0, 0.0)
        monkeypatch.setattr(ttl_module, "_time", fake)
        b = backend(ttl_module.system_clock)
        state = value_state(b)
        out: list[Any] = []

        def process(value: Any, ctx: Any, o: Any) -> None:
            count = (state.value() or 0) + 1  # noqa: B023 (the state of this loop's run)
            state.update(count)  # noqa: B023
            out.append((value, count))  # noqa: B023

        handle = record_timed_handler(b, lambda record: record[0], process, None, None)
        assert handle is not None
        records = [(f"k{i % 7}", i) for i in range(500)]
        if whole:
            list_handler(handle)(records)
        else:
            for record in records:
                handle(record)
        fake.seconds += (TTL + 1) / 1000  # past every expiry: both tables must expire alike
        handle(("k0", -1))
        results.append((out, dict(table(b))))
    assert results[0] == results[1]
    assert results[0][0][-1] == (("k0", -1), 1)


def test_a_record_that_raises_ends_its_buffer_and_clears_the_record_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ttl_module, "_time", FakeTime(1_700_000_000.0))
    b = backend(ttl_module.system_clock)
    value_state(b)
    seen: list[Any] = []

    def process(value: Any, ctx: Any, out: Any) -> None:
        if value == 5:
            raise RuntimeError("record 5")
        seen.append(value)

    many = buffer_handler(b, process)
    with pytest.raises(RuntimeError, match="record 5"):
        many(list(range(10)))
    assert seen == [0, 1, 2, 3, 4]
    assert b.record_time is None
