"""All on-disk vocabulary of the statekit format: file names, magic bytes, versions.

Readers refuse any version they do not know with :class:`UnsupportedVersionError`.
"""

from __future__ import annotations

import re
import struct
import urllib.parse

__all__ = [
    "METADATA_FILE",
    "MAX_METADATA_BYTES",
    "METADATA_MAGIC",
    "METADATA_VERSION",
    "METADATA_HEADER",
    "STATE_FILE_MAGIC",
    "STATE_FILE_FOOTER_MAGIC",
    "STATE_FILE_VERSION",
    "STATE_FILE_HEADER",
    "STATE_FILE_FOOTER",
    "INDEX_ENTRY",
    "FILE_KIND_KEYED",
    "FILE_KIND_OPERATOR",
    "OPERATOR_BLOCK_GROUP",
    "CHECKPOINT_DIR_PATTERN",
    "SAVEPOINT_DIR_PREFIX",
    "SHARED_DIR",
    "TASKOWNED_DIR",
    "checkpoint_dir_name",
    "parse_checkpoint_dir_name",
    "state_file_path",
    "encode_path_component",
]

METADATA_FILE = "_metadata"
# No _metadata (statekit's or Flink's) larger than this is read: a bound on what one file
# can make a reader allocate (256 MiB holds ~10^6 operators' worth of statekit metadata).
MAX_METADATA_BYTES = 256 << 20

# _metadata: magic(8) | version u32 | body length u64 | JSON body | crc32(body) u32, little-endian.
METADATA_MAGIC = b"STKMETA\x01"
METADATA_VERSION = 1
METADATA_HEADER = struct.Struct("<8sIQ")
METADATA_TRAILER = struct.Struct("<I")

# State file: header | blocks | index | footer, little-endian.
#   header: magic(8) | version u16 | file kind u8 | reserved u8 | reserved u32
#   index entry: key group u32 | offset u64 | length u64 | entries u64 | crc32 u32
#   footer: index offset u64 | index count u32 | crc32(index) u32 | crc32(header..index) u32 | magic(8)
STATE_FILE_MAGIC = b"STKSTAT\x01"
STATE_FILE_FOOTER_MAGIC = b"STKEND\x00\x01"
STATE_FILE_VERSION = 1
STATE_FILE_HEADER = struct.Struct("<8sHBBI")
INDEX_ENTRY = struct.Struct("<IQQQI")
STATE_FILE_FOOTER = struct.Struct("<QIII8s")
FILE_KIND_KEYED = 1
FILE_KIND_OPERATOR = 2
# Operator-state files hold one block, indexed under this pseudo key group.
OPERATOR_BLOCK_GROUP = 0

CHECKPOINT_DIR_PATTERN = re.compile(r"^chk-(\d+)$")
SAVEPOINT_DIR_PREFIX = "savepoint-"
SHARED_DIR = "shared"
TASKOWNED_DIR = "taskowned"


def checkpoint_dir_name(checkpoint_id: int) -> str:
    return f"chk-{checkpoint_id}"


def parse_checkpoint_dir_name(name: str) -> int | None:
    """The checkpoint id of a ``chk-N`` directory name, or None for any other name."""
    match = CHECKPOINT_DIR_PATTERN.match(name)
    return int(match.group(1)) if match else None


def encode_path_component(name: str) -> str:
    """A uid or state name as one safe path component (percent-encoded, never ``.``/``..``)."""
    encoded = urllib.parse.quote(name, safe="-_")
    return encoded if encoded not in ("", ".", "..") else "%2E" * max(1, len(encoded))


def state_file_path(uid: str, state: str, subtask: int, parallelism: int) -> str:
    """Relative path of one subtask's file of one state: ``<uid>/<state>/<i>-of-<p>.sks``."""
    return (
        f"{encode_path_component(uid)}/{encode_path_component(state)}/"
        f"{subtask:05d}-of-{parallelism:05d}.sks"
    )
