"""Column-wise fast paths of encoding and decoding give exactly what the reference paths give."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekit.statefmt.encoding import python_values
from statekit.statefmt.entries import KeyedStateEntry, MapStateEntry, StateCodec, group_by_key_group
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.statefmt.serializers import get_serializer, serialize_column, serialize_many

ASCII = st.characters(min_codepoint=32, max_codepoint=126)


@st.composite
def fixed_width_strings(draw: Any) -> list[str]:
    """Strings of one UTF-8 length (fixed-width keys: one msgpack header for the column)."""
    width = draw(st.integers(0, 40))
    return draw(st.lists(st.text(ASCII, min_size=width, max_size=width), min_size=1, max_size=30))


@settings(max_examples=150, deadline=None)
@given(st.one_of(fixed_width_strings(), st.lists(st.text(max_size=300), min_size=1, max_size=30)),
       st.sampled_from(["msgpack", "utf8"]))
def test_serialize_column_equals_value_by_value(values: list[str], name: str) -> None:
    serializer = get_serializer(name)
    try:
        expected = pa.array(serialize_many(serializer, values, "key"), pa.binary())
    except Exception:  # noqa: BLE001 - lone surrogates: not encodable either way
        return
    assert serialize_column(serializer, values, "key").equals(expected)


TYPED = [
    (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    (pa.float64(), st.floats(allow_nan=False)),
    (pa.string(), st.text(max_size=5)),
    (pa.list_(pa.int64()), st.lists(st.integers(-5, 5), max_size=3)),
    (pa.map_(pa.string(), pa.int64()), st.dictionaries(st.text(max_size=3), st.integers(-5, 5), max_size=3)),
    (pa.struct([("a", pa.int64()), ("m", pa.map_(pa.string(), pa.int64()))]),
     st.fixed_dictionaries({"a": st.integers(-5, 5), "m": st.dictionaries(st.text(max_size=2), st.integers(-5, 5), max_size=2)})),
]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_python_values_equals_strict_to_pylist(data: Any) -> None:
    arrow_type, values = data.draw(st.sampled_from(TYPED))
    items = data.draw(st.lists(st.one_of(st.none(), values) if data.draw(st.booleans()) else values, max_size=20))
    column = pa.array(items, arrow_type)
    start = data.draw(st.integers(0, len(items)))
    column = column.slice(start, data.draw(st.integers(0, len(items) - start)))
    assert python_values(column) == column.to_pylist(maps_as_pydicts="strict")


def test_python_values_of_doubles_keeps_nan_and_negative_zero() -> None:
    out = python_values(pa.array([float("nan"), -0.0, 1.5]))
    assert out[0] != out[0] and str(out[1]) == "-0.0" and out[2] == 1.5


KEYS = st.one_of(st.text(max_size=12), st.integers(-(2**40), 2**40))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(KEYS, st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))), max_size=60),
       st.sampled_from([None, "int"]))
def test_decoded_columns_equal_decoded_entries(rows: list[tuple[Any, Any]], value_type: str | None) -> None:
    codec = StateCodec(StateDescriptor("v", StateKind.VALUE, value_type=value_type), "msgpack")
    entries: list[Any] = []
    for _, batch in group_by_key_group(codec.encode_keyed_rows(rows), 8):
        columns = codec.decode_keyed_columns(batch)
        assert set(columns) == {"key", "namespace", "value", "expiry"}
        assert all(len(c) == batch.num_rows for c in columns.values())
        from_columns = [KeyedStateEntry(*row) for row in
                        zip(columns["key"], columns["namespace"], columns["value"], columns["expiry"])]
        assert from_columns == list(codec.decode_keyed_batch(batch))
        entries.extend(from_columns)
    assert {e.key: e.value for e in entries} == dict(rows)  # last write wins
    assert len(entries) == len(dict(rows))


def test_decoded_columns_of_map_state() -> None:
    codec = StateCodec(StateDescriptor("m", StateKind.MAP, value_type="int"), "msgpack")
    rows = [("a", "x", 1), ("a", "ns", "y", 2), MapStateEntry("b", "z", 3, None, 99)]
    decoded = []
    for _, batch in group_by_key_group(codec.encode_keyed_rows(rows), 4):
        c = codec.decode_keyed_columns(batch)
        decoded += list(zip(c["key"], c["user_key"], c["value"], c["namespace"], c["expiry"]))
        assert decoded[-batch.num_rows:] == [tuple(e) for e in codec.decode_keyed_batch(batch)]
    assert sorted(decoded, key=repr) == sorted(
        [("a", "x", 1, None, None), ("a", "y", 2, "ns", None), ("b", "z", 3, None, 99)], key=repr)


# ---------------------------------------------------------------- msgpack int columns

INT_BOUNDS = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1,
              -1, -32, -33, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**63)]
INTS = st.one_of(st.sampled_from(INT_BOUNDS), st.integers(-(2**63), 2**63 - 1), st.integers(-300, 300))


@settings(max_examples=150, deadline=None)
@given(st.lists(INTS, min_size=1, max_size=40), st.integers(0, 5))
def test_msgpack_int_columns_equal_value_by_value(values: list[int], cut: int) -> None:
    """One ``packb`` of the whole list, cut at lengths computed from the ints, gives the
    bytes of packing each int; decoding them (also sliced) gives the ints back."""
    from statekit.statefmt.serializers import deserialize_column

    msgpack_ = get_serializer("msgpack")
    column = serialize_column(msgpack_, values, "value")
    assert column.to_pylist() == serialize_many(msgpack_, values, "value")
    column.validate(full=True)
    start = min(cut, len(values) - 1)
    assert deserialize_column(msgpack_, column.slice(start), "value") == values[start:]


@pytest.mark.parametrize("values", [[1, True], [True, 1], [1, 2**64 - 1], [2**64 - 1], [1, 1.5], [1, None],
                                    [1, "a"], list(range(70_000))])
def test_msgpack_int_fast_path_falls_back_for_other_columns(values: list[Any]) -> None:
    msgpack_ = get_serializer("msgpack")
    assert serialize_column(msgpack_, values, "value").to_pylist() == serialize_many(msgpack_, values, "value")


@pytest.mark.parametrize("rows", [[b"\xcc", b"\x05\x01"], [b"\xcd\x00", b"\x05"], [b"\x05\x06"], [b"\xcc"]])
def test_msgpack_int_rows_cut_in_the_wrong_place_are_refused(rows: list[bytes]) -> None:
    """Every row must be one int exactly as long as its type byte says: the bytes of two
    rows that unpack together as ints are damage, named value by value."""
    from statekit.statefmt.errors import SerializationError
    from statekit.statefmt.serializers import deserialize_column

    with pytest.raises(SerializationError, match="cannot decode value with 'msgpack'"):
        deserialize_column(get_serializer("msgpack"), pa.array(rows, pa.binary()), "value")


# ---------------------------------------------------------------- keys of one width


@pytest.mark.parametrize("width", [8, 9, 11, 12, 13, 16, 17, 23, 31, 40])
def test_murmur3_of_fixed_width_keys_equals_mmh3(width: int) -> None:
    """Keys of one width >= 8 are hashed from 8-byte lanes: equal to mmh3 key by key."""
    import random

    import mmh3

    from statekit.statefmt.keygroups import key_hash_column

    rng = random.Random(width)
    keys = [rng.randbytes(width) for _ in range(500)] + [b"\xff" * width, b"\x00" * width]
    for column in (pa.array(keys, pa.binary()), pa.array(keys, pa.binary()).slice(3)):
        expected = [mmh3.hash(k, 0, signed=False) for k in column.to_pylist()]
        assert key_hash_column(column).to_pylist() == expected


@settings(max_examples=100, deadline=None)
@given(st.one_of(fixed_width_strings(), st.lists(st.text(max_size=5), min_size=1, max_size=30)), st.data())
def test_take_column_equals_take(values: list[str], data: Any) -> None:
    from statekit.statefmt.entries import take_column

    column = pa.array([v.encode() for v in values], pa.binary())
    start = data.draw(st.integers(0, len(values) - 1))
    for array in (column, column.slice(start)):
        indices = pa.array(data.draw(st.lists(st.integers(0, len(array) - 1), max_size=2 * len(array))), pa.int64())
        taken = take_column(array, indices)
        taken.validate(full=True)
        assert taken.equals(array.take(indices))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from([b"a", b"b", b"c"]), st.integers(0, 9)), min_size=1,
                max_size=60), st.sampled_from([1, 4, 6, 128]), st.sampled_from([3, 40, 10**6]))
def test_entries_of_colliding_key_hashes_keep_the_last_write(rows: list[tuple[int, bytes, int]], max_p: int,
                                                             spread: int) -> None:
    """Rows of equal key hash but different keys (murmur3 collisions), and duplicates among
    them — many or few: one entry per key remains, the last written, in (key group, hash,
    key) order."""
    from statekit.statefmt.encoding import empty_namespaces, keyed_schema

    n = len(rows)
    hashes = [h % spread * 2_654_435_761 % 2**32 for h, _, _ in rows]
    table = pa.Table.from_arrays([
        pa.array(hashes, pa.uint32()), pa.array([k for _, k, _ in rows], pa.binary()), empty_namespaces(n),
        pa.nulls(n, pa.binary()), pa.array([v.to_bytes(1, "big") for _, _, v in rows], pa.binary()),
        pa.nulls(n, pa.int64())], schema=keyed_schema())
    got = [(kg, h, k, v) for kg, batch in group_by_key_group(table, max_p, version=2)
           for h, k, v in zip(*(batch.column(c).to_pylist() for c in ("key_hash", "key", "value")))]
    last = {(h, k): v for h, (_, k, _), v in zip(hashes, rows, (r[2].to_bytes(1, "big") for r in rows))}
    assert got == sorted((h % max_p, h, k, v) for (h, k), v in last.items())


# ---------------------------------------------------------------- blocks encoded together

ENTRY_ROWS = st.lists(st.tuples(st.one_of(st.text(max_size=6), st.integers(-50, 50)),
                                st.one_of(st.none(), st.integers(0, 3)),
                                st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, 7]))),
                      min_size=1, max_size=80)


def _file_bytes(groups: list[tuple[int, Any]], fmt: Any, together: bool) -> bytes:
    import io

    from statekit.statefmt import layout
    from statekit.statefmt.statefile import StateFileWriter

    out = io.BytesIO()
    writer = StateFileWriter(out, layout.FILE_KIND_KEYED, fmt=fmt)
    if together:
        writer.write_blocks(iter(groups))
    else:
        for key_group, batch in groups:
            writer.write_block(key_group, batch)
    writer.finish()
    return out.getvalue()


@settings(max_examples=120, deadline=None)
@given(ENTRY_ROWS, st.sampled_from([None, "int"]), st.sampled_from(["none", "lz4", "zstd"]),
       st.booleans(), st.booleans(), st.data())
def test_blocks_written_together_equal_blocks_written_one_by_one(
        rows: list[tuple[Any, Any, Any]], value_type: str | None, compression: str, namespaced: bool,
        expiring: bool, data: Any) -> None:
    """``write_blocks`` (runs of consecutive slices of one table encoded together: shared
    column checks, offsets rebased at once, buffers not copied) writes the bytes
    ``write_block`` writes block by block, whatever columns are empty, null or mixed, and
    also when some blocks are left out (runs broken) or a run mixes in a copy."""
    from statekit.statefmt.encoding import WriteFormat
    from statekit.statefmt.entries import KeyedColumns

    codec = StateCodec(StateDescriptor("v", StateKind.VALUE, value_type=value_type,
                                       namespace_serializer="msgpack"), "msgpack")
    columns = KeyedColumns([k for k, _, _ in rows], [v for _, _, v in rows],
                           namespaces=[ns for _, ns, _ in rows] if namespaced else None,
                           expiries=[v if v is None else abs(v) % 1000 for _, _, v in rows] if expiring else None)
    table = codec.encode_keyed_rows(columns, version=2)
    groups = list(group_by_key_group(table, data.draw(st.sampled_from([1, 3, 8, 16])), version=2))
    keep = data.draw(st.lists(st.booleans(), min_size=len(groups), max_size=len(groups)))
    kept = [g for g, k in zip(groups, keep) if k] or groups
    if len(kept) > 2:  # a block in the middle of a run taken from a copy of its rows (another parent)
        key_group, batch = kept[1]
        kept[1] = (key_group, pa.RecordBatch.from_arrays([pa.concat_arrays([c]) for c in batch.columns],
                                                         schema=batch.schema))
    fmt = WriteFormat(2, compression)
    assert _file_bytes(kept, fmt, together=True) == _file_bytes(kept, fmt, together=False)


def _copied_buffer(buffer: Any, start: int, size: int) -> Any:
    """The reference: the bytes copied into memory of their own, zero-padded to 8."""
    data = bytearray(size + -size % 8)
    data[:size] = memoryview(buffer)[start:start + size]
    return pa.py_buffer(data).slice(0, size)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.binary(max_size=9), min_size=1, max_size=40), st.data())
def test_shared_slices_of_buffers_serialize_like_copies(values: list[bytes], data: Any) -> None:
    """A flat column made canonical from slices of its buffers (no copy) serializes to the
    bytes of one whose buffers were copied into zero-padded memory of their own — the
    IPC writer reads nothing past a buffer's end — also compressed."""
    from statekit.statefmt.encoding import _flat_canonical

    start = data.draw(st.integers(0, len(values) - 1))
    n = data.draw(st.integers(1, len(values) - start))
    ints = pa.array([len(v) * 7919 - 3 for v in values], pa.int64()).slice(start, n)
    binary = pa.array(values, pa.binary()).slice(start, n)
    _, offsets, body = binary.buffers()
    positions = memoryview(offsets).cast("i")
    first, last = positions[start], positions[start + n]
    rebased = pa.array([positions[start + i] - first for i in range(n + 1)], pa.int32())
    reference = [
        pa.Array.from_buffers(pa.int64(), n, [None, _copied_buffer(ints.buffers()[1], 8 * start, 8 * n)]),
        pa.Array.from_buffers(pa.binary(), n, [None, _copied_buffer(rebased.buffers()[1], 0, 4 * (n + 1)),
                                               _copied_buffer(body, first, last - first)]),
    ]
    shared = [_flat_canonical(ints), _flat_canonical(binary)]
    for options in (None, pa.ipc.IpcWriteOptions(compression="lz4"), pa.ipc.IpcWriteOptions(compression="zstd")):
        encoded = []
        for arrays in (shared, reference):
            batch = pa.RecordBatch.from_arrays(arrays, names=["i", "b"])
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, batch.schema, options=options) as stream:
                stream.write_batch(batch)
            encoded.append(sink.getvalue().to_pybytes())
        assert encoded[0] == encoded[1]


