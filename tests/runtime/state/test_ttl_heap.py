"""The heap TTL value handle (``HeapTtlValueState``): chosen for the hashmap backend's value state
with the default update type and visibility and no background cleanup, and the same behaviour as
the generic ``TtlValueState`` it replaces there, on a manual clock and on the wall clock."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

import statekit.runtime.state.ttl as ttl_module
from statekit.readers.savepoint_reader import SavepointReader
from statekit.runtime.api.state import ValueStateDescriptor
from statekit.runtime.api.ttl import ManualClock, StateTtlConfig, StateTtlConfigBuilder
from statekit.runtime.checkpoint.storage import SnapshotOutput
from statekit.runtime.state.backend import KeyedStateBackend, SubtaskScope
from statekit.runtime.state.registry import create_keyed_backend
from statekit.runtime.state.ttl import (
    HeapTtlValueState,
    RecordTimeHeapTtlValueState,
    TtlValueState,
    system_clock,
    ttl_value_state,
)
from statekit.statefmt.entries import KeyedStateEntry
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.keygroups import compute_key_group_range_for_operator_index
from statekit.statefmt.metadata import (
    CheckpointMetadata,
    OperatorMetadata,
    SnapshotFormat,
    SnapshotKind,
    SubtaskState,
)
from statekit.writers.state_writer import commit_metadata

TTL = 100
T0 = 1_000_000


def backend(kind: str = "hashmap", clock: ManualClock | None = None) -> KeyedStateBackend[Any]:
    scope = SubtaskScope("op", 0, 1, 128, "msgpack", compute_key_group_range_for_operator_index(128, 1, 0))
    b = create_keyed_backend(kind, scope)
    if clock is not None:
        b.ttl_clock = clock
    return b


def value_state(b: KeyedStateBackend[Any], builder: StateTtlConfigBuilder, name: str = "v",
                default: Any = None) -> Any:
    descriptor = ValueStateDescriptor(name, default=default)
    descriptor.enable_time_to_live(builder.build())
    return b.get_state(descriptor)


def test_the_heap_handle_serves_the_default_config_on_the_hashmap_backend_only() -> None:
    clock = ManualClock(T0)
    b = backend(clock=clock)
    first = value_state(b, StateTtlConfig.new_builder(TTL).cleanup_full_snapshot(), "a")
    assert type(first) is RecordTimeHeapTtlValueState and b.record_clock is clock  # the first one names it
    assert type(value_state(b, StateTtlConfig.new_builder(TTL), "same clock")) is RecordTimeHeapTtlValueState
    own = StateTtlConfig.new_builder(TTL).set_ttl_clock(ManualClock(T0))
    assert type(value_state(b, own, "own clock")) is HeapTtlValueState  # not the record clock
    assert type(value_state(b, StateTtlConfig.new_builder(TTL).set_ttl_clock(system_clock), "wall")) \
        is HeapTtlValueState  # the wall clock, but not this backend's record clock
    wall = backend()
    assert type(value_state(wall, StateTtlConfig.new_builder(TTL))) is RecordTimeHeapTtlValueState
    assert wall.record_clock is system_clock
    others = {
        "read": StateTtlConfig.new_builder(TTL).update_ttl_on_read_and_write(),
        "visible": StateTtlConfig.new_builder(TTL).return_expired_if_not_cleaned_up(),
        "incremental": StateTtlConfig.new_builder(TTL).cleanup_incrementally(3),
        "sweep": StateTtlConfig.new_builder(TTL).cleanup_in_rocksdb_compact_filter(10),
    }
    for name, builder in others.items():
        assert type(value_state(b, builder, name)) is TtlValueState, name


def test_a_backend_without_a_heap_table_gets_the_generic_handle() -> None:
    class Raw:  # stands for any backend's own value handle
        pass

    b = backend(clock=ManualClock(T0))
    config = StateTtlConfig.new_builder(TTL).build()
    assert type(ttl_value_state(b, "v", config, Raw(), None, None)) is TtlValueState  # type: ignore[arg-type]


HEAP_MODES = ["record time", "no record time", "own clock"]


def _pair(seed: int, mode: str) -> tuple[list[Any], list[Any], dict[Any, Any], dict[Any, Any]]:
    """The same random accesses on a heap handle and on the generic handle over the same backend
    kind and clock: what each access returned, and both tables afterwards. ``mode``: the record
    time handle, each access a record of its own (the backend's ``record_time`` is the clock's
    reading) or outside any record, or the heap handle that reads its own clock."""
    rng = random.Random(seed)
    clock = ManualClock(T0)
    heap_backend, generic_backend = backend(clock=clock), backend(clock=clock)
    heap = value_state(heap_backend, StateTtlConfig.new_builder(TTL), default=-1)
    assert type(heap) is RecordTimeHeapTtlValueState
    if mode == "own clock":
        heap = HeapTtlValueState(heap_backend, heap_backend.table_data("v"), TTL, clock, -1)  # type: ignore[attr-defined]
    generic_config = StateTtlConfig.new_builder(TTL).build()
    raw = generic_backend.handle_types.value_state(generic_backend, generic_backend.declare(
        ValueStateDescriptor("v", default=-1).to_metadata()), None)
    generic = TtlValueState(generic_backend, "v", generic_config, raw, -1)
    seen: tuple[list[Any], list[Any]] = ([], [])
    for _ in range(2000):
        key, op, value = f"k{rng.randrange(8)}", rng.randrange(10), rng.choice([None, 0, 1, "x", [1, 2]])
        if op < 4:
            clock.advance(rng.choice([0, 1, 7, TTL - 1, TTL]))
        if mode == "record time":
            heap_backend.record_time = clock()
        for b, state, out in ((heap_backend, heap, seen[0]), (generic_backend, generic, seen[1])):
            b.current_key = key
            if op < 6:
                out.append(state.value())
            elif op < 9:
                state.update(value)
            else:
                state.clear()
        heap_backend.record_time = None
    return seen[0], seen[1], heap_backend.table_data("v"), generic_backend.table_data("v")  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", HEAP_MODES)
@pytest.mark.parametrize("seed", range(5))
def test_the_heap_handle_behaves_as_the_generic_handle(seed: int, mode: str) -> None:
    heap_seen, generic_seen, heap_table, generic_table = _pair(seed, mode)
    assert heap_seen == generic_seen
    assert {k: tuple(v) for k, v in heap_table.items()} == {k: tuple(v) for k, v in generic_table.items()}


def test_expiry_is_exact_at_the_millisecond() -> None:
    clock = ManualClock(T0)
    b = backend(clock=clock)
    state = value_state(b, StateTtlConfig.new_builder(TTL))
    b.current_key = "a"
    state.update(5)
    assert b.table_data("v")["a"] == (5, T0 + TTL)  # type: ignore[attr-defined]
    clock.now_ms = T0 + TTL - 1
    assert state.value() == 5
    clock.now_ms = T0 + TTL
    assert state.value() is None and "a" not in b.table_data("v")  # type: ignore[attr-defined]


def test_a_restored_entry_without_expiry_never_expires_and_mutables_are_handed_out_as_copies() -> None:
    clock = ManualClock(T0)
    b = backend(clock=clock)
    state = value_state(b, StateTtlConfig.new_builder(TTL), default=[])
    descriptor = b.descriptors()[0]
    b.restore_state(descriptor, [KeyedStateEntry("old", None, [1], None)])
    table = b.table_data("v")  # type: ignore[attr-defined]
    b.current_key = "old"
    clock.advance(10 * TTL)
    got = state.value()
    assert got == [1]
    got.append(2)
    assert state.value() == [1] and table["old"] == ([1], None)
    b.current_key = "new"
    default = state.value()
    default.append(3)
    assert state.value() == []  # the default is copied too


def test_a_snapshot_keeps_what_it_saw_while_the_heap_handle_writes(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    b = backend(clock=clock)
    state = value_state(b, StateTtlConfig.new_builder(TTL).cleanup_full_snapshot())
    for i in range(5):
        b.current_key = f"k{i}"
        state.update(i)
    snapshot = b.snapshot()
    clock.advance(TTL - 1)
    for i in range(5):
        b.current_key = f"k{i}"
        state.update(state.value() + 10)
    io, path = FileIO.for_path(str(tmp_path))
    files = snapshot.write(SnapshotOutput(io, path))
    snapshot.release()
    op = OperatorMetadata(uid="op", name="op", parallelism=1, max_parallelism=128, key_serializer="msgpack",
                          states=tuple(b.descriptors()), subtasks=(SubtaskState(0, b.scope.key_group_range,
                                                                                  tuple(files)),))
    commit_metadata(io, path, CheckpointMetadata("ab" * 16, 1, SnapshotKind.SAVEPOINT, SnapshotFormat.CANONICAL,
                                                 CheckpointMetadata.now_ms(), (op,)))
    written = sorted((e.key, e.value, e.expiry) for e in SavepointReader.read(path).read_keyed_state("op", "v"))
    assert written == [(f"k{i}", i, T0 + TTL) for i in range(5)]
    assert b.table_data("v") == {  # type: ignore[attr-defined]
        f"k{i}": (i + 10, T0 + 2 * TTL - 1) for i in range(5)}


# -- the wall clock ------------------------------------------------------------------------------


class FakeTime:
    """``time.time`` standing still until moved (seconds, a float, as ``time.time`` returns)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self) -> float:
        return self.seconds


