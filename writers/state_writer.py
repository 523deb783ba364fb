"""Write state files and commit snapshots: the only way bytes of state reach storage.

Commit protocol: every state file is written completely (fsynced, renamed into place)
before ``_metadata``; ``_metadata`` is published last and atomically. A reader that sees
``_metadata`` therefore sees every file it names.

Copies (:func:`copy_state_file`, :func:`write_block_runs`) move bytes between local files
with the kernel's copy (``os.copy_file_range``, else ``os.sendfile``) and check them by
reading the source once more from the page cache (every block's CRC-32, or the whole
file's); the checksum of an assembled file is combined from the blocks' CRC-32s
(:func:`statekit.statefmt.checksum.crc32_combine`), never recomputed over its bytes.
Elsewhere (object stores, mixed filesystems) bytes stream through in large buffered
chunks and are checked on the way.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from statekit.statefmt import layout
from statekit.statefmt.checksum import Crc32, crc32, crc32_combine
from statekit.statefmt.encoding import BlockCodec
from statekit.statefmt.errors import CorruptStateError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.metadata import CheckpointMetadata, StateFile, serialize_metadata
from statekit.statefmt.statefile import IndexEntry, StateFileReader, StateFileWriter

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["write_keyed_file", "write_raw_keyed_file", "write_operator_file", "commit_metadata", "copy_state_file",
           "BlockRun", "write_block_runs", "COPY_CHUNK"]

# Buffered copies and checks move this much at a time (also the largest buffer they hold).
COPY_CHUNK = 8 << 20
# Below this many bytes a block's CRC is folded into a run's by hashing its bytes again
# (cheaper than the arithmetic of crc32_combine, ~35 us).
_REHASH_BELOW = 32 << 10


def write_keyed_file(
    io: FileIO, directory: str, relative: str, state: str, groups: Iterable[tuple[int, pa.RecordBatch]]
) -> StateFile:
    """Write ``(key group, sorted batch)`` blocks (key groups ascending) as one keyed file."""
    with io.open_output(posixpath.join(directory, relative)) as out:
        writer = StateFileWriter(out, layout.FILE_KIND_KEYED, path=relative)
        writer.write_blocks(groups)
        summary = writer.finish()
    return StateFile(state, relative, summary.size, summary.checksum, summary.entries)


def write_raw_keyed_file(
    io: FileIO, directory: str, relative: str, state: str, blocks: Iterable[tuple[IndexEntry, bytes]],
    codec: BlockCodec,
) -> StateFile:
    """Assemble a keyed file from whole blocks of files whose header is ``codec``'s (no decoding)."""
    with io.open_output(posixpath.join(directory, relative)) as out:
        writer = StateFileWriter(out, layout.FILE_KIND_KEYED, path=relative, codec=codec)
        for entry, data in blocks:
            writer.write_raw_block(entry.key_group, data, entry.entries, entry.checksum)
        summary = writer.finish()
    return StateFile(state, relative, summary.size, summary.checksum, summary.entries)


@dataclass(frozen=True)
class BlockRun:
    """Consecutive blocks of one source file: ``blocks`` are index entries of that file,
    contiguous and in key-group order; the file's header equals the target's."""

    path: str
    url: str
    blocks: tuple[IndexEntry, ...]

    @property
    def offset(self) -> int:
        return self.blocks[0].offset

    @property
    def length(self) -> int:
        return sum(b.length for b in self.blocks)


def write_block_runs(
    io: FileIO, directory: str, relative: str, state: str, codec: BlockCodec, src_io: FileIO,
    runs: Sequence[BlockRun], *, on_bytes: Callable[[str, int], None] | None = None,
) -> StateFile:
    """A keyed file of ``codec``'s header and the blocks of ``runs``, in order: each run is
    copied whole (by the kernel between local files), every block checked against its
    CRC-32 from the source, and the file's checksum combined from the blocks'.

    A damaged source block raises :class:`CorruptStateError` naming the source file and
    key group; the output file then never appears."""
    with io.open_output(posixpath.join(directory, relative)) as out:
        writer = StateFileWriter(out, layout.FILE_KIND_KEYED, path=relative, codec=codec)
        for run in runs:
            with src_io.open_input(run.path) as source:
                _copy_run(source, out, writer, run)
            if on_bytes:
                on_bytes(run.url, run.length)
        summary = writer.finish()
    return StateFile(state, relative, summary.size, summary.checksum, summary.entries)


