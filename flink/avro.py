"""Decode Avro values of Flink state with ``fastavro`` and the schema recorded in the serializer snapshot.

Flink's ``AvroSerializer`` (specific, generic and reflect records alike) writes Avro data
through its own ``DataOutputEncoder``, not Avro's binary encoder (restated from
``org.apache.flink.formats.avro.utils``)::

    null            nothing               boolean      one byte
    int, enum       int (4 bytes)         long         long (8 bytes)
    float, double   IEEE big-endian       bytes        int length + bytes
    string          int length + UTF-8    fixed        the bytes (size from the schema)
    union           int branch index, then the branch
    array, map      blocks: varint count (7 bits a byte, least significant first) of items
                    then the items (map: string key, value), until a count of 0

The schema is parsed by ``fastavro.parse_schema`` (named types, namespaces, validation); each
value's bytes are re-encoded into Avro's binary encoding while the schema is walked, and
``fastavro.schemaless_reader`` decodes them (logical types included). Values follow
statekit's conventions: a union of ``null`` and one type is that type (nullable), any other
union a struct with one field per branch (named after its type, the others null);
``timestamp-*`` as epoch milliseconds, ``date`` as a date, ``decimal``, ``uuid`` and
``time-*`` as text.
"""

from __future__ import annotations

import datetime
import io
import struct
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from statekit.flink.cursor import ByteCursor

__all__ = ["avro_serializer"]

_F32_BE, _F64_BE = struct.Struct(">f"), struct.Struct(">d")
_F32_LE, _F64_LE = struct.Struct("<f"), struct.Struct("<d")
_PRIMITIVE_SPARK = {"null": "string", "boolean": "boolean", "int": "int", "long": "bigint", "float": "float",
                    "double": "double", "bytes": "binary", "string": "string"}
_LOGICAL_SPARK = {"timestamp-millis": "timestamp", "timestamp-micros": "timestamp", "local-timestamp-millis":
                  "timestamp_ntz", "local-timestamp-micros": "timestamp_ntz", "date": "date", "decimal": "string",
                  "uuid": "string", "time-millis": "string", "time-micros": "string"}
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _zigzag(value: int, out: bytearray) -> None:
    """Avro's long: zig-zag, then 7 bits a byte, least significant first."""
    n = (value << 1) ^ (value >> 63)
    n &= (1 << 64) - 1
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _block_count(cur: ByteCursor) -> int:
    """``DataOutputEncoder.writeVarLongCount``: an unsigned varint."""
    value = shift = 0
    while True:
        byte = cur.u8("Avro block count")
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value
        shift += 7
        if shift > 63:
            raise cur.error("Avro block count too long")


