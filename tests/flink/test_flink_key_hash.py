"""The Java ``hashCode`` of Flink keys, computed from their bytes (``statekit.flink.key_hash``).

The expected values were printed by a JVM (PyFlink 2.3's Flink classes, ``Row.hashCode``,
``Objects.hashCode``, ``KeyGroupRangeAssignment.assignToKeyGroup``; SQL rows built with
``BinaryRowWriter``, serialized by ``RowDataSerializer``, hashed by ``BinaryRowData.hashCode``);
the golden PyFlink and Flink SQL savepoints then check every real key against the key group
Flink stored it in.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekit.flink.key_hash import key_hasher, murmur_words, unhashable_class
from statekit.flink.keygroups import flink_murmur_hash, java_hash_code
from statekit.flink.logical_type import LogicalType
from statekit.flink.serializers import BYTES_CLASS, LIST_CLASS, MAP_CLASS, ROW_CLASS
from statekit.flink.sources import StreamSource, key_group_entries, keyed_sources, prefix_bytes
from statekit.flink.state_meta import BINARY_ROW_DATA_SNAPSHOT, ROW_DATA_SNAPSHOT, SerializerNode
from statekit.flink.storage import load_snapshot
from statekit.statefmt.errors import CorruptStateError

BASE = "org.apache.flink.api.common.typeutils.base."


def simple(name: str) -> SerializerNode:
    return SerializerNode(f"{BASE}{name}Serializer${name}SerializerSnapshot")


def row(*fields: SerializerNode) -> SerializerNode:
    return SerializerNode(ROW_CLASS, fields)


def varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def string(text: str) -> bytes:
    """``StringValue.writeString``: length + 1, then each UTF-16 code unit as a varint."""
    units = struct.unpack(f">{len(text.encode('utf-16-be', 'surrogatepass')) // 2}H",
                          text.encode("utf-16-be", "surrogatepass"))
    return varint(len(units) + 1) + b"".join(varint(u) for u in units)


def mask(kind: int = 0, nulls: tuple[bool, ...] = (False,)) -> bytes:
    bits = [bool(kind & 1), bool(kind & 2), *nulls]
    size = (len(bits) + 7) // 8
    value = sum(1 << (size * 8 - 1 - i) for i, bit in enumerate(bits) if bit)
    return value.to_bytes(size, "big")


def java_hash(node: SerializerNode, data: bytes) -> int:
    hasher = key_hasher(node)
    assert hasher is not None
    h, end = hasher.java_hash(data, 0, where="test")
    assert end == len(data)
    return h - (1 << 32) if h >= 1 << 31 else h


JVM_ROWS: list[tuple[str, SerializerNode, bytes, int]] = [
    ("Row(\"key-1\")", row(simple("String")), mask() + string("key-1"), 101943425),
    ("Row(5L, \"x\")", row(simple("Long"), simple("String")),
     mask(nulls=(False, False)) + struct.pack(">q", 5) + string("x"), 2228),
    ("Row(null)", row(simple("String")), mask(nulls=(True,)), 31),
    ("Row(Row(7))", row(row(simple("Int"))), mask() + mask() + struct.pack(">i", 7), 131),
    ("Row(UPDATE_AFTER, \"a\")", row(simple("String")), mask(kind=2) + string("a"), 221),
    ("Row([3, 4])", row(SerializerNode(LIST_CLASS, (simple("Int"),))),
     mask() + struct.pack(">iii", 2, 3, 4), 2081),
    ("Row(byte[]{1, -1})", row(SerializerNode(BYTES_CLASS)), mask() + struct.pack(">i", 2) + b"\x01\xff", 1053),
    ("Row(1.5)", row(simple("Double")), mask() + struct.pack(">d", 1.5), 1073217598),
    ("Row(true)", row(simple("Boolean")), mask() + b"\x01", 1293),
    ("Row(\"a\", \"b\")", row(simple("String"), simple("String")), mask(nulls=(False, False)) + string("a")
     + string("b"), 5058),
    ("Row({k: 9L, z: null})", row(SerializerNode(MAP_CLASS, (simple("String"), simple("Long")))),
     mask() + struct.pack(">i", 2) + string("k") + b"\x00" + struct.pack(">q", 9) + string("z") + b"\x01", 347),
]
JVM_SCALARS: list[tuple[str, SerializerNode, bytes, int]] = [
    ("\"héllo €𝄞\"", simple("String"), string("héllo €𝄞"), -672415804),
    ("-5L", simple("Long"), struct.pack(">q", -5), 4),
    ("5000000000L", simple("Long"), struct.pack(">q", 5000000000), 705032705),
    ("-0.0", simple("Double"), struct.pack(">d", -0.0), -2147483648),
    ("NaN", simple("Double"), struct.pack(">Q", 0x7FF0000000000001), 2146959360),  # any NaN hashes as the canonical one
    ("'x'", simple("Char"), struct.pack(">H", ord("x")), 120),
    # by the Java spec (floatToIntBits; Short/Byte.hashCode is the value), not printed by the JVM
    ("1.5f", simple("Float"), struct.pack(">f", 1.5), 0x3FC00000),
    ("(short) -3", simple("Short"), struct.pack(">h", -3), -3),
    ("(byte) -1", simple("Byte"), b"\xff", -1),
]


@pytest.mark.parametrize(("what", "node", "data", "expected"), JVM_ROWS + JVM_SCALARS,
                         ids=[case[0] for case in JVM_ROWS + JVM_SCALARS])
def test_hash_codes_equal_the_jvms(what: str, node: SerializerNode, data: bytes, expected: int) -> None:
    assert java_hash(node, data) == expected


def test_key_group_of_a_pyflink_string_key_equals_flinks_assignment() -> None:
    hasher = key_hasher(row(simple("String")))
    assert hasher is not None
    assert hasher.key_group(mask() + string("key-1"), 0, 1024, where="test") == 820  # assignToKeyGroup, JVM


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.integers(-(1 << 63), (1 << 63) - 1), st.integers(-(1 << 31), (1 << 31) - 1))
def test_scalars_hash_like_java_hash_code_of_their_values(text: str, long: int, integer: int) -> None:
    assert java_hash(simple("String"), string(text)) == java_hash_code(text, "string")
    assert java_hash(simple("Long"), struct.pack(">q", long)) == java_hash_code(long, "long")
    assert java_hash(simple("Int"), struct.pack(">i", integer)) == java_hash_code(integer, "int")
    # a PyFlink key: Row(value) hashes to 31 * 0 + 31 * 1 + (31 + hashCode)
    expected = (62 + java_hash_code(text, "string")) & 0xFFFFFFFF
    assert java_hash(row(simple("String")), mask() + string(text)) & 0xFFFFFFFF == expected


def test_unsupported_keys_have_no_hasher_and_name_the_class() -> None:
    pojo = SerializerNode("org.apache.flink.api.java.typeutils.runtime.PojoSerializerSnapshot")
    assert key_hasher(pojo) is None and unhashable_class(pojo) == pojo.snapshot_class
    assert key_hasher(row(simple("String"), pojo)) is None
    assert unhashable_class(row(simple("String"), pojo)) == pojo.snapshot_class
    listed = SerializerNode(LIST_CLASS, (simple("Int"),))
    assert key_hasher(listed) is None and unhashable_class(listed) == LIST_CLASS  # not a Flink key type
    assert key_hasher(None) is None and unhashable_class(None) == "<unknown>"


@pytest.mark.parametrize("data", [b"", b"\x00", mask() + b"\x07ab", mask() + b"\x80\x80\x80\x80\x80\x80"])
def test_truncated_keys_are_corrupt_state_naming_where(data: bytes) -> None:
    hasher = key_hasher(row(simple("String")))
    assert hasher is not None
    with pytest.raises(CorruptStateError, match=r"^somewhere: "):
        hasher.java_hash(data, 0, where="somewhere")


@pytest.mark.parametrize("name", ["pyflink-2.3/hashmap", "pyflink-2.3/rocksdb", "pyflink-1.20/rocksdb"])
def test_every_key_of_real_savepoints_hashes_to_the_key_group_flink_stored_it_in(
        pyflink_jobs: dict[str, Any], name: str) -> None:
    snapshot = load_snapshot(str(pyflink_jobs[name].savepoint("canonical")))
    checked = 0
    for op in snapshot.metadata.operators:
        if not any(sub.managed_keyed_state for sub in op.subtasks):
            continue
        prefix = prefix_bytes(op.max_parallelism)
        for source in keyed_sources(snapshot, op):
            assert isinstance(source, StreamSource) and source.meta.key_serializer is not None
            hasher = key_hasher(source.meta.key_serializer.tree)
            assert hasher is not None and hasher.name in ("Row<String>", "Row<Integer>")
            kinds = {state.name: state.kind for state in source.meta.states}
            names = tuple(kinds)
            for key_group, offset, data in source.key_groups(snapshot):
                for state, key, _, _ in key_group_entries(data, key_group, names, prefix, source.source, offset):
                    start = prefix + (8 if kinds[state] == "timers" else 0)
                    code = hasher.java_hash(key, start, where=source.source)[0]
                    assert flink_murmur_hash(code) % op.max_parallelism == key_group
                    checked += 1
    assert checked > 10000


# ----------------------------------------------------------------------------- Flink SQL's BinaryRowData keys

SQL_GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "flink-sql-2.3"


SQL_TYPES = {"VARCHAR": LogicalType("VARCHAR", precision=2147483647), "DECIMAL": LogicalType("DECIMAL", precision=38, scale=2),
             "TIMESTAMP_WITHOUT_TIME_ZONE": LogicalType("TIMESTAMP_WITHOUT_TIME_ZONE", precision=9)}


def row_data(*roots: str) -> SerializerNode:
    return SerializerNode(ROW_DATA_SNAPSHOT, logical_types=tuple(SQL_TYPES.get(root, LogicalType(root)) for root in roots))


def signed(code: int) -> int:
    return code - (1 << 32) if code >= 1 << 31 else code


# (row, field types, RowDataSerializer bytes, BinaryRowData.hashCode, assignToKeyGroup at 128 and at 100), by a JVM
JVM_SQL_ROWS: list[tuple[str, tuple[str, ...], str, int, int, int]] = [
    ("STRING u7", ("VARCHAR",), "0000001000000000000000007537000000000082", -1467618142, 105, 65),
    ("STRING a-rather-long-key", ("VARCHAR",),
     "0000002800000000000000001100000010000000612d7261746865722d6c6f6e672d6b657900000000000000", -1997020676, 13, 41),
    ("INT 3, BOOLEAN true", ("INTEGER", "BOOLEAN"), "00000018000000000000000003000000000000000100000000000000",
     -1487935460, 112, 0),
    ("BIGINT -5", ("BIGINT",), "000000100000000000000000fbffffffffffffff", -716660054, 77, 37),
    ("INT null, STRING x", ("INTEGER", "VARCHAR"), "00000018000100000000000000000000000000007800000000000081",
     398608515, 6, 6),
    ("no fields", (), "000000080000000000000000", -1670924195, 11, 15),
    ("INT 2, INT 4, STRING u49", ("INTEGER", "INTEGER", "VARCHAR"),
     "000000200000000000000000020000000000000004000000000000007534390000000083", 484983217, 79, 31),
    ("DECIMAL(38, 2) 12345678901234567890.12", ("DECIMAL",),
     "000000200000000000000000090000001000000042ed123b0bd8203a1400000000000000", 881144972, 34, 66),
    ("TIMESTAMP(9)", ("TIMESTAMP_WITHOUT_TIME_ZONE",), "00000018000000000000000055f80600100000007b68e5cf8b010000",
     -71831406, 11, 23),
]


@pytest.mark.parametrize(("what", "roots", "data", "expected", "kg128", "kg100"), JVM_SQL_ROWS,
                         ids=[case[0] for case in JVM_SQL_ROWS])
def test_binary_row_hash_codes_and_key_groups_equal_the_jvms(what: str, roots: tuple[str, ...], data: str,
                                                             expected: int, kg128: int, kg100: int) -> None:
    key = bytes.fromhex(data)
    for node in (row_data(*roots), SerializerNode(BINARY_ROW_DATA_SNAPSHOT, text=str(len(roots)))):
        hasher = key_hasher(node)
        assert hasher is not None and hasher.row_arity == len(roots)
        code, end = hasher.java_hash(b"\x07" + key + b"\x00\x01", 1, where="test")  # a prefix and a namespace around
        assert (signed(code), end) == (expected, 1 + len(key))
        assert hasher.key_group(key, 0, 128, where="test") == kg128
        assert hasher.key_group(key, 0, 100, where="test") == kg100
    assert key_hasher(row_data("VARCHAR", "INTEGER")) is not None
    assert key_hasher(row_data("INTEGER")).name == "RowData<INT>"  # type: ignore[union-attr]


@settings(max_examples=300, deadline=None)
@given(st.integers(-(1 << 31), (1 << 31) - 1))
def test_the_word_hash_of_one_int_with_seed_0_is_flinks_murmur_hash(code: int) -> None:
    """``MathUtils.murmurHash(code)`` is murmur3_32 (seed 0) of the int's 4 little-endian bytes, made
    non-negative: the same mixing as ``hashBytesByWords``, checked against an independent implementation."""
    h = signed(murmur_words(struct.pack("<i", code), 0, 4, seed=0))
    assert (0 if h == -(1 << 31) else abs(h)) == flink_murmur_hash(code)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=120).map(lambda b: b[:len(b) // 4 * 4]), st.integers(0, 7))
def test_the_word_hash_reads_only_its_words(words: bytes, skip: int) -> None:
    """The hash of a slice depends on nothing around it, and the length is mixed in (zero words differ)."""
    assert murmur_words(b"\xff" * skip + words + b"\xee", skip, len(words)) == murmur_words(words, 0, len(words))
    assert murmur_words(words + bytes(4), 0, len(words) + 4) != murmur_words(words, 0, len(words))


@pytest.mark.parametrize("data", ["00000010000000000000000075370000000000",  # cut short
                                  "0000000c000000000000000075370000",  # 12 bytes: no room for the field
                                  "0000000e0000000000000000753700000000",  # 14: not whole words
                                  "ffffffff"])
def test_damaged_binary_rows_are_corrupt_state_naming_where(data: str) -> None:
    hasher = key_hasher(row_data("VARCHAR"))
    assert hasher is not None
    with pytest.raises(CorruptStateError, match=r"^somewhere: .*RowData<STRING>"):
        hasher.java_hash(bytes.fromhex(data), 0, where="somewhere")


def sql_snapshot(variant: str, kind: str) -> Path:
    facts = json.loads((SQL_GOLDEN / variant / "facts.json").read_text())
    return SQL_GOLDEN / variant / facts["savepoints"][kind]


@pytest.mark.parametrize(("variant", "kind"), [("hashmap", "canonical"), ("rocksdb", "canonical"),
                                               ("rocksdb", "native"), ("hashmap-ttl", "canonical")])
def test_every_key_of_real_sql_savepoints_hashes_to_the_key_group_flink_stored_it_in(variant: str,
                                                                                   kind: str) -> None:
    """Every entry (group accumulators and the distinct values' map entries) of the Flink SQL job's
    four GroupAggregates, in the savepoint's stream or RocksDB files; and a hash with another seed
    puts almost every key elsewhere (the check can fail)."""
    snapshot = load_snapshot(str(sql_snapshot(variant, kind)))
    checked, wrong_seed_agrees, types = 0, 0, set()
    for op in snapshot.metadata.operators:
        if not any(sub.managed_keyed_state for sub in op.subtasks):
            continue
        prefix = prefix_bytes(op.max_parallelism)
        for source in keyed_sources(snapshot, op):
            assert source.meta.key_serializer is not None
            hasher = key_hasher(source.meta.key_serializer.tree)
            assert hasher is not None and hasher.row_arity is not None
            types.add(hasher.name)
            for state in source.meta.states:
                for key_group, key, _, where in source.entries(snapshot, state.name, prefix, None):
                    code, end = hasher.java_hash(key, prefix, where=where)
                    assert flink_murmur_hash(code) % op.max_parallelism == key_group, where
                    other = murmur_words(key, prefix + 4, end - prefix - 4, seed=0)
                    wrong_seed_agrees += flink_murmur_hash(other) % op.max_parallelism == key_group
                    checked += 1
    assert types == {"RowData<STRING NOT NULL>", "RowData<INT NOT NULL, BOOLEAN NOT NULL>",
                     "RowData<INT NOT NULL, INT NOT NULL, STRING NOT NULL>", "RowData<INT NOT NULL>"}
    assert checked == 1271  # 50 + 14 + 150 + 7 accumulators, 350 + 700 distinct values
    assert wrong_seed_agrees < checked // 20
