"""Decode Flink SQL's ``RowData``: the keys and values of SQL operators' state.

``RowDataSerializer`` writes every row as a ``BinaryRowData``: an int length (big-endian, as
``DataOutputView`` writes it) and the row's bytes. Inside, every number is little-endian
(``MemorySegment`` in native order; Flink runs only on little-endian machines)::

    header     ((arity + 63 + 8) / 64) * 8 bytes: byte 0 the row kind (0 +I, 1 -U, 2 +U, 3 -D),
               then one null bit per field from bit 8 (bit i of byte i / 8, least significant first)
    fixed part 8 bytes per field, at header + 8 * i:
               BOOLEAN, TINYINT 1 byte; SMALLINT 2; INT, DATE (days), TIME (ms of day), FLOAT 4;
               BIGINT, DOUBLE 8; DECIMAL(p <= 18) the unscaled long; TIMESTAMP(p <= 3) and
               TIMESTAMP_LTZ(p <= 3) epoch ms;
               variable-length fields: offset (from the row start) << 32 | length, or, for
               STRING/BYTES of at most 7 bytes, the bytes themselves with the top byte
               0x80 | length;
               DECIMAL(p > 18): offset << 32 | length of BigInteger.toByteArray (big-endian);
               TIMESTAMP(p > 3): offset << 32 | nano-of-millisecond, the epoch ms at offset;
               ARRAY, MAP, ROW: offset << 32 | length of a nested binary array, map or row
    variable part  after the fixed part, each piece padded to 8 bytes

``BinaryArrayData``: element count int, null bits (4-byte words), elements of their fixed
size (1, 2, 4 or 8 bytes as above, the element area padded to 8 bytes), then the variable
part; offsets are from the array's start. ``BinaryMapData``: the key array's size int, the
key array, the value array.

Values (Python, Spark type): SQL integers and floats as such; DECIMAL as its exact text
(``string``, as ``BigDecimal`` state); CHAR/VARCHAR ``string``; BINARY/VARBINARY
``binary``; DATE ``datetime.date`` (``date``); TIME its ISO text (``string``);
TIMESTAMP(p <= 3) epoch ms of the wall-clock time (``timestamp_ntz``), TIMESTAMP_LTZ(p <= 3)
epoch ms (``timestamp``); p > 3 keeps every digit as ISO text (``string``, LTZ with ``Z``);
ARRAY ``array``, MAP and MULTISET ``map``, ROW ``struct`` of its field names. The row kind
is not part of the value: keys and accumulators are +I, but deduplication and Top-N keep
input rows as they were emitted (+U after an update); a kind byte above 3 is an error. Any
other type (``RAW``, intervals, structured types) is refused by
:func:`row_data_serializer`, and :func:`unsupported_type` names it.
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Callable
from typing import Any

from statekit.flink.cursor import ByteCursor
from statekit.flink.java_types import decimal_text
from statekit.flink.logical_type import LogicalType
from statekit.flink.serializers import FlinkSerializer
from statekit.flink.state_meta import (
    DECIMAL_DATA_SNAPSHOT,
    EXTERNAL_SNAPSHOT,
    NULL_SNAPSHOT,
    RAW_VALUE_SNAPSHOT,
    ROW_DATA_SNAPSHOT,
    STRING_DATA_SNAPSHOT,
    TIMESTAMP_DATA_SNAPSHOT,
    SerializerNode,
)

__all__ = ["BinaryRowReader", "row_data_serializer", "table_serializer", "unsupported_type", "row_spark_type"]

ROW_KINDS = ("+I", "-U", "+U", "-D")
DATA_VIEW = "data view"  # LogicalType.java_class of an accumulator's data-view placeholder
HIGHEST_FIRST_BIT = 0x80 << 56
COMPACT_DECIMAL_PRECISION = 18
COMPACT_TIMESTAMP_PRECISION = 3
_EPOCH = datetime.datetime(1970, 1, 1)
_EPOCH_DATE = datetime.date(1970, 1, 1)
# root -> (fixed size inside an array, struct format) of the fixed-width types
_FIXED: dict[str, tuple[int, str]] = {
    "BOOLEAN": (1, "<?"), "TINYINT": (1, "<b"), "SMALLINT": (2, "<h"), "INTEGER": (4, "<i"),
    "DATE": (4, "<i"), "TIME_WITHOUT_TIME_ZONE": (4, "<i"), "FLOAT": (4, "<f"), "BIGINT": (8, "<q"),
    "DOUBLE": (8, "<d"),
}
_SPARK = {"BOOLEAN": "boolean", "TINYINT": "tinyint", "SMALLINT": "smallint", "INTEGER": "int",
          "BIGINT": "bigint", "FLOAT": "float", "DOUBLE": "double", "DATE": "date",
          "TIME_WITHOUT_TIME_ZONE": "string", "CHAR": "string", "VARCHAR": "string", "BINARY": "binary",
          "VARBINARY": "binary", "DECIMAL": "string"}
_VARIABLE = frozenset({"CHAR", "VARCHAR", "BINARY", "VARBINARY"})
_NESTED = frozenset({"ARRAY", "MULTISET", "MAP", "ROW"})
_TIMESTAMPS = {"TIMESTAMP_WITHOUT_TIME_ZONE": "timestamp_ntz", "TIMESTAMP_WITH_LOCAL_TIME_ZONE": "timestamp"}


def unsupported_type(t: LogicalType) -> LogicalType | None:
    """The first type inside ``t`` (``t`` itself first) that this module cannot decode."""
    if t.root in _FIXED or t.root in _VARIABLE or t.root in _TIMESTAMPS or t.java_class == DATA_VIEW:
        return None
    if t.root == "DECIMAL":
        return None if t.precision is not None and t.scale is not None else t
    if t.root in _NESTED:
        if t.root == "ROW" and len(t.names) != len(t.children):
            return t
        return next((bad for child in t.children if (bad := unsupported_type(child)) is not None), None)
    return t


def _field_names(t: LogicalType) -> list[str]:
    return list(t.names) if t.names else [f"f{i}" for i in range(len(t.children))]


def _spark(t: LogicalType) -> str:
    if t.java_class == DATA_VIEW:
        return "string"  # always null: the view's entries are in their own state
    if t.root in _TIMESTAMPS:
        return _TIMESTAMPS[t.root] if (t.precision or 0) <= COMPACT_TIMESTAMP_PRECISION else "string"
    if t.root == "ARRAY":
        return f"array<{_spark(t.children[0])}>"
    if t.root == "MULTISET":
        return f"map<{_spark(t.children[0])},int>"
    if t.root == "MAP":
        return f"map<{_spark(t.children[0])},{_spark(t.children[1])}>"
    if t.root == "ROW":
        return row_spark_type(_field_names(t), t.children)
    return _SPARK[t.root]


def row_spark_type(names: list[str], types: tuple[LogicalType, ...]) -> str:
    """``struct<name:type,...>`` of a row's fields."""
    return "struct<" + ",".join(f"{name}:{_spark(t)}" for name, t in zip(names, types)) + ">"


