"""Flink types of keys and values that statekit writes: their serializer snapshots and bytes.

A :class:`FlinkType` is what a job declares as ``TypeInformation`` (``Types.LONG``,
``Types.ROW_NAMED(...)``): it knows the serializer snapshot Flink records for it (so a
restoring job finds a compatible serializer), the bytes Flink's Java serializer writes for a
value (keys, Java state) and the bytes PyFlink's Python coder writes (values of PyFlink state,
``python-state-<name>``). The grammar uses Flink's (Java) names::

    string | long | int | short | byte | boolean | char | double | float | bytes | timestamp
    row<name:T,...>  (also row<T,...>, fields f0, f1...)  |  list<T>  |  map<K,V>

with the aliases ``bigint``/``int64`` (long), ``integer``/``int32`` (int), ``smallint``/``int16``,
``tinyint``/``int8``, ``bool``, ``float64`` (double), ``float32`` (float), ``binary``/``byte[]``,
``struct`` (row), ``array`` (list). ``int`` is 32-bit, as in Java (statekit's own declared
types and ``export --value-type`` call that ``int32``).

    ===========  ==========================================  ==================================
    type         Java serializer bytes (snapshot class)      PyFlink coder bytes
    ===========  ==========================================  ==================================
    string       varint length + 1, UTF-16 units as varints  int32 length, UTF-8
                 (StringSerializer)
    long         8 bytes big-endian (LongSerializer)         same
    int          4 bytes (IntSerializer)                     same
    short, byte  2 bytes, 1 byte (Short/ByteSerializer)      same
    boolean      1 byte (BooleanSerializer)                  same
    char         2 bytes, one UTF-16 unit (CharSerializer)   as a string
    double       8 bytes IEEE 754 (DoubleSerializer)         same
    float        4 bytes IEEE 754 (FloatSerializer)          same
    bytes        int32 length + bytes                        same
                 (BytePrimitiveArraySerializer)
    timestamp    refused (SqlTimestampSerializer)            int64 epoch milliseconds
    row<...>     mask (2 row-kind bits, a null bit per       same mask, then the non-null fields
                 field, MSB first), non-null fields
                 (RowSerializer, snapshot v3, outer v4)
    list<T>      int32 size, elements (ListSerializer)       int32 size, per element a presence
                                                             byte and the element
    map<K,V>     int32 size, per entry key, null flag,       same
                 value (MapSerializer)
    ===========  ==========================================  ==================================

Python values (from Arrow rows) are checked against the type: an int out of range, a
string of a ``char`` that is not one UTF-16 unit, a missing row field are errors naming the
value. Keys are hashed from the Java bytes (:mod:`statekit.flink.key_hash`); ``bytes``, ``list``
and ``map`` keys are refused where Flink refuses them (arrays have identity hash codes).
"""

from __future__ import annotations

import datetime as _dt
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from statekit.flink.serializers import BYTES_CLASS, LIST_CLASS, MAP_CLASS, ROW_CLASS
from statekit.flink.state_meta import BYTE_ARRAY_WRAPPER_SNAPSHOT, SerializerNode
from statekit.statefmt.errors import BadInputError

__all__ = ["FlinkType", "parse_flink_type", "encode_java_string", "JAVA_TYPE_NAMES"]

_BASE = "org.apache.flink.api.common.typeutils.base."
_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_F32, _F64 = struct.Struct(">f"), struct.Struct(">d")
ROW_KIND_BITS = 2
_TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*(?:\[\])?|[<>,:])")

Encode = Callable[[Any], bytes]


def _simple(name: str) -> str:
    return _BASE + f"{name}Serializer${name}SerializerSnapshot"


