"""Readers for the serialized state handles inside a Flink ``_metadata`` file.

Layouts restated from Flink's ``MetadataV2V3SerializerBase`` (stream, keyed and operator
handles) and ``ChannelStateHandleSerializerV1/V2`` (channel state). Every handle starts with
a type byte; an unknown type byte is an error that names its offset.
"""

from __future__ import annotations

from statekit.flink.cursor import ByteCursor
from statekit.flink.layout import (
    INPUT_CHANNEL_HANDLE,
    MERGED_INPUT_CHANNEL_HANDLE,
    MERGED_RESULT_SUBPARTITION_HANDLE,
    RESULT_SUBPARTITION_HANDLE,
    HandleCode,
)
from statekit.flink.model import (
    ChannelStateHandle,
    DistributionMode,
    KeyedHandleKind,
    KeyedStateHandle,
    KeyGroupRange,
    NamedStreamHandle,
    OperatorStateEntry,
    OperatorStateHandle,
    StreamHandle,
    StreamHandleKind,
)

__all__ = [
    "read_stream_handle",
    "read_keyed_handle",
    "read_operator_handle",
    "read_channel_handles",
]

# Nested handles (changelog in changelog, key-groups in stream) are legal but shallow in
# practice; the limit keeps malformed input from exhausting the Python stack.
MAX_NESTING = 16
MAX_KEY_GROUPS = 32768

_MODES = (DistributionMode.SPLIT_DISTRIBUTE, DistributionMode.UNION, DistributionMode.BROADCAST)


def _check_depth(cur: ByteCursor, depth: int) -> None:
    if depth > MAX_NESTING:
        raise cur.error(f"state handles nested deeper than {MAX_NESTING} levels")


def _key_group_range(cur: ByteCursor) -> KeyGroupRange:
    at = cur.pos
    start = cur.i32("key-group range start")
    count = cur.i32("number of key groups")
    if start < 0 or count < 0 or count > MAX_KEY_GROUPS or start + count > MAX_KEY_GROUPS:
        raise cur.error(f"invalid key-group range start={start} count={count}", at=at)
    return KeyGroupRange(start, start + count - 1)


def read_stream_handle(cur: ByteCursor, depth: int = 0) -> StreamHandle | None:
    """A ``StreamStateHandle`` (null, byte-stream, file, relative file or key-groups)."""
    _check_depth(cur, depth)
    at = cur.pos
    code = cur.u8("stream handle type")
    if code == HandleCode.NULL:
        return None
    if code == HandleCode.FILE:
        size = cur.i64("file handle size")
        path_offset = cur.pos
        path = cur.utf("file handle path")
        return StreamHandle(
            StreamHandleKind.FILE, size, at, path=path, path_offset=path_offset
        )
    if code == HandleCode.BYTE_STREAM:
        name = cur.utf("byte stream handle name")
        length = cur.count("byte stream handle length")
        data = cur.take(length, "byte stream handle data")
        return StreamHandle(StreamHandleKind.BYTE_STREAM, length, at, name=name, data=data)
    if code == HandleCode.RELATIVE_FILE:
        path = cur.utf("relative file handle path")
        size = cur.i64("relative file handle size")
        return StreamHandle(StreamHandleKind.RELATIVE_FILE, size, at, path=path)
    if code == HandleCode.KEY_GROUPS:
        kg_range = _key_group_range(cur)
        offsets = cur.i64_array(len(kg_range), "key-group offsets")
        delegate = read_stream_handle(cur, depth + 1)
        size = delegate.size if delegate is not None else 0
        return StreamHandle(
            StreamHandleKind.KEY_GROUPS,
            size,
            at,
            key_group_range=kg_range,
            key_group_offsets=offsets,
            delegate=delegate,
        )
    raise cur.error(f"unknown stream state handle type {code}", at=at)


def _handle_and_local_paths(cur: ByteCursor, depth: int) -> tuple[NamedStreamHandle, ...]:
    count = cur.count("number of incremental state files", min_item_size=3)
    items = []
    for _ in range(count):
        local_path = cur.utf("local path of incremental state file")
        items.append(NamedStreamHandle(local_path, read_stream_handle(cur, depth + 1)))
    return tuple(items)


