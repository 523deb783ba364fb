"""Decode the Java types of Flink's DataStream API: tuples, POJOs, Either, enums, time, decimals.

Chosen by serializer-snapshot class (restated from Flink's serializers, checked on real Java
jobs in ``tests/golden/flink-java-2.3``)::

    TupleSerializer          Tuple1..25: the fields in order, no null flags     struct<f0,..>
    ScalaCaseClassSerializer (Flink 1.x) the fields in order, no null flags     struct<f0,..>
    PojoSerializer           flags byte: 1 null, 2 exact class, 4 subclass (its class name,
                             utf), 8 registered subclass (its tag, a byte); an exact class
                             has per field a null boolean and the value; a subclass is
                             written by its own serializer (from the snapshot)   struct<field,..>
    JavaEitherSerializer     boolean (true = left), then that side           struct<left,right>
    EnumSerializer           int ordinal into the snapshot's symbols             string
    LocalDate                int year (MIN = null), byte month, byte day         date
    LocalTime                byte hour (MIN = null), byte minute, byte second, int nano   string
    LocalDateTime            LocalDate, LocalTime                                timestamp_ntz (ms)
    Instant                  long seconds (MIN = null), int nanos                timestamp (ms)
    Date, SqlDate, SqlTime   long epoch ms (MIN = null)                          timestamp/date/string
    SqlTimestamp             long epoch ms (MIN = null), int nanos of second     timestamp (ms)
    BigInt                   int n: 0 null, 1 zero, 2 one, 3 ten, else n - 4 two's
                             complement bytes                                    string (exact)
    BigDec                   BigInt unscaled, int scale                          string (exact)

Timestamps are given as epoch milliseconds (the export turns them into Spark timestamps);
dates as :class:`datetime.date`. Decimals keep every digit as text, since their scale varies
from value to value and Spark's decimal type fixes one.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from statekit.flink.cursor import ByteCursor
from statekit.flink.serializers import FlinkSerializer
from statekit.flink.state_meta import (
    ENUM_SNAPSHOT,
    POJO_SNAPSHOT,
    SCALA_CASE_CLASS_SNAPSHOT,
    TUPLE_SNAPSHOT,
    SerializerNode,
)
from statekit.statefmt.errors import BadInputError

__all__ = ["java_serializer", "JAVA_SIMPLE", "POJO_NULL", "POJO_EXACT_CLASS", "POJO_SUBCLASS", "POJO_TAGGED_SUBCLASS",
           "EITHER_CLASS", "decimal_text"]

_BASE = "org.apache.flink.api.common.typeutils.base."
EITHER_CLASS = "org.apache.flink.api.java.typeutils.runtime.JavaEitherSerializerSnapshot"
POJO_NULL, POJO_EXACT_CLASS, POJO_SUBCLASS, POJO_TAGGED_SUBCLASS = 1, 2, 4, 8
INT_MIN, LONG_MIN, BYTE_MIN = -(1 << 31), -(1 << 63), -128
MAX_TUPLE_ARITY = 25
Build = Callable[[SerializerNode | None], FlinkSerializer | None]
_EPOCH = datetime.date(1970, 1, 1)


def _local_date(cur: ByteCursor) -> datetime.date | None:
    at = cur.pos
    year = cur.i32("LocalDate year")
    month, day = cur.u8("LocalDate month"), cur.u8("LocalDate day")
    if year == INT_MIN:
        return None
    try:
        return datetime.date(year, month, day)
    except ValueError:
        raise cur.error(f"LocalDate {year}-{month}-{day} is not a date", at=at) from None


def _local_time(cur: ByteCursor) -> str | None:
    at = cur.pos
    hour = cur.i8("LocalTime hour")
    minute, second, nano = cur.i8("LocalTime minute"), cur.i8("LocalTime second"), cur.i32("LocalTime nano")
    if hour == BYTE_MIN:
        return None
    if not (0 <= hour < 24 and 0 <= minute < 60 and 0 <= second < 60 and 0 <= nano < 10**9):
        raise cur.error(f"LocalTime {hour}:{minute}:{second}.{nano} is not a time of day", at=at)
    return f"{hour:02d}:{minute:02d}:{second:02d}" + (f".{nano:09d}".rstrip("0") if nano else "")


def _local_date_time(cur: ByteCursor) -> int | None:
    """Epoch ms of the wall-clock time read as UTC (Spark's timestamp_ntz)."""
    date = _local_date(cur)
    at = cur.pos
    time = _local_time(cur)
    if date is None or time is None:
        return None
    hms, _, fraction = time.partition(".")
    hour, minute, second = (int(part) for part in hms.split(":"))
    del at
    days = (date - _EPOCH).days
    return ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + int((fraction or "0").ljust(9, "0")) // 10**6


def _instant(cur: ByteCursor) -> int | None:
    seconds, nanos = cur.i64("Instant seconds"), cur.i32("Instant nanos")
    return None if seconds == LONG_MIN else seconds * 1000 + nanos // 10**6


def _epoch_ms(what: str) -> Callable[[ByteCursor], int | None]:
    def read(cur: ByteCursor) -> int | None:
        value = cur.i64(what)
        return None if value == LONG_MIN else value

    return read


def _sql_date(cur: ByteCursor) -> datetime.date | None:
    millis = cur.i64("SQL date")
    return None if millis == LONG_MIN else _EPOCH + datetime.timedelta(milliseconds=millis)


def _sql_time(cur: ByteCursor) -> str | None:
    millis = cur.i64("SQL time")
    if millis == LONG_MIN:
        return None
    return (datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=millis)).time().isoformat()


