"""Write the keyed-state meta information that starts a canonical key-group stream.

The inverse of :mod:`statekit.flink.state_meta`: Flink's ``KeyedBackendSerializationProxy``
v6 with ``StateMetaInfoSnapshotReadersWriters`` v6 (layout in that module). Serializer
snapshots are written as Flink 1.15 to 2.3 write them:

    ===========================================  =========  ===========================
    snapshot class                               version    content
    ===========================================  =========  ===========================
    simple (String, Long, ..., byte[],           3          none
    VoidNamespace, TimeWindow, ByteArrayWrapper)
    RowSerializerSnapshot                        3          composite, outer v4: supportsRowKind (1)
    ListSerializerSnapshot, MapSerializerSnapshot 3         composite, outer v1: none
    TtlSerializerSnapshot, TimerSerializerSnapshot 3        composite, outer v2: none
    ===========================================  =========  ===========================

    composite = magic 911108 | outer version | outer content
                | nested magic 1333245 | nested version 1 | count | nested snapshots

Invariant: :func:`read_keyed_backend_meta` of :func:`encode_keyed_backend_meta` gives back
the same key serializer, states, kinds and serializer trees (checked against the headers of
real Flink 2.3 and 1.20 savepoints in the tests, byte for byte).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from statekit.flink.metadata_writer import encode_utf
from statekit.flink.serializers import LIST_CLASS, MAP_CLASS, ROW_CLASS, TIMER_CLASS, TTL_CLASS
from statekit.flink.state_meta import (
    COMPOSITE_MAGIC,
    NESTED_MAGIC,
    PROXY_VERSION,
    SIMPLE_SNAPSHOTS,
    SNAPSHOT_PROXY_VERSION,
    SerializerNode,
)

__all__ = ["StateMetaSpec", "encode_serializer_snapshot", "encode_keyed_backend_meta", "KEYED_STATE_TYPES",
           "TIMER_STATE_PREFIX"]

_I32 = struct.Struct(">i")
SNAPSHOT_VERSION = 3
# outer snapshot version and content of the composite snapshots statekit writes
_COMPOSITES: dict[str, tuple[int, bytes]] = {
    ROW_CLASS: (4, b"\x01"),  # supportsRowKind
    LIST_CLASS: (1, b""),
    MAP_CLASS: (1, b""),
    TTL_CLASS: (2, b""),
    TIMER_CLASS: (2, b""),
}
# StateMetaInfoSnapshot.BackendStateType ordinals
KEY_VALUE, PRIORITY_QUEUE = 0, 3
KEYED_STATE_TYPES = {"value": "VALUE", "list": "LIST", "map": "MAP", "reducing": "REDUCING",
                     "aggregating": "AGGREGATING"}
TIMER_STATE_PREFIX = "_timer_state/"


@dataclass(frozen=True)
class StateMetaSpec:
    """One state of the header.

    Attributes:
        name: The state name (``python-state-count``, ``_timer_state/event_user-timers``).
        kind: ``value``, ``list``, ``map``, ``reducing``, ``aggregating`` or ``timers``.
        value: The value serializer snapshot (for list state the ``ListSerializer``'s, for map
            state the ``MapSerializer``'s, for timers the ``TimerSerializer``'s).
        namespace: The namespace serializer snapshot (``None`` for timers).
    """

    name: str
    kind: str
    value: SerializerNode
    namespace: SerializerNode | None


def encode_serializer_snapshot(node: SerializerNode) -> bytes:
    """A versioned serializer snapshot (class name, version, content), without the proxy version.

    Raises:
        ValueError: A class statekit does not write (a bug of the caller).
    """
    head = encode_utf(node.snapshot_class, what="a serializer class") + _I32.pack(SNAPSHOT_VERSION)
    if node.snapshot_class in SIMPLE_SNAPSHOTS:
        if node.children:
            raise ValueError(f"simple snapshot {node.snapshot_class} has nested snapshots")
        return head
    composite = _COMPOSITES.get(node.snapshot_class)
    if composite is None:
        raise ValueError(f"statekit does not write serializer snapshots of {node.snapshot_class}")
    outer_version, outer = composite
    nested = b"".join(encode_serializer_snapshot(child) for child in node.children)
    return (head + _I32.pack(COMPOSITE_MAGIC) + _I32.pack(outer_version) + outer + _I32.pack(NESTED_MAGIC)
            + _I32.pack(1) + _I32.pack(len(node.children)) + nested)


def _serializer(key: str, node: SerializerNode) -> bytes:
    return encode_utf(key, what="a serializer key") + _I32.pack(SNAPSHOT_PROXY_VERSION) + encode_serializer_snapshot(node)


def _state(state: StateMetaSpec) -> bytes:
    out = encode_utf(state.name, what="a state name")
    if state.kind == "timers":
        return out + _I32.pack(PRIORITY_QUEUE) + _I32.pack(0) + _I32.pack(1) + _serializer("VALUE_SERIALIZER",
                                                                                            state.value)
    assert state.namespace is not None
    options = encode_utf("KEYED_STATE_TYPE", what="an option") + encode_utf(KEYED_STATE_TYPES[state.kind],
                                                                             what="an option")
    return (out + _I32.pack(KEY_VALUE) + _I32.pack(1) + options + _I32.pack(2)
            + _serializer("VALUE_SERIALIZER", state.value) + _serializer("NAMESPACE_SERIALIZER", state.namespace))


def encode_keyed_backend_meta(key: SerializerNode, states: Sequence[StateMetaSpec]) -> bytes:
    """The header of a key-group stream: version 6, no compression, key serializer, states in order."""
    if len(states) > 0x7FFF:
        raise ValueError(f"{len(states)} states: Flink's header holds at most {0x7FFF}")
    body = _I32.pack(PROXY_VERSION) + b"\x00" + _I32.pack(SNAPSHOT_PROXY_VERSION) + encode_serializer_snapshot(key)
    return body + len(states).to_bytes(2, "big") + b"".join(_state(s) for s in states)
