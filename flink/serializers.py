"""Decode values written by Flink's common type serializers, chosen by their snapshot class.

Supported (snapshot class → Python value, Spark SQL type)::

    StringSerializer             str       string   StringValue: varint length+1 (0 = null),
                                                    then UTF-16 code units as varints
    Long/Int/Short/Byte          int       bigint/int/smallint/tinyint  (big-endian)
    Boolean                      bool      boolean
    Double/Float                 float     double/float
    Char                         str       string   one UTF-16 code unit
    BytePrimitiveArraySerializer bytes     binary   int length + bytes
    RowSerializer (of the above) dict      struct<f0:..,..>  mask bytes: 2 row-kind bits,
                                                    then one null bit per field, MSB first
    ListSerializer               list      array<...>  int size + elements
    MapSerializer                dict      map<...>    int size + (key, null flag, value)...
    SortedMapSerializer          list      array<struct<key,value>>  as MapSerializer, in the
                                                    comparator's order (Flink SQL's Top-N); entries
                                                    {"key", "value"}, since keys may be rows
    VoidNamespaceSerializer      None      -        one byte
    TimeWindow.Serializer        dict      struct<start:bigint,end:bigint>
    ByteArrayWrapperSerializer   bytes     binary   PyFlink map-state keys: int length + bytes
    TtlSerializer                TtlValue  (value's)  last-access timestamp long, then the value
    TimerSerializer              FlinkTimer struct<timestamp,key,namespace>  timestamp long with
                                                    its sign bit flipped, key, namespace
    Java types (Tuple, POJO, Either, enums, java.time, java.sql, BigInteger/BigDecimal, Scala
    case classes): see :mod:`statekit.flink.java_types`
    KryoSerializer               Kryo 5 (Flink 2.x) value types and declared classes:
                                                    see :mod:`statekit.flink.kryo`
    AvroSerializer               (schema)  (schema)  Avro data written by Flink's DataOutputEncoder
                                                    (see :mod:`statekit.flink.avro`)

Everything else is *unsupported*: :func:`flink_serializer` returns ``None`` and the caller
names the class. Reads go through :class:`ByteCursor`, so damage is an error naming the
byte offset, never an exception from ``struct``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from statekit.flink.cursor import ByteCursor
from statekit.flink.state_meta import (
    AVRO_SNAPSHOT,
    BYTE_ARRAY_WRAPPER_SNAPSHOT,
    DECIMAL_DATA_SNAPSHOT,
    EXTERNAL_SNAPSHOT,
    KRYO_SNAPSHOTS,
    ROW_DATA_SNAPSHOT,
    SORTED_MAP_SNAPSHOT,
    STRING_DATA_SNAPSHOT,
    TIMESTAMP_DATA_SNAPSHOT,
    SerializerNode,
)

__all__ = ["FlinkSerializer", "TtlValue", "FlinkTimer", "flink_serializer", "read_java_string",
           "read_list_delimited", "unsupported_class"]

_BASE = "org.apache.flink.api.common.typeutils.base."
_F64 = struct.Struct(">d")
_F32 = struct.Struct(">f")
ROW_KIND_BITS = 2
TABLE_SNAPSHOTS = frozenset({ROW_DATA_SNAPSHOT, STRING_DATA_SNAPSHOT, DECIMAL_DATA_SNAPSHOT, TIMESTAMP_DATA_SNAPSHOT,
                             EXTERNAL_SNAPSHOT})
LIST_DELIMITER = 0x2C  # ListDelimitedSerializer: elements of list state values are joined by ','


@dataclass(frozen=True)
class TtlValue:
    """A value of state with a time-to-live: Flink's ``TtlValue`` (last access, epoch ms)."""

    timestamp: int
    value: Any


@dataclass(frozen=True)
class FlinkTimer:
    """A timer of a keyed operator (``TimerHeapInternalTimer``)."""

    timestamp: int
    key: Any
    namespace: Any


@dataclass(frozen=True)
class FlinkSerializer:
    """A decoder for one serializer: ``read`` consumes one value from a cursor.

    Attributes:
        name: A short name (``String``, ``Row<String,Long>``...).
        spark_type: The value's Spark SQL type in DDL (``string``, ``struct<f0:string>``).
        fixed_length: Bytes per value when fixed, else ``None`` (Flink's ``getLength() < 0``).
        read: Reads one value.
    """

    name: str
    spark_type: str
    fixed_length: int | None
    read: Callable[[ByteCursor], Any]


def _varint(cur: ByteCursor, what: str) -> int:
    value = shift = 0
    while True:
        byte = cur.u8(what)
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value
        shift += 7
        if shift > 35:
            raise cur.error(f"{what}: variable-length integer too long")


