"""Flink SQL's ``BinaryRowData`` (statekit.flink.row_data): golden bytes and round trips.

The encoder here is written from Flink's documented layout (``BinaryRowData`` javadoc,
``AbstractBinaryWriter``, ``BinaryArrayData``), independently of the decoder: header (row
kind byte, null bits from bit 8), an 8-byte slot per field (little-endian), a variable part
padded to 8 bytes, short strings inline with the top byte ``0x80 | length``.
"""

from __future__ import annotations

import datetime
import struct
from decimal import Decimal, localcontext
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekit.flink.cursor import ByteCursor
from statekit.flink.logical_type import LogicalType
from statekit.flink.row_data import row_data_serializer, unsupported_type
from statekit.flink.serializers import flink_serializer, unsupported_class
from statekit.flink.state_meta import ROW_DATA_SNAPSHOT, SerializerNode
from statekit.statefmt.errors import StatekitError

VARCHAR = LogicalType("VARCHAR", precision=2147483647)
FIXED = {"BOOLEAN": "<?", "TINYINT": "<b", "SMALLINT": "<h", "INTEGER": "<i", "DATE": "<i", "FLOAT": "<f",
         "BIGINT": "<q", "DOUBLE": "<d", "TIME_WITHOUT_TIME_ZONE": "<i"}
ELEMENT_SIZE = {"BOOLEAN": 1, "TINYINT": 1, "SMALLINT": 2, "INTEGER": 4, "DATE": 4, "FLOAT": 4,
                "TIME_WITHOUT_TIME_ZONE": 4}


def _pad(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 8)


