"""Write the ``_metadata`` of a new canonical Flink savepoint (bootstrap, convert).

Layout (:mod:`statekit.flink.metadata`, Flink's ``MetadataV3Serializer`` .. ``V7``): no master
states; per operator its id (Flink's hash of the uid, :func:`statekit.flink.uids.operator_id_for_uid`),
from v5 its name and uid, parallelism and max parallelism, no coordinator state, and per
subtask a ``KeyGroupsSavepointStateHandle`` (key-group range, one offset per key group,
a ``RelativeFileStateHandle`` of the stream in the savepoint directory); no operator or
channel state. From v4 the file ends with Flink's Java-serialized ``CheckpointProperties``
of a canonical savepoint — the bytes Flink 1.20 and 2.3 write alike (``CANONICAL``,
post-checkpoint action ``NONE``).

Which Flink reads which version: 2.x reads 3 to 6 (and writes 6); 1.16 to 1.20 read 3 and 4
(and write 4); 1.15 reads 3. Version 7 (a reference checkpoint id per subtask) is newer
than 2.3.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from statekit.flink.layout import METADATA_MAGIC
from statekit.flink.metadata_writer import (
    NO_REF_CHECKPOINT_ID,
    encode_relative_file_handle,
    encode_savepoint_key_groups_handle,
    encode_utf,
)
from statekit.flink.uids import operator_id_for_uid
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.keygroups import KeyGroupRange

__all__ = ["NewSubtask", "NewOperator", "encode_savepoint_metadata", "METADATA_VERSIONS", "DEFAULT_METADATA_VERSION",
           "CANONICAL_SAVEPOINT_PROPERTIES", "FLINK_READERS"]

_I32, _I64 = struct.Struct(">i"), struct.Struct(">q")
METADATA_VERSIONS = (3, 4, 5, 6, 7)
DEFAULT_METADATA_VERSION = 6
FLINK_READERS = {3: "Flink 1.11 to 2.x", 4: "Flink 1.16 to 2.x", 5: "Flink 2.x", 6: "Flink 2.x",
                 7: "Flink releases after 2.3"}
# java.io.ObjectOutputStream of CheckpointProperties.forSavepoint(false, SavepointFormatType.CANONICAL)
# as Flink 1.20 and 2.3 write it (identical bytes).
CANONICAL_SAVEPOINT_PROPERTIES = bytes.fromhex(
    "aced0005737200386f72672e6170616368652e666c696e6b2e72756e74696d652e636865636b706f696e742e436865636b"
    "706f696e7450726f7065727469657300000000000000020200085a00106469736361726443616e63656c6c65645a000d64"
    "6973636172644661696c65645a000f6469736361726446696e69736865645a000f6469736361726453756273756d65645a"
    "00106469736361726453757370656e6465645a0006666f726365645a0009756e636c61696d65644c000e636865636b706f"
    "696e74547970657400324c6f72672f6170616368652f666c696e6b2f72756e74696d652f636865636b706f696e742f536e"
    "617073686f74547970653b787000000000000100737200316f72672e6170616368652e666c696e6b2e72756e74696d652e"
    "636865636b706f696e742e53617665706f696e7454797065a087d308a45814b80200034c000a666f726d61745479706574"
    "00354c6f72672f6170616368652f666c696e6b2f636f72652f657865637574696f6e2f53617665706f696e74466f726d61"
    "74547970653b4c00046e616d657400124c6a6176612f6c616e672f537472696e673b4c0014706f7374436865636b706f69"
    "6e74416374696f6e7400484c6f72672f6170616368652f666c696e6b2f72756e74696d652f636865636b706f696e742f53"
    "617665706f696e745479706524506f7374436865636b706f696e74416374696f6e3b78707e7200336f72672e6170616368"
    "652e666c696e6b2e636f72652e657865637574696f6e2e53617665706f696e74466f726d61745479706500000000000000"
    "001200007872000e6a6176612e6c616e672e456e756d0000000000000000120000787074000943414e4f4e4943414c7400"
    "0953617665706f696e747e7200466f72672e6170616368652e666c696e6b2e72756e74696d652e636865636b706f696e74"
    "2e53617665706f696e745479706524506f7374436865636b706f696e74416374696f6e0000000000000000120000787100"
    "7e00097400044e4f4e45"
)


@dataclass(frozen=True)
class NewSubtask:
    """One subtask's key-group stream: its range, offsets (0 for an empty key group), file and size."""

    index: int
    key_groups: KeyGroupRange
    offsets: tuple[int, ...]
    file: str
    size: int


@dataclass(frozen=True)
class NewOperator:
    """One keyed operator of the new savepoint."""

    uid: str
    name: str
    parallelism: int
    max_parallelism: int
    subtasks: tuple[NewSubtask, ...]

    @property
    def operator_id(self) -> str:
        return operator_id_for_uid(self.uid)


def check_metadata_version(version: int) -> int:
    """``version`` if statekit writes it.

    Raises:
        BadInputError: Another version.
    """
    if version not in METADATA_VERSIONS:
        raise BadInputError(f"--metadata-version {version}: statekit writes Flink metadata versions "
                            f"{', '.join(map(str, METADATA_VERSIONS))} (6: Flink 2.x; 4: Flink 1.16 to 1.20; 3: 1.15)")
    return version


def _subtask(sub: NewSubtask, version: int) -> bytes:
    handle = encode_savepoint_key_groups_handle(sub.key_groups, sub.offsets,
                                                encode_relative_file_handle(sub.file, sub.size))
    body = _I32.pack(sub.index) + _I32.pack(0) + _I32.pack(0) + handle + b"\x00"  # no raw keyed state
    body += _I32.pack(0) + _I32.pack(0)  # no input, no output channel state
    if version >= 7:
        body += bytes([NO_REF_CHECKPOINT_ID])
    return body


def _operator(op: NewOperator, version: int) -> bytes:
    head = b""
    if version >= 5:
        head = encode_utf(op.name, what="an operator name") + encode_utf(op.uid, what="an operator uid")
    head += bytes.fromhex(op.operator_id) + _I32.pack(op.parallelism) + _I32.pack(op.max_parallelism)
    head += b"\x00"  # no coordinator state
    return head + _I32.pack(len(op.subtasks)) + b"".join(_subtask(s, version) for s in op.subtasks)


def encode_savepoint_metadata(operators: Sequence[NewOperator], *, version: int = DEFAULT_METADATA_VERSION,
                              checkpoint_id: int = 1) -> bytes:
    """The ``_metadata`` of a canonical savepoint holding ``operators``.

    Raises:
        BadInputError: A version statekit does not write, or two operators with one uid.
    """
    check_metadata_version(version)
    uids = [op.uid for op in operators]
    if len(set(uids)) != len(uids):
        raise BadInputError(f"operator uids must be unique: {', '.join(sorted(u for u in set(uids) if uids.count(u) > 1))}")
    out = _I32.pack(METADATA_MAGIC - (1 << 32) if METADATA_MAGIC > 0x7FFFFFFF else METADATA_MAGIC)
    out += _I32.pack(version) + _I64.pack(checkpoint_id) + _I32.pack(0)  # no master states
    out += _I32.pack(len(operators)) + b"".join(_operator(op, version) for op in operators)
    if version >= 4:
        out += CANONICAL_SAVEPOINT_PROPERTIES
    return out
