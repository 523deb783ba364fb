"""Entries: Python rows <-> Arrow batches, grouping by key group, sorting, last write wins."""

from __future__ import annotations

import re
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekit.statefmt.entries import KeyedColumns, KeyedStateEntry, MapStateEntry, StateCodec, group_by_key_group
from statekit.statefmt.errors import BadInputError, SerializationError, UntrustedSerializerError
from statekit.statefmt.keygroups import assign_to_key_group
from statekit.statefmt.metadata import StateDescriptor, StateKind

VALUE = StateDescriptor("v", StateKind.VALUE, value_type="int")
MAP = StateDescriptor("m", StateKind.MAP, user_key_serializer="utf8", user_key_type="string")
LIST = StateDescriptor("l", StateKind.LIST, value_type="string")


def codec(descriptor: StateDescriptor, key_serializer: str | None = "msgpack", **kw: Any) -> StateCodec:
    return StateCodec(descriptor, key_serializer, **kw)


def decode_all(c: StateCodec, rows: list[Any], max_parallelism: int = 16) -> list[Any]:
    table = c.encode_keyed_rows(rows)
    return [e for _, batch in group_by_key_group(table, max_parallelism) for e in c.decode_keyed_batch(batch)]


def test_row_shapes() -> None:
    c = codec(StateDescriptor("r", StateKind.REDUCING))
    rows = [("a", 1), ("b", "w", 2), KeyedStateEntry("c", None, 3, 99), KeyedStateEntry("d", ("w", 1), 4)]
    decoded = sorted(decode_all(c, rows), key=lambda e: e.key)
    assert decoded == [
        KeyedStateEntry("a", None, 1, None), KeyedStateEntry("b", "w", 2, None),
        KeyedStateEntry("c", None, 3, 99), KeyedStateEntry("d", ["w", 1], 4, None),
    ]
    m = codec(MAP)
    rows_m = [("a", "x", 1), ("a", "ns", "y", 2), MapStateEntry("b", "z", 3, None, 5)]
    assert sorted(decode_all(m, rows_m)) == [
        MapStateEntry("a", "x", 1, None, None), MapStateEntry("a", "y", 2, "ns", None), MapStateEntry("b", "z", 3, None, 5),
    ]


@pytest.mark.parametrize(
    ("descriptor", "row", "cause"),
    [
        (VALUE, ("a",), "rows must be (key, value) or (key, namespace, value), got 1 fields"),
        (VALUE, ("a", 1, 2, 3), "got 4 fields"),
        (MAP, ("a", 1), "rows must be (key, user_key, value), got 2 fields"),
        (VALUE, 5, "a row must be a tuple, got int"),
    ],
)
def test_bad_row_shapes(descriptor: StateDescriptor, row: Any, cause: str) -> None:
    with pytest.raises(BadInputError, match=re.escape(cause)):
        codec(descriptor).encode_keyed_rows([("ok", 1), row] if descriptor is VALUE else [row])


def test_declared_types_are_checked_on_write() -> None:
    with pytest.raises(SerializationError, match="state 'v': a value does not match the declared type: expected int, got str"):
        codec(VALUE).encode_keyed_rows([("a", 1), ("b", "x")])
    with pytest.raises(SerializationError, match="a user key does not match"):
        codec(MAP).encode_keyed_rows([("a", 5, 1)])
    with pytest.raises(SerializationError, match="list state 'l' needs a list per key, got str"):
        codec(LIST).encode_keyed_rows([("a", "not a list")])
    with pytest.raises(SerializationError, match="value 3 does not match the declared type"):
        codec(LIST).encode_keyed_rows([("a", ["x", 3])])
    with pytest.raises(SerializationError, match="cannot serialize key"):
        codec(VALUE, "int64").encode_keyed_rows([("not an int", 1)])


@pytest.mark.parametrize("version", [1, 2])
def test_entries_are_grouped_and_sorted_in_the_order_of_the_version(version: int) -> None:
    """Version 1 sorts a key group by key bytes, version 2 by (key hash, key bytes)."""
    c = codec(StateDescriptor("v", StateKind.VALUE), "utf8")
    keys = [f"k{i}" for i in range(200)]
    table = c.encode_keyed_rows([(k, i) for i, k in enumerate(reversed(keys))], version=version)
    seen: list[str] = []
    previous_group = -1
    for key_group, batch in group_by_key_group(table, 8, version=version):
        assert key_group > previous_group
        previous_group = key_group
        key_bytes = batch.column("key").to_pylist()
        hashes = [assign_to_key_group(k, 2**32) for k in key_bytes]
        assert batch.column("key_hash").to_pylist() == hashes
        order = key_bytes if version == 1 else list(zip(hashes, key_bytes))
        assert order == sorted(order)
        assert all(assign_to_key_group(k, 8) == key_group for k in key_bytes)
        seen += [k.decode() for k in key_bytes]
    assert sorted(seen) == sorted(keys)