@dataclass(frozen=True)
class FlinkType:
    """A Flink type: its serializer snapshot, Java and PyFlink bytes of a value.

    Attributes:
        text: The canonical type text (``row<name:string,n:int>``).
        name: ``row``, ``list``, ``map`` or a scalar's name.
        snapshot: The serializer snapshot tree Flink records for the type's Java serializer.
        fixed_length: Bytes of every Java value when fixed (Flink's ``getLength()``), else ``None``.
        java: Python value -> Java serializer bytes (``None`` for a type without a Java form here).
        python: Python value -> PyFlink coder bytes.
        args: Field types (row), element type (list), key and value types (map).
        fields: Field names of a row.
    """

    text: str
    name: str
    snapshot: SerializerNode
    fixed_length: int | None
    java: Encode | None
    python: Encode
    args: tuple[FlinkType, ...] = ()
    fields: tuple[str, ...] = ()

    def encode_java(self, value: Any) -> bytes:
        """The bytes Flink's Java serializer writes for ``value``.

        Raises:
            BadInputError: The value does not fit the type, or the type has no Java form.
        """
        if self.java is None:
            raise BadInputError(f"type {self.text} has no Java serializer statekit writes (use it in PyFlink state)")
        return self.java(value)

    def encode_python(self, value: Any) -> bytes:
        """The bytes PyFlink's coder of this type writes for ``value``."""
        return self.python(value)

    @property
    def hashable(self) -> bool:
        """Whether Flink can key by values of this type (a value-based Java ``hashCode``)."""
        if self.name in ("bytes", "list", "map", "timestamp"):
            return False
        return all(arg.hashable for arg in self.args)


JAVA_TYPE_NAMES = ("string", "long", "int", "short", "byte", "boolean", "char", "double", "float", "bytes",
                   "timestamp")
_ALIASES = {
    "string": "string", "str": "string", "varchar": "string",
    "long": "long", "bigint": "long", "int64": "long",
    "int": "int", "integer": "int", "int32": "int",
    "short": "short", "smallint": "short", "int16": "short",
    "byte": "byte", "tinyint": "byte", "int8": "byte",
    "boolean": "boolean", "bool": "boolean",
    "char": "char",
    "double": "double", "float64": "double",
    "float": "float", "float32": "float",
    "bytes": "bytes", "binary": "bytes", "byte[]": "bytes",
    "timestamp": "timestamp",
}


# ----------------------------------------------------------------------------- value checks


