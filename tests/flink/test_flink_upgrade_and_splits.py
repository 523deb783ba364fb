"""``check --target-flink``, source splits (Kafka golden bytes), Snappy framing and Java value layouts."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.flink.compression import STREAM_IDENTIFIER, compress_framed, decompress_framed
from statekit.flink.cursor import ByteCursor, encode_modified_utf8
from statekit.flink.java_types import decimal_text, java_serializer
from statekit.flink.serializers import flink_serializer
from statekit.flink.source_splits import decode_split
from statekit.flink.state_meta import (
    ENUM_SNAPSHOT,
    KRYO_SNAPSHOTS,
    SCALA_CASE_CLASS_SNAPSHOT,
    FlinkStateMeta,
    SerializerInfo,
    SerializerNode,
)
from statekit.flink.upgrade import LEGACY_OPERATOR_STATES, _state_findings
from statekit.statefmt.errors import CorruptStateError

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
KRYO = next(iter(sorted(KRYO_SNAPSHOTS)))
_BASE = "org.apache.flink.api.common.typeutils.base."


def utf(text: str) -> bytes:
    raw = encode_modified_utf8(text)
    return struct.pack(">H", len(raw)) + raw


# ----------------------------------------------------------------------------- check --target-flink


def _state(*nodes: SerializerNode, problem: str | None = None) -> FlinkStateMeta:
    return FlinkStateMeta("s", "value", "key-value", {}, tuple(SerializerInfo("VALUE_SERIALIZER", n.snapshot_class,
                                                                              (), n) for n in nodes), problem)


def test_kryo_inside_a_pojo_of_a_flink_1_snapshot_is_named() -> None:
    kryo = SerializerNode(KRYO, text="com.acme.Opaque")
    pojo = SerializerNode("org.apache.flink.api.java.typeutils.runtime.PojoSerializerSnapshot",
                          (SerializerNode(_BASE + "LongSerializer$LongSerializerSnapshot"), kryo), ("id", "blob"),
                          "com.acme.Event")
    (finding,) = _state_findings("op", _state(pojo), flink1=True)
    assert finding.kind == "kryo2" and "com.acme.Opaque" in finding.reason and finding.blocking
    assert "Kryo 5" in finding.reason and finding.way_out
    assert _state_findings("op", _state(pojo), flink1=False) == []  # Flink 2 wrote it with Kryo 5


def test_scala_and_legacy_snapshots_are_named() -> None:
    scala = SerializerNode(SCALA_CASE_CLASS_SNAPSHOT, text="com.acme.Point")
    (finding,) = _state_findings("op", _state(scala), flink1=True)
    assert finding.kind == "scala" and SCALA_CASE_CLASS_SNAPSHOT in finding.reason
    legacy = SerializerNode("com.acme.MySerializer$MyConfigSnapshot")
    (finding,) = _state_findings("op", _state(legacy), flink1=False)
    assert finding.kind == "legacy-snapshot" and "1.19 or 1.20" in finding.way_out
    (finding,) = _state_findings("op", _state(problem="cannot skip serializer snapshot com.x.Y"), flink1=False)
    assert finding.kind == "unknown" and not finding.blocking


def test_legacy_connector_states_have_a_way_out() -> None:
    assert "KafkaSource" in LEGACY_OPERATOR_STATES["topic-partition-offset-states"][1]
    assert "FileSink" in LEGACY_OPERATOR_STATES["bucket-states"][1]


@pytest.mark.parametrize("path", [
    "flink-java-2.3/kryo/savepoints/savepoint-0666bd-53ddf97175a2",  # Kryo 5 state of Flink 2.3: restores
    "pyflink-1.20/rocksdb/savepoints/savepoint-4a37e5-754b98d40435",  # Flink 1.20, no Kryo: restores
])
def test_real_snapshots_that_restore_on_flink_2(path: str) -> None:
    result = CliRunner().invoke(cli, ["check", "--target-flink", "2.3", "--json", str(GOLDEN / path)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["compatible"] is True and report["findings"] == [] and report["states_checked"] > 5


def test_target_before_flink_2_is_bad_input() -> None:
    path = GOLDEN / "flink-java-2.3/kryo/savepoints/savepoint-0666bd-53ddf97175a2"
    result = CliRunner().invoke(cli, ["check", "--target-flink", "1.20", str(path)])
    assert result.exit_code == 2 and "Flink 2 release" in result.output


# ----------------------------------------------------------------------------- source splits


def test_kafka_split_from_the_connectors_serializer_test() -> None:
    """KafkaPartitionSplitSerializerTest: topic "topic", partition 1, starting offset 0, each stopping offset."""
    for stopping, expected in ((-3, -3), (0, 0), (1, 1), (-(1 << 63), None)):
        payload = utf("topic") + struct.pack(">iqq", 1, 0, stopping)  # KafkaPartitionSplitSerializer v0
        split = decode_split(0, payload, source="test")
        assert split == {"connector": "kafka", "split_id": "topic-1", "topic": "topic", "partition": 1,
                         "starting_offset": 0, "stopping_offset": expected}


def test_a_split_that_fits_no_shape_is_unknown_not_guessed() -> None:
    assert decode_split(0, utf("topic") + b"\x00", source="t")["connector"] == "unknown"
    assert decode_split(7, b"", source="t")["connector"] == "unknown"
    number = utf("1") + struct.pack(">qq", 5, 9)
    assert decode_split(1, number, source="t") == {"connector": "number-sequence", "split_id": "1",
                                                   "next_number": 5, "last_number": 9}


# ----------------------------------------------------------------------------- Snappy framing


def test_framed_round_trip_and_damage() -> None:
    data = b"state " * 1000
    framed = compress_framed(data)
    assert framed.startswith(STREAM_IDENTIFIER)
    assert decompress_framed(framed + framed, source="s", what="kg") == data + data  # one stream per heap state
    broken = bytearray(framed)
    broken[-1] ^= 0xFF
    with pytest.raises(CorruptStateError, match="key group 7"):
        decompress_framed(bytes(broken), source="s", what="key group 7")
    with pytest.raises(CorruptStateError, match="stream identifier"):
        decompress_framed(data[:20], source="s", what="key group 7")


# ----------------------------------------------------------------------------- Java value layouts


def _read(node: SerializerNode, data: bytes) -> object:
    serializer = java_serializer(node, flink_serializer)
    assert serializer is not None
    cur = ByteCursor(data, source="t", error=CorruptStateError)
    value = serializer.read(cur)
    assert not cur.remaining
    return value


def test_enum_big_decimal_and_time_values() -> None:
    color = SerializerNode(ENUM_SNAPSHOT, names=("RED", "GREEN"), text="com.acme.Color")
    assert _read(color, struct.pack(">i", 1)) == "GREEN"
    with pytest.raises(CorruptStateError, match="ordinal 2"):
        _read(color, struct.pack(">i", 2))
    big = SerializerNode(_BASE + "BigDecSerializer$BigDecSerializerSnapshot")
    assert _read(big, struct.pack(">i", 6) + (-12345).to_bytes(2, "big", signed=True) + struct.pack(">i", 3)) \
        == "-12.345"
    assert _read(big, struct.pack(">i", 0)) is None
    assert decimal_text(5, -2) == "500"
    date = SerializerNode(_BASE + "LocalDateSerializer$LocalDateSerializerSnapshot")
    assert str(_read(date, struct.pack(">ibb", 2024, 2, 29))) == "2024-02-29"
    assert _read(date, struct.pack(">ibb", -(1 << 31), 0, 0)) is None
    time = SerializerNode(_BASE + "LocalTimeSerializer$LocalTimeSerializerSnapshot")
    assert _read(time, struct.pack(">bbbi", 13, 5, 7, 500_000_000)) == "13:05:07.5"


def test_avro_logical_types_unions_and_named_references_through_fastavro() -> None:
    from statekit.flink.avro import avro_serializer

    schema = {"type": "record", "name": "Event", "namespace": "com.acme", "fields": [
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "either", "type": ["null", "int", "string"]},
        {"name": "next", "type": ["null", {"type": "record", "name": "Link", "fields": [
            {"name": "id", "type": "long"}]}]},
        {"name": "again", "type": ["null", "Link"]}]}
    serializer = avro_serializer(json.dumps(schema))
    assert serializer.spark_type == ("struct<at:timestamp,day:date,price:string,either:struct<int:int,string:string>,"
                                     "next:struct<id:bigint>,again:struct<id:bigint>>")
    price = (12345).to_bytes(2, "big")
    value = (struct.pack(">q", 1700000000123) + struct.pack(">i", 19000) + struct.pack(">i", 2) + price
             + struct.pack(">i", 2) + struct.pack(">i", 2) + b"hi"  # either: branch 2, a string
             + struct.pack(">i", 1) + struct.pack(">q", 7)  # next: a Link
             + struct.pack(">i", 0))  # again: null
    cur = ByteCursor(value, source="t", error=CorruptStateError)
    assert serializer.read(cur) == {"at": 1700000000123, "day": __import__("datetime").date(2022, 1, 8),
                                    "price": "123.45", "either": {"int": None, "string": "hi"},
                                    "next": {"id": 7}, "again": None}
    assert not cur.remaining
    with pytest.raises(CorruptStateError, match="union branch 5"):
        serializer.read(ByteCursor(value[:12] + struct.pack(">i", 2) + price + struct.pack(">i", 5), source="t",
                                   error=CorruptStateError))
    assert avro_serializer("{not json") is None


def test_scala_case_class_fields_in_order() -> None:
    """``ScalaCaseClassSerializerSnapshot`` (Flink 1.x): outer snapshot = the class name; fields without null flags."""
    from statekit.flink.state_meta import read_keyed_backend_meta

    nested = struct.pack(">ii", 1333245, 1) + struct.pack(">i", 2)
    nested += utf(_BASE + "StringSerializer$StringSerializerSnapshot") + struct.pack(">i", 3)
    nested += utf(_BASE + "IntSerializer$IntSerializerSnapshot") + struct.pack(">i", 3)
    case = utf(SCALA_CASE_CLASS_SNAPSHOT) + struct.pack(">iii", 3, 911108, 1) + utf("com.acme.Point") + nested
    state = utf("s") + struct.pack(">ii", 0, 1) + utf("KEYED_STATE_TYPE") + utf("VALUE") + struct.pack(">i", 1)
    state += utf("VALUE_SERIALIZER") + struct.pack(">i", 2) + case
    key = utf(_BASE + "StringSerializer$StringSerializerSnapshot") + struct.pack(">i", 3)
    meta = read_keyed_backend_meta(struct.pack(">i?i", 6, False, 2) + key + struct.pack(">h", 1) + state,
                                   source="m")
    node = meta.states[0].serializers[0].tree
    assert node is not None and node.text == "com.acme.Point"
    point = flink_serializer(node)
    assert point is not None and point.spark_type == "struct<f0:string,f1:int>"
    assert point.read(ByteCursor(b"\x03ab" + struct.pack(">i", 7), source="t")) == {"f0": "ab", "f1": 7}


def test_kryo_strings_ascii_utf8_and_null() -> None:
    from statekit.flink.kryo import read_kryo_string

    def read(data: bytes) -> object:
        return read_kryo_string(ByteCursor(data, source="t", error=CorruptStateError))

    assert read(b"ab" + bytes([ord("c") | 0x80])) == "abc"
    assert read(b"\x80") is None and read(b"\x81") == ""
    text = "Grüße"
    assert read(bytes([0x80 | (len(text) + 1)]) + text.encode("utf-8")) == text


def test_kafka_offsets_of_a_savepoint_without_kafka_is_empty() -> None:
    from statekit.flink.source_splits import savepoint_get_kafka_offsets

    path = GOLDEN / "flink-java-2.3/tuple/savepoints/savepoint-e453ed-5f89df1201ba"
    assert savepoint_get_kafka_offsets(str(path)) == {}
