"""Serializer snapshots and values beyond the basic types, as bytes laid out like Flink's writers.

POJO, Avro and Kryo state are written by Java jobs, which the PyFlink fixture generator
does not run: these bytes follow ``PojoSerializerSnapshotData``, ``LinkedOptionalMapSerializer``,
``AvroSerializerSnapshot``, ``DataOutputEncoder`` and ``KryoSerializerSnapshotData``. The TTL
wrapper, timers and PyFlink's byte-array wrapper are also checked on real snapshots
(test_flink_native.py); PyFlink's coders likewise.
"""

from __future__ import annotations

import json
import struct

import pytest

from statekit.flink.cursor import ByteCursor, encode_modified_utf8
from statekit.flink.decoding import decode_entry, flink_state_decoder
from statekit.flink.pyflink import parse_pyflink_type, value_type_options
from statekit.flink.serializers import FlinkTimer, TtlValue, flink_serializer
from statekit.flink.state_meta import (
    AVRO_SNAPSHOT,
    BYTE_ARRAY_WRAPPER_SNAPSHOT,
    OPTIONAL_MAP_HEADER,
    POJO_SNAPSHOT,
    read_keyed_backend_meta,
)
from statekit.statefmt.errors import BadInputError, CorruptStateError

BASE = "org.apache.flink.api.common.typeutils.base."
STRING = BASE + "StringSerializer$StringSerializerSnapshot"
LONG = BASE + "LongSerializer$LongSerializerSnapshot"
INT = BASE + "IntSerializer$IntSerializerSnapshot"
VOID = "org.apache.flink.runtime.state.VoidNamespaceSerializer$VoidNamespaceSerializerSnapshot"
KRYO = "org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializerSnapshot"
TTL = "org.apache.flink.runtime.state.ttl.TtlStateFactory$TtlSerializerSnapshot"
TIMER = "org.apache.flink.streaming.api.operators.TimerSerializerSnapshot"


def utf(text: str) -> bytes:
    raw = encode_modified_utf8(text)
    return struct.pack(">H", len(raw)) + raw


def simple(cls: str) -> bytes:
    return utf(cls) + struct.pack(">i", 3)


def composite(cls: str, *nested: bytes) -> bytes:
    """CompositeTypeSerializerSnapshot: magic, outer version, (no outer snapshot), nested snapshots."""
    return (utf(cls) + struct.pack(">iii", 3, 911108, 1) + struct.pack(">iii", 1333245, 1, len(nested))
            + b"".join(nested))


def optional_map(entries: list[tuple[str, bytes]]) -> bytes:
    out = struct.pack(">qi", OPTIONAL_MAP_HEADER, len(entries))
    for name, snapshot in entries:
        key = utf("com.acme.Reading") + utf(name)  # PojoFieldUtils.writeField: declaring class, name
        out += utf(name) + b"\x01" + struct.pack(">i", len(key)) + key + b"\x01"
        out += struct.pack(">i", len(snapshot)) + snapshot
    return out


def pojo(fields: list[tuple[str, bytes]], subclasses: list[tuple[str, bytes]] | None = None) -> bytes:
    return (utf(POJO_SNAPSHOT) + struct.pack(">i", 2) + utf("com.acme.Reading") + optional_map(fields)
            + optional_map(subclasses or []) + optional_map([]))


def header(value: bytes, *, kind: str = "VALUE", key: bytes = simple(STRING)) -> bytes:
    state = utf("s") + struct.pack(">i", 0) + struct.pack(">i", 1) + utf("KEYED_STATE_TYPE") + utf(kind)
    state += struct.pack(">i", 2) + utf("NAMESPACE_SERIALIZER") + struct.pack(">i", 2) + simple(VOID)
    state += utf("VALUE_SERIALIZER") + struct.pack(">i", 2) + value
    return struct.pack(">i?", 6, False) + struct.pack(">i", 2) + key + struct.pack(">h", 1) + state


def java_string(text: str) -> bytes:
    return bytes([len(text) + 1]) + text.encode("ascii")


def decode(meta_bytes: bytes, value: bytes, key: bytes = b"\x00" + java_string("k") + b"\x00") -> object:
    meta = read_keyed_backend_meta(meta_bytes, source="meta")
    assert meta.states[0].problem is None, meta.states[0].problem
    decoder = flink_state_decoder(meta, "s", source="meta")
    return decode_entry(decoder, 0, key, value, 1, "where", 0)


