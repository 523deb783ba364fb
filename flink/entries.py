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

Decoding (:func:`read_savepoint_entries`) follows the RocksDB composite key, which the
unified format shares::

    key   = key-group prefix | key | [key length] | namespace | [namespace length] | [user key]
    value = value                                  (value, reducing, aggregating state)
          | element (',' element)*                 (list state)
          | null flag boolean | value              (map state, one entry per user key)

The bracketed lengths are written only when both the key and the namespace serializers have
a variable length (one byte per 8 bits, least significant first). Key groups are read one
at a time with ranged reads, so memory stays bounded by the largest key group.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from statekit.flink.cursor import ByteCursor
from statekit.flink.model import FlinkOperatorState, KeyedHandleKind, KeyedStateHandle, StreamHandle
from statekit.flink.serializers import (
    LIST_CLASS,
    MAP_CLASS,
    FlinkSerializer,
    flink_serializer,
    read_list_delimited,
    unsupported_class,
)
from statekit.flink.state_meta import FlinkStateMeta, KeyedBackendMeta, SerializerNode, read_keyed_backend_meta
from statekit.flink.storage import FlinkSnapshot, read_stream_bytes, read_stream_ranges
from statekit.statefmt.errors import BadInputError, CorruptStateError, StateNotFoundError

__all__ = [
    "FlinkEntryCounts",
    "count_savepoint_entries",
    "FlinkKeyedEntry",
    "FlinkStateDecoder",
    "flink_state_decoder",
    "read_savepoint_entries",
    "decodable_states",
    "FlinkStateSupport",
]

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
    prefix = _prefix_bytes(op.max_parallelism)
    for stream in _keyed_streams(snapshot, op, purpose="entry counts"):
        names = tuple(state.name for state in stream.meta.states)
        for key_group, offset, data in stream.key_groups(snapshot):
            for name, key, value, _ in _key_group_entries(data, key_group, names, prefix, stream.source, offset):
                groups = counts.per_key_group.setdefault(name, {})
                groups[key_group] = groups.get(key_group, 0) + 1
                counts.bytes_per_state[name] = counts.bytes_per_state.get(name, 0) + len(key) + len(value)
    return counts


# ----------------------------------------------------------------------------- decoding

DECODABLE_KINDS = ("value", "list", "map", "reducing", "aggregating")


@dataclass(frozen=True)
class FlinkKeyedEntry:
    """One decoded entry of a canonical savepoint (one per user key for map state)."""

    key_group: int
    key: Any
    namespace: Any
    user_key: Any
    value: Any
    subtask: int


@dataclass(frozen=True)
class FlinkStateDecoder:
    """How to decode one state of one operator: its serializers and the Spark schema."""

    state: str
    kind: str
    key: FlinkSerializer
    namespace: FlinkSerializer
    value: FlinkSerializer
    user_key: FlinkSerializer | None
    element: FlinkSerializer | None
    ambiguous_key: bool

    @property
    def spark_schema(self) -> str:
        """The DDL schema of the exported rows (``statekit export`` columns)."""
        user_key = self.user_key.spark_type if self.user_key else "string"
        return (f"key {self.key.spark_type}, namespace {self.namespace.spark_type}, user_key {user_key}, "
                f"value {self.value.spark_type}, key_group int, subtask int")


def _serializer_tree(state: FlinkStateMeta, role: str) -> SerializerNode | None:
    return next((ser.tree for ser in state.serializers if ser.key == role), None)


def _decoder_part(node: SerializerNode | None, what: str, state: str, source: str) -> FlinkSerializer:
    serializer = flink_serializer(node)
    if serializer is None:
        raise BadInputError(f"state {state!r}: cannot decode the {what} serializer {unsupported_class(node)}",
                            path=source)
    return serializer