def test_checksum_of_a_file_with_large_blocks_is_the_crc_of_its_bytes() -> None:
    """Blocks of 64 KiB or more are not hashed twice: the file's CRC-32 continues from each
    block's by crc32_combine, and must equal the CRC-32 of the bytes written."""
    import io
    import zlib

    from statekit.statefmt import layout
    from statekit.statefmt.checksum import format_checksum
    from statekit.statefmt.statefile import _COMBINE_FROM, StateFileReader, StateFileWriter

    codec = StateCodec(StateDescriptor("v", StateKind.VALUE, value_type="int"), "msgpack")
    table = codec.encode_keyed_rows([(f"key-{i}", i) for i in range(40_000)], version=2)
    groups = list(group_by_key_group(table, 4, version=2))
    out = io.BytesIO()
    writer = StateFileWriter(out, layout.FILE_KIND_KEYED)
    writer.write_block(*groups[0])
    writer.write_blocks(groups[1:])
    summary = writer.finish()
    data = out.getvalue()
    reader = StateFileReader(io.BytesIO(data), len(data), path="large")
    assert min(e.length for e in reader.index) >= _COMBINE_FROM  # every block takes the combining path
    assert summary.size == len(data) and summary.checksum == format_checksum(zlib.crc32(data))
    list(reader.iter_blocks())  # block CRCs and the footer's CRC of header..index check out


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=4), st.integers(0, 3), st.integers(-5, 5)), min_size=1, max_size=120),
       st.sampled_from([None, "int"]), st.sampled_from(["none", "zstd"]))