def test_pojo_fields_come_from_the_snapshot() -> None:
    meta = header(pojo([("id", simple(LONG)), ("label", simple(STRING))]))
    entry = decode(meta, b"\x02" + b"\x00" + struct.pack(">q", 7) + b"\x00" + java_string("seven"))
    assert entry.value == {"id": 7, "label": "seven"}  # type: ignore[attr-defined]
    entry = decode(meta, b"\x02" + b"\x01" + b"\x00" + java_string("no id"))
    assert entry.value == {"id": None, "label": "no id"}  # type: ignore[attr-defined]
    assert decode(meta, b"\x01").value is None  # type: ignore[attr-defined]  # a null POJO
    parsed = read_keyed_backend_meta(meta, source="meta")
    decoder = flink_state_decoder(parsed, "s", source="meta")
    assert decoder.value.spark_type == "struct<id:bigint,label:string>"
    with pytest.raises(BadInputError, match="subclass com.acme.Sub, whose serializer the snapshot does not record"):
        decode(meta, b"\x04" + utf("com.acme.Sub"))


def test_pojo_subclasses_decode_by_their_serializer_from_the_snapshot() -> None:
    """A registered subclass is written with its tag (flags 8), another one with its name (flags 4)."""
    sub = pojo([("id", simple(LONG)), ("weight", simple(LONG))])
    meta = header(pojo([("id", simple(LONG))], [("com.acme.Sub", sub)]))
    tagged = decode(meta, b"\x08\x00" + b"\x02" + b"\x00" + struct.pack(">q", 1) + b"\x00" + struct.pack(">q", 9))
    assert tagged.value == {"id": 1, "weight": 9, "_class": "com.acme.Sub"}  # type: ignore[attr-defined]
    exact = decode(meta, b"\x02" + b"\x00" + struct.pack(">q", 2))
    assert exact.value == {"id": 2, "weight": None, "_class": "com.acme.Reading"}  # type: ignore[attr-defined]
    with pytest.raises(CorruptStateError, match="subclass tag 3"):
        decode(meta, b"\x08\x03")


def test_avro_values_follow_the_schema_in_the_snapshot() -> None:
    schema = {"type": "record", "name": "Reading", "namespace": "com.acme", "fields": [
        {"name": "id", "type": "long"}, {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "note", "type": ["null", "string"]}, {"name": "kind", "type": {"type": "enum", "name": "Kind",
                                                                                "symbols": ["A", "B"]}},
        {"name": "attrs", "type": {"type": "map", "values": "int"}}]}
    avro = utf(AVRO_SNAPSHOT) + struct.pack(">i", 2) + utf("org.apache.avro.generic.GenericRecord") + utf(json.dumps(schema))
    value = struct.pack(">q", 5) + b"\x02" + struct.pack(">i", 1) + b"a" + struct.pack(">i", 1) + b"b" + b"\x00"
    value += struct.pack(">i", 1) + struct.pack(">i", 2) + b"hi" + struct.pack(">i", 1)
    value += b"\x01" + struct.pack(">i", 1) + b"x" + struct.pack(">i", 9) + b"\x00"
    entry = decode(header(avro), value)
    assert entry.value == {"id": 5, "tags": ["a", "b"], "note": "hi", "kind": "B", "attrs": {"x": 9}}  # type: ignore[attr-defined]
    decoder = flink_state_decoder(read_keyed_backend_meta(header(avro), source="m"), "s", source="m")
    assert decoder.value.spark_type == ("struct<id:bigint,tags:array<string>,note:string,kind:string,"
                                        "attrs:map<string,int>>")


def kryo_snapshot(type_class: str, registrations: list[str]) -> bytes:
    """``KryoSerializerSnapshot`` v2: the class, registrations (name, no key, a framed value), two empty maps."""
    out = utf(KRYO) + struct.pack(">i", 2) + utf(type_class) + struct.pack(">qi", OPTIONAL_MAP_HEADER, len(registrations))
    for name in registrations:
        out += utf(name) + b"\x00" + b"\x01" + struct.pack(">i", 3) + b"reg"
    return out + struct.pack(">qi", OPTIONAL_MAP_HEADER, 0) + struct.pack(">qi", OPTIONAL_MAP_HEADER, 0)


def test_kryo_is_refused_with_one_line_naming_the_class() -> None:
    meta = read_keyed_backend_meta(header(kryo_snapshot("com.acme.Opaque", ["com.acme.Opaque"])), source="meta")
    assert meta.states[0].problem is None
    with pytest.raises(BadInputError, match="com.acme.Opaque") as caught:
        flink_state_decoder(meta, "s", source="meta")
    assert "\n" not in str(caught.value) and "Kryo" in str(caught.value)


