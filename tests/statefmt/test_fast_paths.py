"""Column-wise fast paths of encoding and decoding give exactly what the reference paths give."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from statekit.statefmt.encoding import python_values
from statekit.statefmt.entries import KeyedStateEntry, MapStateEntry, StateCodec, group_by_key_group
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.statefmt.serializers import get_serializer, serialize_column, serialize_many

ASCII = st.characters(min_codepoint=32, max_codepoint=126)


@st.composite
def fixed_width_strings(draw: Any) -> list[str]:
    """Strings of one UTF-8 length (fixed-width keys: one msgpack header for the column)."""
    width = draw(st.integers(0, 40))
    return draw(st.lists(st.text(ASCII, min_size=width, max_size=width), min_size=1, max_size=30))


@settings(max_examples=150, deadline=None)
@given(st.one_of(fixed_width_strings(), st.lists(st.text(max_size=300), min_size=1, max_size=30)),
       st.sampled_from(["msgpack", "utf8"]))
def test_serialize_column_equals_value_by_value(values: list[str], name: str) -> None:
    serializer = get_serializer(name)
    try:
        expected = pa.array(serialize_many(serializer, values, "key"), pa.binary())
    except Exception:  # noqa: BLE001 - lone surrogates: not encodable either way
        return
    assert serialize_column(serializer, values, "key").equals(expected)


TYPED = [
    (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    (pa.float64(), st.floats(allow_nan=False)),
    (pa.string(), st.text(max_size=5)),
    (pa.list_(pa.int64()), st.lists(st.integers(-5, 5), max_size=3)),
    (pa.map_(pa.string(), pa.int64()), st.dictionaries(st.text(max_size=3), st.integers(-5, 5), max_size=3)),
    (pa.struct([("a", pa.int64()), ("m", pa.map_(pa.string(), pa.int64()))]),
     st.fixed_dictionaries({"a": st.integers(-5, 5), "m": st.dictionaries(st.text(max_size=2), st.integers(-5, 5), max_size=2)})),
]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_python_values_equals_strict_to_pylist(data: Any) -> None:
    arrow_type, values = data.draw(st.sampled_from(TYPED))
    items = data.draw(st.lists(st.one_of(st.none(), values) if data.draw(st.booleans()) else values, max_size=20))
    column = pa.array(items, arrow_type)
    start = data.draw(st.integers(0, len(items)))
    column = column.slice(start, data.draw(st.integers(0, len(items) - start)))
    assert python_values(column) == column.to_pylist(maps_as_pydicts="strict")


def test_python_values_of_doubles_keeps_nan_and_negative_zero() -> None:
    out = python_values(pa.array([float("nan"), -0.0, 1.5]))
    assert out[0] != out[0] and str(out[1]) == "-0.0" and out[2] == 1.5


KEYS = st.one_of(st.text(max_size=12), st.integers(-(2**40), 2**40))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(KEYS, st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))), max_size=60),
       st.sampled_from([None, "int"]))
def test_decoded_columns_equal_decoded_entries(rows: list[tuple[Any, Any]], value_type: str | None) -> None:
    codec = StateCodec(StateDescriptor("v", StateKind.VALUE, value_type=value_type), "msgpack")
    entries: list[Any] = []
    for _, batch in group_by_key_group(codec.encode_keyed_rows(rows), 8):
        columns = codec.decode_keyed_columns(batch)
        assert set(columns) == {"key", "namespace", "value", "expiry"}
        assert all(len(c) == batch.num_rows for c in columns.values())
        from_columns = [KeyedStateEntry(*row) for row in
                        zip(columns["key"], columns["namespace"], columns["value"], columns["expiry"])]
        assert from_columns == list(codec.decode_keyed_batch(batch))
        entries.extend(from_columns)
    assert {e.key: e.value for e in entries} == dict(rows)  # last write wins
    assert len(entries) == len(dict(rows))


def test_decoded_columns_of_map_state() -> None:
    codec = StateCodec(StateDescriptor("m", StateKind.MAP, value_type="int"), "msgpack")
    rows = [("a", "x", 1), ("a", "ns", "y", 2), MapStateEntry("b", "z", 3, None, 99)]
    decoded = []
    for _, batch in group_by_key_group(codec.encode_keyed_rows(rows), 4):
        c = codec.decode_keyed_columns(batch)
        decoded += list(zip(c["key"], c["user_key"], c["value"], c["namespace"], c["expiry"]))
        assert decoded[-batch.num_rows:] == [tuple(e) for e in codec.decode_keyed_batch(batch)]
    assert sorted(decoded, key=repr) == sorted(
        [("a", "x", 1, None, None), ("a", "y", 2, "ns", None), ("b", "z", 3, None, 99)], key=repr)