@pytest.fixture
def fake_time(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    fake = FakeTime(1_700_000_000.25)
    monkeypatch.setattr(ttl_module, "_time", fake)
    return fake


def test_system_clock_is_the_floor_of_time_in_milliseconds(fake_time: FakeTime) -> None:
    assert system_clock() == 1_700_000_000_250
    fake_time.seconds += 0.0009
    assert system_clock() == 1_700_000_000_250


def _wall_clock_state(b: KeyedStateBackend[Any], kind: type[Any], default: Any = None) -> Any:
    """A heap handle on the wall clock: the record time handle (read outside a record here: it
    reads the clock itself) or the plain heap handle, which reads the clock at every access."""
    state = value_state(b, StateTtlConfig.new_builder(TTL), default=default)
    if kind is HeapTtlValueState:
        state = kind(b, b.table_data("v"), TTL, system_clock, default)  # type: ignore[attr-defined]
    assert type(state) is kind
    return state


WALL_CLOCK_HANDLES = [RecordTimeHeapTtlValueState, HeapTtlValueState]


@pytest.mark.parametrize("kind", WALL_CLOCK_HANDLES)
def test_the_wall_clock_handle_stamps_the_current_millisecond(fake_time: FakeTime, kind: type[Any]) -> None:
    b = backend()
    state = _wall_clock_state(b, kind)
    table = b.table_data("v")  # type: ignore[attr-defined]
    b.current_key = "a"
    stamps = []
    for seconds in (1_700_000_000.25, 1_700_000_000.2505,  # one millisecond: one stamp
                    1_700_000_000.2515,  # the next millisecond
                    1_699_999_999.5):  # the clock stepped back: the stamp follows it
        fake_time.seconds = seconds
        state.update(seconds)
        assert table["a"] == (seconds, system_clock() + TTL)
        stamps.append(table["a"][1] - TTL)
    assert stamps == [1_700_000_000_250, 1_700_000_000_250, 1_700_000_000_251, 1_699_999_999_500]


@pytest.mark.parametrize("kind", WALL_CLOCK_HANDLES)
def test_the_wall_clock_handle_expires_when_the_clock_reaches_the_expiry(fake_time: FakeTime, kind: type[Any]) -> None:
    b = backend()
    state = _wall_clock_state(b, kind, "gone")
    b.current_key = "a"
    state.update("here")
    expiry = b.table_data("v")["a"][1]  # type: ignore[attr-defined]
    fake_time.seconds = (expiry - 0.01) / 1000  # the last millisecond before the expiry
    assert system_clock() == expiry - 1 and state.value() == "here"
    fake_time.seconds = (expiry + 0.01) / 1000
    assert system_clock() == expiry and state.value() == "gone"
    assert "a" not in b.table_data("v")  # type: ignore[attr-defined]
    state.update(None)
    assert state.value() == "gone"