def read_java_string(cur: ByteCursor) -> str | None:
    """One ``StringValue.writeString`` value (Flink's StringSerializer)."""
    at = cur.pos
    length = _varint(cur, "string length")
    if length == 0:
        return None
    length -= 1
    if length > cur.remaining:
        raise cur.error(f"truncated: string of {length} characters, {cur.remaining} bytes left", at=at)
    ascii_run = cur.data[cur.pos:cur.pos + length]
    if ascii_run.isascii():  # every character below 0x80 is one byte: the common case, decoded at once
        cur.pos += length
        return ascii_run.decode("ascii")
    units = bytearray()
    for _ in range(length):
        unit = _varint(cur, "string character")
        if unit > 0xFFFF:
            raise cur.error("string character beyond UTF-16")
        units += unit.to_bytes(2, "big")
    return units.decode("utf-16-be", "replace")  # pairs combine; a lone surrogate becomes U+FFFD


def _char(cur: ByteCursor) -> str:
    return chr(cur.u16("char"))


_SIMPLE: dict[str, FlinkSerializer] = {
    "String": FlinkSerializer("String", "string", None, read_java_string),
    "Long": FlinkSerializer("Long", "bigint", 8, lambda cur: cur.i64("long")),
    "Int": FlinkSerializer("Integer", "int", 4, lambda cur: cur.i32("int")),
    "Short": FlinkSerializer("Short", "smallint", 2, lambda cur: cur.i16("short")),
    "Byte": FlinkSerializer("Byte", "tinyint", 1, lambda cur: cur.i8("byte")),
    "Boolean": FlinkSerializer("Boolean", "boolean", 1, lambda cur: cur.boolean("boolean")),
    "Double": FlinkSerializer("Double", "double", 8, lambda cur: _F64.unpack(cur.take(8, "double"))[0]),
    "Float": FlinkSerializer("Float", "float", 4, lambda cur: _F32.unpack(cur.take(4, "float"))[0]),
    "Char": FlinkSerializer("Character", "string", 2, _char),
}
_SIMPLE_CLASSES = {_BASE + f"{name}Serializer${name}SerializerSnapshot": ser for name, ser in _SIMPLE.items()}

BYTES_CLASS = _BASE + "array.BytePrimitiveArraySerializer$BytePrimitiveArraySerializerSnapshot"
ROW_CLASS = "org.apache.flink.api.java.typeutils.runtime.RowSerializer$RowSerializerSnapshot"
LIST_CLASS = _BASE + "ListSerializerSnapshot"
MAP_CLASS = _BASE + "MapSerializerSnapshot"
VOID_NAMESPACE_CLASS = "org.apache.flink.runtime.state.VoidNamespaceSerializer$VoidNamespaceSerializerSnapshot"
TIME_WINDOW_CLASS = (
    "org.apache.flink.streaming.api.windowing.windows.TimeWindow$Serializer$TimeWindowSerializerSnapshot"
)
TTL_CLASS = "org.apache.flink.runtime.state.ttl.TtlStateFactory$TtlSerializerSnapshot"
TIMER_CLASS = "org.apache.flink.streaming.api.operators.TimerSerializerSnapshot"
FLIPPED_SIGN = -(1 << 63)  # Long.MIN_VALUE: xor flips the sign bit of a signed long


def _bytes(cur: ByteCursor) -> bytes:
    return cur.take(cur.count("byte array length"), "byte array")


def _void(cur: ByteCursor) -> None:
    cur.u8("void namespace")
    return


def _time_window(cur: ByteCursor) -> dict[str, int]:
    return {"start": cur.i64("window start"), "end": cur.i64("window end")}


def _row(fields: list[FlinkSerializer]) -> FlinkSerializer:
    bits = ROW_KIND_BITS + len(fields)
    mask_bytes = (bits + 7) // 8

    def read(cur: ByteCursor) -> dict[str, Any]:
        mask = int.from_bytes(cur.take(mask_bytes, "row null mask"), "big")
        row: dict[str, Any] = {}
        for index, field in enumerate(fields):
            is_null = mask >> (mask_bytes * 8 - 1 - ROW_KIND_BITS - index) & 1
            row[f"f{index}"] = None if is_null else field.read(cur)
        return row

    struct_type = ",".join(f"f{i}:{f.spark_type}" for i, f in enumerate(fields))
    return FlinkSerializer(f"Row<{','.join(f.name for f in fields)}>", f"struct<{struct_type}>", None, read)


def _list(element: FlinkSerializer) -> FlinkSerializer:
    def read(cur: ByteCursor) -> list[Any]:
        return [element.read(cur) for _ in range(cur.count("list size"))]

    return FlinkSerializer(f"List<{element.name}>", f"array<{element.spark_type}>", None, read)


def _map(key: FlinkSerializer, value: FlinkSerializer) -> FlinkSerializer:
    def read(cur: ByteCursor) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for _ in range(cur.count("map size", min_item_size=2)):
            k = key.read(cur)
            out[k] = None if cur.boolean("map value null flag") else value.read(cur)
        return out

    return FlinkSerializer(f"Map<{key.name},{value.name}>", f"map<{key.spark_type},{value.spark_type}>", None, read)


