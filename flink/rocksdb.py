"""Native RocksDB state of a Flink snapshot, read without a JVM (through rocksdict).

An incremental checkpoint or a native savepoint stores each subtask's keyed state as the
files of a RocksDB instance (``IncrementalRemoteKeyedStateHandle``): shared files (SSTs)
and private files (``MANIFEST-*``, ``CURRENT``, ``OPTIONS-*``), each with the local file
name it restores to, plus a meta stream holding the keyed backend meta information.

Reading one subtask:
    1. materialize: every file under its local name in a fresh temporary directory — a
       symbolic link to a local SST file, a streamed copy of any other file (opening a store
       writes to some: rocksdict rewrites its config file) and of a remote one (``s3://``...),
       the bytes of an inlined one; local names must be plain file names; every file must have
       the size its handle records (the one thing Flink records about a file's bytes);
    2. open that directory read-only with rocksdict (options and column families come from
       the ``OPTIONS`` file, with the directories it names — Flink's temporary ``wal_dir`` —
       redirected to the temporary one; RocksDB's own ``StringAppendTESTOperator`` merges
       list state), with paranoid checks and a write-ahead log replayed only whole;
    3. walk the column family of a state (one per state, named after it), in key order,
       from the first wanted key group on, the checksum of every block RocksDB reads verified
       (RocksDB writes one per block of an SST file: a damaged byte fails the read).

A failure names the snapshot's file it comes from (RocksDB's messages name the temporary
copy: :class:`StoreFiles` maps them back).

Memory stays bounded (RocksDB reads blocks from the files; nothing is loaded whole), the
temporary directory is removed when the reader is done, also on failure or interruption.

Keys and values have the layout of the canonical format (RocksDB's composite key); see
:mod:`statekit.flink.entries`.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from statekit.flink.model import KeyedStateHandle, NamedStreamHandle, StreamHandleKind
from statekit.flink.storage import FlinkSnapshot, resolve_stream
from statekit.statefmt.errors import BadInputError, CorruptStateError, UnsafePathError

__all__ = ["materialized_rocksdb", "open_rocksdb", "column_family_entries", "column_families", "StoreFiles",
           "TEMP_PREFIX"]

TEMP_PREFIX = "statekit-rocksdb-"
LOCAL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")
COPY_CHUNK = 8 << 20


def _local_name(named: NamedStreamHandle, source: str) -> str:
    name = named.local_path
    if not LOCAL_NAME.match(name) or name in (".", ".."):
        raise UnsafePathError(f"RocksDB file name {name!r} is not a plain file name", path=source)
    return name


@dataclass(frozen=True)
class StoreFiles:
    """A subtask's RocksDB files materialized in ``directory``: what each local name stands for.

    Attributes:
        directory: The temporary directory (removed when the materialization ends).
        names: ``{local name: the snapshot's file}`` (a URL, or ``_metadata`` for inlined bytes).
    """

    directory: str
    names: dict[str, str]

    def explain(self, message: str) -> str:
        """RocksDB's ``message`` with every temporary file named by the snapshot's file instead."""
        message = " ".join(str(message).split())
        for local, shown in self.names.items():
            message = message.replace(os.path.join(self.directory, local), shown)
        return message.replace(self.directory + "/", "")


def _materialize_file(snapshot: FlinkSnapshot, named: NamedStreamHandle, directory: str) -> str:
    """Put one file under its local name; returns the snapshot's name for it (for messages).

    Raises:
        CorruptStateError: The file's size differs from its handle's (names the file).
    """
    handle = named.handle
    local = _local_name(named, snapshot.metadata_path)
    target = os.path.join(directory, local)
    if handle is None:
        raise CorruptStateError(f"RocksDB file {named.local_path} has no state handle", path=snapshot.metadata_path)
    leaf = next(handle.leaves(), handle)
    if leaf.kind is StreamHandleKind.BYTE_STREAM:
        data = leaf.data or b""
        shown = f"{snapshot.metadata_path} (inline bytes of RocksDB file {local})"
        if len(data) != leaf.size:
            raise CorruptStateError(f"inline bytes of RocksDB file {local}: {len(data)} bytes, the handle records "
                                    f"{leaf.size}", path=snapshot.metadata_path)
        with open(target, "xb") as out:
            out.write(data)
        return shown
    location = resolve_stream(snapshot, leaf)
    if location.io.is_local and local.endswith(".sst"):  # RocksDB never writes to an SST: linked, not copied
        size = location.io.size(location.path)
        if size != leaf.size:
            raise _resized(location.url, local, size, leaf.size)
        os.symlink(os.path.realpath(location.path), target)
        return location.url
    copied = 0
    with location.io.open_input(location.path) as stream, open(target, "xb") as out:
        while copied <= leaf.size and (chunk := stream.read(min(COPY_CHUNK, leaf.size + 1 - copied))):
            copied += len(chunk)
            out.write(chunk)
    if copied != leaf.size:  # a longer file is read one byte past its recorded size only
        raise _resized(location.url, local, copied, leaf.size)
    return location.url


def _resized(url: str, local: str, size: int, recorded: int) -> CorruptStateError:
    return CorruptStateError(f"RocksDB file {local}: {size} bytes, _metadata records {recorded} (truncated or "
                             "replaced)", path=url)


@contextmanager
def materialized_rocksdb(snapshot: FlinkSnapshot, handle: KeyedStateHandle) -> Iterator[StoreFiles]:
    """A temporary directory holding a subtask's RocksDB files under their local names, each of
    the size its handle records.

    The directory is removed on exit, whatever happens inside.

    Raises:
        UnsafePathError: A local name that is not a plain file name, or a file outside the
            snapshot directory and its job's ``shared/``.
        PathNotFoundError: A referenced file is missing.
        CorruptStateError: A file whose size differs from its handle's.
    """
    directory = tempfile.mkdtemp(prefix=TEMP_PREFIX)
    try:
        names = {}
        for named in handle.shared + handle.private:
            names[_local_name(named, snapshot.metadata_path)] = _materialize_file(snapshot, named, directory)
        yield StoreFiles(directory, names)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _rocksdict() -> Any:
    try:
        import rocksdict
    except ImportError:
        raise BadInputError("reading native RocksDB state needs rocksdict: pip install 'statekit[rocksdb]'") from None
    return rocksdict


@contextmanager
def open_rocksdb(files: StoreFiles, *, source: str) -> Iterator[Any]:
    """The RocksDB instance of ``files``, opened read-only in raw mode (bytes keys and values),
    with paranoid checks, a write-ahead log replayed only whole, and block checksums verified on
    every read.

    Raises:
        CorruptStateError: RocksDB cannot open it (names ``source`` and RocksDB's reason, with the
            snapshot's file it names).
    """
    rocksdict = _rocksdict()
    directory = files.directory
    try:
        # options and column families as Flink wrote them
        options, families = rocksdict.Options.load_latest(directory, ignore_unknown_options=True)
    except Exception as exc:
        shown = ", ".join(v for k, v in sorted(files.names.items()) if k.startswith("OPTIONS-")) or "none"
        raise CorruptStateError(f"RocksDB cannot read its OPTIONS file ({shown}): {files.explain(str(exc))}",
                                path=source) from exc
    try:
        # every directory the OPTIONS file names (Flink's temporary wal_dir, db_log_dir) redirected here
        options.set_wal_dir(directory)
        options.set_db_log_dir(directory)
        options.set_paranoid_checks(True)
        options.set_wal_recovery_mode(rocksdict.DBRecoveryMode.absolute_consistency())
        db = rocksdict.Rdict(directory, options=options, column_families=families,
                             access_type=rocksdict.AccessType.read_only())
    except Exception as exc:  # rocksdict raises plain exceptions carrying RocksDB's status text
        raise CorruptStateError(f"RocksDB cannot open the state files: {files.explain(str(exc))}",
                                path=source) from exc
    try:
        db.set_read_options(_checked_reads(rocksdict))
        yield db
    finally:
        db.close()


def _checked_reads(rocksdict: Any) -> Any:
    reads = rocksdict.ReadOptions()
    reads.set_verify_checksums(True)
    return reads


def column_families(files: StoreFiles, *, source: str) -> list[str]:
    """The names of the column families of the store in ``files`` (``default`` included).

    Raises:
        CorruptStateError: RocksDB cannot read its manifest (names ``source``).
    """
    rocksdict = _rocksdict()
    try:
        return [str(name) for name in rocksdict.Rdict.list_cf(files.directory)]
    except Exception as exc:
        raise CorruptStateError(f"RocksDB cannot list the column families: {files.explain(str(exc))}",
                                path=source) from exc


def column_family_entries(db: Any, name: str, *, start: bytes | None = None, source: str,
                          files: StoreFiles | None = None) -> Iterator[tuple[bytes, bytes]]:
    """``(key, value)`` of one column family in key order, from ``start`` on, the checksum of
    every block read verified.

    Raises:
        CorruptStateError: No such column family, or RocksDB fails while reading (a damaged
            block: the message names the snapshot's file when ``files`` says which it is).
    """
    explain = files.explain if files is not None else (lambda text: " ".join(text.split()))
    try:
        family = db.get_column_family(name)
    except Exception as exc:
        raise CorruptStateError(f"RocksDB has no column family for state {name!r}: {explain(str(exc))}",
                                path=source) from exc
    try:
        # an iterator stops on a read error as at the end: only its status tells them apart
        # (rocksdict's items() never asks), so walk it by hand
        it = family.iter(_checked_reads(_rocksdict()))
        if start is None:
            it.seek_to_first()
        else:
            it.seek(start)
        while it.valid():
            yield bytes(it.key()), bytes(it.value())
            it.next()
        it.status()
    except Exception as exc:
        raise CorruptStateError(f"RocksDB failed reading state {name!r}: {explain(str(exc))}", path=source) from exc
