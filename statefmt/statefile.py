"""The state file codec: key-group blocks, an index, a footer, checksums everywhere.

Layout (little-endian; constants in :mod:`statekit.statefmt.layout`)::

    header | block* | index(32 * n) | footer(28)

A block holds the entries of one key group, encoded as its file's
:class:`~statekit.statefmt.encoding.BlockCodec` says (format version 1: one Arrow IPC
record-batch message of a fixed schema; version 2: the schema is in the header, blocks may
hold typed value columns and be compressed). Invariants:

* blocks appear in strictly ascending key-group order and are byte ranges that can be
  copied unchanged into another file with the same header bytes (rescale with the same
  max parallelism);
* every block has a CRC-32 in the index; the footer has the CRC-32 of the index and of all
  bytes before the index; ``_metadata`` has the CRC-32 and size of the whole file;
* a reader fetches one key group with three reads (footer, index, block) after the header.

pyarrow is imported lazily: listing checkpoints never loads it.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from statekit.statefmt import layout
from statekit.statefmt.checksum import Crc32, crc32, crc32_combine, format_checksum
from statekit.statefmt.encoding import (
    KEYED_COLUMNS,
    OPERATOR_COLUMNS,
    BlockCodec,
    WriteFormat,
    consecutive,
    current_write_format,
    keyed_schema,
    operator_schema,
)
from statekit.statefmt.errors import CorruptStateError, UnsupportedVersionError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "IndexEntry",
    "FileSummary",
    "StateFileWriter",
    "StateFileReader",
    "BlockCodec",
    "keyed_schema",
    "operator_schema",
    "encode_block",
    "decode_block",
    "verify_state_stream",
    "KEYED_COLUMNS",
    "OPERATOR_COLUMNS",
]


# From this many bytes a written block's CRC is folded into the file's by crc32_combine
# (~50 us) instead of hashing its bytes a second time.
_COMBINE_FROM = 64 << 10


def schema_for(kind: int) -> pa.Schema:
    """The fixed block schema of a version 1 file of ``kind``."""
    return keyed_schema() if kind == layout.FILE_KIND_KEYED else operator_schema()


@dataclass(frozen=True)
class IndexEntry:
    key_group: int
    offset: int
    length: int
    entries: int
    checksum: int


@dataclass(frozen=True)
class FileSummary:
    """What ``_metadata`` records about a finished file."""

    size: int
    checksum: str
    entries: int
    blocks: int


def encode_block(batch: pa.RecordBatch) -> bytes:
    """One record batch as a version 1 block (an IPC message; its schema is implied)."""
    return batch.serialize().to_pybytes()  # type: ignore[no-any-return]


def decode_block(data: bytes, kind: int, *, path: str, key_group: int) -> pa.RecordBatch:
    """Decode and fully validate one version 1 block; malformed bytes raise CorruptStateError."""
    return BlockCodec(1, kind).decode(data, path=path, key_group=key_group)


class StateFileWriter:
    """Writes one state file to a binary stream, block by block, in key-group order.

    The header is written with the first block: its codec comes from ``codec`` (copying
    blocks from a file with that header) or from the first batch's schema and ``fmt``
    (default :func:`~statekit.statefmt.encoding.current_write_format`).
    """

    def __init__(self, out: IO[bytes], kind: int, *, path: str = "", codec: BlockCodec | None = None,
                 fmt: WriteFormat | None = None) -> None:
        self._out = out
        self._kind = kind
        self._path = path
        self._fmt = fmt
        self._crc = Crc32()
        self._index: list[IndexEntry] = []
        self._finished = False
        self.codec: BlockCodec | None = None
        if codec is not None:
            if codec.kind != kind:
                raise ValueError(f"codec of file kind {codec.kind} for a file of kind {kind}")
            self._start(codec)

    def _start(self, codec: BlockCodec) -> None:
        self.codec = codec
        self._write(codec.header)

    def _write(self, data: bytes | memoryview | pa.Buffer) -> None:
        self._out.write(data)
        self._crc.update(data)

    @property
    def entries(self) -> int:
        return sum(e.entries for e in self._index)

    @property
    def position(self) -> int:
        """Bytes written so far (the offset the next block starts at)."""
        return self._crc.size

    def write_block(self, key_group: int, batch: pa.RecordBatch) -> None:
        """Append the entries of one key group (already sorted; empty batches are skipped)."""
        if not batch.num_rows:
            return
        if self.codec is None:
            self._start(BlockCodec.for_writing(self._kind, batch.schema, self._fmt or current_write_format()))
        assert self.codec is not None
        self._write_parts(key_group, batch.num_rows, self.codec.encode_parts(batch))

    def write_blocks(self, groups: Iterable[tuple[int, pa.RecordBatch]]) -> None:
        """:meth:`write_block` of every ``(key group, batch)`` in turn (the same bytes); runs
        of batches that are consecutive slices of one batch (the blocks of a sorted table)
        are encoded together (:meth:`BlockCodec.encode_many`)."""
        run: list[tuple[int, pa.RecordBatch]] = []
        for key_group, batch in groups:
            if not batch.num_rows:
                continue
            if run and not consecutive(run[-1][1], batch):
                self._write_run(run)
                run = []
            run.append((key_group, batch))
        if run:
            self._write_run(run)

    def _write_run(self, run: list[tuple[int, pa.RecordBatch]]) -> None:
        if self.codec is None:
            self._start(BlockCodec.for_writing(self._kind, run[0][1].schema, self._fmt or current_write_format()))
        assert self.codec is not None
        for (key_group, batch), parts in zip(run, self.codec.encode_many([b for _, b in run])):
            self._write_parts(key_group, batch.num_rows, parts)

    def _write_parts(self, key_group: int, entries: int, parts: tuple[bytes | pa.Buffer, ...]) -> None:
        checksum = 0
        for part in parts:
            checksum = crc32(part, checksum)
        length = sum(len(part) for part in parts)
        self._append(key_group, self._crc.size, length, entries, checksum)
        if length < _COMBINE_FROM:
            for part in parts:
                self._write(part)
            return
        for part in parts:  # the file's CRC continues from the block's: its bytes are not hashed again
            self._out.write(part)
        self._crc.combine(checksum, length)

    def write_raw_block(self, key_group: int, data: bytes | memoryview, entries: int, checksum: int) -> None:
        """Append a block copied whole from another file with this file's header (its
        checksum already known)."""
        self._append(key_group, self._crc.size, len(data), entries, checksum)
        self._write(data)

    def _append(self, key_group: int, offset: int, length: int, entries: int, checksum: int) -> None:
        if self.codec is None:
            raise ValueError("a copied block needs the codec of the file it comes from (StateFileWriter(codec=...))")
        if self._index and key_group <= self._index[-1].key_group:
            raise ValueError(f"key group {key_group} written after {self._index[-1].key_group}")
        self._index.append(IndexEntry(key_group, offset, length, entries, checksum))

    def add_copied_blocks(self, blocks: Iterable[IndexEntry], run_checksum: int) -> None:
        """Account for blocks the caller wrote to the output itself, contiguously from
        :attr:`position` (a kernel copy of a run of blocks): their index entries are
        re-based here and ``run_checksum`` is the CRC-32 of the whole run."""
        start = offset = self._crc.size
        for e in blocks:
            self._append(e.key_group, offset, e.length, e.entries, e.checksum)
            offset += e.length
        self._crc.combine(run_checksum, offset - start)

    def finish(self) -> FileSummary:
        """Write index and footer; return size, whole-file checksum and entry count."""
        if self._finished:
            raise ValueError("state file already finished")
        self._finished = True
        if self.codec is None:
            self._start(BlockCodec.for_writing(self._kind, None, self._fmt or current_write_format()))
        index_offset = self._crc.size
        index = b"".join(
            layout.INDEX_ENTRY.pack(e.key_group, e.offset, e.length, e.entries, e.checksum)
            for e in self._index
        )
        self._write(index)
        body_crc = self._crc.value & 0xFFFFFFFF
        self._write(
            layout.STATE_FILE_FOOTER.pack(
                index_offset, len(self._index), crc32(index), body_crc, layout.STATE_FILE_FOOTER_MAGIC
            )
        )
        return FileSummary(self._crc.size, self._crc.checksum, self.entries, len(self._index))


class StateFileReader:
    """Random access to the blocks of one state file through a seekable binary stream."""

    def __init__(self, stream: IO[bytes], size: int, *, path: str) -> None:
        self._stream = stream
        self.path = path
        self.size = size
        # CRC of the bytes read in order from offset 0 (header, then blocks): once it reaches
        # the index, the footer's CRC of header..index can be checked (see check_body).
        self._seq_crc = 0
        self._seq_pos = 0
        self.codec: BlockCodec
        self.kind, self.index = self._read_index()
        self._by_group = {e.key_group: e for e in self.index}

    def _corrupt(self, message: str) -> CorruptStateError:
        return CorruptStateError(message, path=self.path)

    def _read_at(self, offset: int, length: int) -> bytes:
        self._stream.seek(offset)
        data = self._stream.read(length)
        if len(data) != length:
            raise self._corrupt(f"truncated: wanted {length} bytes at offset {offset}, got {len(data)}")
        return bytes(data)

    def _read_index(self) -> tuple[int, tuple[IndexEntry, ...]]:
        header_size, footer_size = layout.STATE_FILE_HEADER.size, layout.STATE_FILE_FOOTER.size
        if self.size < header_size + footer_size:
            raise self._corrupt(f"truncated: {self.size} bytes is shorter than header and footer")
        # version 1 readers ignore the reserved header bytes: the footer's CRC covers them
        self.codec, header = BlockCodec.read(self._read_at, self.size, path=self.path)
        self._seq_crc, self._seq_pos = crc32(header), len(header)
        footer = self._read_at(self.size - footer_size, footer_size)
        index_offset, count, index_crc, body_crc, end_magic = layout.STATE_FILE_FOOTER.unpack(footer)
        entry_size = layout.INDEX_ENTRY.size
        if end_magic != layout.STATE_FILE_FOOTER_MAGIC or index_offset + count * entry_size != self.size - footer_size:
            raise self._corrupt("damaged or truncated footer")
        if index_offset < len(header):
            raise self._corrupt("damaged footer: the index starts inside the header")
        raw = self._read_at(index_offset, count * entry_size)
        if crc32(raw) != index_crc:
            raise self._corrupt("index checksum mismatch")
        self._index_raw, self._index_offset, self._body_crc = raw, index_offset, body_crc
        self._header_crc, self._footer = self._seq_crc, footer
        entries = tuple(IndexEntry(*layout.INDEX_ENTRY.unpack_from(raw, i * entry_size)) for i in range(count))
        position, previous = len(header), -1
        for e in entries:
            if e.offset != position or e.key_group <= previous:
                raise self._corrupt(f"index entry for key group {e.key_group} is inconsistent")
            position, previous = e.offset + e.length, e.key_group
        if position != index_offset:
            raise self._corrupt("blocks do not end where the index starts")
        return self.codec.kind, entries

    @property
    def header_size(self) -> int:
        return self.codec.header_size

    @property
    def entries(self) -> int:
        return sum(e.entries for e in self.index)

    @property
    def key_groups(self) -> list[int]:
        return [e.key_group for e in self.index]

    def entry(self, key_group: int) -> IndexEntry | None:
        return self._by_group.get(key_group)

    def read_block_bytes(self, key_group: int) -> bytes | None:
        """The verified bytes of one key group's block, or None if the file has none."""
        entry = self._by_group.get(key_group)
        if entry is None:
            return None
        data = self._read_at(entry.offset, entry.length)
        if crc32(data) != entry.checksum:
            raise CorruptStateError("block checksum mismatch", path=self.path, key_group=key_group)
        if entry.offset == self._seq_pos:
            self._seq_crc, self._seq_pos = crc32(data, self._seq_crc), self._seq_pos + entry.length
        return data

    def check_body(self) -> None:
        """After every block was read in order: check the footer's CRC of header..index.

        Catches damage no block CRC covers (reserved header bytes, the footer's own CRC
        field). A no-op unless the blocks were read sequentially from the first.
        """
        if self._seq_pos == self._index_offset and crc32(self._index_raw, self._seq_crc) != self._body_crc:
            raise self._corrupt("file checksum mismatch in the footer: header, index or footer damaged")

    def indexed_checksum(self) -> str:
        """The whole file's CRC-32 as its header, its index's block CRCs, the index and the footer
        give it (``crc32:xxxxxxxx``), no block read: equal to the one ``_metadata`` records for
        an intact file. So when it matches, the header, index and footer are the bytes written,
        and each block's bytes are checked by the CRC its index entry holds when they are read."""
        running = self._header_crc
        for e in self.index:
            running = crc32_combine(running, e.checksum, e.length)
        return format_checksum(crc32(self._footer, crc32(self._index_raw, running)))

    def check_indexed_checksum(self, expected: str) -> None:
        """Raise unless :meth:`indexed_checksum` is ``expected`` (the file's CRC-32 in ``_metadata``).

        Raises:
            CorruptStateError: The header, the index or the footer differ from the bytes written.
        """
        found = self.indexed_checksum()
        if found != expected:
            raise self._corrupt(f"file checksum {found} (from its header, index and footer) differs from the "
                                f"recorded {expected}: header, index or footer damaged")

    def read_block(self, key_group: int) -> pa.RecordBatch | None:
        data = self.read_block_bytes(key_group)
        return None if data is None else self.decode(key_group, data)

    def decode(self, key_group: int, data: bytes) -> pa.RecordBatch:
        """Decode verified block bytes of ``key_group``; its row count must match the index."""
        batch = self.codec.decode(data, path=self.path, key_group=key_group)
        entry = self._by_group[key_group]
        if batch.num_rows != entry.entries:
            raise CorruptStateError(f"block holds {batch.num_rows} entries, its index entry {entry.entries}",
                                    path=self.path, key_group=key_group)
        return batch

    def iter_blocks(self, key_groups: Iterable[int] | None = None) -> Iterator[tuple[int, pa.RecordBatch]]:
        """Decoded blocks in key-group order, restricted to ``key_groups`` when given."""
        wanted = None if key_groups is None else set(key_groups)
        for e in self.index:
            if wanted is None or e.key_group in wanted:
                batch = self.read_block(e.key_group)
                assert batch is not None
                yield e.key_group, batch
        if wanted is None:
            self.check_body()

    def iter_raw_blocks(self, key_groups: Iterable[int] | None = None) -> Iterator[tuple[IndexEntry, bytes]]:
        wanted = None if key_groups is None else set(key_groups)
        for e in self.index:
            if wanted is None or e.key_group in wanted:
                data = self.read_block_bytes(e.key_group)
                assert data is not None
                yield e, data
        if wanted is None:
            self.check_body()