def _sql_timestamp(cur: ByteCursor) -> int | None:
    millis, _nanos = cur.i64("SQL timestamp"), cur.i32("SQL timestamp nanos")
    return None if millis == LONG_MIN else millis


def read_big_integer(cur: ByteCursor) -> int | None:
    """``BigIntSerializer.readBigInteger``."""
    at = cur.pos
    length = cur.i32("BigInteger length")
    if length < 0:
        raise cur.error(f"BigInteger of negative length {length}", at=at)
    if length <= 3:
        return (None, 0, 1, 10)[length]
    return int.from_bytes(cur.take(length - 4, "BigInteger bytes"), "big", signed=True)


def decimal_text(unscaled: int, scale: int) -> str:
    """``new BigDecimal(unscaled, scale).toPlainString()``, without a float in between and
    without a context's rounding (any number of digits)."""
    digits = tuple(int(d) for d in str(abs(unscaled)))
    return format(Decimal((int(unscaled < 0), digits, -scale)), "f")


def _big_decimal(cur: ByteCursor) -> str | None:
    unscaled = read_big_integer(cur)
    if unscaled is None:
        return None
    return decimal_text(unscaled, cur.i32("BigDecimal scale"))


def _big_integer(cur: ByteCursor) -> str | None:
    value = read_big_integer(cur)
    return None if value is None else str(value)


JAVA_SIMPLE: dict[str, FlinkSerializer] = {
    _BASE + f"{name}Serializer${name}SerializerSnapshot": ser for name, ser in {
        "LocalDate": FlinkSerializer("LocalDate", "date", 6, _local_date),
        "LocalTime": FlinkSerializer("LocalTime", "string", 7, _local_time),
        "LocalDateTime": FlinkSerializer("LocalDateTime", "timestamp_ntz", 13, _local_date_time),
        "Instant": FlinkSerializer("Instant", "timestamp", 12, _instant),
        "Date": FlinkSerializer("Date", "timestamp", 8, _epoch_ms("date")),
        "SqlDate": FlinkSerializer("SqlDate", "date", 8, _sql_date),
        "SqlTime": FlinkSerializer("SqlTime", "string", 8, _sql_time),
        "SqlTimestamp": FlinkSerializer("SqlTimestamp", "timestamp", 12, _sql_timestamp),
        "BigInt": FlinkSerializer("BigInteger", "string", None, _big_integer),
        "BigDec": FlinkSerializer("BigDecimal", "string", None, _big_decimal),
    }.items()
}


def _fields(fields: list[FlinkSerializer], name: str) -> FlinkSerializer:
    """A tuple or case class: every field in order, none of them null."""
    def read(cur: ByteCursor) -> dict[str, Any]:
        return {f"f{i}": field.read(cur) for i, field in enumerate(fields)}

    lengths = [field.fixed_length for field in fields]
    fixed = None if None in lengths else sum(length for length in lengths if length is not None)
    struct_type = ",".join(f"f{i}:{f.spark_type}" for i, f in enumerate(fields))
    return FlinkSerializer(f"{name}<{','.join(f.name for f in fields)}>", f"struct<{struct_type}>", fixed, read)


def _either(left: FlinkSerializer, right: FlinkSerializer) -> FlinkSerializer:
    def read(cur: ByteCursor) -> dict[str, Any]:
        if cur.boolean("Either side"):
            return {"left": left.read(cur), "right": None}
        return {"left": None, "right": right.read(cur)}

    spark = f"struct<left:{left.spark_type},right:{right.spark_type}>"
    return FlinkSerializer(f"Either<{left.name},{right.name}>", spark, None, read)


