"""State API units: keyed state handles, copy-on-write snapshots, operator state, descriptors.

:class:`TestKeyedStateBackendContract` runs over every backend of the registry, and over a
toy backend (tests/runtime/toy_backend.py) that the fixture registers, as a new one would be.
"""

from __future__ import annotations

import runpy
from collections.abc import Iterator
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
    ValueStateDescriptor,
)
from statekit.runtime.checkpoint.restore import RestorePlan, SubtaskRestore
from statekit.runtime.checkpoint.storage import SnapshotOutput
from statekit.runtime.state.backend import KeyedStateBackend, SubtaskScope
from statekit.runtime.state.operator_state import DefaultOperatorStateStore
from statekit.runtime.state.registry import (
    create_keyed_backend,
    register_state_backend,
    state_backend,
    state_backend_names,
    unregister_state_backend,
)
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.keygroups import KeyGroupRange, assign_to_key_group, compute_key_group_range_for_operator_index
from statekit.statefmt.metadata import (
    CheckpointMetadata,
    OperatorMetadata,
    SnapshotFormat,
    SnapshotKind,
    StateKind,
    SubtaskState,
)
from statekit.statefmt.serializers import get_serializer
from statekit.writers.state_writer import commit_metadata

M = 128


def backend(subtask: int = 0, parallelism: int = 1, kind: str = "hashmap") -> KeyedStateBackend[Any]:
    scope = SubtaskScope(
        "op", subtask, parallelism, M, "msgpack", compute_key_group_range_for_operator_index(M, parallelism, subtask),
    )
    return create_keyed_backend(kind, scope)


def registered_backends() -> list[Any]:
    """Every registered backend; one whose optional package is missing is skipped, saying so."""
    return [
        pytest.param(name, marks=pytest.mark.skipif(
            not state_backend(name).available, reason=f"{state_backend(name).requires} is not installed"))
        for name in state_backend_names()
    ]


TOY = runpy.run_path(str(Path(__file__).parents[1] / "toy_backend.py"))["TOY"]


@pytest.fixture(params=[*registered_backends(), pytest.param(TOY.name, id="toy-registered-by-the-test")])
def kind(request: pytest.FixtureRequest) -> Iterator[str]:
    """A backend name; the toy one is registered for the test only."""
    if request.param != TOY.name:
        yield request.param
        return
    register_state_backend(TOY)
    try:
        yield TOY.name
    finally:
        unregister_state_backend(TOY.name)


class Average(AggregateFunction):
    def create_accumulator(self) -> list[int]:
        return [0, 0]

    def add(self, value: int, accumulator: list[int]) -> list[int]:
        accumulator[0] += value
        accumulator[1] += 1
        return accumulator

    def get_result(self, accumulator: list[int]) -> float:
        return accumulator[0] / accumulator[1]


def test_descriptors_map_to_metadata() -> None:
    assert ValueStateDescriptor("count", "int").to_metadata().kind is StateKind.VALUE
    assert ValueStateDescriptor("count", "int").to_metadata().value_type == "int"
    listed = ListStateDescriptor("offsets", "int").to_metadata(StateKind.UNION)
    assert (listed.kind, listed.value_serializer) == (StateKind.UNION, "msgpack")
    mapped = MapStateDescriptor("views", "int", key_type="string", serializer="json").to_metadata()
    assert (mapped.kind, mapped.user_key_type, mapped.value_serializer, mapped.user_key_serializer) == (
        StateKind.MAP, "string", "json", "msgpack")
    assert ReducingStateDescriptor("r", reduce_function=max).kind is StateKind.REDUCING
    assert AggregatingStateDescriptor("a", aggregate_function=Average()).kind is StateKind.AGGREGATING
    with pytest.raises(ValueError):
        ReducingStateDescriptor("r")
    with pytest.raises(BadInputError):
        ValueStateDescriptor("v", serializer="nope")
    with pytest.raises(BadInputError):
        ValueStateDescriptor("v", "lst<int>")