def _what(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _int(value: Any, bits: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise BadInputError(f"{_what(value)} is not a {name}")
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        raise BadInputError(f"{value} is out of range for a {name}")
    return int(value)


def _float(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInputError(f"{_what(value)} is not a {name}")
    return float(value)


def _str(value: Any, name: str = "string") -> str:
    if not isinstance(value, str):
        raise BadInputError(f"{_what(value)} is not a {name}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise BadInputError(f"{_what(value)} is not a boolean")
    return value


def _bytes(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise BadInputError(f"{_what(value)} is not bytes")


def _char(value: Any) -> int:
    text = _str(value, "char")
    units = text.encode("utf-16-be", errors="surrogatepass")
    if len(units) != 2:
        raise BadInputError(f"{_what(value)} is not one UTF-16 code unit (a Java char)")
    return int.from_bytes(units, "big")


def _epoch_ms(value: Any) -> int:
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        delta: _dt.timedelta = value - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
        return int(delta.days * 86_400_000) + (delta.seconds * 1000) + delta.microseconds // 1000
    return _int(value, 64, "timestamp (epoch milliseconds)")


# ----------------------------------------------------------------------------- Java bytes


def encode_java_string(text: str) -> bytes:
    """``StringValue.writeString``: varint (length + 1), then each UTF-16 unit as a varint."""
    units = text.encode("utf-16-be", errors="surrogatepass")
    if units.isascii() and len(units) % 2 == 0 and not any(units[0::2]):
        body = text.encode("ascii")
    else:
        out = bytearray()
        for (unit,) in struct.iter_unpack(">H", units):
            while unit >= 0x80:
                out.append(unit & 0x7F | 0x80)
                unit >>= 7
            out.append(unit)
        body = bytes(out)
    length = len(units) // 2 + 1
    head = bytearray()
    while length >= 0x80:
        head.append(length & 0x7F | 0x80)
        length >>= 7
    head.append(length)
    return bytes(head) + body


def _scalar_java(name: str) -> Encode | None:
    table: dict[str, Encode] = {
        "string": lambda v: encode_java_string(_str(v)),
        "long": lambda v: _I64.pack(_int(v, 64, "long")),
        "int": lambda v: _I32.pack(_int(v, 32, "int")),
        "short": lambda v: _I16.pack(_int(v, 16, "short")),
        "byte": lambda v: _I8.pack(_int(v, 8, "byte")),
        "boolean": lambda v: b"\x01" if _bool(v) else b"\x00",
        "char": lambda v: _char(v).to_bytes(2, "big"),
        "double": lambda v: _F64.pack(_float(v, "double")),
        "float": lambda v: _F32.pack(_float(v, "float")),
        "bytes": lambda v: _I32.pack(len(b := _bytes(v))) + b,
    }
    return table.get(name)


def _scalar_python(name: str) -> Encode:
    def string(v: Any) -> bytes:
        data = _str(v).encode("utf-8", errors="surrogatepass")
        return _I32.pack(len(data)) + data

    table: dict[str, Encode] = {
        "string": string,
        "char": lambda v: string(chr(_char(v))),
        "timestamp": lambda v: _I64.pack(_epoch_ms(v)),
    }
    found = table.get(name) or _scalar_java(name)
    assert found is not None
    return found


_SNAPSHOTS = {
    "string": _simple("String"), "long": _simple("Long"), "int": _simple("Int"), "short": _simple("Short"),
    "byte": _simple("Byte"), "boolean": _simple("Boolean"), "char": _simple("Char"), "double": _simple("Double"),
    "float": _simple("Float"), "bytes": BYTES_CLASS, "timestamp": _simple("SqlTimestamp"),
}
_FIXED = {"long": 8, "int": 4, "short": 2, "byte": 1, "boolean": 1, "char": 2, "double": 8, "float": 4}


def _scalar(name: str) -> FlinkType:
    return FlinkType(name, name, SerializerNode(_SNAPSHOTS[name]), _FIXED.get(name),
                     _scalar_java(name), _scalar_python(name))


def _mask(nulls: Sequence[bool]) -> bytes:
    """Row kind INSERT (two zero bits), then a null bit per field, most significant bit first."""
    size = (len(nulls) + ROW_KIND_BITS + 7) // 8
    mask = 0
    for index, is_null in enumerate(nulls):
        if is_null:
            mask |= 1 << (size * 8 - 1 - ROW_KIND_BITS - index)
    return mask.to_bytes(size, "big")


def _row_values(value: Any, names: tuple[str, ...]) -> list[Any]:
    if isinstance(value, Mapping):
        missing = [n for n in names if n not in value]
        extra = [k for k in value if k not in names]
        if missing or extra:
            raise BadInputError(f"row {_what(value)} does not have the fields {', '.join(names)}")
        return [value[n] for n in names]
    if isinstance(value, (list, tuple)):
        if len(value) != len(names):
            raise BadInputError(f"row {_what(value)} has {len(value)} fields, not {len(names)}")
        return list(value)
    if len(names) == 1:
        return [value]
    raise BadInputError(f"{_what(value)} is not a row of {len(names)} fields")


def _row_encoder(fields: tuple[FlinkType, ...], names: tuple[str, ...], java: bool) -> Encode:
    encoders = [f.java if java else f.python for f in fields]

    def encode(value: Any) -> bytes:
        values = _row_values(value, names)
        parts = [_mask([v is None for v in values])]
        for enc, v in zip(encoders, values):
            if v is not None:
                assert enc is not None
                parts.append(enc(v))
        return b"".join(parts)

    return encode


def _pairs(value: Any) -> list[tuple[Any, Any]]:
    if isinstance(value, Mapping):
        return list(value.items())
    if isinstance(value, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        return [(k, v) for k, v in value]
    raise BadInputError(f"{_what(value)} is not a map")


def _list_encoder(element: FlinkType, java: bool) -> Encode:
    enc = element.java if java else element.python
    assert enc is not None

    def encode(value: Any) -> bytes:
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
            raise BadInputError(f"{_what(value)} is not a list")
        parts = [_I32.pack(len(value))]
        for item in value:
            if java:
                if item is None:
                    raise BadInputError("a list element is null: Flink's ListSerializer has no null elements")
                parts.append(enc(item))
            elif item is None:
                parts.append(b"\x00")
            else:
                parts.append(b"\x01" + enc(item))
        return b"".join(parts)

    return encode


def _map_encoder(key: FlinkType, val: FlinkType, java: bool) -> Encode:
    kenc, venc = (key.java, val.java) if java else (key.python, val.python)
    assert kenc is not None and venc is not None

    def encode(value: Any) -> bytes:
        pairs = _pairs(value)
        parts = [_I32.pack(len(pairs))]
        for k, v in pairs:
            if k is None:
                raise BadInputError("a map key is null")
            parts.append(kenc(k))
            parts.append(b"\x01" if v is None else b"\x00" + venc(v))
        return b"".join(parts)

    return encode


def _composite(snapshot_class: str, args: tuple[FlinkType, ...]) -> SerializerNode:
    return SerializerNode(snapshot_class, tuple(a.snapshot for a in args))


def row_type(fields: Sequence[tuple[str, FlinkType]]) -> FlinkType:
    """``row<name:T,...>`` of the given fields."""
    names = tuple(n for n, _ in fields)
    types = tuple(t for _, t in fields)
    java = None if any(t.java is None for t in types) else _row_encoder(types, names, True)
    text = ",".join(f"{n}:{t.text}" for n, t in fields)
    return FlinkType(f"row<{text}>", "row", _composite(ROW_CLASS, types), None, java,
                     _row_encoder(types, names, False), types, names)


def list_type(element: FlinkType) -> FlinkType:
    java = None if element.java is None else _list_encoder(element, True)
    return FlinkType(f"list<{element.text}>", "list", _composite(LIST_CLASS, (element,)), None, java,
                     _list_encoder(element, False), (element,))


def map_type(key: FlinkType, value: FlinkType) -> FlinkType:
    java = None if key.java is None or value.java is None else _map_encoder(key, value, True)
    return FlinkType(f"map<{key.text},{value.text}>", "map", _composite(MAP_CLASS, (key, value)), None, java,
                     _map_encoder(key, value, False), (key, value))


def byte_array_wrapper() -> SerializerNode:
    """The snapshot of PyFlink's map-state user keys (``ByteArrayWrapperSerializer``)."""
    return SerializerNode(BYTE_ARRAY_WRAPPER_SNAPSHOT)


# ----------------------------------------------------------------------------- grammar


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[str] = []
        pos = 0
        while pos < len(text) and text[pos:].strip():
            match = _TOKEN.match(text, pos)
            if match is None:
                raise BadInputError(f"invalid Flink type {text!r} at character {pos}")
            self.tokens.append(match.group(1))
            pos = match.end()
        self.pos = 0

    def _fail(self, why: str) -> BadInputError:
        return BadInputError(f"invalid Flink type {self.text!r}: {why} (types: {', '.join(JAVA_TYPE_NAMES)}, "
                             "row<name:T,...>, list<T>, map<K,V>)")

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def word(self) -> str:
        token = self.peek()
        if token is None:
            raise self._fail("it ends early")
        self.pos += 1
        return token

    def expect(self, token: str) -> None:
        if self.word() != token:
            raise self._fail(f"expected {token!r}")

    def parse(self) -> FlinkType:
        word = self.word()
        lowered = word.lower()
        if lowered in _ALIASES:
            return _scalar(_ALIASES[lowered])
        if lowered in ("list", "array"):
            self.expect("<")
            element = self.parse()
            self.expect(">")
            return list_type(element)
        if lowered == "map":
            self.expect("<")
            key = self.parse()
            self.expect(",")
            value = self.parse()
            self.expect(">")
            return map_type(key, value)
        if lowered in ("row", "struct"):
            return self.row()
        raise self._fail(f"unknown type {word!r}")

    def row(self) -> FlinkType:
        self.expect("<")
        fields: list[tuple[str, FlinkType]] = []
        while True:
            if self.pos + 1 < len(self.tokens) and self.tokens[self.pos + 1] == ":":
                name = self.word()
                self.expect(":")
            else:
                name = f"f{len(fields)}"
            fields.append((name, self.parse()))
            if self.peek() == ",":
                self.pos += 1
                continue
            break
        self.expect(">")
        if len({n for n, _ in fields}) != len(fields):
            raise self._fail("duplicate field names")
        return row_type(fields)


def parse_flink_type(text: str) -> FlinkType:
    """Parse a Flink type (see the module docstring).

    Raises:
        BadInputError: Not a type of the grammar (names the text and the known types).
    """
    parser = _Parser(text)
    parsed = parser.parse()
    if parser.peek() is not None:
        raise parser._fail(f"unexpected {parser.peek()!r}")
    return parsed