def _enum(node: SerializerNode) -> FlinkSerializer:
    symbols = node.names

    def read(cur: ByteCursor) -> str:
        at = cur.pos
        ordinal = cur.i32("enum ordinal")
        if not 0 <= ordinal < len(symbols):
            raise cur.error(f"enum {node.text} ordinal {ordinal} outside its {len(symbols)} symbols", at=at)
        return symbols[ordinal]

    return FlinkSerializer(f"Enum<{(node.text or '?').rsplit('.', 1)[-1]}>", "string", 4, read)


def _merge_struct(own: list[tuple[str, str]], subclasses: list[FlinkSerializer]) -> str:
    """The POJO's struct type: its fields, then the fields only its subclasses have."""
    fields = dict(own)
    for sub in subclasses:
        for name, spark in _struct_fields(sub.spark_type):
            fields.setdefault(name, spark)
    return "struct<" + ",".join(f"{name}:{spark}" for name, spark in fields.items()) + ">"


def _struct_fields(spark: str) -> list[tuple[str, str]]:
    inner = spark[len("struct<"):-1]
    depth, start, out = 0, 0, []
    for i, ch in enumerate(inner + ","):
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "," and depth == 0:
            name, _, kind = inner[start:i].partition(":")
            out.append((name, kind))
            start = i + 1
    return [pair for pair in out if pair[0]]


def _pojo(node: SerializerNode, fields: list[FlinkSerializer], build: Build) -> FlinkSerializer | None:
    names = node.names
    subs: dict[str, FlinkSerializer] = {}
    for sub_name, sub_node in node.subclasses:
        sub = build(sub_node)
        if sub is None or not sub.spark_type.startswith("struct<"):
            return None
        subs[sub_name] = sub
    tags = [name for name, _ in node.subclasses[:node.registered]]
    own = [(name, field.spark_type) for name, field in zip(names, fields)]
    spark = _merge_struct(own, list(subs.values()))
    every = [name for name, _ in _struct_fields(spark)]
    with_class = bool(subs)

    def widen(value: dict[str, Any] | None, cls: str) -> dict[str, Any] | None:
        if value is None:
            return None
        row = {name: value.get(name) for name in every}
        if with_class:
            row["_class"] = cls
        return row

    def subclass(cur: ByteCursor, cls: str, at: int) -> dict[str, Any] | None:
        sub = subs.get(cls)
        if sub is None:
            raise BadInputError(f"POJO {node.text} value of subclass {cls}, whose serializer the snapshot does not "
                                f"record (not registered, met after the snapshot's serializer was taken): not "
                                f"decoded (entry at byte offset {at})", path=cur.source)
        return widen(sub.read(cur), cls)

    def read(cur: ByteCursor) -> dict[str, Any] | None:
        at = cur.pos
        flags = cur.u8("POJO flags")
        if flags & POJO_NULL:
            return None
        if flags & POJO_SUBCLASS:
            return subclass(cur, cur.utf("POJO subclass name"), at)
        if flags & POJO_TAGGED_SUBCLASS:
            tag = cur.u8("POJO subclass tag")
            if tag >= len(tags):
                raise cur.error(f"POJO {node.text} subclass tag {tag}: the snapshot registers {len(tags)}", at=at)
            return subclass(cur, tags[tag], at)
        if flags != POJO_EXACT_CLASS:
            raise cur.error(f"POJO {node.text}: unknown flags {flags:#x}", at=at)
        value = {name: None if cur.boolean(f"POJO field {name} null flag") else field.read(cur)
                 for name, field in zip(names, fields)}
        return widen(value, node.text or "") if with_class else value

    if with_class:
        spark = spark[:-1] + ",_class:string>"
    return FlinkSerializer(f"Pojo<{node.text}>", spark, None, read)


def java_serializer(node: SerializerNode, build: Build) -> FlinkSerializer | None:
    """The decoder of a Java-type snapshot, ``None`` when it is not one (or cannot be decoded).

    Args:
        node: The serializer snapshot.
        build: The decoder factory for nested snapshots (:func:`~statekit.flink.serializers.flink_serializer`).
    """
    cls = node.snapshot_class
    if cls in JAVA_SIMPLE:
        return JAVA_SIMPLE[cls]
    if cls == ENUM_SNAPSHOT:
        return _enum(node) if node.names else None
    children = [build(child) for child in node.children]
    if any(child is None for child in children):
        return None
    nested = [child for child in children if child is not None]
    if cls == TUPLE_SNAPSHOT and 0 < len(nested) <= MAX_TUPLE_ARITY:
        return _fields(nested, "Tuple")
    if cls == SCALA_CASE_CLASS_SNAPSHOT and nested:
        return _fields(nested, (node.text or "CaseClass").rsplit(".", 1)[-1])
    if cls == EITHER_CLASS and len(nested) == 2:
        return _either(nested[0], nested[1])
    if cls == POJO_SNAPSHOT and len(nested) == len(node.names) and node.names:
        return _pojo(node, nested, build)
    return None