def test_kryo_declared_fields_decode_in_kryos_order() -> None:
    """FieldSerializer: fields sorted by name, ints and longs zig-zag varints, strings after a reference mark."""
    meta = read_keyed_backend_meta(header(kryo_snapshot("com.acme.Opaque", ["com.acme.Opaque"])), source="meta")
    decoder = flink_state_decoder(meta, "s", source="meta", value_type="struct<name:string,count:int>")
    value = bytes([85 + 2, 1]) + bytes([2 * 7]) + bytes([1]) + b"ab" + bytes([ord("c") | 0x80])
    entry = decode_entry(decoder, 0, b"\x00" + java_string("k") + b"\x00", value, 1, "where", 0)
    assert entry.value == {"count": 7, "name": "abc"}
    with pytest.raises(CorruptStateError, match="registration id 90"):
        decode_entry(decoder, 0, b"\x00" + java_string("k") + b"\x00", bytes([92, 1]), 1, "where", 0)


def test_ttl_timer_and_byte_array_wrapper() -> None:
    ttl = flink_serializer(read_keyed_backend_meta(header(composite(TTL, simple(LONG), simple(STRING))),
                                                   source="m").states[0].serializers[1].tree)
    assert ttl is not None and ttl.read(ByteCursor(struct.pack(">q", 9) + java_string("v"), source="t")) == \
        TtlValue(9, "v")
    entry = decode(header(composite(TTL, simple(LONG), simple(STRING))), struct.pack(">q", 12) + java_string("v"))
    assert (entry.value, entry.expiry) == ("v", 12)  # type: ignore[attr-defined]
    timer_meta = header(composite(TIMER, simple(STRING), simple(VOID)))
    meta = read_keyed_backend_meta(timer_meta.replace(utf("VALUE"), utf("VALUE")), source="m")
    timer = flink_serializer(meta.states[0].serializers[1].tree)
    assert timer is not None
    raw = struct.pack(">q", 1000 ^ -(1 << 63)) + java_string("k") + b"\x00"
    assert timer.read(ByteCursor(raw, source="t")) == FlinkTimer(1000, "k", None)
    negative = struct.pack(">q", -5 ^ -(1 << 63)) + java_string("k") + b"\x00"
    assert timer.read(ByteCursor(negative, source="t")).timestamp == -5
    wrapper = flink_serializer(read_keyed_backend_meta(header(simple(BYTE_ARRAY_WRAPPER_SNAPSHOT)),
                                                       source="m").states[0].serializers[1].tree)
    assert wrapper is not None and wrapper.read(ByteCursor(b"\x00\x00\x00\x02ab", source="t")) == b"ab"


@pytest.mark.parametrize("declared,data,value", [
    ("int", struct.pack(">q", -3), -3),
    ("int32", struct.pack(">i", 7), 7),
    ("int16", struct.pack(">h", -2), -2),
    ("int8", b"\xff", -1),
    ("float32", struct.pack(">f", 1.5), 1.5),
    ("double", struct.pack(">d", 2.25), 2.25),
    ("bool", b"\x01", True),
    ("string", b"\x00\x00\x00\x03h\xc3\xa9", "hé"),
    ("bytes", b"\x00\x00\x00\x02\x01\x02", b"\x01\x02"),
    ("timestamp", struct.pack(">q", 1700000000000), 1700000000000),
    ("list<int32>", b"\x00\x00\x00\x02\x01\x00\x00\x00\x05\x00", [5, None]),
    ("map<string,int>", b"\x00\x00\x00\x01\x00\x00\x00\x01a\x00" + struct.pack(">q", 4), {"a": 4}),
    ("struct<a:string,b:int32>", b"\x00\x00\x00\x00\x01x\x00\x00\x00\x02", {"a": "x", "b": 2}),
    ("struct<a:string,b:int32>", b"\x20\x00\x00\x00\x02", {"a": None, "b": 2}),  # 2 row-kind bits, then a null
])
def test_pyflink_coders(declared: str, data: bytes, value: object) -> None:
    assert parse_pyflink_type(declared).decode(data, "where") == value


def test_pyflink_type_errors() -> None:
    for text, message in [("int<", "unknown type|expected|ends early"), ("pickle", "never unpickled"),
                          ("struct<a:int,a:int>", "duplicate"), ("nope", "unknown type 'nope'")]:
        with pytest.raises(BadInputError, match=message):
            parse_pyflink_type(text)
    with pytest.raises(CorruptStateError, match="bytes left after a int32 value"):
        parse_pyflink_type("int32").decode(b"\x00" * 8, "where")
    assert value_type_options(("count=int", "names = list<string>"), None) == {
        "count": "int", "names": "list<string>"}
    assert value_type_options(("int",), "python-state-count") == {"python-state-count": "int"}
    with pytest.raises(BadInputError, match="given twice"):
        value_type_options(("a=int", "a=string"), None)
