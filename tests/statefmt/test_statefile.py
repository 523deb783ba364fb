"""The state file codec: blocks, index, footer, checksums, random access and damage, in
format versions 1 and 2 (``fmt``: every generic test runs for both, uncompressed and
compressed)."""

from __future__ import annotations

import io
import re
import struct
import zlib
from collections.abc import Iterator

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekit.statefmt import layout
from statekit.statefmt.encoding import BlockCodec, WriteFormat, writing_format
from statekit.statefmt.errors import CorruptStateError, UnsupportedVersionError
from statekit.statefmt.statefile import (
    StateFileReader,
    StateFileWriter,
    keyed_schema,
    operator_schema,
    verify_state_stream,
)

PATH = "/sp/op/s/00000-of-00001.sks"
FORMATS = [WriteFormat(1), WriteFormat(2), WriteFormat(2, "zstd"), WriteFormat(2, "lz4")]
V1 = WriteFormat(1)


@pytest.fixture(params=FORMATS, ids=lambda f: f"v{f.version}-{f.compression}", autouse=True)
def fmt(request: pytest.FixtureRequest) -> Iterator[WriteFormat]:
    with writing_format(request.param):
        yield request.param


def keyed_batch(keys: list[bytes], value: bytes = b"v") -> pa.RecordBatch:
    n = len(keys)
    return pa.record_batch(
        [pa.array([0] * n, pa.uint32()), pa.array(keys, pa.binary()), pa.array([b""] * n, pa.binary()),
         pa.array([None] * n, pa.binary()), pa.array([value] * n, pa.binary()), pa.array([None] * n, pa.int64())],
        schema=keyed_schema(),
    )


def write_file(groups: dict[int, list[bytes]]) -> tuple[bytes, int, str]:
    out = io.BytesIO()
    writer = StateFileWriter(out, layout.FILE_KIND_KEYED, path=PATH)
    for key_group in sorted(groups):
        writer.write_block(key_group, keyed_batch(groups[key_group]))
    summary = writer.finish()
    data = out.getvalue()
    assert summary.size == len(data)
    assert summary.checksum == f"crc32:{zlib.crc32(data):08x}"
    assert summary.entries == sum(len(k) for k in groups.values())
    assert summary.blocks == sum(1 for k in groups.values() if k)
    return data, summary.size, summary.checksum


def open_reader(data: bytes) -> StateFileReader:
    return StateFileReader(io.BytesIO(data), len(data), path=PATH)


def test_layout_header_index_footer(fmt: WriteFormat) -> None:
    data, size, _ = write_file({2: [b"a", b"b"], 5: [b"c"]})
    magic, version, kind, field1, field2 = layout.STATE_FILE_HEADER.unpack_from(data, 0)
    header_size = 16
    if fmt.version == 1:
        assert (magic, version, kind, field1, field2) == (b"STKSTAT\x01", 1, 1, 0, 0)
    else:
        assert (magic, version, kind, field1) == (b"STKSTAT\x01", 2, 1, layout.COMPRESSION_IDS[fmt.compression])
        header_size = 16 + field2 + (-(16 + field2) % 8)
        assert pa.ipc.read_schema(pa.py_buffer(data[16:16 + field2])).equals(keyed_schema())
        assert header_size % 8 == 0 and not any(data[16 + field2:header_size])
    index_offset, count, index_crc, body_crc, end_magic = layout.STATE_FILE_FOOTER.unpack_from(data, size - 28)
    assert end_magic == b"STKEND\x00\x01" and count == 2
    assert index_offset == size - 28 - 2 * 32
    assert index_crc == zlib.crc32(data[index_offset:size - 28])
    assert body_crc == zlib.crc32(data[:size - 28])
    reader = open_reader(data)
    assert reader.key_groups == [2, 5] and reader.entries == 3 and reader.kind == layout.FILE_KIND_KEYED
    first = reader.entry(2)
    assert first is not None and first.offset == header_size and first.entries == 2
    assert first.checksum == zlib.crc32(data[first.offset:first.offset + first.length])