class _Writer:
    """A binary row, array or map under construction: its fixed part and its variable part."""

    def __init__(self, fixed_size: int) -> None:
        self.fixed = bytearray(fixed_size)
        self.var = bytearray()

    def put_var(self, slot: int, data: bytes, low: int | None = None) -> None:
        offset = len(self.fixed) + len(self.var)
        self.var += _pad(data)
        struct.pack_into("<q", self.fixed, slot, offset << 32 | (len(data) if low is None else low))

    def put(self, t: LogicalType, slot: int, value: Any, size: int = 8) -> None:
        root = t.root
        if root in FIXED:
            fmt = FIXED[root]
            if root == "DATE":
                value = (value - datetime.date(1970, 1, 1)).days
            struct.pack_into(fmt, self.fixed, slot, value)
        elif root in ("VARCHAR", "VARBINARY"):
            data = value.encode() if root == "VARCHAR" else value
            if len(data) <= 7:
                self.fixed[slot:slot + 8] = data + b"\0" * (7 - len(data)) + bytes([0x80 | len(data)])
            else:
                self.put_var(slot, data)
        elif root == "DECIMAL":
            with localcontext(prec=60):
                unscaled = int(Decimal(value).scaleb(t.scale or 0))
            if (t.precision or 0) <= 18:
                struct.pack_into("<q", self.fixed, slot, unscaled)
            else:
                self.put_var(slot, unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big", signed=True))
        elif root == "TIMESTAMP_WITHOUT_TIME_ZONE":
            millis, nanos = value
            if (t.precision or 0) <= 3:
                struct.pack_into("<q", self.fixed, slot, millis)
            else:
                self.put_var(slot, struct.pack("<q", millis), low=nanos)
        elif root == "ARRAY":
            self.put_var(slot, encode_array(t.children[0], value))
        elif root == "ROW":
            self.put_var(slot, encode_row(list(t.children), value, with_length=False))
        else:
            raise AssertionError(root)


def encode_array(element: LogicalType, values: list[Any]) -> bytes:
    size = ELEMENT_SIZE.get(element.root, 8)
    header = 4 + (len(values) + 31) // 32 * 4
    writer = _Writer(header + len(_pad(bytes(size * len(values)))))
    struct.pack_into("<i", writer.fixed, 0, len(values))
    for i, value in enumerate(values):
        if value is None:
            writer.fixed[4 + i // 8] |= 1 << (i % 8)
        else:
            writer.put(element, header + size * i, value, size)
    return bytes(writer.fixed + writer.var)


def encode_row(types: list[LogicalType], values: list[Any], *, kind: int = 0, with_length: bool = True) -> bytes:
    header = (len(types) + 63 + 8) // 64 * 8
    writer = _Writer(header + 8 * len(types))
    writer.fixed[0] = kind
    for i, (t, value) in enumerate(zip(types, values)):
        if value is None:
            writer.fixed[(i + 8) // 8] |= 1 << ((i + 8) % 8)
        else:
            writer.put(t, header + 8 * i, value)
    body = bytes(writer.fixed + writer.var)
    return struct.pack(">i", len(body)) + body if with_length else body


def node(*types: LogicalType) -> SerializerNode:
    return SerializerNode(ROW_DATA_SNAPSHOT, logical_types=types)


def decode(types: list[LogicalType], data: bytes) -> dict[str, Any]:
    serializer = row_data_serializer(node(*types))
    assert serializer is not None
    cur = ByteCursor(data, source="row")
    row: dict[str, Any] = serializer.read(cur)
    assert cur.remaining == 0
    return row


def test_golden_bytes_of_a_row_with_a_long_string_and_a_null() -> None:
    data = bytes.fromhex(
        "00000030"  # length 48
        "0004000000000000"  # +I, field 2 null (bit 10)
        "0500000000000000"  # BIGINT 5
        "0c00000020000000"  # "hello world!": 12 bytes at offset 32
        "0000000000000000"  # (null)
        + b"hello world!".hex() + "00000000"  # variable part, padded to 8 bytes
    )
    types = [LogicalType("BIGINT"), VARCHAR, LogicalType("DOUBLE")]
    assert decode(types, data) == {"f0": 5, "f1": "hello world!", "f2": None}
    assert data == encode_row(types, [5, "hello world!", None])
    inline = bytes.fromhex("00000010" "0000000000000000" "6869000000000082")  # "hi": top byte 0x80 | 2
    assert decode([VARCHAR], inline) == {"f0": "hi"}


def test_types_of_the_real_group_aggregate() -> None:
    """The accumulator of ``by_user``: BIGINT, DOUBLE, DECIMAL(38, 2) (not compact), TIMESTAMP(3), (6), DATE."""
    types = [LogicalType("BIGINT"), LogicalType("DOUBLE"), LogicalType("DECIMAL", precision=38, scale=2),
             LogicalType("TIMESTAMP_WITHOUT_TIME_ZONE", precision=3),
             LogicalType("TIMESTAMP_WITHOUT_TIME_ZONE", precision=6), LogicalType("DATE")]
    values = [40, 4875.0, "4750.25", (1700000000000, 0), (1704103200001, 958000), datetime.date(2029, 3, 17)]
    row = decode(types, encode_row(types, values))
    assert row == {"f0": 40, "f1": 4875.0, "f2": "4750.25", "f3": 1700000000000,
                   "f4": "2024-01-01T10:00:00.001958", "f5": datetime.date(2029, 3, 17)}
    serializer = row_data_serializer(node(*types))
    assert serializer is not None
    assert serializer.spark_type == ("struct<f0:bigint,f1:double,f2:string,f3:timestamp_ntz,f4:string,f5:date>")
    assert serializer.name == "RowData<BIGINT,DOUBLE,DECIMAL(38, 2),TIMESTAMP(3),TIMESTAMP(6),DATE>"


def test_nested_arrays_and_rows() -> None:
    inner = LogicalType("ROW", children=(LogicalType("INTEGER"), VARCHAR), names=("n", "s"))
    types = [LogicalType("ARRAY", children=(LogicalType("INTEGER"),)), LogicalType("ARRAY", children=(VARCHAR,)), inner]
    values = [[1, None, 3], ["short", None, "a longer string"], [7, "seven and more"]]
    assert decode(types, encode_row(types, values)) == {
        "f0": [1, None, 3], "f1": ["short", None, "a longer string"], "f2": {"n": 7, "s": "seven and more"}}


@pytest.mark.parametrize("kind", [1, 2, 3])
def test_a_changelog_row_kind_is_not_part_of_the_value(kind: int) -> None:
    """Deduplication and Top-N keep input rows as emitted (+U after an update): same fields as +I."""
    assert decode([LogicalType("BIGINT")], encode_row([LogicalType("BIGINT")], [1], kind=kind)) == {"f0": 1}


def test_a_row_kind_beyond_the_four_is_damage() -> None:
    with pytest.raises(StatekitError, match=r"row kind 4 \(0 to 3"):
        decode([LogicalType("BIGINT")], encode_row([LogicalType("BIGINT")], [1], kind=4))


def test_offsets_outside_the_row_are_damage_not_values() -> None:
    data = bytearray(encode_row([VARCHAR], ["a string of 20 bytes"]))
    struct.pack_into("<q", data, 4 + 8, 200 << 32 | 20)
    with pytest.raises(StatekitError, match="outside the value"):
        decode([VARCHAR], bytes(data))


def test_unknown_types_are_refused_naming_the_type() -> None:
    raw = LogicalType("RAW", java_class="org.apache.flink.table.types.logical.RawType")
    interval = LogicalType("INTERVAL_DAY_TIME", java_class="org.apache.flink.table.types.logical.DayTimeIntervalType")
    row = node(LogicalType("BIGINT"), LogicalType("ARRAY", children=(raw,)))
    assert flink_serializer(row) is None
    assert unsupported_type(row.logical_types[1]) is raw
    assert unsupported_class(row) == "RowData (Flink SQL row) with a field of type RAW"
    assert unsupported_class(node(interval)) == "RowData (Flink SQL row) with a field of type INTERVAL_DAY_TIME"


def test_sql_spelling_of_logical_types() -> None:
    assert VARCHAR.sql() == "STRING"
    assert LogicalType("VARCHAR", nullable=False, precision=10).sql() == "VARCHAR(10) NOT NULL"
    assert LogicalType("TIMESTAMP_WITH_LOCAL_TIME_ZONE", precision=3).sql() == "TIMESTAMP_LTZ(3)"
    assert LogicalType("MAP", children=(VARCHAR, LogicalType("INTEGER"))).sql() == "MAP<STRING, INT>"


# ----------------------------------------------------------------------------- round trips

_SCALARS: list[tuple[LogicalType, st.SearchStrategy[Any], Any]] = [
    (LogicalType("BOOLEAN"), st.booleans(), None),
    (LogicalType("TINYINT"), st.integers(-128, 127), None),
    (LogicalType("SMALLINT"), st.integers(-(2**15), 2**15 - 1), None),
    (LogicalType("INTEGER"), st.integers(-(2**31), 2**31 - 1), None),
    (LogicalType("BIGINT"), st.integers(-(2**63), 2**63 - 1), None),
    (LogicalType("DOUBLE"), st.floats(allow_nan=False), None),
    (LogicalType("FLOAT"), st.floats(width=32, allow_nan=False), None),
    (VARCHAR, st.text(), None),
    (LogicalType("VARBINARY", precision=2147483647), st.binary(), None),
    (LogicalType("DATE"), st.dates(), None),
    (LogicalType("DECIMAL", precision=10, scale=2), st.decimals(-(10**8) + 1, 10**8 - 1, places=2), str),
    (LogicalType("DECIMAL", precision=38, scale=4), st.decimals(-(10**34) + 1, 10**34 - 1, places=4), str),
    (LogicalType("TIMESTAMP_WITHOUT_TIME_ZONE", precision=3),
     st.tuples(st.integers(-(10**14), 10**14), st.just(0)), lambda v: v[0]),
]


@st.composite
def rows(draw: st.DrawFn) -> tuple[list[LogicalType], list[Any], dict[str, Any]]:
    picked = draw(st.lists(st.sampled_from(range(len(_SCALARS))), min_size=1, max_size=70))
    types, values, expected = [], [], {}
    for i, index in enumerate(picked):
        t, strategy, expect = _SCALARS[index]
        value = draw(st.none() | strategy)
        types.append(t)
        values.append(value)
        if value is None:
            expected[f"f{i}"] = None
        elif t.root == "DECIMAL":
            with localcontext(prec=60):  # the value at the type's scale, and never "-0.00"
                exact = (abs(value) if value == 0 else value).quantize(Decimal(1).scaleb(-(t.scale or 0)))
            expected[f"f{i}"] = format(exact, "f")
        else:
            expected[f"f{i}"] = expect(value) if callable(expect) else value
    return types, values, expected


@settings(max_examples=200, deadline=None)
@given(rows())
def test_round_trip_of_any_row_of_scalars(case: tuple[list[LogicalType], list[Any], dict[str, Any]]) -> None:
    types, values, expected = case
    assert decode(types, encode_row(types, values)) == expected


def test_wide_decimals_keep_every_digit() -> None:
    """38 digits: more than the default decimal context's 28 (a rounded value would be wrong)."""
    from statekit.flink.java_types import decimal_text

    assert decimal_text(12345678901234567890123456789012345678, 2) == "123456789012345678901234567890123456.78"
    assert decimal_text(-(10**30) - 1, 4) == "-100000000000000000000000000.0001"


_NESTED_TYPES = [LogicalType("BIGINT"), VARCHAR, LogicalType("DATE"),
                 LogicalType("TIMESTAMP_WITHOUT_TIME_ZONE", precision=9), LogicalType("DECIMAL", precision=30, scale=3),
                 LogicalType("ARRAY", children=(VARCHAR,)),
                 LogicalType("MAP", children=(VARCHAR, LogicalType("INTEGER"))),
                 LogicalType("ROW", children=(LogicalType("TIME_WITHOUT_TIME_ZONE"), VARCHAR), names=("t", "s"))]
_NESTED_ROW = encode_row(_NESTED_TYPES[:6] + [_NESTED_TYPES[7]], [
    7, "a string of some length", datetime.date(2024, 5, 1), (1700000000123, 456789), "12345.678",
    ["x", None, "a longer element"], [1000, "and a long text"]])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(_NESTED_ROW) - 1), st.integers(0, 255)), min_size=1, max_size=6))
