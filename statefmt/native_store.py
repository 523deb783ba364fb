"""Reading native keyed state: a subtask's store files assembled in scratch space, opened read-only.

A native snapshot names the files of each subtask's RocksDB store (private ones in the
checkpoint directory, shared ones in the job's ``shared/``). To read them, :class:`StoreScratch`
assembles one store directory per subtask in a private scratch directory under the system's
temporary directory — a symbolic link per SST file of a local snapshot (RocksDB never writes to
one), a copy of every other file and of every file of an object store — and opens it with
rocksdict in read-only mode. Nothing is ever written into a snapshot;
:meth:`StoreScratch.close` removes the scratch directory whole, also after a failure (use it as a
context manager).

Invariant: no byte of a store file reaches RocksDB unchecked. Every file is first checked to be
the one ``_metadata`` describes — its size, then the CRC-32 of its bytes (one read; a download
checks while it copies) — so a damaged file fails naming it (:class:`CorruptStateError`, exit 2)
before the store opens. RocksDB then opens with paranoid checks, refuses a write-ahead log with a
damaged record (absolute consistency: nothing is dropped silently), and verifies the checksum of
every block it reads.

Entries are read with RocksDB iterators, one key group of one state at a time: memory stays
bounded by a key group, the rest stays on disk. rocksdict is imported lazily.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

from statekit.statefmt.checksum import Crc32
from statekit.statefmt.errors import BadInputError, CorruptStateError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.keygroups import KeyGroupRange
from statekit.statefmt.native_state import (
    KEY_PREFIX,
    NATIVE_ROCKSDB_FORMAT,
    NativeFile,
    NativeKeyedState,
    key_group_prefix,
)

__all__ = ["StoreScratch", "ReadOnlyStore", "fetch_store_files", "check_store_file", "open_store", "scan_prefix"]

_CHUNK = 8 << 20
IMMUTABLE_SUFFIX = ".sst"  # RocksDB never writes to an SST file once it exists


def _require_rocksdict(where: str) -> None:
    try:
        import rocksdict  # noqa: F401
    except ImportError:
        raise BadInputError("native RocksDB state needs the optional package 'rocksdict', which is not installed; "
                            "pip install 'statekit[rocksdb]'", path=where) from None


def fetch_store_files(io: FileIO, resolve: Callable[[str], str], handle: NativeKeyedState, target: str, *,
                      link: bool) -> None:
    """Put every file of ``handle`` into the local directory ``target`` under its store name, each
    checked against ``_metadata`` (size and CRC-32) first.

    Args:
        io: The snapshot's filesystem.
        resolve: Turns a path of ``_metadata`` into a checked path of ``io`` (raises for unsafe ones).
        handle: The subtask's native keyed state.
        target: A local directory (created).
        link: Link local SST files instead of copying them (read-only use only; every other file
            is copied, since opening a store writes to some of them — rocksdict rewrites its
            ``rocksdict-config.json`` — and no write may reach the snapshot through a link).

    Raises:
        CorruptStateError: A file's size or checksum differs from ``_metadata`` (names the file).
        PathNotFoundError / UnsafePathError: A file is missing or leads outside where it may be.
    """
    if handle.format != NATIVE_ROCKSDB_FORMAT:
        raise BadInputError(f"native keyed state of format {handle.format!r} cannot be read by this statekit")
    os.makedirs(target, exist_ok=True)
    for file in handle.files:
        source = resolve(file.path)
        destination = os.path.join(target, file.name)
        if link and io.is_local and file.name.endswith(IMMUTABLE_SUFFIX):
            check_store_file(io, source, file)
            os.symlink(os.path.realpath(source), destination)
        else:
            _copy_checked(io, source, destination, file)


def check_store_file(io: FileIO, source: str, file: NativeFile) -> None:
    """Check that the file at ``source`` is the one ``_metadata`` describes: its size (before a byte
    is read: a huge file is refused, not hashed), then the CRC-32 of its bytes.

    Raises:
        CorruptStateError: The size or the checksum differs (names the file).
        PathNotFoundError: No such file.
    """
    url = io.url(source)
    with io.open_input(source) as stream:
        size = _stream_size(stream)
        if size != file.size:
            raise CorruptStateError(f"size {size} differs from the {file.size} bytes recorded in _metadata "
                                    "(truncated or replaced)", path=url)
        running = Crc32()
        budget = file.size + 1
        while budget > 0 and (chunk := stream.read(min(_CHUNK, budget))):
            budget -= len(chunk)
            running.update(chunk)
    _check_read(running, file, url)


def _stream_size(stream: Any) -> int:
    size = getattr(stream, "size", None)
    if isinstance(size, int):
        return size
    try:
        return os.fstat(stream.fileno()).st_size
    except (AttributeError, OSError, ValueError):
        position = stream.tell()
        end = int(stream.seek(0, 2))
        stream.seek(position)
        return end


def _check_read(running: Crc32, file: NativeFile, url: str) -> None:
    if running.size != file.size:
        raise CorruptStateError(f"size {running.size} differs from the {file.size} bytes recorded in _metadata "
                                "(truncated or replaced)", path=url)
    if running.checksum != file.checksum:
        raise CorruptStateError(f"file checksum {running.checksum} differs from the recorded {file.checksum} "
                                "(damaged)", path=url)


def _copy_checked(io: FileIO, source: str, destination: str, file: NativeFile) -> None:
    url = io.url(source)
    running = Crc32()
    with io.open_input(source) as stream, open(destination, "wb") as out:
        budget = file.size + 1
        while budget > 0 and (chunk := stream.read(min(_CHUNK, budget))):
            budget -= len(chunk)
            running.update(chunk)
            out.write(chunk)
    _check_read(running, file, url)


def open_store(directory: str, *, read_only: bool = True) -> Any:
    """A rocksdict handle on the store in ``directory`` (raw bytes keys and values).

    Read-only (a snapshot's store): paranoid checks, a write-ahead log replayed only whole
    (absolute consistency) and the checksum of every block verified on read (rocksdict's default
    read options skip it).
    """
    from rocksdict import AccessType, DBRecoveryMode, Options, Rdict, ReadOptions

    if not read_only:
        return Rdict(directory, Options(raw_mode=True))
    options = Options(raw_mode=True)
    options.set_paranoid_checks(True)
    options.set_wal_recovery_mode(DBRecoveryMode.absolute_consistency())
    db = Rdict(directory, options, access_type=AccessType.read_only())
    reads = ReadOptions()
    reads.set_verify_checksums(True)
    db.set_read_options(reads)
    return db


def scan_prefix(db: Any, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of every entry whose key starts with ``prefix``, in key order.

    Raises:
        Exception: rocksdict's, when RocksDB fails while reading (a block checksum mismatch):
            an iterator that stops on an error says so here, never by ending early.
    """
    it = db.iter()
    it.seek(prefix)
    while it.valid():
        key = it.key()
        if not key.startswith(prefix):
            return
        yield key, it.value()
        it.next()
    it.status()


def store_entries(db: Any, state_id: int, key_group: int, where: str) -> Iterator[tuple[bytes, bytes, bytes]]:
    """(key bytes, the rest of the store key — namespace, user key —, value bytes) of one state in
    one key group of the store ``db``, in store order.

    Raises:
        CorruptStateError: A key shorter than its key length, or a failing read (naming ``where``).
    """
    prefix = key_group_prefix(state_id, key_group)
    start = KEY_PREFIX.size
    try:
        for raw, value in scan_prefix(db, prefix):
            (length,) = KEY_PREFIX.unpack_from(raw, 0)[2:]
            if len(raw) < start + length:
                raise CorruptStateError("a store key is shorter than its key length", path=where,
                                        key_group=key_group)
            yield raw[start:start + length], raw[start + length:], value
    except CorruptStateError:
        raise
    except Exception as exc:
        raise CorruptStateError(f"reading the store failed: {' '.join(str(exc).split())}", path=where,
                                key_group=key_group) from exc


class ReadOnlyStore:
    """One subtask's store, opened read-only: its entries by state and key group."""

    def __init__(self, directory: str, handle: NativeKeyedState, where: str) -> None:
        self.handle = handle
        self.where = where
        try:
            self.db = open_store(directory)
        except Exception as exc:
            raise CorruptStateError(f"the store does not open: {' '.join(str(exc).split())}", path=where) from exc

    def entries(self, state_id: int, key_group: int) -> Iterator[tuple[bytes, bytes, bytes]]:
        """:func:`store_entries` of this store."""
        return store_entries(self.db, state_id, key_group, self.where)

    def key_groups(self, state_id: int, key_groups: KeyGroupRange) -> Iterator[int]:
        """The key groups of ``key_groups`` in which ``state_id`` has entries."""
        for key_group in key_groups:
            if next(iter(scan_prefix(self.db, key_group_prefix(state_id, key_group))), None) is not None:
                yield key_group

    def close(self) -> None:
        self.db.close()


class StoreScratch:
    """Private scratch space holding assembled store directories (see the module docstring)."""

    def __init__(self, prefix: str = "statekit-native-") -> None:
        self.directory = tempfile.mkdtemp(prefix=prefix)
        self._stores: list[ReadOnlyStore] = []
        self._count = 0

    def __enter__(self) -> StoreScratch:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def open(self, io: FileIO, resolve: Callable[[str], str], handle: NativeKeyedState, where: str) -> ReadOnlyStore:
        """Assemble ``handle``'s files (each checked) in a new store directory and open it read-only."""
        _require_rocksdict(where)
        self._count += 1
        target = os.path.join(self.directory, f"store-{self._count}")
        fetch_store_files(io, resolve, handle, target, link=True)
        store = ReadOnlyStore(target, handle, where)
        self._stores.append(store)
        return store

    def new_dir(self, name: str) -> str:
        """A fresh directory inside the scratch space (for canonical views)."""
        path = os.path.join(self.directory, name)
        os.makedirs(path, exist_ok=False)
        return path

    def close(self) -> None:
        """Close every store and remove the scratch directory."""
        for store in self._stores:
            try:
                store.close()
            except Exception:  # noqa: BLE001 - closing is best effort; removal follows
                pass
        self._stores.clear()
        shutil.rmtree(self.directory, ignore_errors=True)
