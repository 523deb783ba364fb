"""``statekit migrate`` offline: a copy of a savepoint with one state's values migrated."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.errors import BadInputError, IncompatibleStateError, StateNotFoundError
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.statefmt.type_evolution import migrate_value
from statekit.statefmt.value_types import ValueType, parse_value_type
from statekit.writers.migration import EntryMigration, migrate_savepoint, parse_state_ref
from statekit.writers.savepoint_writer import PerSubtask, SavepointWriter

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "statefmt"))
from test_type_evolution import values_of, widened

PRICE = StateDescriptor("price", StateKind.VALUE, value_type="struct<cents:int,label:string>")
HISTORY = StateDescriptor("history", StateKind.LIST, value_type="int")
TOTALS = StateDescriptor("totals", StateKind.MAP, value_type="int", user_key_serializer="msgpack",
                         user_key_type="string")
BUFFER = StateDescriptor("buffer", StateKind.OPERATOR_LIST, value_type="int")
LIMITS = StateDescriptor("limits", StateKind.BROADCAST, value_type="int", user_key_serializer="msgpack",
                         user_key_type="string")


@pytest.fixture
def savepoint(tmp_path: Path) -> str:
    path = str(tmp_path / "sp")
    SavepointWriter.new_savepoint(16).with_operator("shop", {
        PRICE: [("apple", {"cents": 120, "label": "Apple"}), ("pear", {"cents": 99, "label": None})],
        HISTORY: [("apple", [1, 2]), ("pear", [3])],
        TOTALS: [("apple", "mon", 4), ("apple", "tue", 5)],
    }, parallelism=2).with_operator("sink", {
        BUFFER: PerSubtask([[1, 2], [3]]),
        LIMITS: {"food": 300},
    }, parallelism=2).write(path)
    return path


def read(path: str, uid: str, state: str) -> list[Any]:
    reader = SavepointReader.read(path)
    if reader.descriptor(uid, state).keyed:
        return sorted(tuple(e[:3]) for e in reader.read_keyed_state(uid, state))
    return reader.read_operator_state_per_subtask(uid, state)


def test_struct_fields_added_and_removed_int_widened(savepoint: str, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    report = migrate_savepoint(savepoint, out, "shop", "price", "struct<cents:float, currency:string>")
    assert (report.old_type, report.new_type, report.compatibility, report.entries) == (
        "struct<cents:int,label:string>", "struct<cents:float,currency:string>", "compatible_after_migration", 2)
    reader = SavepointReader.read(out)
    assert reader.descriptor("shop", "price").value_type == "struct<cents:float,currency:string>"
    assert read(out, "shop", "price") == [("apple", None, {"cents": 120.0, "currency": None}),
                                          ("pear", None, {"cents": 99.0, "currency": None})]
    # every other state and operator is unchanged
    for uid, state in (("shop", "history"), ("shop", "totals"), ("sink", "buffer"), ("sink", "limits")):
        assert read(out, uid, state) == read(savepoint, uid, state)
        assert reader.descriptor(uid, state) == SavepointReader.read(savepoint).descriptor(uid, state)
    assert [op.uid for op in reader.operators] == ["shop", "sink"]
    assert reader.operator("shop").parallelism == 2


@pytest.mark.parametrize("state, new_type, expected", [
    ("history", "float", [("apple", None, [1.0, 2.0]), ("pear", None, [3.0])]),
    ("totals", "float", [("apple", "mon", 4.0), ("apple", "tue", 5.0)]),
    ("buffer", "float", [[1.0, 2.0], [3.0]]),
    ("limits", "float", [[("food", 300.0)], [("food", 300.0)]]),
])
def test_every_state_kind_migrates(savepoint: str, tmp_path: Path, state: str, new_type: str, expected: Any) -> None:
    uid = "shop" if state in ("history", "totals") else "sink"
    migrate_savepoint(savepoint, str(tmp_path / "out"), uid, state, new_type)
    got = read(str(tmp_path / "out"), uid, state)
    assert got == expected
    assert all(isinstance(v, float) for v in _floats(got))


def _floats(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _floats(v)]
    return [value] if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 2 else []


def test_an_incompatible_type_is_refused_and_nothing_is_written(savepoint: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(IncompatibleStateError, match=r"state shop/history: declared type int cannot change to "
                                                      r"string \(int values cannot be read as string\)"):
        migrate_savepoint(savepoint, str(out), "shop", "history", "string")
    assert not out.exists()


def test_bad_input(savepoint: str, tmp_path: Path) -> None:
    with pytest.raises(StateNotFoundError, match="no state 'nope'"):
        migrate_savepoint(savepoint, str(tmp_path / "o1"), "shop", "nope", "int")
    with pytest.raises(BadInputError, match="invalid value type 'lst<int>'"):
        migrate_savepoint(savepoint, str(tmp_path / "o2"), "shop", "history", "lst<int>")
    with pytest.raises(BadInputError, match="nested more than 32 levels deep"):
        migrate_savepoint(savepoint, str(tmp_path / "o2"), "shop", "history", "list<" * 3000 + "int" + ">" * 3000)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(BadInputError, match="not empty"):
        migrate_savepoint(savepoint, str(tmp_path / "full"), "shop", "history", "float")
    with pytest.raises(BadInputError, match="expected UID/STATE"):
        parse_state_ref("history")
    assert parse_state_ref("a/b/c") == ("a/b", "c")


def test_a_failed_write_leaves_no_output(savepoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import statekit.writers.savepoint_writer as savepoint_writer

    def broken(*_: Any, **__: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(savepoint_writer, "commit_metadata", broken)
    with pytest.raises(OSError, match="No space left"):
        migrate_savepoint(savepoint, str(tmp_path / "out"), "shop", "history", "float")
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["sp"]


def test_entry_migration_refuses_a_changed_kind() -> None:
    with pytest.raises(IncompatibleStateError, match="the kind changed"):
        EntryMigration(HISTORY, StateDescriptor("history", StateKind.VALUE, value_type="float"))


_ROUND_TRIP_TYPES = st.recursive(
    st.sampled_from(["int", "float", "string", "bool", "timestamp"]).map(ValueType),
    lambda inner: (
        inner.map(lambda t: ValueType("list", (t,)))
        | inner.map(lambda t: ValueType("map", (ValueType("string"), t)))
        | st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), inner), min_size=1, max_size=3,
                   unique_by=lambda f: f[0]).map(
            lambda fs: ValueType("struct", tuple(t for _, t in fs), tuple(n for n, _ in fs)))
    ),
    max_leaves=5,
)


@st.composite
def _case(draw: st.DrawFn) -> tuple[ValueType, list[Any], ValueType]:
    old = draw(_ROUND_TRIP_TYPES)
    values = draw(st.lists(values_of(old).filter(lambda v: v is not None), min_size=1, max_size=4))
    return old, values, draw(widened(old))


# filter_too_much: a draw of nested types can be mostly None values, which a value state cannot hold
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(_case())
def test_migration_round_trips_through_the_snapshot_format(tmp_path_factory: pytest.TempPathFactory,
                                                           case: tuple[ValueType, list[Any], ValueType]) -> None:
    old, values, new = case
    root = tmp_path_factory.mktemp("round")
    descriptor = StateDescriptor("s", StateKind.VALUE, value_type=str(old))
    rows = [(f"k{i}", v) for i, v in enumerate(values)]
    SavepointWriter.new_savepoint(8).with_operator("op", {descriptor: rows}, parallelism=2).write(str(root / "sp"))
    migrate_savepoint(str(root / "sp"), str(root / "out"), "op", "s", str(new))
    got = {k: v for k, _, v in read(str(root / "out"), "op", "s")}
    assert got == {k: migrate_value(v, old, new) for k, v in rows}
    assert SavepointReader.read(str(root / "out")).descriptor("op", "s").value_type == str(parse_value_type(str(new)))
