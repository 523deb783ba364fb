"""Decode Avro values of Flink state from the schema recorded in the serializer snapshot.

Flink's ``AvroSerializer`` writes Avro data through its own ``DataOutputEncoder``, not
Avro's binary encoder (restated from ``org.apache.flink.formats.avro.utils``)::

    null            nothing               boolean      one byte
    int, enum       int (4 bytes)         long         long (8 bytes)
    float, double   IEEE big-endian       bytes        int length + bytes
    string          int length + UTF-8    fixed        the bytes (size from the schema)
    union           int branch index, then the branch
    array, map      blocks: varint count (7 bits a byte, least significant first) of items
                    then the items (map: string key, value), until a count of 0

Supported schemas: every primitive, record, enum, fixed, array, map and union (a union of
``null`` and one type becomes that type, nullable; other unions become a struct with one
field per branch, named after its type). Named types may be referenced by name.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

from statekit.flink.cursor import ByteCursor

__all__ = ["avro_serializer"]

_F32 = struct.Struct(">f")
_F64 = struct.Struct(">d")
Reader = Callable[[ByteCursor], Any]
_PRIMITIVE_SPARK = {"null": "string", "boolean": "boolean", "int": "int", "long": "bigint", "float": "float",
                    "double": "double", "bytes": "binary", "string": "string"}


def _varlong(cur: ByteCursor) -> int:
    value = shift = 0
    while True:
        byte = cur.u8("Avro block count")
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value
        shift += 7
        if shift > 63:
            raise cur.error("Avro block count too long")


def _string(cur: ByteCursor) -> str:
    at = cur.pos
    raw = cur.take(cur.count("Avro string length"), "Avro string")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise cur.error("Avro string is not UTF-8", at=at) from None


_PRIMITIVES: dict[str, Reader] = {
    "null": lambda cur: None,
    "boolean": lambda cur: cur.boolean("Avro boolean"),
    "int": lambda cur: cur.i32("Avro int"),
    "long": lambda cur: cur.i64("Avro long"),
    "float": lambda cur: _F32.unpack(cur.take(4, "Avro float"))[0],
    "double": lambda cur: _F64.unpack(cur.take(8, "Avro double"))[0],
    "bytes": lambda cur: cur.take(cur.count("Avro bytes length"), "Avro bytes"),
    "string": _string,
}


class _Schema:
    """Builds a reader and a Spark type per schema node; remembers named types."""

    def __init__(self) -> None:
        self.named: dict[str, tuple[Reader, str]] = {}

    def build(self, schema: Any, namespace: str = "") -> tuple[Reader, str]:
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return _PRIMITIVES[schema], _PRIMITIVE_SPARK[schema]
            full = schema if "." in schema or not namespace else f"{namespace}.{schema}"
            found = self.named.get(full) or self.named.get(schema)
            if found is None:
                raise ValueError(f"unknown Avro type {schema!r}")
            return found
        if isinstance(schema, list):
            return self._union(schema, namespace)
        if not isinstance(schema, dict) or "type" not in schema:
            raise ValueError(f"malformed Avro schema {schema!r}")
        kind = schema["type"]
        if kind in ("record", "error", "enum", "fixed"):
            return self._named(schema, namespace)
        if kind == "array":
            return self._array(schema, namespace)
        if kind == "map":
            return self._map(schema, namespace)
        return self.build(kind, namespace)

    def _named(self, schema: dict[str, Any], namespace: str) -> tuple[Reader, str]:
        name = str(schema["name"])
        space = str(schema.get("namespace", namespace)) if "." not in name else name.rsplit(".", 1)[0]
        full = name if "." in name else (f"{space}.{name}" if space else name)
        kind = schema["type"]
        if kind == "enum":
            symbols = [str(s) for s in schema["symbols"]]

            def enum(cur: ByteCursor) -> str:
                at = cur.pos
                index = cur.i32("Avro enum index")
                if not 0 <= index < len(symbols):
                    raise cur.error(f"Avro enum index {index} outside {len(symbols)} symbols", at=at)
                return symbols[index]

            self.named[full] = (enum, "string")
            return self.named[full]
        if kind == "fixed":
            size = int(schema["size"])
            self.named[full] = ((lambda cur: cur.take(size, "Avro fixed")), "binary")
            return self.named[full]
        fields: list[tuple[str, Reader]] = []
        self.named[full] = (lambda cur: _record(fields, cur), "")  # recursive references see it
        types = []
        for field in schema["fields"]:
            reader, spark = self.build(field["type"], space)
            fields.append((str(field["name"]), reader))
            types.append(f"{field['name']}:{spark}")
        spark_type = f"struct<{','.join(types)}>"
        self.named[full] = (self.named[full][0], spark_type)
        return self.named[full]

    def _array(self, schema: dict[str, Any], namespace: str) -> tuple[Reader, str]:
        item, spark = self.build(schema["items"], namespace)

        def read(cur: ByteCursor) -> list[Any]:
            out: list[Any] = []
            while count := _varlong(cur):
                out += [item(cur) for _ in range(count)]
            return out

        return read, f"array<{spark}>"

    def _map(self, schema: dict[str, Any], namespace: str) -> tuple[Reader, str]:
        value, spark = self.build(schema["values"], namespace)

        def read(cur: ByteCursor) -> dict[str, Any]:
            out: dict[str, Any] = {}
            while count := _varlong(cur):
                for _ in range(count):
                    key = _string(cur)
                    out[key] = value(cur)
            return out

        return read, f"map<string,{spark}>"

    def _union(self, branches: list[Any], namespace: str) -> tuple[Reader, str]:
        built = [self.build(branch, namespace) for branch in branches]
        names = [_branch_name(branch) for branch in branches]

        def read(cur: ByteCursor) -> Any:
            at = cur.pos
            index = cur.i32("Avro union branch")
            if not 0 <= index < len(built):
                raise cur.error(f"Avro union branch {index} outside {len(built)} branches", at=at)
            value = built[index][0](cur)
            if len(non_null) == 1:
                return value
            return {names[i]: (value if i == index else None) for i in range(len(built)) if names[i] != "null"}

        non_null = [i for i, name in enumerate(names) if name != "null"]
        if len(non_null) == 1:
            return read, built[non_null[0]][1]
        spark = ",".join(f"{names[i]}:{built[i][1]}" for i in non_null)
        return read, f"struct<{spark}>"


def _branch_name(schema: Any) -> str:
    if isinstance(schema, dict):
        return str(schema.get("name", schema.get("type"))).rsplit(".", 1)[-1]
    return str(schema).rsplit(".", 1)[-1]


def _record(fields: list[tuple[str, Reader]], cur: ByteCursor) -> dict[str, Any]:
    return {name: reader(cur) for name, reader in fields}


def avro_serializer(schema_text: str | None) -> Any:
    """The :class:`~statekit.flink.serializers.FlinkSerializer` of an Avro schema, or ``None``.

    ``None`` when the snapshot recorded no schema or the schema is not one this module reads.
    """
    from statekit.flink.serializers import FlinkSerializer

    if not schema_text:
        return None
    try:
        reader, spark = _Schema().build(json.loads(schema_text))
    except (ValueError, KeyError, TypeError):
        return None
    return FlinkSerializer("Avro", spark, None, reader)
