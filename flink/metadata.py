"""Read a Flink ``_metadata`` file (format versions 3 to 7) into the frozen model.

Layout (big-endian, Java ``DataOutputStream``), restated from Flink's ``Checkpoints`` and
``MetadataV3Serializer`` ... ``MetadataV7Serializer``::

    magic int 0x4960672d | version int
    checkpoint id long
    master states: count int, each: magic int | length int | (version int, name utf, bytes)
    operators: count int, each:
        [v5+] name utf | uid utf          ("" means not set)
        operator id: 16 bytes (lower long, upper long = the hash bytes in order)
        parallelism int | max parallelism int
        coordinator state: stream handle (byte-stream or null)
        subtask count int (negative: fully finished operator), each:
            index int (negative: -(index + 1), a finished subtask, no state follows)
            has managed operator state int, [handle] | has raw operator state int, [handle]
            managed keyed handle | raw keyed handle
            input channel handles | output channel handles   (typed from v6)
            [v7] ref checkpoint marker byte [, long]
    [v4+] Java-serialized CheckpointProperties

Every malformed or truncated input raises :class:`MetadataError` naming the byte offset.
"""

from __future__ import annotations

import struct

from statekit.flink.cursor import ByteCursor
from statekit.flink.handles import (
    read_channel_handles,
    read_keyed_handle,
    read_operator_handle,
    read_stream_handle,
)
from statekit.flink.layout import (
    HAS_REF_CHECKPOINT_ID,
    MASTER_STATE_MAGIC,
    MAX_VERSION,
    METADATA_MAGIC,
    MIN_VERSION,
)
from statekit.flink.model import (
    FlinkCheckpointMetadata,
    FlinkOperatorState,
    FlinkSubtaskState,
    MasterState,
    StreamHandle,
    StreamHandleKind,
)
from statekit.flink.properties import read_checkpoint_properties
from statekit.statefmt.errors import UnsupportedVersionError

__all__ = ["read_flink_metadata", "is_flink_metadata", "metadata_version", "iter_file_handles"]

_HEADER = struct.Struct(">ii")


def is_flink_metadata(first_bytes: bytes) -> bool:
    """True when ``first_bytes`` (at least 4 bytes of a file) start with Flink's metadata magic."""
    return len(first_bytes) >= 4 and int.from_bytes(first_bytes[:4], "big") == METADATA_MAGIC


def metadata_version(first_bytes: bytes) -> int | None:
    """The format version of a Flink ``_metadata`` header, or ``None`` if it is not one."""
    if len(first_bytes) < 8 or not is_flink_metadata(first_bytes):
        return None
    return int(_HEADER.unpack_from(first_bytes)[1])


def read_flink_metadata(data: bytes, *, source: str) -> FlinkCheckpointMetadata:
    """Parse the bytes of a Flink ``_metadata`` file.

    Args:
        data: The whole file.
        source: The path or URL the bytes came from; every error message names it.

    Returns:
        The frozen model of the file.

    Raises:
        UnsupportedVersionError: A Flink metadata file of a version other than 3..7.
        MetadataError: Not a Flink metadata file, malformed, or truncated.
    """
    cur = ByteCursor(bytes(data), source=source)
    magic = cur.i32("metadata magic number") & 0xFFFFFFFF
    if magic != METADATA_MAGIC:
        raise cur.error(f"not a Flink metadata file (magic {magic:#010x}, expected {METADATA_MAGIC:#010x})", at=0)
    version = cur.i32("metadata version")
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise UnsupportedVersionError(
            f"Flink metadata version {version} at byte offset 4 is not supported "
            f"(supported: {MIN_VERSION}..{MAX_VERSION})",
            path=source,
        )
    at = cur.pos
    checkpoint_id = cur.i64("checkpoint id")
    if checkpoint_id < 0:
        raise cur.error(f"invalid checkpoint id {checkpoint_id}", at=at)
    masters = _master_states(cur)
    operators = tuple(
        _operator(cur, version)
        for _ in range(cur.count("number of operators", min_item_size=25))
    )
    properties = read_checkpoint_properties(cur) if version >= 4 else None
    return FlinkCheckpointMetadata(
        source=source,
        version=version,
        checkpoint_id=checkpoint_id,
        master_states=masters,
        operators=operators,
        properties=properties,
        size=len(data),
    )


