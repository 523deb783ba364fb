"""Block encoding (format version 2): typed value columns round-trip every declared type,
blocks round-trip through compression, and the vectorized key paths equal the scalar ones."""

from __future__ import annotations

import io
import math
import zlib
from collections.abc import Iterator
from typing import Any

import mmh3
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekit.statefmt import layout
from statekit.statefmt.checksum import Crc32, crc32_combine
from statekit.statefmt.encoding import (
    BlockCodec,
    TypedValues,
    WriteFormat,
    current_write_format,
    keyed_schema,
    writing_format,
)
from statekit.statefmt.entries import KeyedStateEntry, StateCodec, group_by_key_group
from statekit.statefmt.errors import BadInputError, SerializationError
from statekit.statefmt.keygroups import key_hash_column
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.statefmt.serializers import (
    deserialize_column,
    get_serializer,
    serialize_column,
    serialize_many,
)
from statekit.statefmt.statefile import StateFileReader, StateFileWriter
from statekit.statefmt.value_types import ValueType

# ---------------------------------------------------------------- declared types and their values

PRIMITIVES = ["int", "float", "string", "bool", "bytes", "timestamp"]
KEY_PRIMITIVES = ["int", "string", "bool", "timestamp"]


def types(depth: int = 2) -> st.SearchStrategy[ValueType]:
    leaf = st.sampled_from(PRIMITIVES).map(ValueType)
    if depth == 0:
        return leaf
    inner = types(depth - 1)
    names = st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=3, unique=True)
    return st.one_of(
        leaf,
        inner.map(lambda t: ValueType("list", (t,))),
        st.tuples(st.sampled_from(KEY_PRIMITIVES).map(ValueType), inner).map(lambda kv: ValueType("map", kv)),
        names.flatmap(lambda ns: st.tuples(*[inner for _ in ns]).map(
            lambda ts, ns=ns: ValueType("struct", tuple(ts), tuple(ns)))),
    )


def values(value_type: ValueType, nullable: bool = True) -> st.SearchStrategy[Any]:
    name = value_type.name
    base: st.SearchStrategy[Any]
    if name == "int":
        base = st.integers(-(2**63), 2**63 - 1)
    elif name == "timestamp":
        base = st.integers(-(2**60), 2**60)
    elif name == "float":
        base = st.floats(allow_nan=False) | st.integers(-(2**53), 2**53)
    elif name == "string":
        base = st.text(max_size=6)
    elif name == "bool":
        base = st.booleans()
    elif name == "bytes":
        base = st.binary(max_size=6)
    elif name == "list":
        base = st.lists(values(value_type.args[0]), max_size=3)
    elif name == "map":
        base = st.dictionaries(values(value_type.args[0], nullable=False), values(value_type.args[1]), max_size=3)
    else:
        base = st.fixed_dictionaries({}, optional={n: values(t) for n, t in zip(value_type.fields, value_type.args)})
    return st.none() | base if nullable else base


def normal(value_type: ValueType, value: Any) -> Any:
    """What a typed column reads back for ``value`` (floats, lists, every struct field)."""
    if value is None:
        return None
    name = value_type.name
    if name == "float":
        return float(value)
    if name == "list":
        return [normal(value_type.args[0], v) for v in value]
    if name == "map":
        return {normal(value_type.args[0], k): normal(value_type.args[1], v) for k, v in value.items()}
    if name == "struct":
        return {n: normal(t, value.get(n)) for n, t in zip(value_type.fields, value_type.args)}
    return value


@st.composite
def typed_states(draw: st.DrawFn) -> tuple[StateDescriptor, ValueType, list[tuple[int, Any]]]:
    value_type = draw(types())
    kind = draw(st.sampled_from([StateKind.VALUE, StateKind.LIST, StateKind.REDUCING]))
    per_entry = ValueType("list", (value_type,)) if kind is StateKind.LIST else value_type
    keys = draw(st.lists(st.integers(-1000, 1000), unique=True, min_size=1, max_size=12))
    rows = [(k, draw(values(per_entry, nullable=kind is not StateKind.LIST))) for k in keys]
    return StateDescriptor("s", kind, value_type=str(value_type)), per_entry, rows