def _metadata(b: KeyedStateBackend[Any], files: list) -> CheckpointMetadata:  # type: ignore[type-arg]
    op = OperatorMetadata(
        uid="op", name="op", parallelism=1, max_parallelism=M, key_serializer="msgpack",
        states=tuple(b.descriptors()),
        subtasks=(SubtaskState(0, KeyGroupRange(0, M - 1), tuple(files)),),
    )
    return CheckpointMetadata("ab" * 16, 1, SnapshotKind.CHECKPOINT, SnapshotFormat.CANONICAL,
                              CheckpointMetadata.now_ms(), (op,))


def restored_backends(directory: str, parallelism: int, kind: str) -> Iterator[KeyedStateBackend[Any]]:
    """A backend per subtask of ``parallelism``, each holding the keyed state of operator ``op``
    that the snapshot at ``directory`` hands that subtask."""
    plan = RestorePlan.open(directory)
    for subtask in range(parallelism):
        restore = plan.subtask("op", subtask, parallelism, M)
        assert isinstance(restore, SubtaskRestore)
        target = backend(subtask, parallelism, kind)
        for descriptor, entries in restore.keyed_states():
            target.restore_state(descriptor, entries)
        yield target


class TestKeyedStateBackendContract:
    """What every keyed state backend must do (``kind`` is each registered backend)."""

    def test_keyed_state_handles_are_scoped_to_the_current_key(self, kind: str) -> None:
        b = backend(kind=kind)
        value = b.get_state(ValueStateDescriptor("v", default=0))
        lst = b.get_state(ListStateDescriptor("l"))
        mp = b.get_state(MapStateDescriptor("m"))
        red = b.get_state(ReducingStateDescriptor("r", reduce_function=lambda a, c: a + c))
        agg = b.get_state(AggregatingStateDescriptor("a", aggregate_function=Average()))
        for key in ("x", "y"):
            b.current_key = key
            assert value.value() == 0 and lst.get() == [] and mp.is_empty() and red.get() is None and agg.get() is None
        b.current_key = "x"
        value.update(5)
        lst.add(1)
        lst.add_all([2, 3])
        mp.put("a", 1)
        mp.put_all({"b": 2})
        red.add(10)
        red.add(5)
        agg.add(4)
        agg.add(8)
        b.current_key = "y"
        assert value.value() == 0 and lst.get() == [] and not mp.contains("a")
        b.current_key = "x"
        assert value.value() == 5
        assert lst.get() == [1, 2, 3] and list(lst) == [1, 2, 3]
        assert sorted(mp.items()) == [("a", 1), ("b", 2)] and mp.get("b") == 2 and mp.contains("a")
        assert red.get() == 15 and agg.get() == 6.0
        mp.remove("a")
        mp.remove("b")
        assert mp.is_empty() and "x" not in list(b.keys("m"))
        lst.update([])
        value.update(None)
        assert lst.get() == [] and value.value() == 0 and "x" not in list(b.keys("v"))
        assert sorted(b.keys("r")) == ["x"]
        red.clear()
        assert red.get() is None
        assert b.get_state(ValueStateDescriptor("v", default=0)) is value

    def test_mutable_default_is_not_shared_between_keys(self, kind: str) -> None:
        b = backend(kind=kind)
        state = b.get_state(ValueStateDescriptor("v", default=[]))
        b.current_key = "a"
        state.value().append(1)
        assert state.value() == []

    def test_snapshot_is_consistent_while_processing_continues(self, tmp_path, kind: str) -> None:  # type: ignore[no-untyped-def]
        b = backend(kind=kind)
        value = b.get_state(ValueStateDescriptor("v", "int"))
        lst = b.get_state(ListStateDescriptor("l", "int"))
        mp = b.get_state(MapStateDescriptor("m", "int", key_type="string"))
        agg = b.get_state(AggregatingStateDescriptor("a", "list<int>", aggregate_function=Average()))
        for key in ("k1", "k2"):
            b.current_key = key
            value.update(1)
            lst.add(1)
            mp.put("p", 1)
            agg.add(1)
        snapshot = b.snapshot()
        # processing after the barrier mutates every kind of state in place
        b.current_key = "k1"
        value.update(2)
        lst.add(2)
        mp.put("p", 2)
        mp.put("q", 2)
        agg.add(3)
        b.current_key = "k3"
        value.update(3)
        io, directory = FileIO.for_path(str(tmp_path / "chk-1"))
        location = SnapshotOutput(io, directory)
        files = snapshot.write(location)
        snapshot.release()
        assert {f.state for f in files} == {"v", "l", "m", "a"}
        metadata = _metadata(b, files)
        commit_metadata(io, directory, metadata)
        reader = SavepointReader.read(directory)
        assert sorted((e.key, e.value) for e in reader.read_keyed_state("op", "v")) == [("k1", 1), ("k2", 1)]
        assert sorted((e.key, e.value) for e in reader.read_keyed_state("op", "l")) == [("k1", [1]), ("k2", [1])]
        assert sorted((e.key, e.user_key, e.value) for e in reader.read_keyed_state("op", "m")) == [
            ("k1", "p", 1), ("k2", "p", 1)]
        assert sorted((e.key, e.value) for e in reader.read_keyed_state("op", "a")) == [("k1", [1, 1]), ("k2", [1, 1])]
        b.current_key = "k1"
        assert lst.get() == [1, 2] and mp.get("q") == 2 and agg.get() == 2.0

    def test_restored_state_keeps_its_kind_and_rejects_another(self, kind: str) -> None:
        b = backend(kind=kind)
        b.restore_state(ValueStateDescriptor("count", "int").to_metadata(), [])
        with pytest.raises(BadInputError, match="restored as value state but the job declares list state"):
            b.get_state(ListStateDescriptor("count"))
        with pytest.raises(BadInputError, match="serializer"):
            b.get_state(ValueStateDescriptor("count", serializer="json"))

    def test_keyed_restore_reads_only_the_key_groups_of_the_new_subtask(self, tmp_path, kind: str) -> None:  # type: ignore[no-untyped-def]
        source = backend(kind=kind)
        state = source.get_state(ValueStateDescriptor("count", "int"))
        keys = [f"w{i}" for i in range(300)]
        for i, key in enumerate(keys):
            source.current_key = key
            state.update(i)
        io, directory = FileIO.for_path(str(tmp_path / "sp"))
        snapshot = source.snapshot()
        files = snapshot.write(SnapshotOutput(io, directory))
        commit_metadata(io, directory, _metadata(source, files))
        key_bytes = get_serializer("msgpack").serialize
        seen: dict[str, int] = {}
        for subtask, target in enumerate(restored_backends(directory, 3, kind)):
            kg_range = compute_key_group_range_for_operator_index(M, 3, subtask)
            handle = target.get_state(ValueStateDescriptor("count", "int"))
            for key in target.keys("count"):
                assert assign_to_key_group(key_bytes(key), M) in kg_range
                target.current_key = key
                seen[key] = handle.value()
        assert seen == {key: i for i, key in enumerate(keys)}