@pytest.mark.parametrize("fmt", [WriteFormat(2), WriteFormat(2, "zstd")], indirect=True, ids=["v2-none", "v2-zstd"])
def test_version_2_blocks_store_only_the_columns_in_use(fmt: WriteFormat) -> None:
    data, _, _ = write_file({3: [b"a", b"b"]})
    reader = open_reader(data)
    entry = reader.entry(3)
    assert entry is not None
    block = data[entry.offset:entry.offset + entry.length]
    assert block[:8] == bytes(8)  # no namespace, user key or expiry stored
    batch = reader.read_block(3)
    assert batch is not None and batch.schema.equals(keyed_schema())
    assert batch.column("namespace").to_pylist() == [b"", b""]
    assert batch.column("user_key").to_pylist() == [None, None] and batch.column("expiry").to_pylist() == [None, None]
    full = pa.record_batch([pa.array([0, 0], pa.uint32()), pa.array([b"a", b"b"]), pa.array([b"n", b""]),
                            pa.array([b"u", None]), pa.array([b"v", b"w"]), pa.array([None, 5], pa.int64())],
                           schema=keyed_schema())
    codec = BlockCodec.for_writing(layout.FILE_KIND_KEYED, full.schema, fmt)
    encoded = codec.encode(full)
    assert encoded[0] == 7 and codec.decode(encoded, path=PATH).equals(full)


def test_empty_file(fmt: WriteFormat) -> None:
    data, size, _ = write_file({})
    reader = open_reader(data)
    assert size == reader.header_size + 28 and (fmt.version == 2 or size == 44)
    assert reader.index == () and list(reader.iter_blocks()) == []
    assert verify_state_stream(io.BytesIO(data), PATH, size, None) == ([], 0)


@settings(max_examples=30, deadline=None)
@given(st.dictionaries(st.integers(0, 200), st.lists(st.binary(max_size=8), min_size=1, max_size=5), max_size=8),
       st.data())
def test_random_access_to_any_key_group(groups: dict[int, list[bytes]], data: st.DataObject) -> None:
    raw, _, _ = write_file(groups)
    reader = open_reader(raw)
    assert reader.key_groups == sorted(groups)
    for key_group, keys in groups.items():
        batch = reader.read_block(key_group)
        assert batch is not None and batch.column("key").to_pylist() == keys
    assert reader.read_block(201) is None and reader.read_block_bytes(201) is None
    wanted = data.draw(st.sets(st.integers(0, 200)))
    assert [kg for kg, _ in reader.iter_blocks(wanted)] == sorted(wanted & set(groups))
    assert [e.key_group for e, _ in reader.iter_raw_blocks(wanted)] == sorted(wanted & set(groups))


def test_raw_blocks_copy_into_an_identical_file() -> None:
    original, _, checksum = write_file({1: [b"a"], 3: [b"b", b"c"]})
    source = open_reader(original)
    out = io.BytesIO()
    writer = StateFileWriter(out, layout.FILE_KIND_KEYED, codec=source.codec)
    for entry, block in source.iter_raw_blocks():
        writer.write_raw_block(entry.key_group, block, entry.entries, entry.checksum)
    assert writer.finish().checksum == checksum and out.getvalue() == original


def test_copied_runs_get_the_checksum_of_their_bytes() -> None:
    original, _, checksum = write_file({1: [b"a"], 3: [b"b", b"c"], 9: [b"d"]})
    source = open_reader(original)
    out = io.BytesIO()
    writer = StateFileWriter(out, layout.FILE_KIND_KEYED, codec=source.codec)
    start, end = source.index[0].offset, source.index[-1].offset + source.index[-1].length
    out.write(original[start:end])  # what a kernel copy of the run writes
    writer.add_copied_blocks(source.index, zlib.crc32(original[start:end]))
    assert writer.finish().checksum == checksum and out.getvalue() == original


def test_a_copied_block_needs_the_codec_of_its_file() -> None:
    writer = StateFileWriter(io.BytesIO(), layout.FILE_KIND_KEYED)
    with pytest.raises(ValueError, match="needs the codec"):
        writer.write_raw_block(1, b"x", 1, zlib.crc32(b"x"))


