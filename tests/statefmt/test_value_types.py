"""Declared value types: the grammar, printing, errors and value checks."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekit.statefmt.errors import BadInputError
from statekit.statefmt.value_types import ANY, ValueType, parse_value_type, to_arrow_type

_PRIMITIVES = ["int", "float", "string", "bool", "bytes", "timestamp", "json"]
_names = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True)

value_types = st.recursive(
    st.sampled_from(_PRIMITIVES).map(ValueType),
    lambda inner: (
        inner.map(lambda t: ValueType("list", (t,)))
        | st.tuples(inner, inner).map(lambda kv: ValueType("map", kv))
        | st.lists(st.tuples(_names, inner), min_size=1, max_size=4, unique_by=lambda f: f[0]).map(
            lambda fs: ValueType("struct", tuple(t for _, t in fs), tuple(n for n, _ in fs))
        )
    ),
    max_leaves=8,
)


@settings(max_examples=100, deadline=None)
@given(value_types)
def test_print_parse_round_trip(value_type: ValueType) -> None:
    text = str(value_type)
    assert parse_value_type(text) == value_type
    assert str(parse_value_type(text)) == text
    spaced = text.replace(",", " , ").replace("<", " < ")
    assert parse_value_type(spaced) == value_type


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("long", "int"), ("BIGINT", "int"), ("int64", "int"), ("double", "float"), ("str", "string"),
        ("boolean", "bool"), ("binary", "bytes"), ("any", "json"), ("array<long>", "list<int>"),
        ("map<str, list<double>>", "map<string,list<float>>"),
        ("struct<a:int, b: struct<c:timestamp>>", "struct<a:int,b:struct<c:timestamp>>"),
    ],
)
def test_aliases_print_canonically(text: str, canonical: str) -> None:
    assert str(parse_value_type(text)) == canonical


@pytest.mark.parametrize("text", [None, "", "   "])
def test_empty_means_any(text: str | None) -> None:
    assert parse_value_type(text) == ANY


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        ("integer8", "unknown type 'integer8'"),
        ("list<int", "expected '>'"),
        ("list<>", "unknown type '>'"),
        ("map<int>", "expected ','"),
        ("struct<>", "expected a field name"),
        ("struct<a:int,a:string>", "duplicate field names"),
        ("struct<a int>", "expected ':'"),
        ("int int", "unexpected 'int'"),
        ("list<int>>", "unexpected '>'"),
        ("int?", "at character 3"),
        ("map<", "ends early"),
    ],
)
def test_invalid_types_raise_bad_input(text: str, cause: str) -> None:
    with pytest.raises(BadInputError) as info:
        parse_value_type(text)
    message = str(info.value)
    assert message.startswith(f"invalid value type {text!r}") and cause in message


def test_nesting_is_bounded_and_long_types_are_shown_short() -> None:
    from statekit.statefmt.value_types import MAX_DEPTH

    assert str(parse_value_type("list<" * MAX_DEPTH + "int" + ">" * MAX_DEPTH)).count("list") == MAX_DEPTH
    for deep in ("list<" * 3000 + "int" + ">" * 3000, "map<int," * 40 + "int" + ">" * 40,
                 "struct<a:" * 40 + "int" + ">" * 40):
        with pytest.raises(BadInputError) as info:
            parse_value_type(deep)
        message = str(info.value)
        assert f"nested more than {MAX_DEPTH} levels deep" in message and len(message) < 400


@pytest.mark.parametrize(
    ("text", "good", "bad", "reason"),
    [
        ("int", [0, -5, 2**70, None], [True, 1.5, "1"], "expected int"),
        ("float", [1.5, 2, None], [True, "x"], "expected float"),
        ("string", ["", "x"], [b"x", 1], "expected string"),
        ("bool", [True, False], [0, "true"], "expected bool"),
        ("bytes", [b"", bytearray(b"x")], ["x"], "expected bytes"),
        ("timestamp", [1_700_000_000_000], [1.5], "expected timestamp"),
        ("json", [object(), None, {"a": [1]}], [], ""),
        ("list<int>", [[1, 2], (3,), []], [[1, "2"], {"a": 1}], "expected"),
        ("map<string,int>", [{"a": 1}, {}], [{"a": "1"}, {1: 1}, [1]], "expected"),
        ("struct<a:int,b:string>", [{"a": 1}, {"a": 1, "b": "x"}, {}], [{"a": "1"}, {"c": 1}, 5], ""),
    ],
)
def test_check(text: str, good: list[Any], bad: list[Any], reason: str) -> None:
    value_type = parse_value_type(text)
    for value in good:
        assert value_type.check(value) is None, value
    for value in bad:
        found = value_type.check(value)
        assert found and reason in found, (value, found)
    assert value_type.check_many(good) is None
    if bad:
        assert value_type.check_many(good + bad[:1]) == value_type.check(bad[0])


def test_struct_check_names_the_field() -> None:
    assert parse_value_type("struct<a:int>").check({"a": "x"}) == "a: expected int, got str"
    assert parse_value_type("struct<a:int>").check({"z": 1}) == "unknown struct fields ['z']"


def test_arrow_types() -> None:
    import pyarrow as pa

    assert to_arrow_type(parse_value_type("int")) == pa.int64()
    assert to_arrow_type(parse_value_type("timestamp")) == pa.timestamp("ms", tz="UTC")
    assert to_arrow_type(parse_value_type("json")) == pa.string()
    assert to_arrow_type(parse_value_type("map<string,list<float>>")) == pa.map_(pa.string(), pa.list_(pa.float64()))
    assert to_arrow_type(parse_value_type("struct<a:int,b:bytes>")) == pa.struct(
        [pa.field("a", pa.int64()), pa.field("b", pa.binary())]
    )


_ELEMENTS = st.one_of(st.none(), st.integers(-5, 5), st.booleans(), st.floats(allow_nan=False), st.text(max_size=2),
                      st.binary(max_size=2))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["list<int>", "list<float>", "list<string>", "list<bool>", "list<bytes>", "list<timestamp>"]),
       st.lists(st.one_of(st.none(), st.lists(_ELEMENTS, max_size=4), st.lists(_ELEMENTS, max_size=4).map(tuple),
                          _ELEMENTS), max_size=6))
def test_check_many_of_lists_agrees_with_checking_one_by_one(declared: str, values: list[Any]) -> None:
    """The by-type fast path for lists of simple elements finds a misfit exactly when some value misfits."""
    value_type = parse_value_type(declared)
    one_by_one = next((r for r in map(value_type.check, values) if r), None)
    assert (value_type.check_many(values) is None) == (one_by_one is None)