def _key_groups_handle(cur: ByteCursor, code: int, at: int, depth: int) -> KeyedStateHandle:
    kg_range = _key_group_range(cur)
    offsets = cur.i64_array(len(kg_range), "key-group offsets")
    delegate = read_stream_handle(cur, depth + 1)
    handle_id = cur.utf("state handle id") if code == HandleCode.KEY_GROUPS_V2 else None
    kind = (
        KeyedHandleKind.SAVEPOINT_KEY_GROUPS
        if code == HandleCode.SAVEPOINT_KEY_GROUPS
        else KeyedHandleKind.KEY_GROUPS
    )
    return KeyedStateHandle(
        kind, code, at, kg_range, key_group_offsets=offsets, delegate=delegate,
        state_handle_id=handle_id,
    )


def _incremental_handle(cur: ByteCursor, code: int, at: int, depth: int) -> KeyedStateHandle:
    checkpoint_id = cur.i64("incremental handle checkpoint id")
    backend_id = cur.utf("incremental handle backend id")
    kg_range = _key_group_range(cur)
    v2 = code == HandleCode.INCREMENTAL_KEY_GROUPS_V2
    checkpointed_size = cur.i64("incremental handle checkpointed size") if v2 else None
    meta = read_stream_handle(cur, depth + 1)
    shared = _handle_and_local_paths(cur, depth)
    private = _handle_and_local_paths(cur, depth)
    handle_id = cur.utf("state handle id") if v2 else None
    return KeyedStateHandle(
        KeyedHandleKind.INCREMENTAL, code, at, kg_range, state_handle_id=handle_id,
        checkpoint_id=checkpoint_id, backend_id=backend_id,
        checkpointed_size=checkpointed_size, meta=meta, shared=shared, private=private,
    )


def _changelog_handle(cur: ByteCursor, code: int, at: int, depth: int) -> KeyedStateHandle:
    kg_range = _key_group_range(cur)
    checkpointed_size = cur.i64("changelog checkpointed size")
    nested: list[KeyedStateHandle] = []
    for what in ("materialized changelog handles", "non-materialized changelog handles"):
        for _ in range(cur.count(f"number of {what}")):
            child = read_keyed_handle(cur, depth + 1)
            if child is not None:
                nested.append(child)
    materialization_id = cur.i64("changelog materialization id")
    checkpoint_id = (
        cur.i64("changelog checkpoint id") if code == HandleCode.CHANGELOG_V2 else materialization_id
    )
    handle_id = cur.utf("state handle id")
    return KeyedStateHandle(
        KeyedHandleKind.CHANGELOG, code, at, kg_range, state_handle_id=handle_id,
        checkpoint_id=checkpoint_id, checkpointed_size=checkpointed_size,
        nested=tuple(nested), materialization_id=materialization_id,
    )


def _changelog_bytes_handle(cur: ByteCursor, code: int, at: int) -> KeyedStateHandle:
    kg_range = _key_group_range(cur)
    cur.i64("changelog sequence number from")
    cur.i64("changelog sequence number to")
    count = cur.count("number of changelog changes", min_item_size=8)
    total = 0
    for _ in range(count):
        cur.i32("changelog change key group")
        size = cur.count("changelog change size")
        cur.skip(size, "changelog change bytes")
        total += size
    handle_id = cur.utf("state handle id")
    return KeyedStateHandle(
        KeyedHandleKind.CHANGELOG_BYTES, code, at, kg_range, state_handle_id=handle_id,
        change_count=count, change_bytes=total,
    )


def _changelog_files_handle(cur: ByteCursor, code: int, at: int, depth: int) -> KeyedStateHandle:
    kg_range = _key_group_range(cur)
    count = cur.count("number of changelog files", min_item_size=9)
    streams = []
    for _ in range(count):
        offset = cur.i64("changelog file offset")
        streams.append((offset, read_stream_handle(cur, depth + 1)))
    cur.i64("changelog state size")
    checkpointed_size = cur.i64("changelog checkpointed size")
    handle_id = cur.utf("state handle id")
    storage = (
        cur.utf("changelog storage identifier")
        if code == HandleCode.CHANGELOG_FILE_INCREMENT_V2
        else "filesystem"
    )
    return KeyedStateHandle(
        KeyedHandleKind.CHANGELOG_FILES, code, at, kg_range, state_handle_id=handle_id,
        checkpointed_size=checkpointed_size, changelog_streams=tuple(streams),
        storage_identifier=storage,
    )