def test_damaged_rows_decode_or_fail_with_a_statekit_error(flips: list[tuple[int, int]]) -> None:
    """Any bytes: a value, or one StatekitError naming the offset — never another exception."""
    data = bytearray(_NESTED_ROW)
    for at, byte in flips:
        data[at] = byte
    types = _NESTED_TYPES[:6] + [_NESTED_TYPES[7]]
    serializer = row_data_serializer(node(*types))
    assert serializer is not None
    try:
        serializer.read(ByteCursor(bytes(data), source="row"))
    except StatekitError as exc:
        assert "byte offset" in str(exc)


def test_the_undamaged_nested_row_decodes() -> None:
    types = _NESTED_TYPES[:6] + [_NESTED_TYPES[7]]
    assert decode(types, _NESTED_ROW) == {
        "f0": 7, "f1": "a string of some length", "f2": datetime.date(2024, 5, 1),
        "f3": "2023-11-14T22:13:20.123456789", "f4": "12345.678", "f5": ["x", None, "a longer element"],
        "f6": {"t": "00:00:01", "s": "and a long text"}}


def _table(cls: str, text: str | None = None, *children: SerializerNode) -> SerializerNode:
    return SerializerNode(cls, children, text=text)


def test_the_field_serializers_of_sql_state() -> None:
    """StringData, DecimalData, TimestampData and ExternalSerializer: map keys and values of SQL data views."""
    from statekit.flink.state_meta import (
        DECIMAL_DATA_SNAPSHOT,
        EXTERNAL_SNAPSHOT,
        STRING_DATA_SNAPSHOT,
        TIMESTAMP_DATA_SNAPSHOT,
    )

    def read(node: SerializerNode, data: bytes) -> Any:
        serializer = flink_serializer(node)
        assert serializer is not None
        cur = ByteCursor(data, source="value")
        value = serializer.read(cur)
        assert cur.remaining == 0
        return value

    text = "héllo".encode()
    assert read(_table(STRING_DATA_SNAPSHOT), struct.pack(">i", len(text)) + text) == "héllo"
    assert read(_table(EXTERNAL_SNAPSHOT, None, _table(STRING_DATA_SNAPSHOT)), b"\0\0\0\x01u") == "u"
    assert read(_table(DECIMAL_DATA_SNAPSHOT, "10,2"), struct.pack(">q", -12345)) == "-123.45"
    wide = (10**30 + 7).to_bytes(13, "big", signed=True)
    assert read(_table(DECIMAL_DATA_SNAPSHOT, "38,3"), struct.pack(">i", 13) + wide) == "1000000000000000000000000000.007"
    assert read(_table(TIMESTAMP_DATA_SNAPSHOT, "3"), struct.pack(">q", 1700000000123)) == 1700000000123
    assert read(_table(TIMESTAMP_DATA_SNAPSHOT, "6"), struct.pack(">qi", 1700000000123, 456000)) == (
        "2023-11-14T22:13:20.123456")


