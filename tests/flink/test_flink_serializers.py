"""Decoders of Flink's common serializers, against bytes encoded here as Java writes them."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statekit.flink.cursor import ByteCursor
from statekit.flink.serializers import (
    BYTES_CLASS,
    LIST_CLASS,
    MAP_CLASS,
    ROW_CLASS,
    TIME_WINDOW_CLASS,
    VOID_NAMESPACE_CLASS,
    flink_serializer,
    read_list_delimited,
    unsupported_class,
)
from statekit.flink.state_meta import SerializerNode
from statekit.statefmt.errors import CorruptStateError

BASE = "org.apache.flink.api.common.typeutils.base."


def simple(name: str) -> SerializerNode:
    return SerializerNode(BASE + f"{name}Serializer${name}SerializerSnapshot")


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def java_string(text: str | None) -> bytes:
    """``StringValue.writeString``: length+1 then UTF-16 code units, each as a varint."""
    if text is None:
        return b"\x00"
    units = text.encode("utf-16-be")
    codes = [int.from_bytes(units[i:i + 2], "big") for i in range(0, len(units), 2)]
    return varint(len(codes) + 1) + b"".join(varint(c) for c in codes)


def read(node: SerializerNode, data: bytes) -> object:
    serializer = flink_serializer(node)
    assert serializer is not None
    cur = ByteCursor(data, source="test", error=CorruptStateError)
    value = serializer.read(cur)
    assert cur.remaining == 0
    return value


@given(st.text())
def test_strings_round_trip_including_supplementary_characters(text: str) -> None:
    text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")  # no lone surrogates
    assert read(simple("String"), java_string(text)) == text


def test_null_string_and_long_strings() -> None:
    assert read(simple("String"), java_string(None)) is None
    assert read(simple("String"), java_string("x" * 300)) == "x" * 300  # two-byte length


@pytest.mark.parametrize(("name", "data", "value", "spark"), [
    ("Long", struct.pack(">q", -5), -5, "bigint"),
    ("Int", struct.pack(">i", 42), 42, "int"),
    ("Short", struct.pack(">h", -2), -2, "smallint"),
    ("Byte", b"\xff", -1, "tinyint"),
    ("Boolean", b"\x01", True, "boolean"),
    ("Double", struct.pack(">d", 2.5), 2.5, "double"),
    ("Float", struct.pack(">f", 0.5), 0.5, "float"),
    ("Char", b"\x00A", "A", "string"),
])
def test_fixed_length_types(name: str, data: bytes, value: object, spark: str) -> None:
    serializer = flink_serializer(simple(name))
    assert serializer is not None and serializer.spark_type == spark and serializer.fixed_length == len(data)
    assert read(simple(name), data) == value


def test_byte_arrays_rows_lists_and_maps() -> None:
    assert read(SerializerNode(BYTES_CLASS), b"\x00\x00\x00\x03abc") == b"abc"
    row = SerializerNode(ROW_CLASS, (simple("String"), simple("Long"), simple("Int")))
    # mask: 2 row-kind bits then one null bit per field, most significant bit first: f1 null
    data = bytes([0b0001_0000]) + java_string("k") + struct.pack(">i", 7)
    assert read(row, data) == {"f0": "k", "f1": None, "f2": 7}
    assert flink_serializer(row).spark_type == "struct<f0:string,f1:bigint,f2:int>"  # type: ignore[union-attr]
    wide = SerializerNode(ROW_CLASS, tuple(simple("Int") for _ in range(7)))  # 9 bits: two mask bytes
    data = bytes([0, 0b1000_0000]) + b"".join(struct.pack(">i", i) for i in range(6))
    assert read(wide, data) == {**{f"f{i}": i for i in range(6)}, "f6": None}
    listed = SerializerNode(LIST_CLASS, (simple("Long"),))
    assert read(listed, struct.pack(">iqq", 2, 1, 2)) == [1, 2]
    mapped = SerializerNode(MAP_CLASS, (simple("String"), simple("Int")))
    assert read(mapped, struct.pack(">i", 2) + java_string("a") + b"\x00" + struct.pack(">i", 1)
                + java_string("b") + b"\x01") == {"a": 1, "b": None}
    assert read(SerializerNode(VOID_NAMESPACE_CLASS), b"\x00") is None
    assert read(SerializerNode(TIME_WINDOW_CLASS), struct.pack(">qq", 0, 60_000)) == {"start": 0, "end": 60_000}


def test_list_state_values_are_comma_delimited() -> None:
    long = flink_serializer(simple("Long"))
    assert long is not None
    data = struct.pack(">q", 1) + b"," + struct.pack(">q", 2) + b"," + struct.pack(">q", 3)
    assert read_list_delimited(ByteCursor(data, source="t", error=CorruptStateError), long, len(data)) == [1, 2, 3]
    bad = struct.pack(">q", 1) + b";" + struct.pack(">q", 2)
    with pytest.raises(CorruptStateError, match="delimiter.* at byte offset 8"):
        read_list_delimited(ByteCursor(bad, source="t", error=CorruptStateError), long, len(bad))


def test_unsupported_classes_are_named() -> None:
    kryo = SerializerNode("org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializerSnapshot")
    row = SerializerNode(ROW_CLASS, (simple("String"), kryo))
    assert flink_serializer(row) is None
    assert unsupported_class(row).startswith(kryo.snapshot_class)
    assert flink_serializer(None) is None


@pytest.mark.parametrize("cut", range(1, 9))
def test_truncated_values_raise_with_the_offset(cut: int) -> None:
    data = (java_string("hello") + struct.pack(">q", 3))
    row = SerializerNode(ROW_CLASS, (simple("String"), simple("Long")))
    serializer = flink_serializer(row)
    assert serializer is not None
    cur = ByteCursor(b"\x00" + data[:cut], source="state-file", error=CorruptStateError)
    with pytest.raises(CorruptStateError, match=r"state-file: truncated: .* at byte offset \d+"):
        serializer.read(cur)
