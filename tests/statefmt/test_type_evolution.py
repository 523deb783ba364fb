"""State schema evolution: which declared-type changes are compatible, and value migration."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekit.statefmt.errors import IncompatibleStateError
from statekit.statefmt.type_evolution import (
    SchemaCompatibility,
    migrate_value,
    resolve_declared_types,
    resolve_type_change,
)
from statekit.statefmt.value_types import ValueType, parse_value_type

AS_IS = SchemaCompatibility.COMPATIBLE_AS_IS
MIGRATE = SchemaCompatibility.COMPATIBLE_AFTER_MIGRATION
INCOMPATIBLE = SchemaCompatibility.INCOMPATIBLE


@pytest.mark.parametrize("old, new, expected", [
    ("int", "int", AS_IS),
    ("long", "int", AS_IS),
    ("int", "float", MIGRATE),
    ("int", "timestamp", AS_IS),
    ("timestamp", "int", AS_IS),
    ("timestamp", "float", MIGRATE),
    ("string", "json", AS_IS),
    ("struct<a:int>", "json", AS_IS),
    (None, "json", AS_IS),
    ("struct<a:int,b:string>", "struct<b:string,a:int>", AS_IS),
    ("struct<a:int>", "struct<a:int,b:string>", MIGRATE),
    ("struct<a:int,b:string>", "struct<a:int>", MIGRATE),
    ("struct<a:int>", "struct<a:float>", MIGRATE),
    ("struct<a:int,b:string>", "struct<a:float,c:bool>", MIGRATE),
    ("list<int>", "list<float>", MIGRATE),
    ("list<struct<a:int>>", "list<struct<a:int,b:int>>", MIGRATE),
    ("map<string,int>", "map<string,float>", MIGRATE),
    ("map<string,int>", "map<string,int>", AS_IS),
    ("string", "int", INCOMPATIBLE),
    ("float", "int", INCOMPATIBLE),
    ("int", "string", INCOMPATIBLE),
    ("int", "struct<n:int>", INCOMPATIBLE),
    ("json", "int", INCOMPATIBLE),
    (None, "string", INCOMPATIBLE),
    ("list<string>", "list<int>", INCOMPATIBLE),
    ("map<string,int>", "map<int,int>", INCOMPATIBLE),
    ("map<int,int>", "map<float,int>", INCOMPATIBLE),
    ("struct<a:string>", "struct<a:int>", INCOMPATIBLE),
    ("list<int>", "map<string,int>", INCOMPATIBLE),
])
def test_compatibility_table(old: str | None, new: str, expected: SchemaCompatibility) -> None:
    change = resolve_declared_types(old, new)
    assert change.compatibility is expected
    assert (change.reason is not None) == (expected is INCOMPATIBLE)


@pytest.mark.parametrize("old, new, reason", [
    ("string", "int", "string values cannot be read as int"),
    ("struct<a:string>", "struct<a:int>", "field a: string values cannot be read as int"),
    ("list<map<string,string>>", "list<map<string,int>>",
     "list element: map value: string values cannot be read as int"),
    ("map<string,int>", "map<int,int>", "map key type string -> int: keys cannot change type"),
    ("json", "int", "json (any value) cannot be narrowed to int"),
])
def test_incompatible_changes_name_the_part_that_changed(old: str, new: str, reason: str) -> None:
    assert resolve_declared_types(old, new).reason == reason


@pytest.mark.parametrize("value, old, new, expected", [
    (3, "int", "float", 3.0),
    (None, "int", "float", None),
    ({"a": 1, "b": "x"}, "struct<a:int,b:string>", "struct<a:float,c:bool>", {"a": 1.0, "c": None}),
    ({"a": 1}, "struct<a:int>", "struct<a:int,b:list<int>>", {"a": 1, "b": None}),
    ([1, None, 3], "list<int>", "list<float>", [1.0, None, 3.0]),
    ({"k": [{"a": 2}]}, "map<string,list<struct<a:int>>>", "map<string,list<struct<a:float,z:string>>>",
     {"k": [{"a": 2.0, "z": None}]}),
    ("text", "string", "json", "text"),
])
def test_migrate_value(value: Any, old: str, new: str, expected: Any) -> None:
    migrated = migrate_value(value, parse_value_type(old), parse_value_type(new))
    assert migrated == expected
    assert [type(v) for v in _leaves(migrated)] == [type(v) for v in _leaves(expected)]


def test_migrate_value_refuses_an_incompatible_change() -> None:
    with pytest.raises(IncompatibleStateError, match="cannot migrate string to int: string values cannot be read as int"):
        migrate_value("3", parse_value_type("string"), parse_value_type("int"))


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for k in sorted(value) for leaf in _leaves(value[k])]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


# ---------------------------------------------------------------- properties

_SCALARS = ["int", "float", "string", "bool", "bytes", "timestamp"]
_KEYS = ["int", "string", "bool"]
_names = st.sampled_from(["a", "b", "c", "d", "e"])

types = st.recursive(
    st.sampled_from([*_SCALARS, "json"]).map(ValueType),
    lambda inner: (
        inner.map(lambda t: ValueType("list", (t,)))
        | st.tuples(st.sampled_from(_KEYS).map(ValueType), inner).map(lambda kv: ValueType("map", kv))
        | st.lists(st.tuples(_names, inner), min_size=1, max_size=3, unique_by=lambda f: f[0]).map(
            lambda fs: ValueType("struct", tuple(t for _, t in fs), tuple(n for n, _ in fs)))
    ),
    max_leaves=6,
)

_SCALAR_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "int": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(allow_nan=False),
    "string": st.text(max_size=5),
    "bool": st.booleans(),
    "bytes": st.binary(max_size=5),
    "timestamp": st.integers(0, 2**50),
    "json": st.none() | st.integers(-5, 5) | st.text(max_size=3),
}


def values_of(t: ValueType) -> st.SearchStrategy[Any]:
    """Values that ``t.check`` accepts (None included)."""
    if t.name in _SCALAR_VALUES:
        inner = _SCALAR_VALUES[t.name]
    elif t.name == "list":
        inner = st.lists(values_of(t.args[0]), max_size=3)
    elif t.name == "map":
        inner = st.dictionaries(_SCALAR_VALUES[t.args[0].name], values_of(t.args[1]), max_size=3)
    else:
        inner = st.fixed_dictionaries({n: values_of(f) for n, f in zip(t.fields, t.args)})
    return st.none() | inner


def widened(t: ValueType) -> st.SearchStrategy[ValueType]:
    """A type every value of ``t`` migrates to (the changes the evolution rules allow)."""
    same = st.just(t)
    if t.name in ("int", "timestamp"):
        return st.sampled_from([t, ValueType("float"), ValueType("json"),
                                ValueType("timestamp" if t.name == "int" else "int")])
    if t.name == "list":
        return same | widened(t.args[0]).map(lambda e: ValueType("list", (e,)))
    if t.name == "map":
        return same | widened(t.args[1]).map(lambda v: ValueType("map", (t.args[0], v)))
    if t.name == "struct":
        return same | st.builds(_evolve_struct, st.tuples(*(widened(f) for f in t.args)), st.just(t),
                                st.lists(st.tuples(st.sampled_from(["x", "y"]), types), max_size=2,
                                         unique_by=lambda f: f[0]), st.integers(0, len(t.fields)))
    return same | st.just(ValueType("json"))


def _evolve_struct(fields: tuple[ValueType, ...], t: ValueType, added: list[tuple[str, ValueType]],
                   keep: int) -> ValueType:
    kept = list(zip(t.fields, fields))[:max(keep, 1)]
    pairs = kept + [(n, f) for n, f in added if n not in t.fields]
    return ValueType("struct", tuple(f for _, f in pairs), tuple(n for n, _ in pairs))


@st.composite
def typed_value_and_widening(draw: st.DrawFn) -> tuple[ValueType, Any, ValueType]:
    old = draw(types)
    return old, draw(values_of(old)), draw(widened(old))


@settings(max_examples=300, deadline=None)
@given(typed_value_and_widening())
def test_every_widening_is_compatible_and_migrated_values_fit(case: tuple[ValueType, Any, ValueType]) -> None:
    old, value, new = case
    assert old.check(value) is None
    change = resolve_type_change(old, new)
    assert change.compatible, change.reason
    migrated = migrate_value(value, old, new)
    assert new.check(migrated) is None
    if change.compatibility is AS_IS:
        assert migrated is value


@settings(max_examples=300, deadline=None)
@given(types, types, st.data())
def test_any_compatible_pair_migrates_every_value_into_the_new_type(old: ValueType, new: ValueType,
                                                                   data: st.DataObject) -> None:
    change = resolve_type_change(old, new)
    if not change.compatible:
        with pytest.raises(IncompatibleStateError):
            migrate_value(data.draw(values_of(old)), old, new)
        return
    value = data.draw(values_of(old))
    assert new.check(migrate_value(value, old, new)) is None


@settings(max_examples=200, deadline=None)
@given(types.filter(lambda t: t.name == "struct"), st.data())
def test_a_field_added_then_removed_round_trips(old: ValueType, data: st.DataObject) -> None:
    added = ValueType("struct", (*old.args, ValueType("string")), (*old.fields, "zz_added"))
    value = data.draw(values_of(old))
    there = migrate_value(value, old, added)
    assert there is None or there["zz_added"] is None
    assert migrate_value(there, added, old) == value


@settings(max_examples=200, deadline=None)
@given(types)
def test_a_type_is_compatible_as_is_with_itself_and_json(t: ValueType) -> None:
    assert resolve_type_change(t, t).compatibility is AS_IS
    assert resolve_type_change(t, ValueType("json")).compatibility is AS_IS


def test_added_fields_take_given_defaults() -> None:
    old, new = parse_value_type("struct<a:int>"), parse_value_type("struct<a:float,cur:string,tags:list<string>>")
    defaults = {"cur": "EUR", "tags": []}
    first = migrate_value({"a": 1}, old, new, defaults)
    assert first == {"a": 1.0, "cur": "EUR", "tags": []}
    first["tags"].append("x")
    assert migrate_value({"a": 2}, old, new, defaults) == {"a": 2.0, "cur": "EUR", "tags": []}
    assert migrate_value(None, old, new, defaults) is None


@pytest.mark.parametrize("defaults, message", [
    ({"a": 1.5}, "default for 'a': struct<a:float,cur:string> adds no field 'a' to struct<a:int> "
                 r"\(fields added: cur\)"),
    ({"cur": 3}, "default for 'cur': expected string, got int"),
])
def test_defaults_must_name_an_added_field_and_fit_its_type(defaults: dict[str, Any], message: str) -> None:
    from statekit.statefmt.errors import BadInputError

    with pytest.raises(BadInputError, match=message):
        migrate_value({"a": 1}, parse_value_type("struct<a:int>"), parse_value_type("struct<a:float,cur:string>"),
                      defaults)