@pytest.fixture(params=registered_backends())
def namespaced_kind(request: pytest.FixtureRequest) -> str:
    """A registered backend that keeps namespaced state (every built-in one does)."""
    assert state_backend(request.param).backend_class().supports_namespaces
    return str(request.param)


class TestNamespacedStateContract:
    """Namespaced keyed state (the window operator's): handles scoped to (key, namespace)."""

    @staticmethod
    def states(b: KeyedStateBackend[Any]) -> dict[str, Any]:
        ns = {"namespace_type": "list<int>"}
        return {
            "v": b.get_state(ValueStateDescriptor("v", "int", **ns)),
            "l": b.get_state(ListStateDescriptor("l", "int", **ns)),
            "m": b.get_state(MapStateDescriptor("m", "int", key_type="string", **ns)),
            "r": b.get_state(ReducingStateDescriptor("r", "int", reduce_function=lambda a, c: a + c, **ns)),
            "a": b.get_state(AggregatingStateDescriptor("a", "list<int>", aggregate_function=Average(), **ns)),
        }

    def test_handles_are_scoped_to_the_current_key_and_namespace(self, kind: str) -> None:
        b = backend(kind=kind)
        if not b.supports_namespaces:
            with pytest.raises(BadInputError, match="does not support"):
                b.get_state(ValueStateDescriptor("v", namespace_type="list<int>"))
            return
        s = self.states(b)
        for key, windows in (("x", [(0, 10), (10, 20)]), ("y", [(0, 10)])):
            b.current_key = key
            for start, end in windows:
                for state in s.values():
                    state.set_current_namespace((start, end))
                s["v"].update(start + 1)
                s["l"].add_all([start, end])
                s["m"].put("s", start)
                s["r"].add(end)
                s["r"].add(1)
                s["a"].add(start)
        b.current_key = "x"
        for state in s.values():
            state.set_current_namespace((10, 20))
        assert (s["v"].value(), s["l"].get(), s["m"].items(), s["r"].get(), s["a"].get()) == (
            11, [10, 20], [("s", 10)], 21, 10.0)
        for state in s.values():
            state.clear()
        assert (s["v"].value(), s["l"].get(), s["m"].items(), s["r"].get(), s["a"].get()) == (None, [], [], None, None)
        for state in s.values():
            state.set_current_namespace((0, 10))  # another namespace of the key: untouched by clear
        assert (s["v"].value(), s["l"].get(), s["m"].get("s"), s["r"].get()) == (1, [0, 10], 0, 11)
        assert sorted(b.keys("v")) == ["x", "y"]
        assert sorted(b.namespaces("l")) == [("x", (0, 10)), ("y", (0, 10))]
        with pytest.raises(TypeError, match="has no namespace"):
            b.get_state(ValueStateDescriptor("plain")).set_current_namespace((0, 10))

    def test_a_snapshot_keeps_namespaces_and_restores_them_at_another_parallelism(
            self, tmp_path: Path, namespaced_kind: str) -> None:
        kind = namespaced_kind
        source = backend(kind=kind)
        s = self.states(source)
        expected: dict[tuple[str, tuple[int, int]], int] = {}
        for i in range(200):
            source.current_key = f"k{i}"
            for window in ((0, 10), (10, 20)) if i % 2 else ((), ):
                for state in s.values():
                    state.set_current_namespace(window)
                s["v"].update(i)
                s["m"].put("n", i)
                expected[(f"k{i}", tuple(window))] = i  # type: ignore[index]
        io, directory = FileIO.for_path(str(tmp_path / "sp"))
        snapshot = source.snapshot()
        files = snapshot.write(SnapshotOutput(io, directory))
        snapshot.release()
        commit_metadata(io, directory, _metadata(source, files))
        reader = SavepointReader.read(directory)
        assert reader.operator("op").state("v").namespace_type == "list<int>"
        read = {(e.key, tuple(e.namespace)): e.value for e in reader.read_keyed_state("op", "v")}
        assert read == expected
        assert {(e.key, tuple(e.namespace), e.user_key): e.value for e in reader.read_keyed_state("op", "m")} == {
            (k, w, "n"): v for (k, w), v in expected.items()}
        restored: dict[tuple[str, tuple[int, int]], int] = {}
        for target in restored_backends(directory, 2, kind):
            handles = self.states(target)
            for key, window in target.namespaces("v"):
                target.current_key = key
                handles["v"].set_current_namespace(window)
                handles["m"].set_current_namespace(window)
                assert handles["m"].get("n") == handles["v"].value()
                restored[(key, tuple(window))] = handles["v"].value()
        assert restored == expected

    def test_a_restored_state_without_namespace_is_refused(self, namespaced_kind: str) -> None:
        kind = namespaced_kind
        b = backend(kind=kind)
        b.restore_state(ValueStateDescriptor("v", "int").to_metadata(), [])
        with pytest.raises(BadInputError, match="namespace type none but the job declares list<int>"):
            b.get_state(ValueStateDescriptor("v", "int", namespace_type="list<int>"))

    def test_entries_with_a_namespace_in_a_state_declaring_none_are_refused(self, namespaced_kind: str) -> None:
        from statekit.statefmt.entries import KeyedStateEntry, MapStateEntry

        b = backend(kind=namespaced_kind)
        with pytest.raises(BadInputError, match="declares no namespace_type"):
            b.restore_state(ValueStateDescriptor("v", "int").to_metadata(), [KeyedStateEntry("k", [0, 10], 1, None)])
        with pytest.raises(BadInputError, match="declares no namespace_type"):
            b.restore_state(MapStateDescriptor("m", "int").to_metadata(), [MapStateEntry("k", "u", 1, "ns", None)])

    def test_namespaced_state_cannot_have_a_ttl(self, kind: str) -> None:
        from statekit.runtime.api.ttl import StateTtlConfig

        b = backend(kind=kind)
        descriptor = ValueStateDescriptor("v", "int", namespace_type="list<int>")
        descriptor.enable_time_to_live(StateTtlConfig.new_builder(1000).build())
        with pytest.raises(BadInputError, match="namespace"):
            b.get_state(descriptor)