NESTED = "list<struct<a:int,b:string,c:map<string,bool>>>"


def nested_value(i: int) -> Any:
    return [{"a": i if i % 3 else None, "b": "x" * (i % 5), "c": {"k": bool(i % 2)}}, None][: 1 + i % 2]


@pytest.mark.parametrize("compression", ["none", "zstd"])
@pytest.mark.parametrize(("declared", "value"), [("string", lambda i: "v" * (i % 7)), ("int", lambda i: i if i % 4 else None),
                                                  (NESTED, nested_value), (None, lambda i: {"any": i})])
def test_a_version_2_block_s_bytes_depend_only_on_its_entries(compression: str, declared: str | None, value: Any) -> None:
    """Equal key groups of two different tables encode to equal bytes (diff skips them by
    checksum): no byte of a block comes from other rows around it in the table or from
    memory under a null (version 1 blocks do carry some: their bytes are frozen by the v1
    golden files)."""
    from statekit.statefmt.encoding import BlockCodec, WriteFormat
    from statekit.statefmt.statefile import layout

    c = codec(StateDescriptor("v", StateKind.VALUE, value_type=declared))
    rows = [(f"k{i}", value(i)) for i in range(300)]
    others = [(k, value(7)) for k in (f"other{i}" for i in range(3000)) if assign_to_key_group(msgpack.packb(k), 16) % 2]
    blocks = []
    for table in (c.encode_keyed_rows(rows, version=2), c.encode_keyed_rows(rows[::-1] + others, version=2)):
        codec_ = BlockCodec.for_writing(layout.FILE_KIND_KEYED, table.schema, WriteFormat(2, compression))
        blocks.append({kg: codec_.encode(b) for kg, b in group_by_key_group(table, 16, version=2)})
    shared = {kg for kg in blocks[0] if blocks[0][kg] == blocks[1].get(kg)}
    assert shared == set(range(0, 16, 2))


def test_last_write_wins_on_duplicate_entries() -> None:
    rows = [("a", 1), ("b", 2), ("a", 3), ("a", "ns", 4), ("a", "ns", 5)]
    decoded = decode_all(codec(StateDescriptor("v", StateKind.VALUE)), rows)
    assert sorted((e.key, e.namespace or "", e.value) for e in decoded) == [("a", "", 3), ("a", "ns", 5), ("b", "", 2)]
    map_rows = [("a", "x", 1), ("a", "x", 2), ("a", "y", 3)]
    assert sorted(e.value for e in decode_all(codec(MAP), map_rows)) == [2, 3]


def test_void_namespace_is_empty_bytes() -> None:
    c = codec(StateDescriptor("v", StateKind.VALUE))
    table = c.encode_keyed_rows([("a", 1), ("b", "w", 2)])
    assert sorted(table.column("namespace").to_pylist()) == [b"", msgpack.packb("w")]
    assert c.decode_namespace(b"") is None


def test_pickle_codec_needs_trust_to_read_but_not_to_write() -> None:
    descriptor = StateDescriptor("p", StateKind.VALUE, value_serializer="pickle")
    writer = codec(descriptor, for_write=True)
    table = writer.encode_keyed_rows([("a", {1, 2})])
    with pytest.raises(UntrustedSerializerError):
        codec(descriptor)
    trusted = codec(descriptor, trust_pickle=True)
    [(_, batch)] = list(group_by_key_group(table, 4))
    assert list(trusted.decode_keyed_batch(batch)) == [KeyedStateEntry("a", None, {1, 2}, None)]


def test_operator_elements() -> None:
    union = codec(StateDescriptor("u", StateKind.UNION), None)
    assert union.decode_operator_batch(union.encode_operator_elements([3, 1, 2])) == [3, 1, 2]
    broadcast = codec(StateDescriptor("b", StateKind.BROADCAST, user_key_serializer="utf8"), None)
    batch = broadcast.encode_operator_elements({"z": 1, "a": [2]})
    assert batch.column("key").to_pylist() == [b"a", b"z"]
    assert broadcast.decode_operator_batch(batch) == [("a", [2]), ("z", 1)]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=4), st.one_of(st.none(), st.integers(0, 3)), st.integers(-(2**63), 2**63 - 1)), max_size=40),
       st.integers(1, 64))
def test_grouping_keeps_one_entry_per_key_and_namespace(rows: list[tuple[str, int | None, int]], max_p: int) -> None:
    expected = {(k, ns): v for k, ns, v in rows}
    decoded = decode_all(codec(StateDescriptor("v", StateKind.VALUE)), [(k, ns, v) for k, ns, v in rows], max_p)
    assert {(e.key, e.namespace): e.value for e in decoded} == expected
    assert len(decoded) == len(expected)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.binary(max_size=3), st.binary(max_size=2)), max_size=80),
       st.sampled_from([1, 7, 16, 5000, 32768]))