def test_a_data_view_placeholder_is_null_and_other_raw_fields_are_refused() -> None:
    from statekit.flink.state_meta import NULL_SNAPSHOT, RAW_VALUE_SNAPSHOT

    raw = LogicalType("RAW", java_class="org.apache.flink.table.types.logical.RawType")
    view = _table(RAW_VALUE_SNAPSHOT, None, _table(NULL_SNAPSHOT))
    long_node = _table("org.apache.flink.api.common.typeutils.base.LongSerializer$LongSerializerSnapshot")
    row = SerializerNode(ROW_DATA_SNAPSHOT, (long_node, view), logical_types=(LogicalType("BIGINT"), raw))
    serializer = flink_serializer(row)
    assert serializer is not None and serializer.spark_type == "struct<f0:bigint,f1:string>"
    data = encode_row([LogicalType("BIGINT"), LogicalType("BIGINT")], [3, None])
    assert serializer.read(ByteCursor(data, source="row")) == {"f0": 3, "f1": None}
    other = SerializerNode(ROW_DATA_SNAPSHOT, (long_node, _table(RAW_VALUE_SNAPSHOT, None, long_node)),
                           logical_types=(LogicalType("BIGINT"), raw))
    assert flink_serializer(other) is None
    assert unsupported_class(other) == "RowData (Flink SQL row) with a field of type RAW"
