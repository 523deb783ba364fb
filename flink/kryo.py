"""Decode what Flink's ``KryoSerializer`` (Kryo 5, Flink 2.x) writes, where the fields are known.

Flink serializes a generic type (no POJO, no type information) with
``kryo.writeClassAndObject``, references on, registration optional. Restated from Kryo 5.6
and checked on a real Java job (``tests/golden/flink-java-2.3/kryo``)::

    value     = class | object
    class     = varint: 0 null, 1 by name (varint name id, then the class name the first
                time), else registration id + 2
    reference = varint before each object of a tracked class (everything but the boxed
                primitives): 0 null, 1 a new object, n >= 2 the (n - 2)-th object read
    varint    = 7 bits a byte, least significant first; ints and longs zig-zag encoded
    string    = ASCII with the high bit set on the last byte, or varint (length + 1) with
                the 0x80 flag on its first byte, then UTF-8; 0x80 alone is null

Registration ids: Kryo's own 0 int, 1 String, 2 float, 3 boolean, 4 byte, 5 char, 6 short,
7 long, 8 double (the boxed classes share them); Flink's Chill registrar 73..84 (of which
``java.util.UUID`` 82: two little-endian longs, ``java.sql`` Date 77, Time 78: varlong
epoch ms); then the serializer's own registrations in the snapshot's order, the type class
first (:data:`FIRST_FLINK_REGISTRATION` in Flink 2.x).

Kryo's default ``FieldSerializer`` writes a class's non-transient fields in alphabetical
order, with no names: statekit decodes an object only when its fields are declared
(``--value-type STATE=struct<name:type,...>``, any order: statekit sorts them as Kryo does),
or when it is one of the value types above. Everything else is refused, naming the class and
the state — never guessed.
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from statekit.flink.cursor import ByteCursor
from statekit.flink.serializers import FlinkSerializer
from statekit.flink.state_meta import SerializerNode
from statekit.statefmt.errors import BadInputError

__all__ = ["KryoLayout", "kryo_serializer", "kryo_layout", "FIRST_FLINK_REGISTRATION", "KryoField",
           "read_kryo_string", "read_varint"]

FIRST_FLINK_REGISTRATION = 85  # FlinkChillPackageRegistrar.getNextRegistrationId() in Flink 2.x
NULL, BY_NAME = 0, 1
NOT_NULL = 1
_F32 = struct.Struct("<f")
_F64 = struct.Struct("<d")
_U64 = struct.Struct("<q")

# Kryo's default registrations (boxed classes share their primitive's id), and Flink's Chill ones
KRYO_IDS = {0: "java.lang.Integer", 1: "java.lang.String", 2: "java.lang.Float", 3: "java.lang.Boolean",
            4: "java.lang.Byte", 5: "java.lang.Character", 6: "java.lang.Short", 7: "java.lang.Long",
            8: "java.lang.Double", 77: "java.sql.Date", 78: "java.sql.Time", 79: "java.sql.Timestamp",
            82: "java.util.UUID"}
UNTRACKED = frozenset({"java.lang.Integer", "java.lang.Float", "java.lang.Boolean", "java.lang.Byte",
                       "java.lang.Character", "java.lang.Short", "java.lang.Long", "java.lang.Double"})


def read_varint(cur: ByteCursor, what: str, *, zigzag: bool = False) -> int:
    """Kryo's variable-length int or long (``optimizePositive`` unless ``zigzag``)."""
    value = shift = 0
    while True:
        byte = cur.u8(what)
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
        if shift > 63:
            raise cur.error(f"{what}: variable-length integer too long")
    return (value >> 1) ^ -(value & 1) if zigzag else value


def read_kryo_string(cur: ByteCursor) -> str | None:
    """``Output.writeString``: ASCII with the last byte flagged, or a flagged length + UTF-8."""
    at = cur.pos
    first = cur.u8("Kryo string")
    if first & 0x80 == 0:  # ASCII: every byte a character, the last one with its high bit set
        out = bytearray([first])
        while out[-1] & 0x80 == 0:
            out.append(cur.u8("Kryo string character"))
        out[-1] &= 0x7F
        return out.decode("ascii")
    cur.pos = at
    # length + 1 as a varint whose first byte carries 6 bits (bit 0x80 = "not ASCII", 0x40 = more)
    first = cur.u8("Kryo string length")
    length = first & 0x3F
    shift = 6
    more = first & 0x40
    while more:
        byte = cur.u8("Kryo string length")
        length |= (byte & 0x7F) << shift
        shift += 7
        more = byte & 0x80
    if length == 0:
        return None
    if length == 1:
        return ""
    chars = length - 1
    out = bytearray()
    for _ in range(chars):  # Kryo writes UTF-8 of UTF-16 units: 1 to 3 bytes each
        lead = cur.u8("Kryo string character")
        size = 1 if lead < 0x80 else 2 if lead >> 5 == 0x6 else 3
        out.append(lead)
        out += cur.take(size - 1, "Kryo string character")
    try:
        return out.decode("utf-8", "surrogatepass").encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    except UnicodeDecodeError:
        raise cur.error("Kryo string is not UTF-8", at=at) from None


