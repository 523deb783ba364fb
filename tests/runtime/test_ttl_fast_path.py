"""The fast paths of the record-time heap TTL value handle (``RecordTimeHeapTtlValueState``) and of
the wall-clock record handler (``ttl.record_timed_handler``): each gives exactly what the general
path gives, at its edges (a stamp reused across records and outside them, ``None``, values whose
class is not what ``type`` says, the float bounds of a millisecond)."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

import statekit.runtime.ttl as ttl_module
from statekit.runtime.backend import KeyedStateBackend, SubtaskScope, create_keyed_backend
from statekit.runtime.state import ValueStateDescriptor
from statekit.runtime.ttl import ManualClock, RecordTimeHeapTtlValueState, StateTtlConfig, record_timed_handler
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