def _master_states(cur: ByteCursor) -> tuple[MasterState, ...]:
    states = []
    for _ in range(cur.count("number of master states", min_item_size=8)):
        at = cur.pos
        if cur.i32("master state magic number") != MASTER_STATE_MAGIC:
            raise cur.error("wrong master state magic number", at=at)
        length_at = cur.pos
        length = cur.count("master state length")
        if length == 0:
            raise cur.error("empty master state", at=length_at)
        end = cur.pos + length
        version = cur.i32("master state version")
        name = cur.utf("master state name")
        size = cur.count("master state payload length")
        cur.skip(size, "master state payload")
        if cur.pos != end:
            raise cur.error(f"master state fields do not fill its declared length {length}", at=length_at)
        states.append(MasterState(name, version, size))
    return tuple(states)


def _operator(cur: ByteCursor, version: int) -> FlinkOperatorState:
    at = cur.pos
    name = uid = None
    if version >= 5:
        name = cur.utf("operator name") or None
        uid = cur.utf("operator uid") or None
    operator_id = cur.take(16, "operator id").hex()
    parallelism = cur.i32("parallelism")
    max_par_at = cur.pos
    max_parallelism = cur.i32("max parallelism")
    if parallelism < 0 or max_parallelism < 0:
        raise cur.error(f"invalid parallelism {parallelism} / max parallelism {max_parallelism}", at=max_par_at)
    coordinator_at = cur.pos
    coordinator = read_stream_handle(cur)
    if coordinator is not None and coordinator.kind is not StreamHandleKind.BYTE_STREAM:
        raise cur.error("operator coordinator state is not an inlined byte stream", at=coordinator_at)
    count_at = cur.pos
    count = cur.i32("number of subtask states")
    if count < 0:
        if coordinator is not None:
            raise cur.error("fully finished operator has coordinator state", at=count_at)
        return FlinkOperatorState(
            operator_id, name, uid, parallelism, max_parallelism, None, True, (), at
        )
    if count * 4 > cur.remaining:
        raise cur.error(f"truncated: {count} subtask states announced", at=count_at)
    subtasks = tuple(_subtask(cur, version) for _ in range(count))
    return FlinkOperatorState(
        operator_id, name, uid, parallelism, max_parallelism, coordinator, False, subtasks, at
    )


def _subtask(cur: ByteCursor, version: int) -> FlinkSubtaskState:
    stored = cur.i32("subtask index")
    if stored < 0:
        return FlinkSubtaskState(index=-stored - 1, finished=True)
    managed_op = read_operator_handle(cur) if cur.i32("has managed operator state") else None
    raw_op = read_operator_handle(cur) if cur.i32("has raw operator state") else None
    managed_keyed = read_keyed_handle(cur)
    raw_keyed = read_keyed_handle(cur)
    typed = version >= 6
    inputs = read_channel_handles(cur, "input", typed=typed)
    outputs = read_channel_handles(cur, "output", typed=typed)
    ref_checkpoint_id = None
    if version >= 7 and cur.u8("ref checkpoint id marker") == HAS_REF_CHECKPOINT_ID:
        ref_checkpoint_id = cur.i64("ref checkpoint id")
    return FlinkSubtaskState(
        index=stored,
        managed_operator_state=managed_op,
        raw_operator_state=raw_op,
        managed_keyed_state=managed_keyed,
        raw_keyed_state=raw_keyed,
        input_channel_state=inputs,
        output_channel_state=outputs,
        ref_checkpoint_id=ref_checkpoint_id,
    )


def iter_file_handles(metadata: FlinkCheckpointMetadata) -> list[StreamHandle]:
    """Every absolute-path file handle in the metadata, in file order."""
    by_offset = {
        handle.offset: handle
        for _, _, _, handle in metadata.stream_handles()
        if handle.kind is StreamHandleKind.FILE
    }
    return [by_offset[offset] for offset in sorted(by_offset)]