def flink_state_decoder(meta: KeyedBackendMeta, state: str, *, source: str) -> FlinkStateDecoder:
    """The decoder of ``state`` from a keyed backend header.

    Raises:
        StateNotFoundError: No state of that name.
        BadInputError: A kind or serializer that cannot be decoded (names the class).
    """
    found = next((s for s in meta.states if s.name == state), None)
    if found is None:
        names = ", ".join(s.name for s in meta.states) or "none"
        raise StateNotFoundError(f"no keyed state {state!r} (states: {names})", path=source)
    if found.kind not in DECODABLE_KINDS:
        raise BadInputError(f"state {state!r}: {found.kind} state cannot be decoded", path=source)
    if found.problem:
        raise BadInputError(f"state {state!r}: {found.problem}", path=source)
    key = _decoder_part(meta.key_serializer.tree if meta.key_serializer else None, "key", state, source)
    namespace = _decoder_part(_serializer_tree(found, "NAMESPACE_SERIALIZER"), "namespace", state, source)
    value_tree = _serializer_tree(found, "VALUE_SERIALIZER")
    value = _decoder_part(value_tree, "value", state, source)
    assert value_tree is not None  # else _decoder_part raised
    user_key = element = None
    if found.kind in ("map", "list"):
        container = MAP_CLASS if found.kind == "map" else LIST_CLASS
        if value_tree.snapshot_class != container:
            raise BadInputError(f"state {state!r}: {found.kind} state whose value serializer is "
                                f"{value_tree.snapshot_class}, not {container}", path=source)
        # the container decoded, so its children do: map = (user key, value), list = (element,)
        children = [_decoder_part(child, found.kind, state, source) for child in value_tree.children]
        if found.kind == "map":
            user_key, value = children
        else:
            (element,) = children
    ambiguous = key.fixed_length is None and namespace.fixed_length is None
    return FlinkStateDecoder(state, found.kind, key, namespace, value, user_key, element, ambiguous)


def _skip_length(cur: ByteCursor, start: int) -> None:
    """Skip the length of the bytes since ``start``, checking it.

    ``RocksDBKeySerializationUtils.writeVariableIntBytes``: the length's bytes, least
    significant first, until the rest is zero (at least one byte).
    """
    at = cur.pos
    expected = length = at - start
    while True:
        if cur.u8("length suffix") != length & 0xFF:
            raise cur.error(f"length suffix does not match the {expected} bytes before it", at=at)
        length >>= 8
        if not length:
            return


def _decode(decoder: FlinkStateDecoder, key_group: int, key: bytes, value: bytes, prefix: int,
            where: str, subtask: int) -> FlinkKeyedEntry:
    kc = ByteCursor(key, source=where, pos=prefix, error=CorruptStateError)
    k = decoder.key.read(kc)
    if decoder.ambiguous_key:
        _skip_length(kc, prefix)
    namespace_at = kc.pos
    ns = decoder.namespace.read(kc)
    if decoder.ambiguous_key:
        _skip_length(kc, namespace_at)
    user_key = decoder.user_key.read(kc) if decoder.user_key else None
    if kc.remaining:
        raise kc.error(f"{kc.remaining} key bytes left after the key")
    vc = ByteCursor(value, source=where, error=CorruptStateError)
    v: Any
    if decoder.kind == "list":
        assert decoder.element is not None
        v = read_list_delimited(vc, decoder.element, len(value)) if value else []
    elif decoder.kind == "map":
        v = None if vc.boolean("map value null flag") else decoder.value.read(vc)
    else:
        v = decoder.value.read(vc)
    if vc.remaining:
        raise vc.error(f"{vc.remaining} value bytes left after the value")
    return FlinkKeyedEntry(key_group, k, ns, user_key, v, subtask)


def _key_group_entries(
    data: bytes, key_group: int, names: tuple[str, ...], prefix: int, source: str, base: int
) -> Iterator[tuple[str, bytes, bytes, int]]:
    """(state name, key, value, file offset) of every entry of one key group's bytes."""
    cur = ByteCursor(data, source=source, error=CorruptStateError)
    state_id = cur.u16("state id")
    while True:
        if state_id >= len(names):
            raise CorruptStateError(f"key group {key_group}: unknown state id {state_id} "
                                    f"at byte offset {base + cur.pos - 2}", path=source)
        at = base + cur.pos
        key = cur.take(cur.count("key length"), "key")
        value = cur.take(cur.count("value length"), "value")
        if len(key) < prefix or _key_group_of(key, prefix) != key_group:
            raise CorruptStateError(f"key in key group {key_group} has a wrong key-group prefix "
                                    f"at byte offset {at}", path=source)
        yield names[state_id], key, value, at
        if key[0] & META_FOLLOWS:
            marker = cur.u16("state id or end-of-key-group mark")
            if marker == END_OF_KEY_GROUP_MARK:
                return
            state_id = marker