def _sorted_map(key: FlinkSerializer, value: FlinkSerializer) -> FlinkSerializer:
    def read(cur: ByteCursor) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for _ in range(cur.count("sorted map size", min_item_size=2)):
            k = key.read(cur)
            out.append({"key": k, "value": None if cur.boolean("sorted map value null flag") else value.read(cur)})
        return out

    return FlinkSerializer(f"SortedMap<{key.name},{value.name}>",
                           f"array<struct<key:{key.spark_type},value:{value.spark_type}>>", None, read)


def _ttl(value: FlinkSerializer) -> FlinkSerializer:
    def read(cur: ByteCursor) -> TtlValue:
        return TtlValue(cur.i64("TTL timestamp"), value.read(cur))

    length = None if value.fixed_length is None else 8 + value.fixed_length
    return FlinkSerializer(f"Ttl<{value.name}>", value.spark_type, length, read)


def _timer(key: FlinkSerializer, namespace: FlinkSerializer) -> FlinkSerializer:
    def read(cur: ByteCursor) -> FlinkTimer:
        timestamp = cur.i64("timer timestamp") ^ FLIPPED_SIGN  # MathUtils.flipSignBit
        return FlinkTimer(timestamp, key.read(cur), namespace.read(cur))

    spark = f"struct<timestamp:bigint,key:{key.spark_type},namespace:{namespace.spark_type}>"
    return FlinkSerializer(f"Timer<{key.name},{namespace.name}>", spark, None, read)


def flink_serializer(node: SerializerNode | None) -> FlinkSerializer | None:
    """The decoder of a serializer snapshot tree, or ``None`` when a class is unsupported."""
    if node is None:
        return None
    cls = node.snapshot_class
    if cls in _SIMPLE_CLASSES:
        return _SIMPLE_CLASSES[cls]
    if cls == BYTES_CLASS:
        return FlinkSerializer("byte[]", "binary", None, _bytes)
    if cls == VOID_NAMESPACE_CLASS:
        return FlinkSerializer("VoidNamespace", "string", 1, _void)
    if cls == TIME_WINDOW_CLASS:
        return FlinkSerializer("TimeWindow", "struct<start:bigint,end:bigint>", 16, _time_window)
    if cls == BYTE_ARRAY_WRAPPER_SNAPSHOT:
        return FlinkSerializer("ByteArrayWrapper", "binary", None, _bytes)
    if cls == AVRO_SNAPSHOT:
        from statekit.flink.avro import avro_serializer

        avro: FlinkSerializer | None = avro_serializer(node.text)
        return avro
    if cls in KRYO_SNAPSHOTS:
        from statekit.flink.kryo import kryo_serializer

        return kryo_serializer(node)
    if cls in TABLE_SNAPSHOTS:
        from statekit.flink.row_data import table_serializer

        return table_serializer(node, flink_serializer)
    from statekit.flink.java_types import java_serializer

    java = java_serializer(node, flink_serializer)
    if java is not None:
        return java
    children = [flink_serializer(child) for child in node.children]
    if any(child is None for child in children):
        return None
    nested = [child for child in children if child is not None]
    if cls == ROW_CLASS and nested:
        return _row(nested)
    if cls == LIST_CLASS and len(nested) == 1:
        return _list(nested[0])
    if cls == MAP_CLASS and len(nested) == 2:
        return _map(nested[0], nested[1])
    if cls == SORTED_MAP_SNAPSHOT and len(nested) == 2:
        return _sorted_map(nested[0], nested[1])
    if cls == TTL_CLASS and len(nested) == 2 and nested[0].name == "Long":
        return _ttl(nested[1])
    if cls == TIMER_CLASS and len(nested) == 2:
        return _timer(nested[0], nested[1])
    return None


def unsupported_class(node: SerializerNode | None) -> str:
    """The first class of ``node`` (depth first) that :func:`flink_serializer` cannot decode."""
    if node is None:
        return "<unknown>"
    if node.snapshot_class in KRYO_SNAPSHOTS:
        return f"{node.snapshot_class} (Kryo, class {node.text}: its fields are not known)"
    if node.snapshot_class == ROW_DATA_SNAPSHOT:
        from statekit.flink.row_data import unsupported_type

        bad = next((b for t in node.logical_types if (b := unsupported_type(t)) is not None), None)
        if bad is not None:
            return f"RowData (Flink SQL row) with a field of type {bad.sql()}"
    for _, sub in node.subclasses:
        if flink_serializer(sub) is None:
            return unsupported_class(sub)
    for child in node.children:
        if flink_serializer(child) is None:
            return unsupported_class(child)
    return node.snapshot_class


def read_list_delimited(cur: ByteCursor, element: FlinkSerializer, end: int) -> list[Any]:
    """A list state value: elements up to ``end``, separated by ``,`` (``ListDelimitedSerializer``)."""
    values = [element.read(cur)]
    while cur.pos < end:
        at = cur.pos
        if cur.u8("list delimiter") != LIST_DELIMITER:
            raise cur.error("list state value: expected the ',' delimiter between elements", at=at)
        values.append(element.read(cur))
    return values
