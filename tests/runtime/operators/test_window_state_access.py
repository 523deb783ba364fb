"""The window operator's per-record state access: window state by explicit (key, namespace)
pairs on every backend that keeps namespaced state, and the window timers grouped by timestamp."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekit.runtime.api.state import MapStateDescriptor, ValueStateDescriptor
from statekit.runtime.api.windows.windows import TimeWindow, window_of
from statekit.runtime.operators.windows.state_access import HandleMaps, HandleValues, maps_by_pair, values_by_pair
from statekit.runtime.operators.windows.timers import EVENT_TIME, WINDOW_TIMERS, WindowTimers
from statekit.runtime.state.backend import KeyedStateBackend, SubtaskScope
from statekit.runtime.state.registry import create_keyed_backend, state_backend
from statekit.runtime.state.shared_map import SharedMap
from statekit.statefmt.keygroups import compute_key_group_range_for_operator_index

M = 128
NS = "list<int>"


@pytest.fixture(params=["hashmap", "rocksdb"])
def kind(request: pytest.FixtureRequest) -> str:
    """Every built-in backend (each keeps namespaced state)."""
    if not state_backend(request.param).available:
        pytest.skip(f"{state_backend(request.param).requires} is not installed")
    return str(request.param)


def make(kind: str, tmp_path: Path) -> KeyedStateBackend[Any]:
    scope = SubtaskScope("windows", 0, 1, M, "msgpack", compute_key_group_range_for_operator_index(M, 1, 0))
    return create_keyed_backend(kind, scope, working_dir=str(tmp_path))


def test_pairs_read_and_write_what_the_scoped_handles_see(kind: str, tmp_path: Path) -> None:
    b = make(kind, tmp_path)
    try:
        value = b.get_state(ValueStateDescriptor("v", namespace_type=NS))
        mapped = b.get_state(MapStateDescriptor("m", value_type="bool", key_type="list<int>", namespace_type=NS))
        values, maps = values_by_pair(b, value), maps_by_pair(b, mapped)  # type: ignore[arg-type]
        # a plain tuple and a TimeWindow of the same bounds are the same namespace
        values.put(("a", (0, 10)), 1)
        values.put(("a", (10, 20)), 2)
        maps.put(("a", (0, 10)), (0, 9), True)
        maps.put(("a", (0, 10)), (0, 19), True)
        b.current_key = "a"
        value.set_current_namespace(TimeWindow(0, 10))
        mapped.set_current_namespace(TimeWindow(0, 10))
        assert value.value() == 1
        assert sorted(tuple(k) for k in mapped.keys())  # noqa: SIM118 - MapState, not a dict == [(0, 9), (0, 19)]
        value.update(5)
        assert values.get(("a", TimeWindow(0, 10))) == 5
        assert values.pop(("a", (0, 10))) == 5
        assert values.get(("a", (0, 10))) is None and values.get(("a", (10, 20))) == 2
        values.put(("a", (10, 20)), None)  # None removes, as update(None) does
        assert values.get(("a", (10, 20))) is None
        maps.remove(("a", (0, 10)), (0, 9))
        assert [list(k) for k in mapped.keys()]  # noqa: SIM118 - MapState, not a dict == [[0, 19]]
        maps.remove(("a", (0, 10)), (0, 19))  # the last user key: the map goes
        assert mapped.is_empty() and list(b.namespaces("m")) == []
        maps.put(("b", (0, 10)), (0, 9), True)
        maps.clear(("b", (0, 10)))
        assert list(b.namespaces("m")) == []
    finally:
        b.close()


def test_the_hashmap_serves_pairs_itself_and_another_backend_through_its_handles(tmp_path: Path) -> None:
    b = make("hashmap", tmp_path)
    value = b.get_state(ValueStateDescriptor("v", namespace_type=NS))
    assert not isinstance(values_by_pair(b, value), HandleValues)  # type: ignore[arg-type]
    if state_backend("rocksdb").available:
        r = make("rocksdb", tmp_path)
        try:
            rv = r.get_state(ValueStateDescriptor("v", namespace_type=NS))
            rm = r.get_state(MapStateDescriptor("m", key_type="list<int>", namespace_type=NS))
            assert isinstance(values_by_pair(r, rv), HandleValues)  # type: ignore[arg-type]
            assert isinstance(maps_by_pair(r, rm), HandleMaps)  # type: ignore[arg-type]
        finally:
            r.close()


def test_a_hashmap_pair_read_while_a_snapshot_shares_the_table_is_a_private_copy(tmp_path: Path) -> None:
    b = make("hashmap", tmp_path)
    value = b.get_state(ValueStateDescriptor("v", namespace_type=NS))
    mapped = b.get_state(MapStateDescriptor("m", value_type="bool", key_type="list<int>", namespace_type=NS))
    values, maps = values_by_pair(b, value), maps_by_pair(b, mapped)  # type: ignore[arg-type]
    values.put(("a", (0, 10)), [1])
    maps.put(("a", (0, 10)), (0, 9), True)
    maps.put(("a", (0, 10)), (0, 19), True)
    snapshot = b.snapshot()
    try:
        live = {slot.descriptor.name: slot.data for slot in b.slots()}
        before_list, before_map = list(live["v"][("a", (0, 10))]), dict(live["m"][("a", (0, 10))])
        values.get(("a", (0, 10))).append(2)
        maps.put(("a", (0, 10)), (0, 29), True)
        maps.remove(("a", (0, 10)), (0, 9))
        # the snapshot's view (its copies of the tables) is unchanged
        copies = {table.descriptor.name: data for table, data in snapshot._copies}  # type: ignore[attr-defined]
        assert copies["v"][("a", (0, 10))] == before_list == [1]
        assert copies["m"][("a", (0, 10))] == before_map == {(0, 9): True, (0, 19): True}
        assert values.get(("a", (0, 10))) == [1, 2]
        assert dict(b.table_data("m")[("a", (0, 10))]) == {(0, 19): True, (0, 29): True}  # type: ignore[attr-defined]
    finally:
        snapshot.release()


def test_timers_fire_by_timestamp_then_registration_and_join_the_pass_of_their_timestamp(kind: str,
                                                                                          tmp_path: Path) -> None:
    b = make(kind, tmp_path)
    try:
        fired: list[tuple[Any, TimeWindow, int]] = []
        timers: WindowTimers

        def fire(key: Any, window: Any, timestamp: int, domain: int, pair: Any) -> None:
            assert domain == EVENT_TIME and b.current_key == key and isinstance(window, TimeWindow)
            assert pair == (key, tuple(window))
            fired.append((key, window, timestamp))
            if key == "a":  # while 10 fires: one more timer at 10 (fires in this pass) and one deleted
                b.current_key = "e"
                timers.register(EVENT_TIME, 10, TimeWindow(0, 11))
                b.current_key = "c"
                timers.delete(EVENT_TIME, 10, TimeWindow(10, 11))

        timers = WindowTimers(b, fire)
        w1, w2 = TimeWindow(0, 11), TimeWindow(10, 11)
        for key, timestamp, window in (("a", 10, w1), ("b", 10, w1), ("c", 10, w2), ("d", 5, w1),
                                       ("a", 10, w1), ("f", 20, w1)):
            b.current_key = key
            timers.register(EVENT_TIME, timestamp, window)
        assert timers.pending() == 5
        timers.advance_watermark(10)
        assert fired == [("d", w1, 5), ("a", w1, 10), ("b", w1, 10), ("e", w1, 10)]
        assert timers.pending() == 1
        # the state holds exactly the pending timer
        assert sorted(b.namespaces(WINDOW_TIMERS.name)) == [("f", (0, 11))]
        restored = WindowTimers(b, fire)
        restored.restore()
        fired.clear()
        restored.advance_watermark(30)
        assert fired == [("f", w1, 20)]
        assert list(b.namespaces(WINDOW_TIMERS.name)) == []
    finally:
        b.close()


def test_pairs_with_one_timer_hold_one_shared_map_that_no_write_changes(kind: str, tmp_path: Path) -> None:
    """Every pair whose only timer is at one timestamp holds that timestamp's one map (hashmap);
    a second timer, a removal or a scoped write gives the pair a map of its own and leaves the
    others' as they were, also while a snapshot shares the table; both backends read the same."""
    b = make(kind, tmp_path)
    try:
        timers = WindowTimers(b, lambda *args: None)
        window = TimeWindow(0, 10)
        for key in ("a", "b", "c", "d"):
            b.current_key = key
            timers.register(EVENT_TIME, 9, window)

        def maps() -> dict[Any, dict[Any, Any]]:
            out = {}
            for key, namespace in b.namespaces(WINDOW_TIMERS.name):
                b.current_key = key
                timers.state.set_current_namespace(window_of(namespace))
                out[key] = {tuple(k): v for k, v in timers.state.items()}
            return out

        if kind == "hashmap":
            data = b.table_data(WINDOW_TIMERS.name)  # type: ignore[attr-defined]
            held = [data[(key, (0, 10))] for key in "abcd"]
            assert all(m is held[0] for m in held) and type(held[0]) is SharedMap
        snapshot = b.snapshot() if kind == "hashmap" else None
        try:
            b.current_key = "a"
            timers.register(EVENT_TIME, 19, window)  # a second timer: "a" gets its own map
            b.current_key = "b"
            timers.delete(EVENT_TIME, 9, window)  # b's only timer: its entry goes
            b.current_key = "c"
            timers.state.set_current_namespace(window)
            timers.state.put((0, 29), True)  # a write through the scoped handle
            assert maps() == {"a": {(0, 9): True, (0, 19): True}, "c": {(0, 9): True, (0, 29): True},
                              "d": {(0, 9): True}}
            if snapshot is not None:
                copies = {t.descriptor.name: d for t, d in snapshot._copies}  # type: ignore[attr-defined]
                assert {k: dict(v) for k, v in copies[WINDOW_TIMERS.name].items()} == {
                    (key, (0, 10)): {(0, 9): True} for key in "abcd"}
                data = b.table_data(WINDOW_TIMERS.name)  # type: ignore[attr-defined]
                assert type(data[("a", (0, 10))]) is dict and type(data[("d", (0, 10))]) is SharedMap
        finally:
            if snapshot is not None:
                snapshot.release()
        fired: list[Any] = []
        restored = WindowTimers(b, lambda key, w, t, d, pair: fired.append((key, t)))
        restored.restore()
        restored.advance_watermark(30)
        assert sorted(fired) == [("a", 9), ("a", 19), ("c", 9), ("c", 29), ("d", 9)]
        assert list(b.namespaces(WINDOW_TIMERS.name)) == []
    finally:
        b.close()


def test_a_hashmap_table_owns_a_shared_map_before_any_change(tmp_path: Path) -> None:
    b = make("hashmap", tmp_path)
    mapped = b.get_state(MapStateDescriptor("m", value_type="bool", key_type="list<int>", namespace_type=NS))
    maps = maps_by_pair(b, mapped)  # type: ignore[arg-type]
    shared = SharedMap({(0, 9): True})
    maps.put_shared(("a", (0, 10)), shared)
    maps.put_shared(("b", (0, 10)), shared)
    maps.put_shared(("a", (0, 10)), SharedMap({(0, 19): True}))  # into a's map: a copy of its own
    maps.put(("b", (0, 10)), (0, 29), False)
    b.current_key = "c"
    mapped.set_current_namespace(TimeWindow(0, 10))
    maps.put_shared(("c", (0, 10)), shared)
    mapped.remove((0, 9))  # the scoped handle: c's only entry, the map goes
    assert shared == {(0, 9): True} and type(shared) is SharedMap
    data = b.table_data("m")  # type: ignore[attr-defined]
    assert data == {("a", (0, 10)): {(0, 9): True, (0, 19): True}, ("b", (0, 10)): {(0, 9): True, (0, 29): False}}
    assert all(type(m) is dict for m in data.values())