FORMATS = [WriteFormat(2), WriteFormat(2, "zstd"), WriteFormat(2, "lz4")]


def write_and_read(descriptor: StateDescriptor, rows: list[Any], fmt: WriteFormat,
                   max_parallelism: int = 8) -> tuple[list[Any], StateFileReader]:
    codec = StateCodec(descriptor, "msgpack", for_write=True)
    out = io.BytesIO()
    with writing_format(fmt):
        table = codec.encode_keyed_rows(rows)
        writer = StateFileWriter(out, layout.FILE_KIND_KEYED, path="mem")
        for key_group, batch in group_by_key_group(table, max_parallelism):
            writer.write_block(key_group, batch)
        summary = writer.finish()
    data = out.getvalue()
    assert summary.size == len(data) and summary.checksum == f"crc32:{zlib.crc32(data):08x}"
    reader = StateFileReader(io.BytesIO(data), len(data), path="mem")
    entries = [e for _, batch in reader.iter_blocks() for e in codec.decode_keyed_batch(batch)]
    return entries, reader


# ---------------------------------------------------------------- round trips


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(typed_states(), st.sampled_from(FORMATS))
def test_typed_values_round_trip_every_declared_type(state: tuple[StateDescriptor, ValueType, list[Any]],
                                                     fmt: WriteFormat) -> None:
    descriptor, per_entry, rows = state
    entries, reader = write_and_read(descriptor, rows, fmt)
    typed = TypedValues.for_descriptor(descriptor)
    stored = reader.codec.schema.field("value").type
    if descriptor.value_type == "bytes":
        # a declared top-level bytes value (list state: bytes elements) stays serialized
        assert typed is None and stored == pa.binary()
    else:
        assert typed is not None and stored == typed.arrow_type
    assert {e.key: e.value for e in entries} == {k: normal(per_entry, v) for k, v in rows}
    assert len(entries) == len(rows)


@settings(max_examples=80, deadline=None)
@given(typed_states())
def test_typed_columns_serialize_to_the_version_1_bytes(state: tuple[StateDescriptor, ValueType, list[Any]]) -> None:
    """A typed column turned back into serialized values holds what a v1 file holds for the
    values as they read back — diff and the Spark raw mode compare across versions on this."""
    descriptor, per_entry, rows = state
    codec = StateCodec(descriptor, "msgpack", for_write=True)
    typed = codec.encode_keyed_rows(rows, version=2).column("value").combine_chunks()
    normalized = [(k, normal(per_entry, v)) for k, v in rows]
    v1 = codec.encode_keyed_rows(normalized, version=1).column("value").combine_chunks()
    assert codec.serialized_values(typed).equals(v1)


def test_nan_and_infinities_round_trip() -> None:
    descriptor = StateDescriptor("f", StateKind.VALUE, value_type="float")
    entries, _ = write_and_read(descriptor, [(1, math.nan), (2, math.inf), (3, -math.inf), (4, -0.0)], WriteFormat(2))
    got = {e.key: e.value for e in entries}
    assert math.isnan(got[1]) and got[2] == math.inf and got[3] == -math.inf and math.copysign(1, got[4]) == -1


@pytest.mark.parametrize(("value_type", "value", "cause"), [
    ("int", 2**64, "cannot be stored as int"),
    ("map<string,int>", {None: 1}, "cannot be stored as map<string,int>"),
    ("int", "x", "does not match the declared type: expected int, got str"),
    ("struct<a:int>", {"b": 1}, "unknown struct fields"),
])
def test_values_a_typed_column_cannot_hold_are_refused(value_type: str, value: Any, cause: str) -> None:
    codec = StateCodec(StateDescriptor("s", StateKind.VALUE, value_type=value_type), "msgpack", for_write=True)
    with pytest.raises(SerializationError, match=f"state 's': .*{cause}"):
        codec.encode_keyed_rows([(1, value)], version=2)


def test_version_1_tables_keep_serialized_values() -> None:
    codec = StateCodec(StateDescriptor("s", StateKind.VALUE, value_type="int"), "msgpack", for_write=True)
    assert codec.encode_keyed_rows([(1, 2)], version=1).schema.equals(keyed_schema())
    assert codec.encode_keyed_rows([(1, 2)], version=2).schema.field("value").type == pa.int64()