@dataclass(frozen=True)
class KryoField:
    """One declared field of a class Kryo's ``FieldSerializer`` writes."""

    name: str
    type: str  # int, long, short, byte, boolean, char, float, double (primitives) or a value class




class _Graph:
    """One ``writeClassAndObject`` call: the objects read so far (for back references)."""

    def __init__(self, layout: KryoLayout) -> None:
        self.layout = layout
        self.objects: list[Any] = []
        self.names: list[str] = []

    def reference(self, cur: ByteCursor) -> tuple[bool, Any]:
        """(True, value) for null or a back reference; (False, None) before a new object."""
        at = cur.pos
        marker = read_varint(cur, "Kryo reference")
        if marker == NULL:
            return True, None
        if marker == NOT_NULL:
            return False, None
        index = marker - 2
        if index >= len(self.objects):
            raise cur.error(f"Kryo reference to object {index}, only {len(self.objects)} read", at=at)
        return True, self.objects[index]

    def class_name(self, cur: ByteCursor) -> str | None:
        at = cur.pos
        marker = read_varint(cur, "Kryo class")
        if marker == NULL:
            return None
        if marker == BY_NAME:
            name_id = read_varint(cur, "Kryo class name id")
            if name_id < len(self.names):
                return self.names[name_id]
            name = read_kryo_string(cur)
            if name is None:
                raise cur.error("Kryo class name is null", at=at)
            self.names.append(name)
            return name
        name = self.layout.registered(marker - 2)
        if name is None:
            raise cur.error(f"Kryo registration id {marker - 2} is not one statekit knows (neither Kryo's, Flink's "
                            f"nor one of the {len(self.layout.registrations)} the snapshot names)", at=at)
        return name

    def object_of(self, cur: ByteCursor, cls: str) -> Any:
        """An object of ``cls`` after its class: the reference marker (tracked classes), then its bytes."""
        if cls not in UNTRACKED:
            done, value = self.reference(cur)
            if done:
                return value
            slot = len(self.objects)
            self.objects.append(None)
            value = self.layout.read_class(cur, cls, self)
            self.objects[slot] = value
            return value
        return self.layout.read_class(cur, cls, self)


def _uuid(cur: ByteCursor, graph: _Graph) -> str:
    import uuid

    most, least = _U64.unpack(cur.take(8, "UUID")), _U64.unpack(cur.take(8, "UUID"))
    return str(uuid.UUID(int=((most[0] & (1 << 64) - 1) << 64) | (least[0] & (1 << 64) - 1)))


def _signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _kryo_local_date(cur: ByteCursor, graph: _Graph) -> datetime.date:
    at = cur.pos
    year = _signed(read_varint(cur, "Kryo LocalDate year"), 32)
    month, day = cur.i8("Kryo LocalDate month"), cur.i8("Kryo LocalDate day")
    try:
        return datetime.date(year, month, day)
    except ValueError:
        raise cur.error(f"Kryo LocalDate {year}-{month}-{day} is not a date", at=at) from None


def _kryo_time_parts(cur: ByteCursor) -> tuple[int, int, int, int]:
    """Kryo's ``LocalTimeSerializer``: the last part written is complemented (negative)."""
    minute = second = nano = 0
    hour = cur.i8("Kryo LocalTime hour")
    if hour < 0:
        return ~hour, 0, 0, 0
    minute = cur.i8("Kryo LocalTime minute")
    if minute < 0:
        return hour, ~minute, 0, 0
    second = cur.i8("Kryo LocalTime second")
    if second < 0:
        return hour, minute, ~second, 0
    nano = read_varint(cur, "Kryo LocalTime nano")
    return hour, minute, second, nano


def _kryo_local_time(cur: ByteCursor, graph: _Graph) -> str:
    hour, minute, second, nano = _kryo_time_parts(cur)
    return f"{hour:02d}:{minute:02d}:{second:02d}" + (f".{nano:09d}".rstrip("0") if nano else "")


def _kryo_local_date_time(cur: ByteCursor, graph: _Graph) -> int:
    """Epoch ms of the wall-clock time read as UTC (Spark's timestamp_ntz)."""
    days = (_kryo_local_date(cur, graph) - datetime.date(1970, 1, 1)).days
    hour, minute, second, nano = _kryo_time_parts(cur)
    return ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + nano // 10**6