def _copy_run(source: IO[bytes], out: IO[bytes], writer: StateFileWriter, run: BlockRun) -> None:
    if _kernel_copy(source, out, run.offset, run.length, run.url):
        writer.add_copied_blocks(run.blocks, _checked_run(source.fileno(), run))
        return
    source.seek(run.offset)
    for block in run.blocks:  # buffered: read, check, write one block at a time
        data = source.read(block.length)
        if len(data) != block.length:
            raise CorruptStateError(f"truncated: block of {block.length} bytes at offset {block.offset}",
                                    path=run.url, key_group=block.key_group)
        if crc32(data) != block.checksum:
            raise CorruptStateError("block checksum mismatch", path=run.url, key_group=block.key_group)
        writer.write_raw_block(block.key_group, data, block.entries, block.checksum)


def _checked_run(fd: int, run: BlockRun) -> int:
    """Read a copied run back from the source (page cache): every block's CRC-32 must match
    its index entry; returns the CRC-32 of the whole run."""
    buffer = bytearray(min(COPY_CHUNK, max((b.length for b in run.blocks), default=0)) or 1)
    view = memoryview(buffer)
    running = 0
    for block in run.blocks:
        checksum, offset, left = 0, block.offset, block.length
        while left:
            n = os.preadv(fd, [view[:min(left, len(view))]], offset)
            if n <= 0:
                raise CorruptStateError(f"truncated: block of {block.length} bytes at offset {block.offset}",
                                        path=run.url, key_group=block.key_group)
            checksum = crc32(view[:n], checksum)
            if block.length < _REHASH_BELOW:
                running = crc32(view[:n], running)
            offset, left = offset + n, left - n
        if checksum != block.checksum:
            raise CorruptStateError("block checksum mismatch", path=run.url, key_group=block.key_group)
        if block.length >= _REHASH_BELOW:
            running = crc32_combine(running, checksum, block.length)
    return running


# errno values that mean "this way of copying does not apply here" (not damage, not a full disk)
_KERNEL_COPY_FAILURES = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF, errno.ENOTSUP}


def _kernel_copy(source: IO[bytes], out: IO[bytes], offset: int, length: int, url: str) -> bool:
    """Append ``length`` bytes of ``source`` from ``offset`` to ``out`` inside the kernel
    (``copy_file_range``, else ``sendfile``); False when neither applies (not local files,
    a filesystem pair that refuses both) — nothing was written then."""
    src_fd, dst_fd = _fileno(source), _fileno(out)
    if src_fd is None or dst_fd is None or not length:
        return False
    out.flush()
    for copy in _kernel_copies(src_fd, dst_fd):
        done = 0
        try:
            while done < length:
                n = copy(min(length - done, 1 << 30), offset + done)
                if n == 0:
                    raise CorruptStateError(f"truncated: wanted {length} bytes at offset {offset}, the file "
                                            f"ended after {done}", path=url)
                done += n
        except OSError as exc:
            if done or exc.errno not in _KERNEL_COPY_FAILURES:
                raise
            continue  # nothing written: try the next way
        end = out.seek(0, os.SEEK_END)  # the stream's notion of its position follows the file's
        start_writeback(dst_fd, end - length, length)
        return True
    return False


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Start writing the just-copied range of the file to disk now (Linux starts the writeback
    of ``POSIX_FADV_DONTNEED``'s range and keeps its pages while they are dirty or under
    writeback), so the fsync that makes the file durable waits for less: the copy of the next
    run, and the block checks, overlap the disk. Only this range: earlier runs, clean by now,
    stay cached. A hint only: it changes no byte and no durability promise."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None:
        with contextlib.suppress(OSError):
            advise(fd, offset, length, os.POSIX_FADV_DONTNEED)


def _kernel_copies(src_fd: int, dst_fd: int) -> list[Callable[[int, int], int]]:
    """``copy(count, source offset) -> bytes appended`` for each kernel copy this OS has."""
    ways: list[Callable[[int, int], int]] = []
    copy_file_range = getattr(os, "copy_file_range", None)
    if copy_file_range is not None:
        ways.append(lambda count, at: int(copy_file_range(src_fd, dst_fd, count, at)))
    if hasattr(os, "sendfile"):
        ways.append(lambda count, at: os.sendfile(dst_fd, src_fd, at, count))
    return ways