def test_hashmap_hands_out_a_private_copy_of_a_container_a_snapshot_shares(tmp_path: Path) -> None:
    """hashmap hands out its live containers; the first one changed while shared is copied first."""
    b = backend(kind="hashmap")
    lst = b.get_state(ListStateDescriptor("l", "int"))
    for key in ("k1", "k2"):
        b.current_key = key
        lst.add(1)
    snapshot = b.snapshot()
    b.current_key = "k1"
    lst.add(2)
    lst.get().append(99)
    io, directory = FileIO.for_path(str(tmp_path / "chk-1"))
    files = snapshot.write(SnapshotOutput(io, directory))
    snapshot.release()
    commit_metadata(io, directory, _metadata(b, files))
    reader = SavepointReader.read(directory)
    assert sorted((e.key, e.value) for e in reader.read_keyed_state("op", "l")) == [("k1", [1]), ("k2", [1])]
    assert lst.get() == [1, 2, 99]


def test_operator_state_modes_redistribute_on_restore() -> None:
    store = DefaultOperatorStateStore("src", 0, 1)
    even = store.get_list_state(ListStateDescriptor("even", "int"))
    union = store.get_union_list_state(ListStateDescriptor("union", "int"))
    broadcast = store.get_broadcast_state(MapStateDescriptor("rules", "int", key_type="string"))
    even.update([1, 2, 3, 4, 5])
    union.add(7)
    broadcast.put("a", 1)
    kinds = {d.name: d.kind for d in store.descriptors()}
    assert kinds == {"even": StateKind.OPERATOR_LIST, "union": StateKind.UNION, "rules": StateKind.BROADCAST}
    snap = store.snapshot()
    even.add(6)
    assert [data for _, data in snap.copies] == [[1, 2, 3, 4, 5], {"a": 1}, [7]]

    class FakePlan:
        def __init__(self, parts: dict[str, list[list[int]]]) -> None:
            self.parts = parts
            self.checkpoint_id = 3

        def operator_elements(self, uid: str, state: str) -> list[list[int]]:
            return self.parts[state]

    from statekit.statefmt.metadata import StateDescriptor

    op = OperatorMetadata("src", "src", 2, M, None, (
        StateDescriptor("even", StateKind.OPERATOR_LIST), StateDescriptor("union", StateKind.UNION),
        StateDescriptor("rules", StateKind.BROADCAST)), ())
    plan = FakePlan({"even": [[1, 2, 3], [4, 5]], "union": [[7], [8]], "rules": [[("a", 1)], [("a", 1)]]})
    shares = [dict(SubtaskRestore(plan, op, i, 3, M).operator_states()) for i in range(3)]  # type: ignore[arg-type]
    by_name = [{d.name: v for d, v in s.items()} for s in shares]
    assert [s["even"] for s in by_name] == [[1, 2], [3, 4], [5]]
    assert all(s["union"] == [7, 8] for s in by_name)
    assert all(s["rules"] == [("a", 1)] for s in by_name)
    same = [{d.name: v for d, v in SubtaskRestore(plan, op, i, 2, M).operator_states()} for i in range(2)]  # type: ignore[arg-type]
    assert [s["even"] for s in same] == [[1, 2, 3], [4, 5]]
