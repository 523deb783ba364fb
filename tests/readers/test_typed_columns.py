"""Value bytes -> typed Arrow columns (no Spark needed)."""

from __future__ import annotations

from typing import Any

import msgpack
import pyarrow as pa
import pytest

from statekit.readers.typed_columns import (
    ColumnTypes,
    TypedDecoder,
    column_type,
    decode_list_values,
    decode_values,
    infer_type,
    python_values,
    to_json_text,
)
from statekit.statefmt.entries import StateCodec
from statekit.statefmt.errors import SerializationError, UntrustedSerializerError
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.statefmt.serializers import encode_list, get_serializer
from statekit.statefmt.value_types import parse_value_type


def column(values: list[Any], serializer: str = "msgpack") -> pa.Array:
    s = get_serializer(serializer, for_write=True)
    return pa.array([None if v is None else s.serialize(v) for v in values], pa.binary())


def decode(values: list[Any], declared: str, serializer: str = "msgpack") -> pa.Array:
    return decode_values(column(values, serializer), get_serializer(serializer), parse_value_type(declared),
                         what="value", state="s")


@pytest.mark.parametrize(("declared", "values", "arrow_type"), [
    ("int", [1, -2, 2**62], pa.int64()),
    ("float", [1.5, 2, None], pa.float64()),
    ("string", ["a", "ü", ""], pa.string()),
    ("bool", [True, False], pa.bool_()),
    ("bytes", [b"\x00\x01", b""], pa.binary()),
    ("list<int>", [[1, 2], [], None], pa.list_(pa.int64())),
    ("map<string,int>", [{"a": 1}, {}], pa.map_(pa.string(), pa.int64())),
    ("struct<a:int,b:list<string>>", [{"a": 1, "b": ["x"]}, {"a": None, "b": []}],
     pa.struct([("a", pa.int64()), ("b", pa.list_(pa.string()))])),
])
def test_declared_types_become_typed_columns(declared: str, values: list[Any], arrow_type: pa.DataType) -> None:
    result = decode(values, declared)
    assert result.type == arrow_type
    expected = [float(v) if declared == "float" and isinstance(v, int) else v for v in values]
    if declared.startswith("map"):
        expected = [list(v.items()) for v in values]
    assert result.to_pylist() == expected


def test_timestamps_are_utc_milliseconds() -> None:
    result = decode([1_700_000_000_123], "timestamp")
    assert result.type == pa.timestamp("ms", tz="UTC")
    assert result.cast(pa.int64()).to_pylist() == [1_700_000_000_123]
    nested = decode([{"at": 5}], "struct<at:timestamp>")
    assert nested.type.field("at").type == pa.timestamp("ms", tz="UTC")


def test_json_columns_hold_canonical_json_text() -> None:
    result = decode([{"b": [1, b"\x01"], "a": None}, "x", None, 3], "json")
    assert result.type == pa.string()
    assert result.to_pylist() == ['{"b":[1,{"$bytes":"AQ=="}],"a":null}', '"x"', None, "3"]
    assert to_json_text({(1, 2): "tuple key"}) == '{"[1,2]":"tuple key"}'
    nested = decode([{"meta": {"k": [1]}}], "struct<meta:json>")
    assert nested.to_pylist() == [{"meta": '{"k":[1]}'}]


def test_single_type_serializers_decode_without_python_objects_per_value() -> None:
    assert decode([1, -1, 2**63 - 1], "int", "int64").to_pylist() == [1, -1, 2**63 - 1]
    assert decode(["héllo"], "string", "utf8").type == pa.string()
    raw = decode([b"\xff\x00"], "int", "bytes")  # raw bytes stay bytes whatever is declared
    assert raw.type == pa.binary() and raw.to_pylist() == [b"\xff\x00"]


def test_msgpack_fast_path_matches_value_by_value_decoding() -> None:
    values = [1, "two", [3], {"4": 4}, None, b"5", 6.5]
    data = column(values)
    assert python_values(data, get_serializer("msgpack"), "value") == values
    sliced = data.slice(2, 3)
    assert python_values(sliced, get_serializer("msgpack"), "value") == values[2:5]


def test_corrupt_msgpack_names_the_problem() -> None:
    data = pa.array([msgpack.packb(1), b"\xc1"], pa.binary())
    with pytest.raises(SerializationError, match="msgpack"):
        python_values(data, get_serializer("msgpack"), "value")


def test_values_that_do_not_fit_the_declared_type_are_refused_with_a_way_out() -> None:
    with pytest.raises(SerializationError, match="valueType=json"):
        decode(["not an int"], "int")


def test_column_type_rules() -> None:
    assert str(column_type("msgpack", "list<int>")) == "list<int>"
    assert str(column_type("bytes", "int")) == "bytes"
    assert str(column_type("int64", None)) == "int"
    assert str(column_type("utf8", None)) == "string"
    assert str(column_type("msgpack", None)) == "json"
    assert str(column_type("msgpack", None, sample=["a", "b"])) == "string"
    assert str(column_type("msgpack", None, sample=[1, 2])) == "int"
    assert str(column_type("msgpack", None, sample=[1, "b"])) == "json"
    assert str(column_type("msgpack", "int", override="json")) == "json"
    assert str(infer_type([True])) == "json" and str(infer_type([])) == "json"


def test_list_state_values_are_lists_of_the_element_type() -> None:
    s = get_serializer("msgpack")
    frames = pa.array([encode_list([s.serialize(1), s.serialize(2)]), encode_list([])], pa.binary())
    result = decode_list_values(frames, s, parse_value_type("int"), state="history")
    assert result.to_pylist() == [[1, 2], []]


def test_typed_decoder_builds_the_data_source_columns() -> None:
    descriptor = StateDescriptor("tags", StateKind.MAP, value_type="int", user_key_type="string")
    codec = StateCodec(descriptor, "msgpack", for_write=True)
    raw = codec.encode_keyed_rows([(7, "a", 1), (7, "b", 2)])
    types = ColumnTypes(parse_value_type("int"), parse_value_type("string"), parse_value_type("int"))
    decoder = TypedDecoder(descriptor, "msgpack", types)
    batch = decoder.decode_keyed(raw, pa.array([3, 3], pa.int32()), pa.array([0, 0], pa.int32()))
    assert batch.schema.names == ["key", "namespace", "user_key", "value", "expiry", "key_group", "subtask"]
    assert batch.to_pylist()[0] == {"key": 7, "namespace": None, "user_key": "a", "value": 1, "expiry": None,
                                   "key_group": 3, "subtask": 0}


def test_typed_decoder_refuses_pickle_without_trust() -> None:
    descriptor = StateDescriptor("p", StateKind.VALUE, value_serializer="pickle")
    types = ColumnTypes(parse_value_type("int"), parse_value_type("json"), parse_value_type("json"))
    with pytest.raises(UntrustedSerializerError):
        TypedDecoder(descriptor, "msgpack", types)