def test_namespaces_shared_by_many_rows_encode_like_distinct_ones(
        rows: list[tuple[str, int, int]], value_type: str | None, compression: str) -> None:
    """Window state: a few window objects shared by every key. Such a namespace column is
    serialized once per distinct object and indexed; the file must be byte-identical to the
    one whose rows each hold an equal namespace object of their own (serialized row by row)."""
    from statekit.statefmt.encoding import WriteFormat
    from statekit.statefmt.entries import KeyedColumns

    codec = StateCodec(StateDescriptor("v", StateKind.VALUE, value_type=value_type,
                                       namespace_type="list<int>"), "msgpack")
    windows = [(w * 1000, w * 1000 + 1000) for w in range(4)]
    shared = [windows[w] for _, w, _ in rows]
    distinct = [(start + 0, end + 0) for start, end in shared]  # equal, not identical (ints > 256 are new objects)
    assert len({id(ns) for ns in distinct}) == len(rows)
    encoded = []
    for namespaces in (shared, distinct):
        table = codec.encode_keyed_rows(KeyedColumns([k for k, _, _ in rows], [v for _, _, v in rows], namespaces),
                                        version=2)
        encoded.append(_file_bytes(list(group_by_key_group(table, 8, version=2)), WriteFormat(2, compression),
                                   together=True))
    assert encoded[0] == encoded[1]


def test_equal_but_differently_serialized_namespaces_are_not_merged() -> None:
    """Deduplication is by identity: ``(1, 2)`` and ``(True, 2)`` are equal and hash alike but
    msgpack writes them differently; each row keeps its own bytes."""
    codec = StateCodec(StateDescriptor("v", StateKind.VALUE, namespace_type="list<int>"), "msgpack")
    a, b = (1, 2), (True, 2)
    namespaces = [a] * 10 + [b] * 10
    column = codec._namespace_column(namespaces)
    assert column.to_pylist() == serialize_many(get_serializer("msgpack"), namespaces, "namespace")
    assert column[0].as_py() != column[10].as_py()