class _Schema:
    """A parsed schema: re-encodes Flink's bytes, converts fastavro's values, names Spark types."""

    def __init__(self, parsed: Any) -> None:
        self.parsed = parsed
        self.named: dict[str, Any] = dict(parsed.get("__named_schemas", {})) if isinstance(parsed, dict) else {}

    def resolve(self, schema: Any) -> Any:
        if isinstance(schema, str) and schema in self.named:
            return self.named[schema]
        return schema

    @staticmethod
    def kind(schema: Any) -> str:
        if isinstance(schema, list):
            return "union"
        return schema if isinstance(schema, str) else str(schema["type"])

    # ------------------------------------------------------------------ bytes

    def transcode(self, schema: Any, cur: ByteCursor, out: bytearray, branches: list[int]) -> None:
        schema = self.resolve(schema)
        kind = self.kind(schema)
        if kind == "null":
            return
        if kind == "boolean":
            out.append(1 if cur.boolean("Avro boolean") else 0)
        elif kind in ("int", "enum"):
            _zigzag(cur.i32(f"Avro {kind}"), out)
        elif kind == "long":
            _zigzag(cur.i64("Avro long"), out)
        elif kind == "float":
            out += _F32_LE.pack(_F32_BE.unpack(cur.take(4, "Avro float"))[0])
        elif kind == "double":
            out += _F64_LE.pack(_F64_BE.unpack(cur.take(8, "Avro double"))[0])
        elif kind in ("bytes", "string"):
            raw = cur.take(cur.count(f"Avro {kind} length"), f"Avro {kind}")
            _zigzag(len(raw), out)
            out += raw
        elif kind == "fixed":
            out += cur.take(int(schema["size"]), "Avro fixed")
        elif kind == "union":
            at = cur.pos
            index = cur.i32("Avro union branch")
            if not 0 <= index < len(schema):
                raise cur.error(f"Avro union branch {index} outside {len(schema)} branches", at=at)
            branches.append(index)
            _zigzag(index, out)
            self.transcode(schema[index], cur, out, branches)
        elif kind == "record":
            for field in schema["fields"]:
                self.transcode(field["type"], cur, out, branches)
        elif kind in ("array", "map"):
            while count := _block_count(cur):
                _zigzag(count, out)
                for _ in range(count):
                    if kind == "map":
                        self.transcode("string", cur, out, branches)
                    self.transcode(schema["items" if kind == "array" else "values"], cur, out, branches)
            out.append(0)
        else:
            self.transcode(schema["type"], cur, out, branches)

    # ------------------------------------------------------------------ values

    def convert(self, schema: Any, value: Any, branches: Iterator[int]) -> Any:
        schema = self.resolve(schema)
        kind = self.kind(schema)
        if kind == "union":
            index = next(branches)
            names = [_branch_name(b) for b in schema]
            inner = self.convert(schema[index], value, branches)
            non_null = [i for i, name in enumerate(names) if name != "null"]
            if len(non_null) <= 1:
                return inner
            return {names[i]: (inner if i == index else None) for i in non_null}
        if value is None:
            return None
        if kind == "record":
            return {f["name"]: self.convert(f["type"], value[f["name"]], branches) for f in schema["fields"]}
        if kind == "array":
            return [self.convert(schema["items"], v, branches) for v in value]
        if kind == "map":
            return {k: self.convert(schema["values"], v, branches) for k, v in value.items()}
        return _logical(value)

    # ------------------------------------------------------------------ Spark

    def spark(self, schema: Any, seen: frozenset[str] = frozenset()) -> str:
        name = schema if isinstance(schema, str) else None
        schema = self.resolve(schema)
        kind = self.kind(schema)
        if kind == "union":
            names = [_branch_name(b) for b in schema]
            non_null = [i for i, n in enumerate(names) if n != "null"]
            if len(non_null) == 1:
                return self.spark(schema[non_null[0]], seen)
            return "struct<" + ",".join(f"{names[i]}:{self.spark(schema[i], seen)}" for i in non_null) + ">"
        if isinstance(schema, dict) and schema.get("logicalType") in _LOGICAL_SPARK:
            return _LOGICAL_SPARK[str(schema["logicalType"])]
        if kind in _PRIMITIVE_SPARK:
            return _PRIMITIVE_SPARK[kind]
        if kind == "enum":
            return "string"
        if kind == "fixed":
            return "binary"
        if kind == "array":
            return f"array<{self.spark(schema['items'], seen)}>"
        if kind == "map":
            return f"map<string,{self.spark(schema['values'], seen)}>"
        if kind == "record":
            full = str(schema["name"])
            if name in seen or full in seen:
                raise ValueError(f"recursive Avro record {full} has no Spark type")
            inner = seen | {full}
            return "struct<" + ",".join(f"{f['name']}:{self.spark(f['type'], inner)}" for f in schema["fields"]) + ">"
        return self.spark(schema["type"], seen)


def _branch_name(schema: Any) -> str:
    if isinstance(schema, dict):
        return str(schema.get("name", schema.get("type"))).rsplit(".", 1)[-1]
    return str(schema).rsplit(".", 1)[-1]


def _logical(value: Any) -> Any:
    """fastavro's logical-type values in statekit's conventions."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return (value - _EPOCH) // datetime.timedelta(milliseconds=1)
    if isinstance(value, (Decimal, datetime.time)):
        return format(value, "f") if isinstance(value, Decimal) else value.isoformat()
    if type(value).__name__ == "UUID":
        return str(value)
    return value


def avro_serializer(schema_text: str | None) -> Any:
    """The :class:`~statekit.flink.serializers.FlinkSerializer` of an Avro schema, or ``None``.

    ``None`` when the snapshot recorded no schema or fastavro does not accept it.
    """
    import json

    import fastavro

    from statekit.flink.serializers import FlinkSerializer

    if not schema_text:
        return None
    try:
        parsed = fastavro.parse_schema(json.loads(schema_text))
        schema = _Schema(parsed)
        spark = schema.spark(parsed)
    except (ValueError, KeyError, TypeError, fastavro.schema.SchemaParseException, fastavro.schema.UnknownType):
        return None

    def read(cur: ByteCursor) -> Any:
        out = bytearray()
        branches: list[int] = []
        at = cur.pos
        schema.transcode(parsed, cur, out, branches)
        try:
            value = fastavro.schemaless_reader(io.BytesIO(bytes(out)), parsed)
        except (ValueError, EOFError, UnicodeDecodeError) as exc:
            raise cur.error(f"Avro value does not decode: {exc}", at=at) from None
        return schema.convert(parsed, value, iter(branches))

    return FlinkSerializer("Avro", spark, None, read)
