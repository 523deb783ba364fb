"""Native RocksDB state of a Flink snapshot, read without a JVM (through rocksdict).

An incremental checkpoint or a native savepoint stores each subtask's keyed state as the
files of a RocksDB instance (``IncrementalRemoteKeyedStateHandle``): shared files (SSTs)
and private files (``MANIFEST-*``, ``CURRENT``, ``OPTIONS-*``), each with the local file
name it restores to, plus a meta stream holding the keyed backend meta information.

Reading one subtask:
    1. materialize: every file under its local name in a fresh temporary directory — a
       symbolic link to a local file, a streamed copy of a remote one (``s3://``...), the
       bytes of an inlined one; local names must be plain file names;
    2. open that directory read-only with rocksdict (options and column families come from
       the ``OPTIONS`` file, with the directories it names — Flink's temporary ``wal_dir`` —
       redirected to the temporary one; RocksDB's own ``StringAppendTESTOperator`` merges
       list state);
    3. walk the column family of a state (one per state, named after it), in key order,
       from the first wanted key group on.

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
from typing import Any

from statekit.flink.model import KeyedStateHandle, NamedStreamHandle, StreamHandleKind
from statekit.flink.storage import FlinkSnapshot, resolve_stream
from statekit.statefmt.errors import BadInputError, CorruptStateError, UnsafePathError

__all__ = ["materialized_rocksdb", "open_rocksdb", "column_family_entries", "TEMP_PREFIX"]

TEMP_PREFIX = "statekit-rocksdb-"
LOCAL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")
COPY_CHUNK = 8 << 20


def _local_name(named: NamedStreamHandle, source: str) -> str:
    name = named.local_path
    if not LOCAL_NAME.match(name) or name in (".", ".."):
        raise UnsafePathError(f"RocksDB file name {name!r} is not a plain file name", path=source)
    return name


def _materialize_file(snapshot: FlinkSnapshot, named: NamedStreamHandle, directory: str) -> None:
    handle = named.handle
    target = os.path.join(directory, _local_name(named, snapshot.metadata_path))
    if handle is None:
        raise CorruptStateError(f"RocksDB file {named.local_path} has no state handle", path=snapshot.metadata_path)
    leaf = next(handle.leaves(), handle)
    if leaf.kind is StreamHandleKind.BYTE_STREAM:
        with open(target, "xb") as out:
            out.write(leaf.data or b"")
        return
    location = resolve_stream(snapshot, leaf)
    if location.io.is_local:
        os.symlink(os.path.realpath(location.path), target)
        return
    with location.io.open_input(location.path) as stream, open(target, "xb") as out:
        while chunk := stream.read(COPY_CHUNK):
            out.write(chunk)


@contextmanager
def materialized_rocksdb(snapshot: FlinkSnapshot, handle: KeyedStateHandle) -> Iterator[str]:
    """A temporary directory holding a subtask's RocksDB files under their local names.

    The directory is removed on exit, whatever happens inside.

    Raises:
        UnsafePathError: A local name that is not a plain file name, or a file outside the
            snapshot directory and its job's ``shared/``.
        PathNotFoundError: A referenced file is missing.
    """
    directory = tempfile.mkdtemp(prefix=TEMP_PREFIX)
    try:
        for named in handle.shared + handle.private:
            _materialize_file(snapshot, named, directory)
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _rocksdict() -> Any:
    try:
        import rocksdict
    except ImportError:
        raise BadInputError("reading native RocksDB state needs rocksdict: pip install 'statekit[rocksdb]'") from None
    return rocksdict


@contextmanager
def open_rocksdb(directory: str, *, source: str) -> Iterator[Any]:
    """The RocksDB instance in ``directory``, opened read-only in raw mode (bytes keys and values).

    Raises:
        CorruptStateError: RocksDB cannot open it (names ``source`` and RocksDB's reason).
    """
    rocksdict = _rocksdict()
    try:
        # options and column families as Flink wrote them, but every directory the OPTIONS file
        # names (Flink's temporary wal_dir, db_log_dir) redirected here
        options, families = rocksdict.Options.load_latest(directory, ignore_unknown_options=True)
        options.set_wal_dir(directory)
        options.set_db_log_dir(directory)
        db = rocksdict.Rdict(directory, options=options, column_families=families,
                             access_type=rocksdict.AccessType.read_only())
    except Exception as exc:  # rocksdict raises plain exceptions carrying RocksDB's status text
        raise CorruptStateError(f"RocksDB cannot open the state files: {exc}", path=source) from exc
    try:
        yield db
    finally:
        db.close()


def column_family_entries(db: Any, name: str, *, start: bytes | None = None,
                          source: str) -> Iterator[tuple[bytes, bytes]]:
    """``(key, value)`` of one column family in key order, from ``start`` on.

    Raises:
        CorruptStateError: No such column family, or RocksDB fails while reading.
    """
    try:
        family = db.get_column_family(name)
    except Exception as exc:
        raise CorruptStateError(f"RocksDB has no column family for state {name!r}: {exc}", path=source) from exc
    try:
        for key, value in family.items(from_key=start):
            yield bytes(key), bytes(value)
    except Exception as exc:
        raise CorruptStateError(f"RocksDB failed reading state {name!r}: {exc}", path=source) from exc
