"""Decode one keyed-state entry (key bytes, value bytes) by the serializers of its state.

Keys and values have RocksDB's composite layout, which the canonical format shares::

    key   = key-group prefix | key | [key length] | namespace | [namespace length] | [user key]
    value = value                                  (value, reducing, aggregating state)
          | element (',' element)*                 (list state)
          | null flag boolean | value              (map state, one entry per user key)
    timer = key-group prefix | timestamp (sign bit flipped) | key | namespace;  value empty

The bracketed lengths are written only when both the key and the namespace serializers have
a variable length (one byte per 8 bits, least significant first).

A value wrapped in Flink's TTL serializer carries its last-access timestamp, which becomes
the entry's ``expiry`` (for list state: the latest of its elements'). PyFlink state
(``byte[]`` values) is decoded further by a declared type (:mod:`statekit.flink.pyflink`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from statekit.flink.cursor import ByteCursor
from statekit.flink.pyflink import PyFlinkType, parse_pyflink_type
from statekit.flink.serializers import (
    LIST_CLASS,
    MAP_CLASS,
    FlinkSerializer,
    FlinkTimer,
    TtlValue,
    flink_serializer,
    read_list_delimited,
    unsupported_class,
)
from statekit.flink.state_meta import KRYO_SNAPSHOTS, FlinkStateMeta, KeyedBackendMeta, SerializerNode
from statekit.statefmt.errors import BadInputError, CorruptStateError, StateNotFoundError

__all__ = ["FlinkKeyedEntry", "FlinkStateDecoder", "flink_state_decoder", "decode_entry", "read_heap_state",
           "DECODABLE_KINDS"]

DECODABLE_KINDS = ("value", "list", "map", "reducing", "aggregating", "timers")
_BYTES_TYPES = ("byte[]", "ByteArrayWrapper")


@dataclass(frozen=True)
class FlinkKeyedEntry:
    """One decoded entry (one per user key for map state, one per timer for timers).

    ``expiry`` is the TTL timestamp (last access, epoch ms) of state with a time-to-live.
    """

    key_group: int
    key: Any
    namespace: Any
    user_key: Any
    value: Any
    subtask: int
    expiry: int | None = None


@dataclass(frozen=True)
class FlinkStateDecoder:
    """How to decode one state of one operator: its serializers and the Spark schema.

    Attributes:
        value_type: The declared type of PyFlink ``byte[]`` values, when given.
    """

    state: str
    kind: str
    key: FlinkSerializer
    namespace: FlinkSerializer
    value: FlinkSerializer
    user_key: FlinkSerializer | None
    element: FlinkSerializer | None
    ambiguous_key: bool
    value_type: PyFlinkType | None = None

    def _value_spark_type(self) -> str:
        if self.kind == "timers":
            return "bigint"
        if self.value_type is not None:
            if self.kind == "map":
                return self.value_type.args[1].spark_type
            return self.value_type.spark_type
        if self.kind == "list" and self.element is not None:
            return f"array<{self.element.spark_type}>"
        return self.value.spark_type

    @property
    def spark_schema(self) -> str:
        """The DDL schema of the exported rows (``statekit export`` columns)."""
        key = self.key.spark_type
        namespace = self.namespace.spark_type
        user_key = self.user_key.spark_type if self.user_key else "string"
        if self.kind == "timers":
            timer = self.value.spark_type  # struct<timestamp,key,namespace>
            key, namespace = _struct_field(timer, "key"), _struct_field(timer, "namespace")
        if self.value_type is not None and self.kind == "map":
            user_key = self.value_type.args[0].spark_type
        return (f"key {key}, namespace {namespace}, user_key {user_key}, value {self._value_spark_type()}, "
                "expiry bigint, key_group int, subtask int")


def _struct_field(struct_type: str, name: str) -> str:
    """The type of field ``name`` of a ``struct<timestamp:..,key:..,namespace:..>`` DDL."""
    inner = struct_type[len("struct<"):-1]
    depth, start, parts = 0, 0, []
    for i, ch in enumerate(inner):
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    parts.append(inner[start:])
    return next(p.split(":", 1)[1] for p in parts if p.split(":", 1)[0] == name)


def _tree(state: FlinkStateMeta, role: str) -> SerializerNode | None:
    return next((ser.tree for ser in state.serializers if ser.key == role), None)


def _part(node: SerializerNode | None, what: str, state: str, source: str) -> FlinkSerializer:
    serializer = flink_serializer(node)
    if serializer is None:
        raise BadInputError(f"state {state!r}: cannot decode the {what} serializer {unsupported_class(node)}",
                            path=source)
    return serializer


def _timers_decoder(meta: KeyedBackendMeta, found: FlinkStateMeta, source: str) -> FlinkStateDecoder:
    timer = _part(_tree(found, "VALUE_SERIALIZER"), "timer", found.name, source)
    key = _part(meta.key_serializer.tree if meta.key_serializer else None, "key", found.name, source)
    return FlinkStateDecoder(found.name, "timers", key, key, timer, None, None, False)


def _value_type(found: FlinkStateMeta, decoder: FlinkStateDecoder, value_type: str, source: str) -> PyFlinkType:
    declared = parse_pyflink_type(value_type)
    bytes_value = (decoder.element or decoder.value).name.removeprefix("Ttl<").removesuffix(">") in _BYTES_TYPES
    if decoder.kind == "timers" or not bytes_value:
        raise BadInputError(f"state {found.name!r}: --value-type applies to PyFlink state (byte[] values); its "
                            f"values are {(decoder.element or decoder.value).name}, decoded already", path=source)
    if decoder.kind == "map":
        key_bytes = decoder.user_key is not None and decoder.user_key.name in _BYTES_TYPES
        if declared.name != "map" or not key_bytes:
            raise BadInputError(f"state {found.name!r} is a map state: declare map<KEY,VALUE>, not "
                                f"{declared.text}", path=source)
    elif declared.name == "map":
        raise BadInputError(f"state {found.name!r} is a {decoder.kind} state, not a map state: "
                            f"{declared.text} does not fit", path=source)
    return declared


def flink_state_decoder(meta: KeyedBackendMeta, state: str, *, source: str,
                        value_type: str | None = None) -> FlinkStateDecoder:
    """The decoder of ``state`` from a keyed backend header.

    Args:
        meta: The keyed backend meta information.
        state: The state name.
        source: The file the header came from, for messages.
        value_type: The declared type of PyFlink ``byte[]`` values (``--value-type``).

    Raises:
        StateNotFoundError: No state of that name.
        BadInputError: A kind or serializer that cannot be decoded (names the class), or a
            declared type that does not fit the state.
    """
    found = next((s for s in meta.states if s.name == state), None)
    if found is None:
        names = ", ".join(s.name for s in meta.states) or "none"
        raise StateNotFoundError(f"no keyed state {state!r} (states: {names})", path=source)
    if found.kind not in DECODABLE_KINDS:
        raise BadInputError(f"state {state!r}: {found.kind} state cannot be decoded", path=source)
    if found.problem:
        raise BadInputError(f"state {state!r}: {found.problem}", path=source)
    if found.kind == "timers":
        decoder = _timers_decoder(meta, found, source)
    elif value_type is not None and _kryo_value(found) is not None:
        return _declared_kryo_decoder(meta, found, value_type, source)
    else:
        decoder = _keyed_decoder(meta, found, source)
    if value_type is None:
        return decoder
    declared = _value_type(found, decoder, value_type, source)
    return FlinkStateDecoder(decoder.state, decoder.kind, decoder.key, decoder.namespace, decoder.value,
                             decoder.user_key, decoder.element, decoder.ambiguous_key, declared)


def _kryo_value(found: FlinkStateMeta) -> SerializerNode | None:
    """The Kryo serializer of a state's values (of a list's elements, a map's values), if Kryo."""
    tree = _tree(found, "VALUE_SERIALIZER")
    if tree is not None and found.kind in ("list", "map") and tree.children:
        tree = tree.children[-1]
    return tree if tree is not None and tree.snapshot_class in KRYO_SNAPSHOTS else None


