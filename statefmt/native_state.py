"""Native keyed state: a subtask's keyed state as the files of its embedded store.

A *native* snapshot (``format: native``) records, for each subtask of a keyed operator, the
files of its key-value store instead of canonical key-group files: a RocksDB checkpoint (SST
files, ``MANIFEST-*``, ``CURRENT``, ``OPTIONS-*``, write-ahead logs). In an incremental
checkpoint the SST files live once in the job's ``shared/`` directory and several checkpoints
name the same file (``../shared/<encoded uid>/<32 hex>.sst``); the other files are private to
the checkpoint (``<encoded uid>/_native/<i>-of-<p>/<file>``). A native savepoint is
self-contained: every file is private.

Format ``rocksdb-sst/1`` stores one entry per key-value pair under the key
``state id (u16) | key group (u16) | key length (u32) | key bytes [| namespace length (u32) |
namespace bytes] [| user key bytes]`` (big-endian; the namespace only for a state whose
descriptor declares a ``namespace_type``, the user key only for map state), so a key group's
entries of one state are one contiguous key range, and a key's entries one range in it; the value
is the state's serialized value (list state: the framed element list of the state-file
format). ``state_ids`` maps each keyed state name to its id. A TTL state's value is
``expiry (i64 big-endian, NO_EXPIRY for none) | value bytes`` (list state: each element).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any

from statekit.statefmt import layout
from statekit.statefmt.paths import SHARED_PREFIX

__all__ = [
    "NATIVE_ROCKSDB_FORMAT",
    "NATIVE_FORMATS",
    "NATIVE_DIR",
    "NativeFile",
    "NativeKeyedState",
    "native_private_dir",
    "shared_file_path",
    "SHARED_FILE_PATTERN",
    "FILE_NAME_PATTERN",
    "encode_key",
    "decode_key",
    "state_prefix",
    "key_group_prefix",
    "KEY_PREFIX",
    "NAMESPACE_LENGTH",
    "TTL_EXPIRY",
    "NO_EXPIRY",
    "namespace_bytes",
    "split_namespace",
]

NATIVE_ROCKSDB_FORMAT = "rocksdb-sst/1"
NATIVE_FORMATS = (NATIVE_ROCKSDB_FORMAT,)
NATIVE_DIR = "_native"
# a file of the store: a plain name (000123.sst, MANIFEST-000005, CURRENT, OPTIONS-000007, ...)
FILE_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# a shared file below <job>/shared/: <encoded uid>/<32 hex>.sst, or the temp file of an
# upload to it that never finished (FileIO.open_output: .<name>.<32 hex>.tmp beside it)
SHARED_FILE_PATTERN = re.compile(r"^[^/]+/(?:[0-9a-f]{32}\.sst|\.[0-9a-f]{32}\.sst\.[0-9a-f]{32}\.tmp)$")

# state id u16 | key group u16 | key length u32
KEY_PREFIX = struct.Struct(">HHI")
NAMESPACE_LENGTH = struct.Struct(">I")
TTL_EXPIRY = struct.Struct(">q")  # before a TTL state's value (or each list element)
NO_EXPIRY = (1 << 63) - 1  # a stored expiry meaning "never"
_STATE = struct.Struct(">H")
_STATE_GROUP = struct.Struct(">HH")


@dataclass(frozen=True)
class NativeFile:
    """One file of a subtask's store.

    Attributes:
        name: Its name inside the store's directory (what the store's manifest refers to).
        path: Where the snapshot keeps it, relative to the snapshot directory
            (``../shared/...`` for a shared file of an incremental checkpoint).
        size: Bytes.
        checksum: ``crc32:xxxxxxxx`` of the bytes.
    """

    name: str
    path: str
    size: int
    checksum: str

    @property
    def shared(self) -> bool:
        return self.path.startswith(SHARED_PREFIX)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "size": self.size, "checksum": self.checksum}


@dataclass(frozen=True)
class NativeKeyedState:
    """A subtask's keyed state as store files.

    Attributes:
        format: :data:`NATIVE_ROCKSDB_FORMAT`.
        state_ids: Keyed state name -> id in the key layout.
        files: Every file of the store (private and shared).
    """

    format: str
    state_ids: tuple[tuple[str, int], ...]
    files: tuple[NativeFile, ...]

    def state_id(self, name: str) -> int | None:
        return next((i for n, i in self.state_ids if n == name), None)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def shared_size(self) -> int:
        return sum(f.size for f in self.files if f.shared)

    def to_json(self) -> dict[str, Any]:
        return {"format": self.format, "state_ids": dict(self.state_ids),
                "files": [f.to_json() for f in self.files]}


def native_private_dir(uid: str, subtask: int, parallelism: int) -> str:
    """``<encoded uid>/_native/<i>-of-<p>``: a subtask's private store files."""
    return f"{layout.encode_path_component(uid)}/{NATIVE_DIR}/{subtask:05d}-of-{parallelism:05d}"


def shared_file_path(uid: str, token: str) -> str:
    """``<encoded uid>/<token>.sst`` below the job's ``shared/`` (``token``: 32 hex chars)."""
    return f"{layout.encode_path_component(uid)}/{token}.sst"


def state_prefix(state_id: int) -> bytes:
    """The key prefix of every entry of one state."""
    return _STATE.pack(state_id)


def key_group_prefix(state_id: int, key_group: int) -> bytes:
    """The key prefix of one state's entries in one key group."""
    return _STATE_GROUP.pack(state_id, key_group)


def encode_key(state_id: int, key_group: int, key: bytes, user_key: bytes = b"") -> bytes:
    """The store key of an entry (user key only for map state)."""
    return KEY_PREFIX.pack(state_id, key_group, len(key)) + key + user_key


def decode_key(raw: bytes) -> tuple[int, int, bytes, bytes]:
    """(state id, key group, key bytes, user key bytes) of a store key.

    Raises:
        ValueError: The key is shorter than its prefix says.
    """
    state_id, key_group, length = KEY_PREFIX.unpack_from(raw, 0)
    start = KEY_PREFIX.size
    if len(raw) < start + length:
        raise ValueError("store key shorter than its key length")
    return state_id, key_group, raw[start:start + length], raw[start + length:]


def namespace_bytes(namespace: bytes) -> bytes:
    """The store-key part of a serialized namespace (after the key bytes)."""
    return NAMESPACE_LENGTH.pack(len(namespace)) + namespace


def split_namespace(rest: bytes) -> tuple[bytes, bytes]:
    """(namespace bytes, user key bytes) of what follows the key bytes in a namespaced state's key.

    Raises:
        ValueError: ``rest`` is shorter than its namespace length says.
    """
    if len(rest) < NAMESPACE_LENGTH.size:
        raise ValueError("store key has no namespace length")
    (length,) = NAMESPACE_LENGTH.unpack_from(rest, 0)
    end = NAMESPACE_LENGTH.size + length
    if len(rest) < end:
        raise ValueError("store key shorter than its namespace length")
    return rest[NAMESPACE_LENGTH.size:end], rest[end:]