def verify_state_stream(stream: IO[bytes], path: str, expected_size: int | None, expected_checksum: str | None,
                        chunk_size: int = 1 << 20, *, kind: int | None = None,
                        key_groups: Container[int] | None = None,
                        entries: int | None = None) -> tuple[list[CorruptStateError], int]:
    """Every check on one file: size, whole-file CRC, footer, index and every block.

    With ``kind`` and ``key_groups`` (the subtask's range), also that the file is of the
    state's kind and holds only blocks of that range; with ``entries``, that its index
    holds that many entries. Returns the problems found (empty when the file is intact)
    and the number of blocks checked; never raises for damage. Reads at most
    ``expected_size + 1`` bytes for the whole-file CRC (one more tells a longer file).
    """
    problems: list[CorruptStateError] = []
    stream.seek(0)
    running = Crc32()
    budget = None if expected_size is None else expected_size + 1
    while budget is None or budget > 0:
        chunk = stream.read(chunk_size if budget is None else min(chunk_size, budget))
        if not chunk:
            break
        running.update(chunk)
        if budget is not None:
            budget -= len(chunk)
    size = running.size
    if budget == 0:  # longer than recorded: its real size is what the index must match
        stream.seek(0, 2)
        size = stream.tell()
    if expected_size is not None and size != expected_size:
        problems.append(CorruptStateError(f"size {size} differs from the recorded {expected_size}", path=path))
    if expected_checksum is not None and running.checksum != expected_checksum:
        problems.append(CorruptStateError(f"file checksum {running.checksum} differs from the recorded {expected_checksum}", path=path))
    try:
        reader = StateFileReader(stream, size, path=path)
    except CorruptStateError as exc:
        problems.append(exc)
        return problems, 0
    except UnsupportedVersionError as exc:
        problems.append(CorruptStateError(str(exc).removeprefix(f"{path}: "), path=path))
        return problems, 0
    if entries is not None and reader.entries != entries:
        problems.append(CorruptStateError(
            f"its index holds {reader.entries} entries, _metadata records {entries}", path=path))
    if kind is not None and reader.kind != kind:
        problems.append(CorruptStateError(
            f"file kind {reader.kind} differs from the state's kind {kind} (1 keyed, 2 operator): another state's file",
            path=path))
    for e in reader.index:
        if key_groups is not None and e.key_group not in key_groups:
            problems.append(CorruptStateError("block outside the subtask's key-group range", path=path,
                                              key_group=e.key_group))
        try:
            data = reader.read_block_bytes(e.key_group)
            assert data is not None
            reader.decode(e.key_group, data)
        except CorruptStateError as exc:
            problems.append(exc)
    try:
        reader.check_body()
    except CorruptStateError as exc:
        problems.append(exc)
    return problems, len(reader.index)