@pytest.mark.parametrize("declared", [None, "json", "list<json>", "struct<a:json>", "bytes"])
def test_states_without_a_typed_column(declared: str | None) -> None:
    assert TypedValues.for_descriptor(StateDescriptor("s", StateKind.VALUE, value_type=declared)) is None
    assert TypedValues.for_descriptor(StateDescriptor("s", StateKind.UNION, value_type="int")) is None


# ---------------------------------------------------------------- blocks


def typed_batch(n: int, namespaces: bool = False, expiry: bool = False) -> pa.RecordBatch:
    return pa.record_batch([
        pa.array(range(n), pa.uint32()), pa.array([f"k{i:05d}".encode() for i in range(n)]),
        pa.array([b"ns" if namespaces and i % 2 else b"" for i in range(n)]), pa.nulls(n, pa.binary()),
        pa.array(range(n), pa.int64()), pa.array([i if expiry else None for i in range(n)], pa.int64()),
    ], schema=keyed_schema(pa.int64()))


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.compression)
@pytest.mark.parametrize(("namespaces", "expiry"), [(False, False), (True, False), (False, True), (True, True)])
def test_blocks_round_trip_with_any_optional_columns(fmt: WriteFormat, namespaces: bool, expiry: bool) -> None:
    batch = typed_batch(3000, namespaces, expiry)
    codec = BlockCodec.for_writing(layout.FILE_KIND_KEYED, batch.schema, fmt)
    data = codec.encode(batch)
    assert data[0] == (1 if namespaces else 0) | (4 if expiry else 0)
    assert codec.decode(data, path="mem").equals(batch)
    if fmt.compression != "none":
        assert len(data) < len(BlockCodec.for_writing(layout.FILE_KIND_KEYED, batch.schema, WriteFormat(2)).encode(batch))


def test_a_block_that_would_not_shrink_is_stored_plain() -> None:
    batch = typed_batch(2)
    plain = BlockCodec.for_writing(layout.FILE_KIND_KEYED, batch.schema, WriteFormat(2)).encode(batch)
    assert BlockCodec.for_writing(layout.FILE_KIND_KEYED, batch.schema, WriteFormat(2, "zstd")).encode(batch) == plain


def test_a_batch_of_another_schema_is_refused() -> None:
    codec = BlockCodec.for_writing(layout.FILE_KIND_KEYED, keyed_schema(pa.int64()), WriteFormat(2))
    with pytest.raises(ValueError, match="is not the file's"):
        codec.encode(typed_batch(1).cast(keyed_schema(pa.float64())))


def test_version_1_cannot_hold_typed_values() -> None:
    with pytest.raises(ValueError, match="version 1 cannot hold typed values"):
        BlockCodec.for_writing(layout.FILE_KIND_KEYED, keyed_schema(pa.int64()), WriteFormat(1))


def test_header_schemas_outside_the_format_are_refused() -> None:
    """A header whose schema is well-formed Arrow but not a statekit schema."""
    bad = pa.schema([pa.field("key", pa.binary()), pa.field("value", pa.int8())])
    message = bad.serialize().to_pybytes()
    header = layout.STATE_FILE_HEADER.pack(layout.STATE_FILE_MAGIC, 2, layout.FILE_KIND_KEYED, 0, len(message))
    data = header + message + bytes(28 + 8)

    def read_at(offset: int, length: int) -> bytes:
        return data[offset:offset + length]

    from statekit.statefmt.errors import CorruptStateError

    with pytest.raises(CorruptStateError, match="not a keyed state schema"):
        BlockCodec.read(read_at, len(data), path="mem")[0]


def test_a_header_field_name_that_is_not_utf8_is_corrupt_state() -> None:
    """A damaged byte inside a field name of the header schema (found by the damage fuzz test:
    a bit flip in 'keyed/attrs/...') is a corrupt header, not a UnicodeDecodeError."""
    message = bytearray(keyed_schema(pa.int64()).serialize().to_pybytes())
    at = bytes(message).index(b"key_hash")
    message[at] = 0xFF
    header = layout.STATE_FILE_HEADER.pack(layout.STATE_FILE_MAGIC, 2, layout.FILE_KIND_KEYED, 0, len(message))
    data = header + bytes(message) + bytes(28 + 8)

    def read_at(offset: int, length: int) -> bytes:
        return data[offset:offset + length]

    from statekit.statefmt.errors import CorruptStateError

    with pytest.raises(CorruptStateError, match="header schema does not decode"):
        BlockCodec.read(read_at, len(data), path="mem")