def test_radix_order_equals_a_full_sort(rows: list[tuple[int, bytes, bytes]], max_p: int) -> None:
    """The radix sort of the version 2 order, with many equal key hashes (ties by key, namespace)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from statekit.statefmt.entries import hash_order, hash_sort_indices

    hashes = [h * 1_000_003 % 2**32 for h, _, _ in rows]  # few distinct hashes, spread over all bits
    table = pa.table({"key_hash": pa.array(hashes, pa.uint32()), "key": pa.array([k for _, k, _ in rows], pa.binary()),
                      "namespace": pa.array([ns for _, _, ns in rows], pa.binary())})
    got = table.take(hash_sort_indices(table, max_p, ["key", "namespace"]))
    full = table.append_column("__order", hash_order(table, max_p))
    want = full.take(pc.sort_indices(full, sort_keys=[("__order", "ascending"), ("key", "ascending"),
                                                      ("namespace", "ascending")])).drop_columns(["__order"])
    assert got.equals(want)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=5), st.sampled_from([(), (0, 10), (10, 20)]), st.integers(0, 5),
                          st.integers(-(1 << 63), (1 << 63) - 1)), max_size=30))
def test_plain_tuple_rows_encode_as_the_entries_they_stand_for(rows: list[tuple[str, Any, int, int]]) -> None:
    """The column-wise fast paths for (key, namespace, value), (key, user key, value) and
    (key, namespace, user key, value) rows give the table the entry objects give."""
    value = StateDescriptor("v", StateKind.VALUE, namespace_type="list<int>")
    mapped = StateDescriptor("m", StateKind.MAP, user_key_serializer="msgpack", namespace_type="list<int>")
    plain_map = StateDescriptor("p", StateKind.MAP, user_key_serializer="msgpack")
    cases = [
        (value, [(k, n, v) for k, n, _, v in rows], [KeyedStateEntry(k, n, v, None) for k, n, _, v in rows]),
        (mapped, [(k, n, u, v) for k, n, u, v in rows], [MapStateEntry(k, u, v, n, None) for k, n, u, v in rows]),
        (plain_map, [(k, u, v) for k, _, u, v in rows], [MapStateEntry(k, u, v, None, None) for k, _, u, v in rows]),
    ]
    for descriptor, tuples, entries in cases:
        codec = StateCodec(descriptor, "msgpack", for_write=True)
        assert codec.encode_keyed_rows(tuples).equals(codec.encode_keyed_rows(entries))


@given(pairs=st.dictionaries(st.text(max_size=8) | st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1), max_size=40),
       map_values=st.booleans())
@settings(max_examples=60, deadline=None)
def test_keyed_columns_encode_the_table_their_rows_encode(pairs: dict[Any, int], map_values: bool) -> None:
    """A heap table's key and value columns (KeyedColumns) are the same rows as its (key,
    value) tuples: the same table, so the same state file."""
    kind = StateKind.MAP if map_values else StateKind.VALUE
    codec = StateCodec(StateDescriptor("s", kind, value_type=None if map_values else "int"), "msgpack")
    keys, values = list(pairs), list(pairs.values())
    if map_values:
        rows: list[Any] = [(k, f"u{i}", v) for i, (k, v) in enumerate(pairs.items())]
        columns = KeyedColumns(keys, values, user_keys=[f"u{i}" for i in range(len(keys))])
    else:
        rows = list(pairs.items())
        columns = KeyedColumns(keys, values)
    assert codec.encode_keyed_rows(columns).equals(codec.encode_keyed_rows(rows))
    assert len(columns) == len(rows) and bool(columns) == bool(rows)


def test_keyed_columns_of_different_lengths_are_refused() -> None:
    codec = StateCodec(StateDescriptor("s", StateKind.VALUE), "msgpack")
    with pytest.raises(BadInputError, match="different lengths"):
        codec.encode_keyed_rows(KeyedColumns(["a", "b"], [1]))
    map_codec = StateCodec(StateDescriptor("m", StateKind.MAP), "msgpack")
    with pytest.raises(BadInputError, match="without user keys"):
        map_codec.encode_keyed_rows(KeyedColumns(["a"], [1]))


def test_keyed_columns_carry_expiries_like_entries_do() -> None:
    codec = StateCodec(StateDescriptor("t", StateKind.VALUE, value_type="int", ttl_ms=1000), "msgpack")
    columns = KeyedColumns(["a", "b", "c"], [1, 2, 3], expiries=[5, None, 7])
    entries = [KeyedStateEntry("a", None, 1, 5), KeyedStateEntry("b", None, 2, None), KeyedStateEntry("c", None, 3, 7)]
    assert codec.encode_keyed_rows(columns).equals(codec.encode_keyed_rows(entries))
    no_expiry = KeyedColumns(["a"], [1], expiries=[None])
    assert codec.encode_keyed_rows(no_expiry).equals(codec.encode_keyed_rows([("a", 1)]))
    with pytest.raises(BadInputError, match="different lengths"):
        codec.encode_keyed_rows(KeyedColumns(["a"], [1], expiries=[1, 2]))