def _kryo_instant(cur: ByteCursor, graph: _Graph) -> int:
    seconds = _signed(read_varint(cur, "Kryo Instant seconds"), 64)
    return seconds * 1000 + read_varint(cur, "Kryo Instant nanos") // 10**6


_VALUE_CLASSES: dict[str, tuple[Callable[[ByteCursor, _Graph], Any], str]] = {
    "java.time.LocalDate": (_kryo_local_date, "date"),
    "java.time.LocalTime": (_kryo_local_time, "string"),
    "java.time.LocalDateTime": (_kryo_local_date_time, "timestamp_ntz"),
    "java.time.Instant": (_kryo_instant, "timestamp"),
    "java.lang.Integer": (lambda cur, g: read_varint(cur, "Kryo int", zigzag=True), "int"),
    "java.lang.Long": (lambda cur, g: read_varint(cur, "Kryo long", zigzag=True), "bigint"),
    "java.lang.Short": (lambda cur, g: int.from_bytes(cur.take(2, "Kryo short"), "little", signed=True), "smallint"),
    "java.lang.Byte": (lambda cur, g: cur.i8("Kryo byte"), "tinyint"),
    "java.lang.Boolean": (lambda cur, g: cur.boolean("Kryo boolean"), "boolean"),
    "java.lang.Character": (lambda cur, g: chr(int.from_bytes(cur.take(2, "Kryo char"), "little")), "string"),
    "java.lang.Float": (lambda cur, g: _F32.unpack(cur.take(4, "Kryo float"))[0], "float"),
    "java.lang.Double": (lambda cur, g: _F64.unpack(cur.take(8, "Kryo double"))[0], "double"),
    "java.lang.String": (lambda cur, g: read_kryo_string(cur), "string"),
    "java.util.UUID": (_uuid, "string"),
    "java.sql.Date": (lambda cur, g: read_varint(cur, "Kryo date", zigzag=False), "timestamp"),
    "java.sql.Time": (lambda cur, g: read_varint(cur, "Kryo time", zigzag=False), "timestamp"),
}
_PRIMITIVE_FIELDS: dict[str, tuple[Callable[[ByteCursor, _Graph], Any], str]] = {
    "int": _VALUE_CLASSES["java.lang.Integer"], "int32": _VALUE_CLASSES["java.lang.Integer"],
    "long": _VALUE_CLASSES["java.lang.Long"], "bigint": _VALUE_CLASSES["java.lang.Long"],
    "short": _VALUE_CLASSES["java.lang.Short"], "int16": _VALUE_CLASSES["java.lang.Short"],
    "byte": _VALUE_CLASSES["java.lang.Byte"], "int8": _VALUE_CLASSES["java.lang.Byte"],
    "boolean": _VALUE_CLASSES["java.lang.Boolean"], "bool": _VALUE_CLASSES["java.lang.Boolean"],
    "char": _VALUE_CLASSES["java.lang.Character"],
    "float": _VALUE_CLASSES["java.lang.Float"], "float32": _VALUE_CLASSES["java.lang.Float"],
    "double": _VALUE_CLASSES["java.lang.Double"],
}
# a field of a final value class: the object after its reference marker (no class written)
_FINAL_FIELDS = {"string": "java.lang.String", "uuid": "java.util.UUID"}
# a boxed field: the class is not final... Integer is final: Kryo writes it as writeObjectOrNull
_BOXED_FIELDS = {"Integer": "java.lang.Integer", "Long": "java.lang.Long", "Short": "java.lang.Short",
                 "Byte": "java.lang.Byte", "Boolean": "java.lang.Boolean", "Character": "java.lang.Character",
                 "Float": "java.lang.Float", "Double": "java.lang.Double"}


@dataclass(frozen=True)
class KryoLayout:
    """What statekit knows of one Kryo serializer: its registrations and the declared classes.

    Attributes:
        type_class: The state's declared class (the snapshot's type class).
        registrations: The snapshot's registrations, in order (ids from :data:`FIRST_FLINK_REGISTRATION`).
        declared: Fields of classes, by class name (``--value-type`` for the type class).
    """

    type_class: str
    registrations: tuple[str, ...]
    declared: tuple[tuple[str, tuple[KryoField, ...]], ...] = ()

    def registered(self, registration_id: int) -> str | None:
        """The class of a registration id, or ``None``."""
        if registration_id in KRYO_IDS:
            return KRYO_IDS[registration_id]
        index = registration_id - FIRST_FLINK_REGISTRATION
        return self.registrations[index] if 0 <= index < len(self.registrations) else None

    def fields(self, cls: str) -> tuple[KryoField, ...] | None:
        return next((fields for name, fields in self.declared if name == cls), None)

    def read_class(self, cur: ByteCursor, cls: str, graph: _Graph) -> Any:
        """The bytes of one object of ``cls`` (after its class and reference marker)."""
        known = _VALUE_CLASSES.get(cls)
        if known is not None:
            return known[0](cur, graph)
        fields = self.fields(cls)
        if fields is None:
            raise BadInputError(f"Kryo value of class {cls}: its fields are not known (declare them with "
                                f"--value-type STATE=struct<name:type,...>); not decoded", path=cur.source)
        return {field.name: _read_field(cur, field, graph) for field in sorted(fields, key=lambda f: f.name)}