def _declared_kryo_decoder(meta: KeyedBackendMeta, found: FlinkStateMeta, value_type: str,
                           source: str) -> FlinkStateDecoder:
    """A state whose Kryo values are decoded by the fields ``value_type`` declares."""
    from statekit.flink.kryo import kryo_serializer

    node = _kryo_value(found)
    assert node is not None
    declared = kryo_serializer(node, value_type)
    if declared is None:
        raise BadInputError(f"state {found.name!r}: Kryo class {node.text}: {value_type} does not declare "
                            "its fields", path=source)
    return _keyed_decoder(meta, found, source, kryo=declared)


def _keyed_decoder(meta: KeyedBackendMeta, found: FlinkStateMeta, source: str,
                   kryo: FlinkSerializer | None = None) -> FlinkStateDecoder:
    state = found.name
    key = _part(meta.key_serializer.tree if meta.key_serializer else None, "key", state, source)
    namespace = _part(_tree(found, "NAMESPACE_SERIALIZER"), "namespace", state, source)
    value_tree = _tree(found, "VALUE_SERIALIZER")
    if kryo is not None and found.kind not in ("list", "map"):
        value = kryo
    else:
        value = _part(value_tree, "value", state, source) if kryo is None else kryo
    assert value_tree is not None  # else _part raised
    user_key = element = None
    if found.kind in ("map", "list"):
        container = MAP_CLASS if found.kind == "map" else LIST_CLASS
        if value_tree.snapshot_class != container:
            raise BadInputError(f"state {state!r}: {found.kind} state whose value serializer is "
                                f"{value_tree.snapshot_class}, not {container}", path=source)
        # the container decoded, so its children do: map = (user key, value), list = (element,)
        children = [_part(child, found.kind, state, source) for child in value_tree.children]
        if kryo is not None:
            children[-1] = kryo
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