def _fileno(stream: IO[bytes]) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _file_checksum(fd: int, size: int, url: str) -> str:
    """The CRC-32 of a local file's first ``size`` bytes, read back with ``preadv``."""
    buffer = memoryview(bytearray(min(COPY_CHUNK, size) or 1))
    running, offset = Crc32(), 0
    while offset < size:
        n = os.preadv(fd, [buffer[:min(size - offset, len(buffer))]], offset)
        if n <= 0:
            raise CorruptStateError(f"truncated: the file ended after {offset} of {size} bytes", path=url)
        running.update(buffer[:n])
        offset += n
    return running.checksum


def write_operator_file(
    io: FileIO, directory: str, relative: str, state: str, batch: pa.RecordBatch
) -> StateFile:
    """Write one subtask's operator state (list/union elements or broadcast pairs)."""
    with io.open_output(posixpath.join(directory, relative)) as out:
        writer = StateFileWriter(out, layout.FILE_KIND_OPERATOR, path=relative)
        writer.write_block(layout.OPERATOR_BLOCK_GROUP, batch)
        summary = writer.finish()
    return StateFile(state, relative, summary.size, summary.checksum, summary.entries)


def copy_state_file(
    src_io: FileIO, src_path: str, io: FileIO, directory: str, relative: str, file: StateFile,
    *, verify: bool = True, chunk_size: int = COPY_CHUNK,
) -> StateFile:
    """Copy a state file byte for byte under a new relative path.

    With ``verify`` (the default) the size and whole-file CRC-32 recorded in ``_metadata``
    are checked (read back from the source after a kernel copy, or while the bytes stream
    through); on a mismatch :class:`CorruptStateError` names the source and nothing
    appears at the target.
    """
    target = posixpath.join(directory, relative)
    if not verify:
        io.copy_file(src_io, src_path, target)
        return StateFile(file.state, relative, file.size, file.checksum, file.entries)
    url = src_io.url(src_path)
    with src_io.open_input(src_path) as source:
        _check_size(source, file.size, url)
        _check_structure(source, file, url)
        with io.open_output(target) as out:
            if _kernel_copy(source, out, 0, file.size, url):
                _check_checksum(_file_checksum(source.fileno(), file.size, url), file, url)
            else:
                _copy_checked(source, out, chunk_size, file, url)
    return StateFile(file.state, relative, file.size, file.checksum, file.entries)


def _check_size(source: IO[bytes], expected: int, url: str) -> None:
    """Compare sizes before a byte is copied: a huge (sparse) file is refused, not copied."""
    source.seek(0, 2)
    size = source.tell()
    source.seek(0)
    if size != expected:
        raise CorruptStateError(
            f"size {size} differs from the {expected} bytes recorded in _metadata (truncated or replaced)", path=url)


def _check_structure(source: IO[bytes], file: StateFile, url: str) -> None:
    """Header, footer and index agree with ``_metadata`` before a byte is copied (three small reads)."""
    reader = StateFileReader(source, file.size, path=url)
    if reader.entries != file.entries:
        raise CorruptStateError(f"its index holds {reader.entries} entries, _metadata records {file.entries}", path=url)
    source.seek(0)


def _copy_checked(source: IO[bytes], out: IO[bytes], chunk_size: int, file: StateFile, url: str) -> None:
    """Copy at most the recorded size (plus one byte to tell a longer file), checking size and CRC."""
    running = Crc32()
    budget = file.size + 1
    while budget > 0:
        chunk = source.read(min(chunk_size, budget))
        if not chunk:
            break
        budget -= len(chunk)
        running.update(chunk)
        out.write(chunk)
    if running.size != file.size:
        raise CorruptStateError(
            f"size {running.size} differs from the {file.size} bytes recorded in _metadata (truncated or replaced)",
            path=url,
        )
    _check_checksum(running.checksum, file, url)


def _check_checksum(checksum: str, file: StateFile, url: str) -> None:
    if checksum != file.checksum:
        raise CorruptStateError(f"file checksum mismatch: {checksum} differs from the recorded {file.checksum} (damaged)",
                                path=url)


def commit_metadata(io: FileIO, directory: str, metadata: CheckpointMetadata) -> None:
    """Publish ``_metadata`` atomically; call only after every state file is durable."""
    io.sync_dir(directory)
    io.write_atomic(posixpath.join(directory, layout.METADATA_FILE), serialize_metadata(metadata))
