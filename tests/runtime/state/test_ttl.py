"""State TTL (``StateTtlConfig``): every option with a manual clock, on every registered backend,
and expiry through savepoints, restores (also at another parallelism) and offline rescales."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekit.readers.savepoint_reader import SavepointReader
from statekit.runtime.api.functions import AggregateFunction
from statekit.runtime.api.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptorBase,
    ValueStateDescriptor,
)
from statekit.runtime.api.ttl import ManualClock, StateTtlConfig, StateVisibility, UpdateType
from statekit.runtime.checkpoint.restore import RestorePlan, SubtaskRestore
from statekit.runtime.checkpoint.storage import SnapshotOutput
from statekit.runtime.state.backend import KeyedStateBackend, SubtaskScope
from statekit.runtime.state.registry import create_keyed_backend, state_backend, state_backend_names
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.keygroups import compute_key_group_range_for_operator_index
from statekit.statefmt.metadata import (
    CheckpointMetadata,
    OperatorMetadata,
    SnapshotFormat,
    SnapshotKind,
    StateFile,
    SubtaskState,
)
from statekit.writers.rescale import rescale_savepoint
from statekit.writers.state_writer import commit_metadata

M = 128
TTL = 100
T0 = 1_000_000

BACKENDS = [
    pytest.param(name, marks=pytest.mark.skipif(
        not state_backend(name).available, reason=f"{state_backend(name).requires} is not installed"))
    for name in state_backend_names()
]


@pytest.fixture(params=BACKENDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def backend(kind: str, clock: ManualClock, subtask: int = 0, parallelism: int = 1) -> KeyedStateBackend[Any]:
    scope = SubtaskScope("op", subtask, parallelism, M, "msgpack",
                         compute_key_group_range_for_operator_index(M, parallelism, subtask))
    b = create_keyed_backend(kind, scope)
    b.ttl_clock = clock
    return b


def with_ttl(descriptor: StateDescriptorBase, **options: Any) -> StateDescriptorBase:
    builder = StateTtlConfig.new_builder(TTL)
    if options.get("update") is not None:
        builder.set_update_type(options["update"])
    if options.get("visibility") is not None:
        builder.set_state_visibility(options["visibility"])
    if options.get("full_snapshot"):
        builder.cleanup_full_snapshot()
    if options.get("incremental"):
        builder.cleanup_incrementally(options["incremental"])
    if options.get("sweep"):
        builder.cleanup_in_rocksdb_compact_filter(options["sweep"])
    descriptor.enable_time_to_live(builder.build())
    return descriptor


class Sum(AggregateFunction):
    def create_accumulator(self) -> list[int]:
        return [0]

    def add(self, value: int, accumulator: list[int]) -> list[int]:
        accumulator[0] += value
        return accumulator

    def get_result(self, accumulator: list[int]) -> int:
        return accumulator[0]


def savepoint(b: KeyedStateBackend[Any], directory: Path, parallelism: int = 1,
              backends: list[KeyedStateBackend[Any]] | None = None) -> str:
    """Snapshot ``b`` (or every subtask of ``backends``) into a committed savepoint; its path."""
    subtasks = backends or [b]
    io, path = FileIO.for_path(str(directory))
    location = SnapshotOutput(io, path)
    states: list[SubtaskState] = []
    for index, sub in enumerate(subtasks):
        snapshot = sub.snapshot()
        files: list[StateFile] = snapshot.write(location)
        snapshot.release()
        states.append(SubtaskState(index, sub.scope.key_group_range, tuple(files)))
    op = OperatorMetadata(uid="op", name="op", parallelism=len(subtasks), max_parallelism=M,
                          key_serializer="msgpack", states=tuple(subtasks[0].descriptors()), subtasks=tuple(states))
    commit_metadata(io, path, CheckpointMetadata("ab" * 16, 1, SnapshotKind.SAVEPOINT, SnapshotFormat.CANONICAL,
                                                 CheckpointMetadata.now_ms(), (op,)))
    return path


def restore(kind: str, clock: ManualClock, path: str, subtask: int, parallelism: int) -> KeyedStateBackend[Any]:
    plan = RestorePlan.open(path)
    restored = plan.subtask("op", subtask, parallelism, M)
    assert isinstance(restored, SubtaskRestore)
    target = backend(kind, clock, subtask, parallelism)
    for descriptor, entries in restored.keyed_states():
        target.restore_state(descriptor, entries)
    return target


def entries(path: str, state: str) -> list[tuple[Any, ...]]:
    reader = SavepointReader.read(path)
    out = []
    for e in reader.read_keyed_state("op", state):
        out.append((e.key, e.user_key, e.value, e.expiry) if hasattr(e, "user_key") else (e.key, e.value, e.expiry))
    return sorted(out)


# -- the config -----------------------------------------------------------------------------


def test_builder_sets_every_option_and_refuses_bad_ones() -> None:
    clock = ManualClock()
    config = (StateTtlConfig.new_builder(5000).set_update_type(UpdateType.ON_READ_AND_WRITE)
              .set_state_visibility(StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP).cleanup_full_snapshot()
              .cleanup_incrementally(7).cleanup_in_rocksdb_compact_filter(300).set_ttl_clock(clock).build())
    assert (config.ttl_ms, config.update_type, config.state_visibility) == (
        5000, UpdateType.ON_READ_AND_WRITE, StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP)
    assert (config.cleanup_full_snapshot, config.incremental_cleanup_size, config.sweep_after_entries) == (True, 7, 300)
    assert config.clock is clock
    assert StateTtlConfig.new_builder(1).cleanup_incrementally(3).disable_cleanup_in_background().build() == \
        StateTtlConfig(1)
    with pytest.raises(ValueError, match="positive"):
        StateTtlConfig.new_builder(0)
    with pytest.raises(ValueError, match="positive"):
        StateTtlConfig.new_builder(10).cleanup_incrementally(0)
    descriptor = with_ttl(MapStateDescriptor("m"))
    assert descriptor.to_metadata().ttl_ms == TTL
    assert ValueStateDescriptor("v").to_metadata().ttl_ms is None


def test_operator_state_ignores_ttl() -> None:
    from statekit.statefmt.metadata import StateKind

    assert with_ttl(ListStateDescriptor("offsets")).to_metadata(StateKind.UNION).ttl_ms is None


# -- semantics per option, every backend ---------------------------------------------------------


def test_value_expires_after_ttl_and_returns_the_default(kind: str) -> None:
    clock = ManualClock(T0)
    b = backend(kind, clock)
    state = b.get_state(with_ttl(ValueStateDescriptor("v", default=-1)))
    b.current_key = "a"
    state.update(5)
    clock.advance(TTL - 1)
    assert state.value() == 5
    clock.advance(1)
    assert state.value() == -1
    assert list(b.keys("v")) == []  # the read removed it
    state.update(6)
    assert state.value() == 6
    b.close()


def test_on_create_and_write_reads_do_not_extend_but_writes_do(kind: str) -> None:
    clock = ManualClock(T0)
    b = backend(kind, clock)
    state = b.get_state(with_ttl(ValueStateDescriptor("v"), update=UpdateType.ON_CREATE_AND_WRITE))
    b.current_key = "a"
    state.update(1)
    clock.advance(60)
    assert state.value() == 1  # a read: expiry stays T0 + TTL
    clock.advance(40)
    assert state.value() is None
    state.update(2)
    clock.advance(60)
    state.update(3)  # a write: expiry moves to now + TTL
    clock.advance(60)
    assert state.value() == 3
    b.close()


def test_on_read_and_write_reads_extend(kind: str) -> None:
    clock = ManualClock(T0)
    b = backend(kind, clock)
    state = b.get_state(with_ttl(ValueStateDescriptor("v"), update=UpdateType.ON_READ_AND_WRITE))
    b.current_key = "a"
    state.update(1)
    for _ in range(5):
        clock.advance(60)
        assert state.value() == 1
    clock.advance(TTL)
    assert state.value() is None
    b.close()


def test_return_expired_if_not_cleaned_up_returns_it_once(kind: str) -> None:
    clock = ManualClock(T0)
    b = backend(kind, clock)
    visibility = StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP
    value = b.get_state(with_ttl(ValueStateDescriptor("v"), visibility=visibility))
    mapped = b.get_state(with_ttl(MapStateDescriptor("m"), visibility=visibility))
    listed = b.get_state(with_ttl(ListStateDescriptor("l"), visibility=visibility))
    b.current_key = "a"
    value.update(1)
    mapped.put("x", 2)
    listed.add(3)
    clock.advance(TTL)
    assert (value.value(), mapped.get("x"), listed.get()) == (1, 2, [3])
    assert (value.value(), mapped.get("x"), listed.get()) == (None, None, [])
    b.close()


def test_list_state_expires_per_element(kind: str) -> None:
    clock = ManualClock(T0)
    b = backend(kind, clock)
    state = b.get_state(with_ttl(ListStateDescriptor("l", "int")))
    b.current_key = "a"
    state.add(1)
    clock.advance(50)
    state.add_all([2, 3])
    assert state.get() == [1, 2, 3]
    clock.advance(50)
    assert state.get() == [2, 3]
    clock.advance(50)
    assert state.get() == []
    state.update([7, 8])
    assert list(state) == [7, 8]
    b.close()


def test_map_state_expires_per_user_key(kind: str) -> None:
    clock = ManualClock(T0)
    b = backend(kind, clock)
    state = b.get_state(with_ttl(MapStateDescriptor("m", "int", key_type="string")))
    b.current_key = "a"
    state.put("old", 1)
    clock.advance(50)
    state.put_all({"new": 2, "newer": 3})
    clock.advance(50)
    assert state.get("old") is None and not state.contains("old")
    assert sorted(state.items()) == [("new", 2), ("newer", 3)]
    assert sorted(state.keys()) == ["new", "newer"] and not state.is_empty()
    clock.advance(50)
    assert state.is_empty() and list(b.keys("m")) == []
    b.close()


def test_reducing_and_aggregating_restart_after_expiry(kind: str) -> None:
    clock = ManualClock(T0)
    b = backend(kind, clock)
    reducing = b.get_state(with_ttl(ReducingStateDescriptor("r", reduce_function=lambda a, c: a + c)))
    aggregating = b.get_state(with_ttl(AggregatingStateDescriptor("g", "list<int>", aggregate_function=Sum())))
    b.current_key = "a"
    for value in (1, 2):
        reducing.add(value)
        aggregating.add(value)
    clock.advance(TTL - 1)
    assert (reducing.get(), aggregating.get()) == (3, 3)
    reducing.add(10)  # an add is a write: the expiry moves
    aggregating.add(10)
    clock.advance(TTL - 1)
    assert (reducing.get(), aggregating.get()) == (13, 13)
    clock.advance(1)
    assert (reducing.get(), aggregating.get()) == (None, None)
    reducing.add(4)
    aggregating.add(4)
    assert (reducing.get(), aggregating.get()) == (4, 4)
    b.close()


def test_incremental_cleanup_removes_expired_keys_on_access(kind: str) -> None:
    clock = ManualClock(T0)
    b = backend(kind, clock)
    state = b.get_state(with_ttl(ValueStateDescriptor("v"), incremental=3))
    for i in range(9):
        b.current_key = f"k{i}"
        state.update(i)
    clock.advance(TTL)
    b.current_key = "fresh"
    state.update(100)  # this access checks 3 keys (and lists the keys, "fresh" among them)
    assert len(list(b.keys("v"))) == 10 - 3
    state.update(100)
    state.update(100)
    state.update(100)
    assert list(b.keys("v")) == ["fresh"]
    assert b.current_key == "fresh" and state.value() == 100
    b.close()


def test_without_background_cleanup_expired_keys_stay_until_read(kind: str) -> None:
    clock = ManualClock(T0)
    b = backend(kind, clock)
    state = b.get_state(with_ttl(ValueStateDescriptor("v")))
    for i in range(5):
        b.current_key = f"k{i}"
        state.update(i)
    clock.advance(TTL)
    b.current_key = "fresh"
    for _ in range(10):
        state.update(1)
    assert len(list(b.keys("v"))) == 6
    b.close()


def test_compact_filter_sweep_runs_every_n_accesses(kind: str) -> None:
    clock = ManualClock(T0)
    b = backend(kind, clock)
    state = b.get_state(with_ttl(MapStateDescriptor("m"), sweep=4))
    for i in range(4):
        b.current_key = f"k{i}"
        state.put("x", i)  # accesses 1..4: the 4th sweeps 4 keys, none expired
    assert len(list(b.keys("m"))) == 4
    clock.advance(TTL)
    b.current_key = "fresh"
    for _ in range(3):
        state.put("x", 0)
    assert len(list(b.keys("m"))) == 5  # 3 accesses: no sweep yet
    state.put("x", 0)  # the 4th: a sweep of 4 keys
    state.put("x", 0)
    for _ in range(3):
        state.get("x")  # the 8th access sweeps the rest
    assert list(b.keys("m")) == ["fresh"]
    b.close()


def test_a_restored_state_must_keep_its_ttl(kind: str, tmp_path: Path) -> None:
    clock = ManualClock(T0)
    b = backend(kind, clock)
    state = b.get_state(with_ttl(ValueStateDescriptor("v")))
    b.current_key = "a"
    state.update(1)
    path = savepoint(b, tmp_path / "sp")
    target = restore(kind, clock, path, 0, 1)
    with pytest.raises(BadInputError, match="restored with TTL but the job declares it without TTL"):
        target.get_state(ValueStateDescriptor("v"))
    plain = backend(kind, clock)
    plain.current_key = "a"
    plain.get_state(ValueStateDescriptor("p")).update(1)
    path = savepoint(plain, tmp_path / "plain")
    with pytest.raises(BadInputError, match="restored without TTL but the job declares it with TTL"):
        restore(kind, clock, path, 0, 1).get_state(with_ttl(ValueStateDescriptor("p")))
    for opened in (b, target, plain):
        opened.close()


# -- snapshots, restore, rescale ----------------------------------------------------------------


def _fill(b: KeyedStateBackend[Any], clock: ManualClock, full_snapshot: bool = False) -> None:
    """k0..k9 in every kind: even keys written at T0, odd keys at T0 + 50; list k* elements at both."""
    states = [b.get_state(with_ttl(d, full_snapshot=full_snapshot)) for d in (
        ValueStateDescriptor("v", "int"), ListStateDescriptor("l", "int"), MapStateDescriptor("m", "int"),
        ReducingStateDescriptor("r", reduce_function=max))]
    value, listed, mapped, reducing = states
    for phase in (0, 1):
        for i in range(10):
            b.current_key = f"k{i}"
            if i % 2 == phase:
                value.update(i)  # type: ignore[attr-defined]
                mapped.put("u", i)  # type: ignore[attr-defined]
                reducing.add(i)  # type: ignore[attr-defined]
            listed.add(phase)  # type: ignore[attr-defined]
        if phase == 0:
            clock.advance(50)


def test_savepoint_stores_the_expiry_column(kind: str, tmp_path: Path) -> None:
    clock = ManualClock(T0)
    b = backend(kind, clock)
    _fill(b, clock)
    clock.advance(TTL)  # everything expired, but no full-snapshot cleanup: all written
    path = savepoint(b, tmp_path / "sp")
    expiry = {i: T0 + TTL + 50 * (i % 2) for i in range(10)}
    assert entries(path, "v") == [(f"k{i}", i, expiry[i]) for i in range(10)]
    assert entries(path, "r") == [(f"k{i}", i, expiry[i]) for i in range(10)]
    assert entries(path, "m") == [(f"k{i}", "u", i, expiry[i]) for i in range(10)]
    # a list entry's expiry is its latest element's
    assert entries(path, "l") == [(f"k{i}", [0, 1], T0 + TTL + 50) for i in range(10)]
    assert SavepointReader.read(path).metadata.operators[0].state("v").ttl_ms == TTL
    b.close()


def test_full_snapshot_cleanup_drops_expired_entries_from_the_snapshot(kind: str, tmp_path: Path) -> None:
    clock = ManualClock(T0)
    b = backend(kind, clock)
    _fill(b, clock, full_snapshot=True)
    clock.advance(TTL - 1)  # T0 + 149: the T0 writes expired, the T0 + 50 ones live
    path = savepoint(b, tmp_path / "sp")
    assert entries(path, "v") == [(f"k{i}", i, T0 + TTL + 50) for i in range(1, 10, 2)]
    assert entries(path, "m") == [(f"k{i}", "u", i, T0 + TTL + 50) for i in range(1, 10, 2)]
    assert entries(path, "l") == [(f"k{i}", [1], T0 + TTL + 50) for i in range(10)]
    assert len(list(b.keys("v"))) == 10  # the live state keeps them until accessed
    b.close()


@pytest.mark.parametrize("parallelism", [1, 3])
def test_expiry_survives_savepoint_and_restore(kind: str, tmp_path: Path, parallelism: int) -> None:
    clock = ManualClock(T0)
    b = backend(kind, clock)
    _fill(b, clock)
    path = savepoint(b, tmp_path / "sp")
    clock.advance(60)  # T0 + 110: the T0 writes expired, the T0 + 50 ones live until T0 + 150
    seen: dict[str, tuple[Any, ...]] = {}
    for subtask in range(parallelism):
        target = restore(kind, clock, path, subtask, parallelism)
        value = target.get_state(with_ttl(ValueStateDescriptor("v", "int")))
        mapped = target.get_state(with_ttl(MapStateDescriptor("m", "int")))
        listed = target.get_state(with_ttl(ListStateDescriptor("l", "int")))
        reducing = target.get_state(with_ttl(ReducingStateDescriptor("r", reduce_function=max)))
        for key in sorted(target.keys("l")):
            target.current_key = key
            seen[key] = (value.value(), mapped.get("u"), listed.get(), reducing.get())  # type: ignore[attr-defined]
        clock_then = clock.now_ms
        clock.advance(40)  # T0 + 150: all gone
        for key in sorted(target.keys("l")):
            target.current_key = key
            assert (value.value(), mapped.get("u"), listed.get(), reducing.get()) == (  # type: ignore[attr-defined]
                None, None, [], None)
        clock.now_ms = clock_then
        target.close()
    assert seen == {f"k{i}": (i, i, [0, 1], i) if i % 2 else (None, None, [0, 1], None) for i in range(10)}
    b.close()


def test_expiry_survives_a_restore_from_several_subtasks(kind: str, tmp_path: Path) -> None:
    clock = ManualClock(T0)
    subtasks = [backend(kind, clock, i, 2) for i in range(2)]
    for i in range(20):
        key = f"k{i}"
        sub = next(s for s in subtasks if _owns(s, key))
        sub.current_key = key
        sub.get_state(with_ttl(ValueStateDescriptor("v"))).update(i)  # type: ignore[attr-defined]
        clock.advance(1)
    path = savepoint(subtasks[0], tmp_path / "sp", backends=subtasks)
    assert entries(path, "v") == sorted((f"k{i}", i, T0 + TTL + i) for i in range(20))
    target = restore(kind, clock, path, 0, 1)
    state = target.get_state(with_ttl(ValueStateDescriptor("v")))
    clock.now_ms = T0 + TTL + 10
    alive = {}
    for key in list(target.keys("v")):
        target.current_key = key
        alive[key] = state.value()  # type: ignore[attr-defined]
    assert {k: v for k, v in alive.items() if v is not None} == {f"k{i}": i for i in range(11, 20)}
    for opened in (*subtasks, target):
        opened.close()


def _owns(b: KeyedStateBackend[Any], key: str) -> bool:
    from statekit.statefmt.keygroups import assign_to_key_group
    from statekit.statefmt.serializers import get_serializer

    return assign_to_key_group(get_serializer("msgpack").serialize(key), M) in b.scope.key_group_range


def test_offline_rescale_keeps_the_expiry(kind: str, tmp_path: Path) -> None:
    clock = ManualClock(T0)
    b = backend(kind, clock)
    _fill(b, clock)
    path = savepoint(b, tmp_path / "sp")
    before = {state: entries(path, state) for state in ("v", "l", "m", "r")}
    out = str(tmp_path / "rescaled")
    rescale_savepoint(path, out, parallelism=4)
    assert SavepointReader.read(out).metadata.operators[0].parallelism == 4
    assert {state: entries(out, state) for state in ("v", "l", "m", "r")} == before
    assert SavepointReader.read(out).metadata.operators[0].state("m").ttl_ms == TTL
    b.close()



# -- a job on the runtime ------------------------------------------------------------------------


def _ttl_count_job(kind: str, n: int, parallelism: int, clock: ManualClock, storage: str) -> Any:
    """numbers 1..n -> key_by(v % 10) -> a TTL value state counting per key (uid ``counter``)."""
    from statekit.runtime.api.checkpoint_config import ExternalizedCheckpointCleanup
    from statekit.runtime.api.functions import KeyedProcessFunction, RuntimeContext
    from statekit.runtime.connectors.sinks import DiscardingSink
    from statekit.runtime.dataflow.environment import StreamEnvironment

    class TtlCount(KeyedProcessFunction):
        def open(self, ctx: RuntimeContext) -> None:
            descriptor = ValueStateDescriptor("count", "int")
            descriptor.enable_time_to_live(StateTtlConfig.new_builder(TTL).set_ttl_clock(clock).build())
            self.count = ctx.get_state(descriptor)

        def process_element(self, value: int, ctx: Any, out: Any) -> None:
            self.count.update((self.count.value() or 0) + 1)  # type: ignore[attr-defined]

    env = StreamEnvironment().set_parallelism(parallelism)
    env.set_checkpoint_storage(storage)
    if kind == "rocksdb":
        env.set_state_backend("rocksdb", incremental=True)
    else:
        env.set_state_backend(kind)
    env.enable_checkpointing(30, num_retained=1, externalized_cleanup=ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    (env.from_sequence(1, n).uid("numbers")
        .key_by(lambda v: v % 10)
        .process(TtlCount()).uid("counter")
        .sink_to(DiscardingSink()).uid("sink"))
    return env


def test_a_job_keeps_expiries_through_its_checkpoint_restored_at_another_parallelism(
        kind: str, tmp_path: Path) -> None:
    from jobs_for_checkpoints import run_with

    from statekit.runtime.dataflow.job_handle import JobStatus
    from statekit.runtime.dataflow.run_options import RunOptions

    clock = ManualClock(T0)
    storage = str(tmp_path / "chk")
    first = run_with(_ttl_count_job(kind, 3000, 2, clock, storage), RunOptions(), "ttl p2")
    assert first.status is JobStatus.FINISHED and first.latest_checkpoint is not None
    clock.advance(TTL - 1)  # restored entries live one more millisecond; new writes would move them
    savepoints = str(tmp_path / "savepoints")
    restored = run_with(_ttl_count_job(kind, 3000, 3, clock, storage),
                        RunOptions(restore_path=first.latest_checkpoint, savepoint_on_finish=savepoints), "ttl p3")
    assert restored.status is JobStatus.FINISHED and restored.savepoint_path is not None
    reader = SavepointReader.read(restored.savepoint_path)
    assert reader.metadata.operator("counter").state("count").ttl_ms == TTL
    found = sorted((e.key, e.value, e.expiry) for e in reader.read_keyed_state("counter", "count"))
    assert found == [(k, 300, T0 + TTL) for k in range(10)]