def _unwrap(value: Any) -> tuple[Any, int | None]:
    if isinstance(value, TtlValue):
        return value.value, value.timestamp
    return value, None


def _timer_entry(decoder: FlinkStateDecoder, key_group: int, key: bytes, value: bytes, prefix: int,
                 where: str, subtask: int) -> FlinkKeyedEntry:
    kc = ByteCursor(key, source=where, pos=prefix, error=CorruptStateError)
    timer = decoder.value.read(kc)
    assert isinstance(timer, FlinkTimer)
    if kc.remaining or value:
        raise kc.error(f"{kc.remaining} key bytes and {len(value)} value bytes left after the timer")
    return FlinkKeyedEntry(key_group, timer.key, timer.namespace, None, timer.timestamp, subtask)


def _typed(decoder: FlinkStateDecoder, v: Any, user_key: Any, where: str) -> tuple[Any, Any]:
    """PyFlink bytes decoded by the declared type: (value, user key)."""
    declared = decoder.value_type
    assert declared is not None
    if decoder.kind == "map":
        return declared.args[1].decode(v, where), declared.args[0].decode(user_key, where)
    if decoder.kind != "list":
        return declared.decode(v, where), user_key
    if declared.name == "list":
        return [declared.args[0].decode(e, where) for e in v], user_key
    if len(v) != 1:
        raise CorruptStateError(f"{len(v)} elements where a PyFlink value state holds one: declare "
                                f"list<{declared.text}> for a ListState", path=where)
    return declared.decode(v[0], where), user_key


def decode_entry(decoder: FlinkStateDecoder, key_group: int, key: bytes, value: bytes, prefix: int,
                 where: str, subtask: int) -> FlinkKeyedEntry:
    """Decode one entry of ``decoder``'s state.

    Raises:
        CorruptStateError: The bytes do not decode (names ``where`` and the byte offset).
    """
    if decoder.kind == "timers":
        return _timer_entry(decoder, key_group, key, value, prefix, where, subtask)
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
    expiry = None
    if decoder.kind == "list":
        assert decoder.element is not None
        elements = [_unwrap(e) for e in read_list_delimited(vc, decoder.element, len(value))] if value else []
        v = [e for e, _ in elements]
        stamps = [t for _, t in elements if t is not None]
        expiry = max(stamps) if stamps else None
    elif decoder.kind == "map":
        v, expiry = _unwrap(None if vc.boolean("map value null flag") else decoder.value.read(vc))
    else:
        v, expiry = _unwrap(decoder.value.read(vc))
    if vc.remaining:
        raise vc.error(f"{vc.remaining} value bytes left after the value")
    if decoder.value_type is not None and v is not None:
        v, user_key = _typed(decoder, v, user_key, where)
    return FlinkKeyedEntry(key_group, k, ns, user_key, v, subtask, expiry)


def _heap_value(decoder: FlinkStateDecoder, cur: ByteCursor) -> list[tuple[Any, Any, int | None]]:
    """(user key, value, expiry) of one heap state value: one per user key for map state."""
    if decoder.kind == "map":
        assert decoder.user_key is not None
        out = []
        for _ in range(cur.count("map size", min_item_size=2)):
            user_key = decoder.user_key.read(cur)
            value, expiry = _unwrap(None if cur.boolean("map value null flag") else decoder.value.read(cur))
            out.append((user_key, value, expiry))
        return out
    if decoder.kind == "list":
        assert decoder.element is not None
        elements = [_unwrap(decoder.element.read(cur)) for _ in range(cur.count("list size"))]
        stamps = [t for _, t in elements if t is not None]
        return [(None, [e for e, _ in elements], max(stamps) if stamps else None)]
    value, expiry = _unwrap(decoder.value.read(cur))
    return [(None, value, expiry)]


def read_heap_state(decoder: FlinkStateDecoder, cur: ByteCursor, key_group: int, subtask: int,
                    wanted: bool) -> list[FlinkKeyedEntry]:
    """One state's part of a heap key group: ``count`` int, then the entries.

    ``HeapSnapshotStrategy`` writes each state through its snapshot's key-group writer: a
    key/value state as (namespace, key, whole value) per entry — a list state's value is
    the whole list, a map state's the whole map —, a priority queue (timers) as its
    elements. Entries are read (to reach the next state) even when not ``wanted``.
    """
    out: list[FlinkKeyedEntry] = []
    for _ in range(cur.count("number of heap state entries")):
        if decoder.kind == "timers":
            timer = decoder.value.read(cur)
            assert isinstance(timer, FlinkTimer)
            out.append(FlinkKeyedEntry(key_group, timer.key, timer.namespace, None, timer.timestamp, subtask))
            continue
        namespace = decoder.namespace.read(cur)
        key = decoder.key.read(cur)
        for user_key, value, expiry in _heap_value(decoder, cur):
            if decoder.value_type is not None and value is not None:
                value, user_key = _typed(decoder, value, user_key, cur.source)
            out.append(FlinkKeyedEntry(key_group, key, namespace, user_key, value, subtask, expiry))
    return out if wanted else []