@dataclass(frozen=True)
class _KeyedStream:
    subtask: int
    handle: KeyedStateHandle
    source: str
    meta: KeyedBackendMeta

    @property
    def delegate(self) -> StreamHandle:
        """The stream holding the key groups."""
        assert self.handle.delegate is not None
        return self.handle.delegate

    def key_groups(self, snapshot: FlinkSnapshot, wanted: set[int] | None = None) -> Iterator[tuple[int, int, bytes]]:
        """(key group, file offset, bytes) of every non-empty (wanted) key group, one open for all."""
        starts = sorted((offset, kg) for kg, offset in zip(self.handle.key_group_range, self.handle.key_group_offsets)
                        if offset)
        spans = [(kg, offset, (starts[i + 1][0] - offset) if i + 1 < len(starts) else None)
                 for i, (offset, kg) in enumerate(starts) if wanted is None or kg in wanted]
        data = read_stream_ranges(snapshot, self.delegate, [(offset, length) for _, offset, length in spans])
        for (key_group, offset, _), chunk in zip(spans, data):
            yield key_group, offset, chunk


def _keyed_streams(snapshot: FlinkSnapshot, op: FlinkOperatorState, purpose: str = "decoding state",
                   wanted: set[int] | None = None) -> Iterator[_KeyedStream]:
    """The canonical keyed streams of ``op`` (only those holding a ``wanted`` key group)."""
    for subtask in op.subtasks:
        handle = subtask.managed_keyed_state
        if handle is None:
            continue
        if handle.kind is not KeyedHandleKind.SAVEPOINT_KEY_GROUPS or handle.delegate is None:
            raise BadInputError(
                f"{purpose} needs a canonical savepoint; {op.label} has a {handle.kind.value} handle",
                path=snapshot.path,
            )
        if wanted is not None and wanted.isdisjoint(handle.key_group_range):
            continue
        source = handle.delegate.path or handle.delegate.name or "<inline>"
        first = min((o for o in handle.key_group_offsets if o), default=None)
        head = read_stream_bytes(snapshot, handle.delegate, length=first)
        meta = read_keyed_backend_meta(head, source=source)
        if meta.compressed:
            raise BadInputError("compressed (snappy) key groups are not supported", path=source)
        if not meta.states:
            raise CorruptStateError(meta.problem or "no state meta information", path=source)
        yield _KeyedStream(subtask.index, handle, source, meta)


@dataclass(frozen=True)
class FlinkStateSupport:
    """One keyed state of an operator: its decoder, or why it cannot be decoded."""

    name: str
    kind: str
    decoder: FlinkStateDecoder | None
    reason: str | None


def decodable_states(snapshot: FlinkSnapshot, uid_or_id: str) -> list[FlinkStateSupport]:
    """Every keyed state of one operator, with its decoder or the reason there is none.

    Reads the keyed backend header of the operator's first keyed stream (every subtask
    writes the same states and serializers).
    """
    op = snapshot.metadata.operator(uid_or_id)
    for stream in _keyed_streams(snapshot, op):
        out: list[FlinkStateSupport] = []
        for state in stream.meta.states:
            try:
                out.append(FlinkStateSupport(state.name, state.kind,
                                             flink_state_decoder(stream.meta, state.name, source=stream.source), None))
            except BadInputError as exc:
                reason = str(exc).removeprefix(f"{stream.source}: ").removeprefix(f"state {state.name!r}: ")
                out.append(FlinkStateSupport(state.name, state.kind, None, reason))
        return out
    return []


def read_savepoint_entries(
    snapshot: FlinkSnapshot, uid_or_id: str, state: str, *, key_groups: Iterable[int] | None = None
) -> Iterator[FlinkKeyedEntry]:
    """Decode the entries of one keyed state of a canonical savepoint, key group by key group.

    Args:
        snapshot: An opened canonical savepoint.
        uid_or_id: The operator's uid or operator id.
        state: The state name.
        key_groups: Only these key groups (default: all).

    Raises:
        StateNotFoundError: No such operator or state.
        BadInputError: Not a canonical savepoint, or a serializer that cannot be decoded.
        CorruptStateError: Damaged bytes (names the file and byte offset).
    """
    op = snapshot.metadata.operator(uid_or_id)
    wanted = None if key_groups is None else set(key_groups)
    prefix = _prefix_bytes(op.max_parallelism)
    for stream in _keyed_streams(snapshot, op, wanted=wanted):
        decoder = flink_state_decoder(stream.meta, state, source=stream.source)
        names = tuple(s.name for s in stream.meta.states)
        for key_group, offset, data in stream.key_groups(snapshot, wanted):
            for name, key, value, at in _key_group_entries(data, key_group, names, prefix, stream.source, offset):
                if name == state:
                    where = f"{stream.source} (state {state!r}, key group {key_group}, entry at byte offset {at})"
                    yield _decode(decoder, key_group, key, value, prefix, where, stream.subtask)
