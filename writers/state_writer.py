"""Write state files and commit snapshots: the only way bytes of state reach storage.

Commit protocol: every state file is written completely (fsynced, renamed into place)
before ``_metadata``; ``_metadata`` is published last and atomically. A reader that sees
``_metadata`` therefore sees every file it names.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING

from statekit.statefmt import layout
from statekit.statefmt.checksum import Crc32
from statekit.statefmt.errors import CorruptStateError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.metadata import CheckpointMetadata, StateFile, serialize_metadata
from statekit.statefmt.statefile import IndexEntry, StateFileReader, StateFileWriter

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["write_keyed_file", "write_raw_keyed_file", "write_operator_file", "commit_metadata", "copy_state_file"]


def write_keyed_file(
    io: FileIO, directory: str, relative: str, state: str, groups: Iterable[tuple[int, pa.RecordBatch]]
) -> StateFile:
    """Write ``(key group, sorted batch)`` blocks (key groups ascending) as one keyed file."""
    with io.open_output(posixpath.join(directory, relative)) as out:
        writer = StateFileWriter(out, layout.FILE_KIND_KEYED, path=relative)
        for key_group, batch in groups:
            writer.write_block(key_group, batch)
        summary = writer.finish()
    return StateFile(state, relative, summary.size, summary.checksum, summary.entries)


def write_raw_keyed_file(
    io: FileIO, directory: str, relative: str, state: str, blocks: Iterable[tuple[IndexEntry, bytes]]
) -> StateFile:
    """Assemble a keyed file from whole blocks copied from other files (no decoding)."""
    with io.open_output(posixpath.join(directory, relative)) as out:
        writer = StateFileWriter(out, layout.FILE_KIND_KEYED, path=relative)
        for entry, data in blocks:
            writer.write_raw_block(entry.key_group, data, entry.entries, entry.checksum)
        summary = writer.finish()
    return StateFile(state, relative, summary.size, summary.checksum, summary.entries)


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
    *, verify: bool = True, chunk_size: int = 8 << 20,
) -> StateFile:
    """Copy a state file byte for byte under a new relative path.

    With ``verify`` (the default) the size and whole-file CRC-32 recorded in ``_metadata``
    are checked while the bytes stream through; on a mismatch :class:`CorruptStateError`
    names the source and nothing appears at the target.
    """
    target = posixpath.join(directory, relative)
    if not verify:
        io.copy_file(src_io, src_path, target)
        return StateFile(file.state, relative, file.size, file.checksum, file.entries)
    running = Crc32()
    with src_io.open_input(src_path) as source:
        _check_size(source, file.size, src_io.url(src_path))
        _check_structure(source, file, src_io.url(src_path))
        _copy_checked(source, io, target, running, chunk_size, file, src_io.url(src_path))
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


def _copy_checked(source: IO[bytes], io: FileIO, target: str, running: Crc32, chunk_size: int,
                  file: StateFile, url: str) -> None:
    """Copy at most the recorded size (plus one byte to tell a longer file), checking size and CRC."""
    with io.open_output(target) as out:
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
        if running.checksum != file.checksum:
            raise CorruptStateError(
                f"file checksum mismatch: {running.checksum} differs from the recorded {file.checksum} (damaged)",
                path=url,
            )


def commit_metadata(io: FileIO, directory: str, metadata: CheckpointMetadata) -> None:
    """Publish ``_metadata`` atomically; call only after every state file is durable."""
    io.sync_dir(directory)
    io.write_atomic(posixpath.join(directory, layout.METADATA_FILE), serialize_metadata(metadata))