def read_keyed_handle(cur: ByteCursor, depth: int = 0) -> KeyedStateHandle | None:
    """A ``KeyedStateHandle`` of any kind Flink 1.11..2.x writes, or ``None``."""
    _check_depth(cur, depth)
    at = cur.pos
    code = cur.u8("keyed state handle type")
    if code == HandleCode.NULL:
        return None
    if code in (HandleCode.KEY_GROUPS, HandleCode.KEY_GROUPS_V2, HandleCode.SAVEPOINT_KEY_GROUPS):
        return _key_groups_handle(cur, code, at, depth)
    if code in (HandleCode.INCREMENTAL_KEY_GROUPS, HandleCode.INCREMENTAL_KEY_GROUPS_V2):
        return _incremental_handle(cur, code, at, depth)
    if code in (HandleCode.CHANGELOG, HandleCode.CHANGELOG_V2):
        return _changelog_handle(cur, code, at, depth)
    if code == HandleCode.CHANGELOG_BYTE_INCREMENT:
        return _changelog_bytes_handle(cur, code, at)
    if code in (HandleCode.CHANGELOG_FILE_INCREMENT, HandleCode.CHANGELOG_FILE_INCREMENT_V2):
        return _changelog_files_handle(cur, code, at, depth)
    raise cur.error(f"unknown keyed state handle type {code}", at=at)


def read_operator_handle(cur: ByteCursor) -> OperatorStateHandle | None:
    """A partitionable ``OperatorStateHandle`` (named states with distribution modes)."""
    at = cur.pos
    code = cur.u8("operator state handle type")
    if code == HandleCode.NULL:
        return None
    if code != HandleCode.PARTITIONABLE_OPERATOR:
        raise cur.error(f"unknown operator state handle type {code}", at=at)
    count = cur.count("number of operator states", min_item_size=7)
    states = []
    for _ in range(count):
        name = cur.utf("operator state name")
        mode_at = cur.pos
        mode = cur.u8("operator state distribution mode")
        if mode >= len(_MODES):
            raise cur.error(f"unknown operator state distribution mode {mode}", at=mode_at)
        offsets = cur.i64_array(cur.count("number of partition offsets", min_item_size=8),
                                "partition offsets")
        states.append(OperatorStateEntry(name, _MODES[mode], offsets))
    delegate = read_stream_handle(cur)
    return OperatorStateHandle(at, tuple(states), delegate)


def _channel_handle(
    cur: ByteCursor, direction: str, *, typed: bool
) -> ChannelStateHandle:
    merged = False
    if typed:
        at = cur.pos
        code = cur.u8("channel state handle type")
        expected = (
            (INPUT_CHANNEL_HANDLE, MERGED_INPUT_CHANNEL_HANDLE)
            if direction == "input"
            else (RESULT_SUBPARTITION_HANDLE, MERGED_RESULT_SUBPARTITION_HANDLE)
        )
        if code not in expected:
            raise cur.error(f"unknown {direction} channel state handle type {code}", at=at)
        merged = code == expected[1]
    subtask = cur.i32("channel state subtask index")
    if merged:
        size = cur.i64("merged channel state size")
        delegate = read_stream_handle(cur)
        offsets_len = cur.count("merged channel offsets length")
        cur.skip(offsets_len, "merged channel offsets")
        return ChannelStateHandle(direction, True, subtask, None, None, offsets_len, size, delegate)
    first = cur.i32("channel gate/partition index")
    second = cur.i32("channel index")
    offsets = cur.count("number of channel state offsets", min_item_size=8)
    cur.skip(8 * offsets, "channel state offsets")
    size = cur.i64("channel state size")
    delegate = read_stream_handle(cur)
    return ChannelStateHandle(direction, False, subtask, first, second, offsets, size, delegate)


def read_channel_handles(
    cur: ByteCursor, direction: str, *, typed: bool
) -> tuple[ChannelStateHandle, ...]:
    """A collection of channel state handles (``typed``: v6+ leading type byte)."""
    count = cur.count(f"number of {direction} channel state handles", min_item_size=4)
    return tuple(_channel_handle(cur, direction, typed=typed) for _ in range(count))
