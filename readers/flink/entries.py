"""Count the entries of a canonical savepoint's keyed state, per state and key group.

Canonical savepoints (heap and RocksDB alike) write one key-group stream per subtask in
Flink's unified format (``FullSnapshotAsyncWriter``), after the keyed backend meta
information. At each non-zero key-group offset::

    state id short
    repeated: key bytes (int length + bytes) | value bytes (int length + bytes)
        when the key's first byte has bit 0x80 set, meta data follows:
        a short — 0xFFFF ends the key group, anything else is the next state id

A key starts with the key group itself (1 byte when max parallelism <= 128, else 2), with
the 0x80 flag cleared; a mismatch with the key group of the offset is reported as damage.
An offset of 0 means the key group is empty.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from statekit.readers.flink.cursor import ByteCursor
from statekit.readers.flink.model import FlinkOperatorState, KeyedHandleKind, KeyedStateHandle
from statekit.readers.flink.state_meta import read_keyed_backend_meta
from statekit.readers.flink.storage import FlinkSnapshot, read_stream_bytes
from statekit.statefmt.errors import BadInputError, CorruptStateError

__all__ = ["FlinkEntryCounts", "count_savepoint_entries"]

END_OF_KEY_GROUP_MARK = 0xFFFF
META_FOLLOWS = 0x80


@dataclass(frozen=True)
class FlinkEntryCounts:
    """Entries per state and key group of one operator's keyed state.

    Attributes:
        operator: The operator's uid or id.
        per_key_group: ``{state name: {key group: entries}}`` (empty key groups omitted).
        bytes_per_state: Key plus value bytes per state name.
    """

    operator: str
    per_key_group: dict[str, dict[int, int]] = field(default_factory=dict)
    bytes_per_state: dict[str, int] = field(default_factory=dict)

    @property
    def totals(self) -> dict[str, int]:
        """Entries per state name."""
        return {name: sum(groups.values()) for name, groups in self.per_key_group.items()}


def _prefix_bytes(max_parallelism: int) -> int:
    return 2 if max_parallelism > 128 else 1


def _key_group_of(key: bytes, prefix: int) -> int:
    value = key[0] & ~META_FOLLOWS & 0xFF
    return (value << 8 | key[1]) if prefix == 2 else value


def _count_key_group(
    cur: ByteCursor, key_group: int, names: tuple[str, ...], prefix: int, counts: FlinkEntryCounts
) -> None:
    state_id = cur.u16("state id")
    while True:
        if state_id >= len(names):
            raise cur.error(f"key group {key_group}: unknown state id {state_id}")
        name = names[state_id]
        key_at = cur.pos
        key = cur.take(cur.count("key length"), "key")
        value_length = cur.count("value length")
        cur.skip(value_length, "value")
        if len(key) < prefix or _key_group_of(key, prefix) != key_group:
            raise cur.error(f"key in key group {key_group} has a wrong key-group prefix", at=key_at)
        groups = counts.per_key_group.setdefault(name, {})
        groups[key_group] = groups.get(key_group, 0) + 1
        counts.bytes_per_state[name] = counts.bytes_per_state.get(name, 0) + len(key) + value_length
        if key[0] & META_FOLLOWS:
            marker = cur.u16("state id or end-of-key-group mark")
            if marker == END_OF_KEY_GROUP_MARK:
                return
            state_id = marker


def _count_handle(
    snapshot: FlinkSnapshot, op: FlinkOperatorState, handle: KeyedStateHandle, counts: FlinkEntryCounts
) -> None:
    if handle.kind is not KeyedHandleKind.SAVEPOINT_KEY_GROUPS or handle.delegate is None:
        raise BadInputError(
            f"entry counts need a canonical savepoint; {op.label} has a {handle.kind.value} handle",
            path=snapshot.path,
        )
    source = handle.delegate.path or handle.delegate.name or "<inline>"
    data = read_stream_bytes(snapshot, handle.delegate)
    meta = read_keyed_backend_meta(data, source=source)
    if meta.compressed:
        raise BadInputError("compressed (snappy) key groups are not supported", path=source)
    if not meta.states:
        raise CorruptStateError(meta.problem or "no state meta information", path=source)
    names = tuple(state.name for state in meta.states)
    prefix = _prefix_bytes(op.max_parallelism)
    for key_group, offset in zip(handle.key_group_range, handle.key_group_offsets):
        if offset == 0:
            continue
        cur = ByteCursor(data, source=source, pos=offset, error=CorruptStateError)
        _count_key_group(cur, key_group, names, prefix, counts)


def count_savepoint_entries(snapshot: FlinkSnapshot, uid_or_id: str) -> FlinkEntryCounts:
    """Count the keyed entries of one operator of a canonical savepoint.

    Args:
        snapshot: An opened canonical savepoint.
        uid_or_id: The operator's uid or operator id.

    Raises:
        StateNotFoundError: No such operator.
        BadInputError: Not a canonical savepoint, or compressed key groups.
        CorruptStateError: The key-group stream is damaged (names file and byte offset).
    """
    op = snapshot.metadata.operator(uid_or_id)
    counts = FlinkEntryCounts(op.label)
    for subtask in op.subtasks:
        if subtask.managed_keyed_state is not None:
            _count_handle(snapshot, op, subtask.managed_keyed_state, counts)
    return counts