class BinaryRowReader:
    """Reads the fields of binary rows, arrays and maps of one ``data`` buffer.

    ``data`` holds the whole serialized value; every offset in it is from the start of the
    row (array, map) it belongs to, and every read is checked against the value's end.
    """

    def __init__(self, cur: ByteCursor, start: int, end: int) -> None:
        self.cur, self.start, self.end = cur, start, end

    def error(self, message: str, at: int) -> Exception:
        return self.cur.error(f"BinaryRowData: {message}", at=at)

    def _unpack(self, fmt: str, at: int, what: str) -> Any:
        size = struct.calcsize(fmt)
        if at < self.start or at + size > self.end:
            raise self.error(f"{what} outside the row ({size} bytes)", at)
        return struct.unpack_from(fmt, self.cur.data, at)[0]

    def _slice(self, base: int, offset_and_size: int, what: str) -> tuple[int, int]:
        offset, size = offset_and_size >> 32, offset_and_size & 0xFFFFFFFF
        at = base + offset
        if offset_and_size < 0 or at < self.start or at + size > self.end:
            raise self.error(f"{what}: offset {offset} and length {size} lie outside the value", base)
        return at, size

    def _bytes(self, base: int, slot: int, what: str) -> bytes:
        word = self._unpack("<Q", slot, what)
        if word & HIGHEST_FIRST_BIT:  # at most 7 bytes, inside the slot; length in the top byte
            size = (word >> 56) & 0x7F
            if size > 7:
                raise self.error(f"{what}: inline length {size} > 7", slot)
            return bytes(self.cur.data[slot:slot + size])
        at, size = self._slice(base, word, what)
        return bytes(self.cur.data[at:at + size])

    def value(self, t: LogicalType, base: int, slot: int, what: str) -> Any:
        """The value of type ``t`` whose 8-byte (or element-sized) slot is at ``slot``."""
        root = t.root
        if t.java_class == DATA_VIEW:
            return None
        if root in _FIXED:
            raw = self._unpack(_FIXED[root][1], slot, what)
            if root == "DATE":
                try:
                    return _EPOCH_DATE + datetime.timedelta(days=raw)
                except OverflowError:
                    raise self.error(f"{what}: DATE {raw} days from 1970 is beyond year 9999", slot) from None
            if root == "TIME_WITHOUT_TIME_ZONE":
                return _time_text(raw, self, slot, what)
            return raw
        if root in ("CHAR", "VARCHAR"):
            data = self._bytes(base, slot, what)
            try:
                return data.decode("utf-8")
            except UnicodeDecodeError:
                raise self.error(f"{what}: a string that is not UTF-8", slot) from None
        if root in ("BINARY", "VARBINARY"):
            return self._bytes(base, slot, what)
        if root == "DECIMAL":
            assert t.precision is not None and t.scale is not None
            if t.precision <= COMPACT_DECIMAL_PRECISION:
                return decimal_text(self._unpack("<q", slot, what), t.scale)
            at, size = self._slice(base, self._unpack("<q", slot, what), what)
            return decimal_text(int.from_bytes(self.cur.data[at:at + size], "big", signed=True), t.scale)
        if root in _TIMESTAMPS:
            return self._timestamp(t, base, slot, what)
        if root in ("ARRAY", "MULTISET", "MAP", "ROW"):
            at, size = self._slice(base, self._unpack("<q", slot, what), what)
            nested = BinaryRowReader(self.cur, at, at + size)
            if root == "ROW":
                return nested.row(_field_names(t), t.children, what)
            if root == "ARRAY":
                return nested.array(t.children[0], what)
            return nested.map(t.children[0], t.children[1] if root == "MAP" else LogicalType("INTEGER"), what)
        raise self.error(f"{what}: type {t.sql()} cannot be decoded", slot)

    def _timestamp(self, t: LogicalType, base: int, slot: int, what: str) -> Any:
        word = self._unpack("<q", slot, what)
        if (t.precision or 0) <= COMPACT_TIMESTAMP_PRECISION:
            return word
        at, nano_of_milli = self._slice(base, (word >> 32) << 32 | 8, what)[0], word & 0xFFFFFFFF
        millis = self._unpack("<q", at, what)
        if nano_of_milli >= 1_000_000:
            raise self.error(f"{what}: nano of millisecond {nano_of_milli}", slot)
        try:
            moment = _EPOCH + datetime.timedelta(milliseconds=millis)
        except OverflowError:
            raise self.error(f"{what}: TIMESTAMP {millis} ms from 1970 is beyond year 9999", slot) from None
        digits = t.precision or 9
        fraction = f"{moment.microsecond // 1000:03d}{nano_of_milli:06d}"[:digits]
        text = moment.strftime("%Y-%m-%dT%H:%M:%S") + "." + fraction
        return text + "Z" if t.root == "TIMESTAMP_WITH_LOCAL_TIME_ZONE" else text

    def row(self, names: list[str], types: tuple[LogicalType, ...], what: str) -> dict[str, Any]:
        """The row of ``types`` that fills ``[start, end)``."""
        header = ((len(types) + 63 + 8) // 64) * 8
        if self.start + header + 8 * len(types) > self.end:
            raise self.error(f"{what}: {self.end - self.start} bytes cannot hold {len(types)} fields", self.start)
        kind = self.cur.data[self.start]
        if kind >= len(ROW_KINDS):
            raise self.error(f"{what}: row kind {kind} (0 to 3: +I, -U, +U, -D)", self.start)
        out: dict[str, Any] = {}
        for i, (name, t) in enumerate(zip(names, types)):
            bit = i + 8
            if self.cur.data[self.start + (bit >> 3)] >> (bit & 7) & 1:
                out[name] = None
            else:
                out[name] = self.value(t, self.start, self.start + header + 8 * i, f"{what} field {name}")
        return out

    def array(self, element: LogicalType, what: str) -> list[Any]:
        count = self._unpack("<i", self.start, f"{what} array size")
        if count < 0 or count > self.end - self.start:
            raise self.error(f"{what}: array size {count}", self.start)
        header = 4 + ((count + 31) // 32) * 4
        size = _FIXED[element.root][0] if element.root in _FIXED else 8
        if self.start + header + size * count > self.end:
            raise self.error(f"{what}: {count} elements do not fit the array", self.start)
        out: list[Any] = []
        for i in range(count):
            if self.cur.data[self.start + 4 + (i >> 3)] >> (i & 7) & 1:
                out.append(None)
            else:
                out.append(self.value(element, self.start, self.start + header + size * i, f"{what}[{i}]"))
        return out

    def map(self, key: LogicalType, value: LogicalType, what: str) -> dict[Any, Any]:
        key_bytes = self._unpack("<i", self.start, f"{what} map key array size")
        split = self.start + 4 + key_bytes
        if key_bytes < 0 or split > self.end:
            raise self.error(f"{what}: map key array size {key_bytes}", self.start)
        keys = BinaryRowReader(self.cur, self.start + 4, split).array(key, f"{what} keys")
        values = BinaryRowReader(self.cur, split, self.end).array(value, f"{what} values")
        if len(keys) != len(values):
            raise self.error(f"{what}: {len(keys)} keys and {len(values)} values", self.start)
        return {_hashable(k): v for k, v in zip(keys, values)}


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(value.items())
    if isinstance(value, list):
        return tuple(value)
    return value


def _time_text(millis: int, reader: BinaryRowReader, slot: int, what: str) -> str:
    if not 0 <= millis < 86_400_000:
        raise reader.error(f"{what}: TIME {millis} ms is not a time of day", slot)
    seconds, ms = divmod(millis, 1000)
    text = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return text + (f".{ms:03d}".rstrip("0") if ms else "")


def _reader(types: tuple[LogicalType, ...], names: list[str]) -> Callable[[ByteCursor], dict[str, Any]]:
    def read(cur: ByteCursor) -> dict[str, Any]:
        at = cur.pos
        size = cur.i32("BinaryRowData length")
        if size < 0:
            raise cur.error(f"BinaryRowData length {size}", at=at)
        start = cur.pos
        cur.skip(size, "BinaryRowData")
        return BinaryRowReader(cur, start, start + size).row(names, types, "row")

    return read


def _data_view(t: LogicalType, field: SerializerNode | None) -> bool:
    """Whether a row field is an accumulator's data-view placeholder: ``RAW`` written by
    ``NullSerializer`` (the ``MapView``/``ListView`` lives in its own state, ``distinctAcc_N``...)."""
    return (t.root == "RAW" and field is not None and field.snapshot_class == RAW_VALUE_SNAPSHOT
            and len(field.children) == 1 and field.children[0].snapshot_class == NULL_SNAPSHOT)


def row_data_serializer(node: SerializerNode) -> FlinkSerializer | None:
    """The decoder of a ``RowDataSerializer`` snapshot, or ``None`` when a field's type is not
    decodable (:func:`unsupported_type` names it). Fields are ``f0``.. (the snapshot records
    the types of a top-level row, not its field names); a data-view placeholder is ``None``."""
    types = node.logical_types
    fields = list(node.children) if len(node.children) == len(types) else [None] * len(types)
    types = tuple(LogicalType("NULL", java_class=DATA_VIEW) if _data_view(t, f) else t for t, f in zip(types, fields))
    if not types or any(unsupported_type(t) is not None for t in types):
        return None
    names = [f"f{i}" for i in range(len(types))]
    label = "RowData<" + ",".join(t.sql() for t in types) + ">"
    return FlinkSerializer(label, row_spark_type(names, types), None, _reader(types, names))


def _string_data(cur: ByteCursor) -> str:
    at = cur.pos
    data = cur.take(cur.count("StringData length"), "StringData")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise cur.error("StringData that is not UTF-8", at=at) from None


def _decimal_data(precision: int, scale: int) -> Callable[[ByteCursor], str]:
    def read(cur: ByteCursor) -> str:
        if precision <= COMPACT_DECIMAL_PRECISION:
            return decimal_text(cur.i64("DecimalData"), scale)
        data = cur.take(cur.count("DecimalData length"), "DecimalData")
        return decimal_text(int.from_bytes(data, "big", signed=True), scale)

    return read


def _timestamp_data(precision: int) -> Callable[[ByteCursor], Any]:
    t = LogicalType("TIMESTAMP_WITHOUT_TIME_ZONE", precision=precision)

    def read(cur: ByteCursor) -> Any:
        millis = cur.i64("TimestampData milliseconds")
        if precision <= COMPACT_TIMESTAMP_PRECISION:
            return millis
        at = cur.pos
        nanos = cur.i32("TimestampData nano of millisecond")
        value = struct.pack("<qq", (8 << 32) | nanos, millis)  # as a row's slot and variable part
        return BinaryRowReader(ByteCursor(value, source=cur.source, error=cur.error_class), 0, 16)._timestamp(
            t, 0, 0, f"TimestampData at byte offset {at}")

    return read


def table_serializer(node: SerializerNode, child: Callable[[SerializerNode], FlinkSerializer | None],
                     ) -> FlinkSerializer | None:
    """The decoder of a Flink SQL serializer snapshot (``RowData``, ``StringData``, ``DecimalData``,
    ``TimestampData``, ``ExternalSerializer`` of one of these or of a basic type), or ``None``.

    ``StringData``: int length, UTF-8; ``DecimalData``: the unscaled long (precision <= 18) or
    int length and ``BigInteger`` bytes; ``TimestampData``: epoch ms (precision <= 3), then the
    nano of millisecond int; ``ExternalSerializer``: its internal serializer's bytes.
    """
    cls = node.snapshot_class
    if cls == ROW_DATA_SNAPSHOT:
        return row_data_serializer(node)
    if cls == STRING_DATA_SNAPSHOT:
        return FlinkSerializer("StringData", "string", None, _string_data)
    params = [int(p) for p in (node.text or "").split(",") if p.lstrip("-").isdigit()]
    if cls == DECIMAL_DATA_SNAPSHOT and len(params) == 2:
        fixed = 8 if params[0] <= COMPACT_DECIMAL_PRECISION else None
        return FlinkSerializer(f"DecimalData({params[0]}, {params[1]})", "string", fixed, _decimal_data(*params))
    if cls == TIMESTAMP_DATA_SNAPSHOT and len(params) == 1:
        compact = params[0] <= COMPACT_TIMESTAMP_PRECISION
        return FlinkSerializer(f"TimestampData({params[0]})", "timestamp_ntz" if compact else "string",
                               8 if compact else 12, _timestamp_data(params[0]))
    if cls == EXTERNAL_SNAPSHOT and len(node.children) == 1:
        return child(node.children[0])
    return None