def test_key_groups_must_ascend_and_finish_once() -> None:
    writer = StateFileWriter(io.BytesIO(), layout.FILE_KIND_KEYED)
    writer.write_block(4, keyed_batch([b"a"]))
    with pytest.raises(ValueError, match="key group 4 written after 4"):
        writer.write_block(4, keyed_batch([b"b"]))
    with pytest.raises(ValueError, match="key group 2 written after 4"):
        writer.write_block(2, keyed_batch([b"b"]))
    writer.write_block(3, keyed_batch([]))  # empty batches are skipped, order is not checked
    writer.finish()
    with pytest.raises(ValueError, match="already finished"):
        writer.finish()


def test_operator_file() -> None:
    out = io.BytesIO()
    writer = StateFileWriter(out, layout.FILE_KIND_OPERATOR)
    batch = pa.record_batch([pa.array([None, None], pa.binary()), pa.array([b"1", b"2"])], schema=operator_schema())
    writer.write_block(layout.OPERATOR_BLOCK_GROUP, batch)
    writer.finish()
    reader = open_reader(out.getvalue())
    assert reader.kind == layout.FILE_KIND_OPERATOR
    assert [b.column("value").to_pylist() for _, b in reader.iter_blocks()] == [[b"1", b"2"]]


# ---------------------------------------------------------------- damage


def flip(data: bytes, position: int, bit: int = 0) -> bytes:
    damaged = bytearray(data)
    damaged[position] ^= 1 << bit
    return bytes(damaged)


def test_block_checksum_names_file_and_key_group() -> None:
    data, _, _ = write_file({1: [b"a"], 7: [b"b"]})
    entry = open_reader(data).entry(7)
    assert entry is not None
    reader = open_reader(flip(data, entry.offset + 5))
    assert reader.read_block(1) is not None  # other key groups stay readable
    with pytest.raises(CorruptStateError, match=f"^{PATH}: key group 7: block checksum mismatch$") as info:
        reader.read_block(7)
    assert info.value.key_group == 7 and info.value.path == PATH


@pytest.mark.parametrize(
    ("where", "cause"),
    [
        (0, "bad magic"),
        (10, "unknown file kind"),
        (-1, "damaged or truncated footer"),  # end magic
        (-28, "damaged or truncated footer"),  # index offset
        (-20, "damaged or truncated footer"),  # index count
        (-16, "index checksum mismatch"),  # index crc
        (-40, "index checksum mismatch"),  # inside the index
    ],
)
def test_structural_damage_on_open(where: int, cause: str) -> None:
    data, size, _ = write_file({1: [b"a"], 7: [b"b"]})
    with pytest.raises(CorruptStateError, match=cause) as info:
        open_reader(flip(data, where % size))
    assert info.value.path == PATH and info.value.key_group is None


def test_version_is_checked() -> None:
    data, _, _ = write_file({1: [b"a"]})
    damaged = bytearray(data)
    damaged[8] = 3
    with pytest.raises(UnsupportedVersionError, match=r"state file version 3 is not supported \(known: 1, 2\)"):
        open_reader(bytes(damaged))


@pytest.mark.parametrize("where", [11, 12, 15, -12, -9])  # reserved header bytes, the footer's body CRC
def test_damage_no_block_covers_is_found_by_a_full_read(fmt: WriteFormat, where: int) -> None:
    data, size, _ = write_file({1: [b"a"], 7: [b"b"]})
    damaged = flip(data, where % size)
    if fmt.version == 2 and where > 0:  # the compression and schema length fields
        try:
            open_reader(damaged)
        except CorruptStateError as exc:
            assert re.search("compression|schema|canonical", str(exc))
            return  # refused on open
    reader = open_reader(damaged)
    assert reader.read_block(7) is not None  # a partial read cannot see it
    with pytest.raises(CorruptStateError, match="file checksum mismatch in the footer"):
        list(open_reader(damaged).iter_blocks())
    with pytest.raises(CorruptStateError, match="file checksum mismatch in the footer"):
        list(open_reader(damaged).iter_raw_blocks())
    problems, _ = verify_state_stream(io.BytesIO(damaged), PATH, None, None)
    assert [str(p) for p in problems] == [f"{PATH}: file checksum mismatch in the footer: header, index or footer damaged"]


V2_FORMATS = [f for f in FORMATS if f.version == 2]


