"""All on-disk vocabulary of the statekit format: file names, magic bytes, versions.

Readers refuse any version they do not know with :class:`UnsupportedVersionError`.
"""

from __future__ import annotations

import re
import struct
import urllib.parse
import uuid

__all__ = [
    "METADATA_FILE",
    "MAX_METADATA_BYTES",
    "METADATA_MAGIC",
    "METADATA_VERSION",
    "METADATA_HEADER",
    "STATE_FILE_MAGIC",
    "STATE_FILE_FOOTER_MAGIC",
    "STATE_FILE_VERSION",
    "STATE_FILE_VERSIONS",
    "STATE_FILE_HEADER",
    "BLOCK_PREFIX",
    "MAX_SCHEMA_BYTES",
    "COMPRESSION_IDS",
    "STATE_FILE_FOOTER",
    "INDEX_ENTRY",
    "FILE_KIND_KEYED",
    "FILE_KIND_OPERATOR",
    "OPERATOR_BLOCK_GROUP",
    "CHECKPOINT_DIR_PATTERN",
    "SAVEPOINT_DIR_PREFIX",
    "SHARED_DIR",
    "TASKOWNED_DIR",
    "JOB_LOCK_FILE",
    "STAGING_DIR_PATTERN",
    "checkpoint_dir_name",
    "parse_checkpoint_dir_name",
    "state_file_path",
    "encode_path_component",
    "staging_dir_name",
    "hive_partition_dir",
]

METADATA_FILE = "_metadata"
# The commands that read Apache Flink snapshots, named when one is given to a command that
# reads statekit's only (tests/cli/test_flink_commands.py keeps it in step with the commands' help)
FLINK_COMMANDS = ("checkpoints list", "inspect", "verify", "dispose", "report", "export", "diff", "check --uid",
                  "rescale --max-parallelism", "modify", "relocate", "keygroup --flink", "convert --to statekit")
# No _metadata (statekit's or Flink's) larger than this is read: a bound on what one file
# can make a reader allocate (256 MiB holds ~10^6 operators' worth of statekit metadata).
MAX_METADATA_BYTES = 256 << 20

# _metadata: magic(8) | version u32 | body length u64 | JSON body | crc32(body) u32, little-endian.
METADATA_MAGIC = b"STKMETA\x01"
METADATA_VERSION = 1
METADATA_HEADER = struct.Struct("<8sIQ")
METADATA_TRAILER = struct.Struct("<I")

# State file: header | blocks | index | footer, little-endian.
#   index entry: key group u32 | offset u64 | length u64 | entries u64 | crc32 u32
#   footer: index offset u64 | index count u32 | crc32(index) u32 | crc32(header..index) u32 | magic(8)
STATE_FILE_MAGIC = b"STKSTAT\x01"
STATE_FILE_FOOTER_MAGIC = b"STKEND\x00\x01"
# The version new files are written in; readers accept every version in STATE_FILE_VERSIONS.
#   1: header(16); a block is one Arrow IPC record-batch message of the schema the file kind
#      fixes (every value serialized to bytes).
#   2: header(16) then the file's Arrow schema (an IPC schema message, zero-padded to 8
#      bytes); a block is BLOCK_PREFIX then one record-batch message of the schema's columns
#      the prefix marks present (optionally compressed); keyed values may be typed columns.
STATE_FILE_VERSION = 2
STATE_FILE_VERSIONS = (1, 2)
#   header v1: magic(8) | version u16 | file kind u8 | reserved u8 | reserved u32
#   header v2: magic(8) | version u16 | file kind u8 | compression u8 | schema length u32
STATE_FILE_HEADER = struct.Struct("<8sHBBI")
# Version 2 block prefix: present-column flags u8 | 7 zero bytes (keeps the message 8-aligned).
BLOCK_PREFIX = struct.Struct("<B7x")
# A version 2 header's schema message is at most this long (a bound on what a header can
# make a reader allocate; real schemas are well under 4 KiB).
MAX_SCHEMA_BYTES = 1 << 20
# Block compression, recorded in the version 2 header (Arrow IPC buffer compression).
COMPRESSION_IDS = {"none": 0, "lz4": 1, "zstd": 2}
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
# <checkpoint-dir>/<job-id>/_running.lock: held (flock) by the job while it runs, on local
# disks (statekit.statefmt.job_lock); dispose asks it before touching a chk-N of the job.
JOB_LOCK_FILE = "_running.lock"

# An output being built: a hidden sibling ``.<name>.inprogress-<12 hex>`` of the directory it
# becomes by one rename (snapshots, exports, diff outputs; statekit's own, never Flink's).
STAGING_DIR_PATTERN = re.compile(r"^\.(?P<name>.+)\.inprogress-(?P<token>[0-9a-f]{12})$")


def checkpoint_dir_name(checkpoint_id: int) -> str:
    return f"chk-{checkpoint_id}"


def parse_checkpoint_dir_name(name: str) -> int | None:
    """The checkpoint id of a ``chk-N`` directory name, or None for any other name."""
    match = CHECKPOINT_DIR_PATTERN.match(name)
    return int(match.group(1)) if match else None


def staging_dir_name(name: str) -> str:
    """A fresh staging directory name for the output named ``name`` (matches :data:`STAGING_DIR_PATTERN`)."""
    return f".{name}.inprogress-{uuid.uuid4().hex[:12]}"


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


_HIVE_SPECIAL = frozenset('"#%\'*/:=?\\\x7f{[]^')


def hive_partition_dir(uid: str, state: str) -> str:
    """``operator_uid=<uid>/state_name=<state>``: one state's directory in an export or a diff
    output, escaped like Hive escapes partition values (``/`` becomes ``%2F``, ...)."""
    return f"operator_uid={_hive_escape(uid)}/state_name={_hive_escape(state)}"


def _hive_escape(value: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _HIVE_SPECIAL or ord(c) < 0x20 else c for c in value)
