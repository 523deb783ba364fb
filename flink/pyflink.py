"""Values of PyFlink state: the bytes PyFlink's Python coders wrote, decoded by a declared type.

PyFlink registers a Python function's state on the Java side under ``python-state-<name>``
with byte-array serializers: a ``ValueState`` and a ``ListState`` become a Java list state of
``byte[]`` (one element for a value state), a ``MapState`` a Java map state from
``ByteArrayWrapper`` to ``byte[]``. The bytes are written by the coder of the Python state
descriptor's type (``pyflink.fn_execution.coder_impl_slow``); the type itself is not in the
snapshot, so the user declares it (``--value-type``), in statekit's declared-type grammar:

    ==========================  ================================================  =================
    PyFlink type                bytes                                             declared type
    ==========================  ================================================  =================
    Types.BOOLEAN()             1 byte (0 or 1)                                   bool
    Types.BYTE()                1 byte, signed                                    int8 (tinyint)
    Types.SHORT()               2 bytes, big-endian, signed                       int16 (smallint)
    Types.INT()                 4 bytes, big-endian, signed                       int32
    Types.LONG(), BIG_INT()     8 bytes, big-endian, signed                       int (long, bigint)
    Types.FLOAT()               4 bytes, IEEE 754, big-endian                     float32
    Types.DOUBLE()              8 bytes, IEEE 754, big-endian                     float (double)
    Types.STRING(), CHAR()      int32 length, UTF-8                               string
    PRIMITIVE_ARRAY(BYTE())     int32 length, the bytes                           bytes
    Types.SQL_TIMESTAMP()       int64 epoch milliseconds                          timestamp
    Types.ROW([...]),           mask: 2 row-kind bits then one null bit per       struct<a:T,...>
    ROW_NAMED([...], [...])       field, MSB first, ceil((n+2)/8) bytes; then
                                  the non-null fields in order
    Types.LIST(T),              int32 size, then per element a presence byte      list<T>
    BASIC_ARRAY(T)                (1 = present) and the element
    Types.MAP(K, V)             int32 size, then per entry the key, a null byte   map<K,V>
                                  (1 = null) and the value
    PICKLED_BYTE_ARRAY (none)   int32 length, cloudpickle bytes                   refused (never
                                                                                  unpickled)
    ==========================  ================================================  =================

The declared type describes the Python state: ``T`` for a ValueState (exactly one element
is expected), ``list<T>`` for a ListState, ``map<K,V>`` for a MapState. The widths
``int32``/``int16``/``int8``/``float32`` extend statekit's grammar, where ``int`` and ``float``
are 64-bit.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from statekit.flink.cursor import ByteCursor
from statekit.statefmt.errors import BadInputError, CorruptStateError

__all__ = ["PyFlinkType", "parse_pyflink_type", "value_type_options", "PYTHON_STATE_PREFIX"]

PYTHON_STATE_PREFIX = "python-state-"
ROW_KIND_BITS = 2
_TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|[<>,:])")
_F32, _F64 = struct.Struct(">f"), struct.Struct(">d")

# name -> (canonical name, Spark type, reader)
_PRIMITIVES: dict[str, tuple[str, str, Callable[[ByteCursor], Any]]] = {}


def _register(names: tuple[str, ...], spark: str, read: Callable[[ByteCursor], Any]) -> None:
    for name in names:
        _PRIMITIVES[name] = (names[0], spark, read)


def _string(cur: ByteCursor) -> str:
    at = cur.pos
    raw = cur.take(cur.count("PyFlink string length"), "PyFlink string")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise cur.error("PyFlink string is not UTF-8", at=at) from None


_register(("bool", "boolean"), "boolean", lambda cur: cur.boolean("PyFlink boolean"))
_register(("int8", "tinyint", "byte"), "tinyint", lambda cur: cur.i8("PyFlink byte"))
_register(("int16", "smallint", "short"), "smallint", lambda cur: cur.i16("PyFlink short"))
_register(("int32",), "int", lambda cur: cur.i32("PyFlink int"))
_register(("int", "long", "int64", "bigint", "integer"), "bigint", lambda cur: cur.i64("PyFlink long"))
_register(("float32",), "float", lambda cur: _F32.unpack(cur.take(4, "PyFlink float"))[0])
_register(("float", "double", "float64"), "double", lambda cur: _F64.unpack(cur.take(8, "PyFlink double"))[0])
_register(("string", "str"), "string", _string)
_register(("bytes", "binary"), "binary", lambda cur: cur.take(cur.count("PyFlink bytes length"), "PyFlink bytes"))
_register(("timestamp",), "timestamp", lambda cur: cur.i64("PyFlink timestamp"))


@dataclass(frozen=True)
class PyFlinkType:
    """A declared type of PyFlink state values: its name, Spark type and decoder.

    Attributes:
        text: The declared type as given.
        name: ``list``, ``map``, ``struct`` or a primitive's canonical name.
        spark_type: The Spark SQL type of decoded values.
        read: Reads one value from a cursor.
        args: Element type (list) or key and value types (map).
    """

    text: str
    name: str
    spark_type: str
    read: Callable[[ByteCursor], Any]
    args: tuple[PyFlinkType, ...] = ()

    def decode(self, data: bytes, where: str) -> Any:
        """One value from exactly ``data``.

        Raises:
            CorruptStateError: The bytes do not hold one value of this type (names ``where``).
        """
        cur = ByteCursor(data, source=where, error=CorruptStateError)
        value = self.read(cur)
        if cur.remaining:
            raise cur.error(f"{cur.remaining} bytes left after a {self.text} value: is the declared type right?")
        return value


def _tokens(text: str) -> list[str]:
    tokens, pos = [], 0
    while pos < len(text) and text[pos:].strip():
        match = _TOKEN.match(text, pos)
        if match is None:
            raise BadInputError(f"invalid value type {text!r} at character {pos}")
        tokens.append(match.group(1))
        pos = match.end()
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.text, self.tokens, self.pos = text, _tokens(text), 0

    def expect(self, token: str) -> None:
        if self.pos >= len(self.tokens) or self.tokens[self.pos] != token:
            raise BadInputError(f"invalid value type {self.text!r}: expected {token!r}")
        self.pos += 1

    def word(self) -> str:
        if self.pos >= len(self.tokens):
            raise BadInputError(f"invalid value type {self.text!r}: ends early")
        self.pos += 1
        return self.tokens[self.pos - 1]

    def parse(self) -> PyFlinkType:
        word = self.word()
        lowered = word.lower()
        if lowered in _PRIMITIVES:
            name, spark, read = _PRIMITIVES[lowered]
            return PyFlinkType(name, name, spark, read)
        if lowered in ("list", "array"):
            self.expect("<")
            element = self.parse()
            self.expect(">")
            return _list(element)
        if lowered == "map":
            self.expect("<")
            key = self.parse()
            self.expect(",")
            value = self.parse()
            self.expect(">")
            return _map(key, value)
        if lowered in ("struct", "row"):
            return self.struct()
        if lowered in ("json", "any", "pickle"):
            raise BadInputError(f"value type {word!r}: PyFlink's pickled values are never unpickled; declare "
                                "the state's Types in the job, or export the bytes (no --value-type)")
        raise BadInputError(f"invalid value type {self.text!r}: unknown type {word!r}")

    def struct(self) -> PyFlinkType:
        self.expect("<")
        fields: list[tuple[str, PyFlinkType]] = []
        while True:
            name = self.word()
            if not re.match(r"[A-Za-z_]", name):
                raise BadInputError(f"invalid value type {self.text!r}: expected a field name")
            self.expect(":")
            fields.append((name, self.parse()))
            if self.pos < len(self.tokens) and self.tokens[self.pos] == ",":
                self.pos += 1
                continue
            break
        self.expect(">")
        if len({n for n, _ in fields}) != len(fields):
            raise BadInputError(f"invalid value type {self.text!r}: duplicate field names")
        return _row(fields)


def _list(element: PyFlinkType) -> PyFlinkType:
    def read(cur: ByteCursor) -> list[Any]:
        return [element.read(cur) if cur.boolean("PyFlink list element presence") else None
                for _ in range(cur.count("PyFlink list size"))]

    return PyFlinkType(f"list<{element.text}>", "list", f"array<{element.spark_type}>", read, (element,))


def _map(key: PyFlinkType, value: PyFlinkType) -> PyFlinkType:
    def read(cur: ByteCursor) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for _ in range(cur.count("PyFlink map size", min_item_size=2)):
            k = key.read(cur)
            out[k] = None if cur.boolean("PyFlink map value null flag") else value.read(cur)
        return out

    return PyFlinkType(f"map<{key.text},{value.text}>", "map", f"map<{key.spark_type},{value.spark_type}>",
                       read, (key, value))


def _row(fields: list[tuple[str, PyFlinkType]]) -> PyFlinkType:
    mask_bytes = (len(fields) + ROW_KIND_BITS + 7) // 8

    def read(cur: ByteCursor) -> dict[str, Any]:
        mask = int.from_bytes(cur.take(mask_bytes, "PyFlink row mask"), "big")
        row: dict[str, Any] = {}
        for index, (name, field) in enumerate(fields):
            is_null = mask >> (mask_bytes * 8 - 1 - ROW_KIND_BITS - index) & 1
            row[name] = None if is_null else field.read(cur)
        return row

    text = ",".join(f"{n}:{t.text}" for n, t in fields)
    spark = ",".join(f"{n}:{t.spark_type}" for n, t in fields)
    return PyFlinkType(f"struct<{text}>", "struct", f"struct<{spark}>", read, tuple(t for _, t in fields))


def parse_pyflink_type(text: str) -> PyFlinkType:
    """Parse a declared type of PyFlink state (see the module docstring).

    Raises:
        BadInputError: Not a type of the grammar, or a type PyFlink state cannot be read as.
    """
    parser = _Parser(text)
    parsed = parser.parse()
    if parser.pos != len(parser.tokens):
        raise BadInputError(f"invalid value type {text!r}: unexpected {parser.tokens[parser.pos]!r}")
    return parsed


def value_type_options(items: tuple[str, ...] | list[str], state: str | None) -> dict[str, str]:
    """``--value-type`` options as ``{state name: type}``.

    Each item is ``STATE=TYPE`` (``STATE`` a full state name or a PyFlink state's Python
    name) or a bare ``TYPE`` for the one state chosen by ``--state``.

    Raises:
        BadInputError: A bare type without ``--state``, or a state given twice.
    """
    out: dict[str, str] = {}
    for item in items:
        name, sep, declared = item.partition("=")
        if not sep:
            if state is None:
                raise BadInputError(f"--value-type {item!r}: name the state (STATE=TYPE) or choose it with --state")
            name, declared = state, item
        name, declared = name.strip(), declared.strip()
        if not name or not declared:
            raise BadInputError(f"--value-type {item!r} is not [STATE=]TYPE")
        if name in out:
            raise BadInputError(f"--value-type: state {name!r} is given twice")
        parse_pyflink_type(declared)  # bad types fail before any work starts
        out[name] = declared
    return out
