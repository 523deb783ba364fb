"""The Java ``hashCode`` of Flink keys, computed from their bytes (``statekit.flink.key_hash``).

The expected values were printed by a JVM (PyFlink 2.3's Flink classes, ``Row.hashCode``,
``Objects.hashCode``, ``KeyGroupRangeAssignment.assignToKeyGroup``); the golden PyFlink
savepoints then check every real key against the key group Flink stored it in.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekit.flink.key_hash import key_hasher, unhashable_class
from statekit.flink.keygroups import flink_murmur_hash, java_hash_code
from statekit.flink.serializers import BYTES_CLASS, LIST_CLASS, MAP_CLASS, ROW_CLASS
from statekit.flink.sources import StreamSource, key_group_entries, keyed_sources, prefix_bytes
from statekit.flink.state_meta import SerializerNode
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
