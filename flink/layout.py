"""All on-disk vocabulary of Apache Flink snapshots that this reader knows.

Values restated from Flink's ``Checkpoints``, ``MetadataV2V3SerializerBase``,
``MetadataV3Serializer`` ... ``MetadataV7Serializer``, ``ChannelStateHandleSerializerV1/V2``
and ``AbstractFsCheckpointStorageAccess``.
"""

from __future__ import annotations

import re

__all__ = [
    "METADATA_FILE",
    "METADATA_MAGIC",
    "MIN_VERSION",
    "MAX_VERSION",
    "MASTER_STATE_MAGIC",
    "HandleCode",
    "KEYED_HANDLE_CODES",
    "STREAM_HANDLE_CODES",
    "CHECKPOINT_DIR_PATTERN",
    "SAVEPOINT_DIR_PREFIX",
    "JOB_ID_PATTERN",
    "SHARED_DIR",
    "TASKOWNED_DIR",
    "JAVA_STREAM_MAGIC",
    "INPUT_CHANNEL_HANDLE",
    "RESULT_SUBPARTITION_HANDLE",
    "MERGED_INPUT_CHANNEL_HANDLE",
    "MERGED_RESULT_SUBPARTITION_HANDLE",
    "HAS_REF_CHECKPOINT_ID",
]

METADATA_FILE = "_metadata"

# Checkpoints.HEADER_MAGIC_NUMBER, followed by an int format version.
METADATA_MAGIC = 0x4960672D
MIN_VERSION = 3
MAX_VERSION = 7

MASTER_STATE_MAGIC = 0xC96B1696 - (1 << 32)  # as a signed Java int


class HandleCode:
    """The leading type byte of a serialized state handle."""

    NULL = 0
    BYTE_STREAM = 1
    FILE = 2
    KEY_GROUPS = 3
    PARTITIONABLE_OPERATOR = 4
    INCREMENTAL_KEY_GROUPS = 5
    RELATIVE_FILE = 6
    SAVEPOINT_KEY_GROUPS = 7
    CHANGELOG = 8
    CHANGELOG_BYTE_INCREMENT = 9
    CHANGELOG_FILE_INCREMENT = 10
    INCREMENTAL_KEY_GROUPS_V2 = 11
    KEY_GROUPS_V2 = 12
    CHANGELOG_FILE_INCREMENT_V2 = 13
    CHANGELOG_V2 = 14


KEYED_HANDLE_CODES = frozenset(
    {
        HandleCode.KEY_GROUPS,
        HandleCode.INCREMENTAL_KEY_GROUPS,
        HandleCode.SAVEPOINT_KEY_GROUPS,
        HandleCode.CHANGELOG,
        HandleCode.CHANGELOG_BYTE_INCREMENT,
        HandleCode.CHANGELOG_FILE_INCREMENT,
        HandleCode.INCREMENTAL_KEY_GROUPS_V2,
        HandleCode.KEY_GROUPS_V2,
        HandleCode.CHANGELOG_FILE_INCREMENT_V2,
        HandleCode.CHANGELOG_V2,
    }
)
STREAM_HANDLE_CODES = frozenset(
    {HandleCode.BYTE_STREAM, HandleCode.FILE, HandleCode.RELATIVE_FILE, HandleCode.KEY_GROUPS}
)

# Channel state handles (unaligned checkpoints), ChannelStateHandleSerializerV2 (v6+).
INPUT_CHANNEL_HANDLE = 1
RESULT_SUBPARTITION_HANDLE = 2
MERGED_INPUT_CHANNEL_HANDLE = 3
MERGED_RESULT_SUBPARTITION_HANDLE = 4

# MetadataV7Serializer: optional trailing refCheckpointId per subtask.
HAS_REF_CHECKPOINT_ID = 1

# Directory layout of filesystem checkpoint storage.
CHECKPOINT_DIR_PATTERN = re.compile(r"^chk-(\d+)$")
SAVEPOINT_DIR_PREFIX = "savepoint-"
JOB_ID_PATTERN = re.compile(r"^[0-9a-f]{32}$")
SHARED_DIR = "shared"
TASKOWNED_DIR = "taskowned"

# java.io.ObjectOutputStream stream header (STREAM_MAGIC, STREAM_VERSION).
JAVA_STREAM_MAGIC = b"\xac\xed\x00\x05"