@pytest.mark.parametrize("fmt", V2_FORMATS, indirect=True, ids=lambda f: f"v2-{f.compression}")
@pytest.mark.parametrize("change", ["schema byte", "schema length + 8", "schema length - 8"])
def test_version_2_header_must_be_canonical(fmt: WriteFormat, change: str) -> None:
    data = bytearray(write_file({1: [b"a"]})[0])
    length = layout.STATE_FILE_HEADER.unpack_from(data, 0)[4]
    if change == "schema byte":
        data[16 + length - 9] ^= 0x40
    else:
        struct.pack_into("<I", data, 12, length + (8 if change.endswith("+ 8") else -8))
    with pytest.raises(CorruptStateError, match="header"):
        open_reader(bytes(data))


@pytest.mark.parametrize("length", [0, 10, 43, 100])
def test_truncated_file(length: int) -> None:
    data, size, checksum = write_file({1: [b"a"], 7: [b"b"]})
    with pytest.raises(CorruptStateError, match="truncated|damaged or truncated footer|more than the file holds"):
        StateFileReader(io.BytesIO(data[:length]), length, path=PATH)
    problems, blocks = verify_state_stream(io.BytesIO(data[:length]), PATH, size, checksum)
    messages = [str(p) for p in problems]
    assert blocks == 0
    assert messages[0] == f"{PATH}: size {length} differs from the recorded {size}"
    assert any("differs from the recorded crc32" in m for m in messages)


def test_reader_refuses_a_size_that_lies() -> None:
    data, size, _ = write_file({1: [b"a"]})
    with pytest.raises(CorruptStateError, match="truncated: wanted"):
        StateFileReader(io.BytesIO(data[:-10]), size, path=PATH)


def test_verify_reports_every_damaged_block() -> None:
    data, size, checksum = write_file({1: [b"a"], 4: [b"b"], 7: [b"c"]})
    reader = open_reader(data)
    damaged = data
    for kg in (1, 7):
        entry = reader.entry(kg)
        assert entry is not None
        damaged = flip(damaged, entry.offset + entry.length // 2)
    problems, blocks = verify_state_stream(io.BytesIO(damaged), PATH, size, checksum)
    assert blocks == 3
    assert [(p.key_group, str(p).split(": ", 1)[1]) for p in problems] == [
        (None, f"file checksum crc32:{zlib.crc32(damaged):08x} differs from the recorded {checksum}"),
        (1, "key group 1: block checksum mismatch"),
        (7, "key group 7: block checksum mismatch"),
    ]


@pytest.mark.parametrize("garbage", [b"\x00" * 24, b"\x00" * 8 + b"\xff" * 16, b"\x01\x01" + bytes(22), b"\x80" + bytes(23)])
def test_block_with_a_valid_checksum_but_undecodable_bytes(garbage: bytes) -> None:
    out = io.BytesIO()
    codec = BlockCodec.for_writing(layout.FILE_KIND_KEYED, None, WriteFormat(2) if garbage[0] else V1)
    writer = StateFileWriter(out, layout.FILE_KIND_KEYED, codec=codec)
    writer.write_raw_block(3, garbage, 1, zlib.crc32(garbage))
    summary = writer.finish()
    reader = open_reader(out.getvalue())
    with pytest.raises(CorruptStateError, match="key group 3: block (does not decode|prefix)"):
        reader.read_block(3)
    problems, _ = verify_state_stream(io.BytesIO(out.getvalue()), PATH, summary.size, summary.checksum)
    assert [p.key_group for p in problems] == [3]


def test_a_block_whose_rows_disagree_with_its_index_entry() -> None:
    source = open_reader(write_file({3: [b"a", b"b"]})[0])
    out = io.BytesIO()
    writer = StateFileWriter(out, layout.FILE_KIND_KEYED, codec=source.codec)
    ((entry, block),) = source.iter_raw_blocks()
    writer.write_raw_block(3, block, 5, entry.checksum)
    writer.finish()
    with pytest.raises(CorruptStateError, match="key group 3: block holds 2 entries, its index entry 5"):
        open_reader(out.getvalue()).read_block(3)


def test_header_constants() -> None:
    assert layout.STATE_FILE_HEADER.size == 16 and layout.STATE_FILE_FOOTER.size == 28
    assert layout.INDEX_ENTRY.size == 32 and struct.calcsize("<8sIQ") == layout.METADATA_HEADER.size