# ---------------------------------------------------------------- write format


def test_write_format_defaults_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STATEKIT_BLOCK_COMPRESSION", raising=False)
    assert current_write_format() == WriteFormat(2, "none")
    monkeypatch.setenv("STATEKIT_BLOCK_COMPRESSION", "ZSTD")
    assert current_write_format() == WriteFormat(2, "zstd")
    with writing_format(WriteFormat(1)):
        assert current_write_format() == WriteFormat(1)
    monkeypatch.setenv("STATEKIT_BLOCK_COMPRESSION", "gzip")
    with pytest.raises(BadInputError, match=r"\$STATEKIT_BLOCK_COMPRESSION: unknown block compression 'gzip'"):
        current_write_format()


@pytest.mark.parametrize(("version", "compression"), [(3, "none"), (1, "zstd"), (2, "brotli")])
def test_bad_write_formats_are_refused(version: int, compression: str) -> None:
    with pytest.raises(BadInputError):
        WriteFormat(version, compression)


# ---------------------------------------------------------------- vectorized key paths


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=60), st.integers(0, 5))
def test_vectorized_murmur3_equals_mmh3(keys: list[bytes], cut: int) -> None:
    column = pa.array(keys, pa.binary()).slice(min(cut, len(keys)))
    assert key_hash_column(column).to_pylist() == [mmh3.hash(k, 0, signed=False) for k in keys[min(cut, len(keys)):]]


def test_vectorized_murmur3_over_many_keys_of_every_length() -> None:
    import random

    rng = random.Random(5)
    keys = [rng.randbytes(rng.randrange(0, 70)) for _ in range(5000)]
    assert key_hash_column(pa.array(keys, pa.binary())).to_pylist() == [mmh3.hash(k, 0, signed=False) for k in keys]
    same_length = [rng.randbytes(13) for _ in range(3000)]  # every row takes the all-rows path
    assert key_hash_column(pa.array(same_length)).to_pylist() == [mmh3.hash(k, 0, signed=False) for k in same_length]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=300), max_size=30), st.sampled_from(["msgpack", "utf8"]))
def test_string_columns_serialize_like_value_by_value(texts: list[str], name: str) -> None:
    serializer = get_serializer(name)
    column = serialize_column(serializer, texts, "key")
    assert column.to_pylist() == serialize_many(serializer, texts, "key")
    assert deserialize_column(serializer, column, "key") == texts


def test_a_msgpack_column_whose_values_run_into_each_other_is_refused() -> None:
    """b"\\x92\\x01" + b"\\x02\\x03" unpacks as two values in one pass; value by value it is damage."""
    column = pa.array([b"\x92\x01", b"\x02\x03"], pa.binary())
    with pytest.raises(SerializationError, match="cannot decode key with 'msgpack'"):
        deserialize_column(get_serializer("msgpack"), column, "key")


# ---------------------------------------------------------------- CRC-32 combination


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.binary(max_size=3000), st.integers(0, 2**32 - 1))
def test_crc32_combine_equals_the_crc_of_the_concatenation(a: bytes, b: bytes, start: int) -> None:
    assert crc32_combine(zlib.crc32(a, start), zlib.crc32(b), len(b)) == zlib.crc32(a + b, start)


def test_crc32_combine_over_long_runs() -> None:
    run = bytes(range(256)) * 40_000  # 10 MB: every byte of the length counts
    assert crc32_combine(7, zlib.crc32(run), len(run)) == zlib.crc32(run, 7)
    running = Crc32()
    running.update(b"head")
    running.combine(zlib.crc32(run), len(run))
    assert running.value == zlib.crc32(b"head" + run) and running.size == 4 + len(run)


def entries_of(rows: list[tuple[int, Any]]) -> Iterator[KeyedStateEntry]:
    return (KeyedStateEntry(k, None, v, None) for k, v in rows)