def _read_field(cur: ByteCursor, field: KryoField, graph: _Graph) -> Any:
    primitive = _PRIMITIVE_FIELDS.get(field.type)
    if primitive is not None:
        return primitive[0](cur, graph)
    final = _FINAL_FIELDS.get(field.type)
    if final is not None:
        return graph.object_of(cur, final)
    boxed = _BOXED_FIELDS.get(field.type)
    if boxed is not None:  # final classes: writeObjectOrNull without references: a null byte
        if cur.u8(f"Kryo field {field.name} null flag") == NULL:
            return None
        return graph.layout.read_class(cur, boxed, graph)
    cls = graph.class_name(cur)  # any other class: writeClassAndObject
    return None if cls is None else graph.object_of(cur, cls)


def _spark_type(layout: KryoLayout, cls: str) -> str | None:
    known = _VALUE_CLASSES.get(cls)
    if known is not None:
        return known[1]
    fields = layout.fields(cls)
    if fields is None:
        return None
    parts = []
    for field in fields:
        spark = (_PRIMITIVE_FIELDS.get(field.type) or (None, None))[1]
        if spark is None and field.type in _FINAL_FIELDS:
            spark = "string"
        if spark is None and field.type in _BOXED_FIELDS:
            spark = _VALUE_CLASSES[_BOXED_FIELDS[field.type]][1]
        if spark is None:
            return None
        parts.append(f"{field.name}:{spark}")
    return "struct<" + ",".join(parts) + ">"


def kryo_layout(node: SerializerNode, declared: str | None = None) -> KryoLayout:
    """The layout of a Kryo serializer snapshot, with the type class's fields from ``declared``.

    Args:
        node: The ``KryoSerializerSnapshot`` (its type class and registrations).
        declared: ``struct<name:type,...>`` of the type class (types: int, long, short, byte,
            boolean, char, float, double, string, uuid, Integer, Long, ... Double).

    Raises:
        BadInputError: A declaration that is not ``struct<...>`` of those types.
    """
    type_class = node.text or "?"
    fields: tuple[KryoField, ...] = ()
    if declared is not None:
        text = declared.strip()
        if not (text.startswith("struct<") and text.endswith(">")):
            raise BadInputError(f"Kryo class {type_class}: declare its fields as struct<name:type,...>, not {declared}")
        parts = [p for p in text[len("struct<"):-1].split(",") if p.strip()]
        out = []
        for part in parts:
            name, _, kind = part.partition(":")
            kind = kind.strip()
            if not name.strip() or (kind not in _PRIMITIVE_FIELDS and kind not in _FINAL_FIELDS
                                    and kind not in _BOXED_FIELDS):
                raise BadInputError(f"Kryo class {type_class}: field {part.strip()!r}: types are "
                                    f"{', '.join(sorted({*_PRIMITIVE_FIELDS, *_FINAL_FIELDS, *_BOXED_FIELDS}))}")
            out.append(KryoField(name.strip(), kind))
        fields = tuple(out)
    return KryoLayout(type_class, node.names, ((type_class, fields),) if fields else ())


def kryo_serializer(node: SerializerNode, declared: str | None = None) -> FlinkSerializer | None:
    """The decoder of a Flink 2.x ``KryoSerializerSnapshot``, or ``None`` when its values cannot be typed.

    Values of the type class decode when it is a value class Kryo writes itself (boxed
    primitives, ``String``, ``UUID``...) or ``declared`` gives its fields; a value of
    ``Object`` decodes when each value is such a class (its Spark type is then ``string``).
    """
    layout = kryo_layout(node, declared)
    if layout.type_class == "java.lang.Object":
        spark: str | None = "string"
    else:
        spark = _spark_type(layout, layout.type_class)
    if spark is None:
        return None
    as_text = layout.type_class == "java.lang.Object"

    def read(cur: ByteCursor) -> Any:
        graph = _Graph(layout)
        cls = graph.class_name(cur)
        if cls is None:
            return None
        value = graph.object_of(cur, cls)
        return None if value is None else str(value) if as_text else value

    return FlinkSerializer(f"Kryo<{layout.type_class.rsplit('.', 1)[-1]}>", spark, None, read)
