"""How one keyed state is laid out in a canonical savepoint: header entry and entry bytes.

A :class:`StateLayout` turns Python values (key, namespace, user key, value) into the entry
a canonical key-group stream stores (:mod:`statekit.flink.decoding` reads it back)::

    key   = [key-group prefix] | key | [key length] | namespace | [namespace length] | [user key]
    value = value | element (',' element)* (list) | null flag + value (map)
    timer key = [key-group prefix] | timestamp with its sign bit flipped | key | namespace

(the prefix is added when the stream is written; the bracketed lengths only when key and
namespace both have a variable length). Two layouts:

* **Java** (``pyflink=False``): the state as a Java job declares it — ``ValueStateDescriptor<T>``
  and friends; key, value, element, map key and value by Flink's Java serializers of their types.
* **PyFlink** (``pyflink=True``): what PyFlink registers on the Java side for a Python
  function's state — ``python-state-<name>``; the key is a one-field ``Row`` of the key type;
  a ValueState is a Java list state of one ``byte[]``, a ListState a list state of ``byte[]``
  (one per element), a MapState a map state from ``ByteArrayWrapper`` to ``byte[]``; the bytes
  are PyFlink's coder bytes of the declared types.

Values of state with a time-to-live are wrapped in Flink's TTL serializer: the last-access
timestamp (epoch ms) before each value, element or map value.

Namespaces: ``void`` (Flink's ``VoidNamespace``, one zero byte: no window), ``window``
(``TimeWindow``: start and end, epoch ms, end exclusive) or ``global`` (``GlobalWindow``, one
zero byte).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from statekit.flink.serializers import (
    BYTES_CLASS,
    LIST_CLASS,
    MAP_CLASS,
    TIME_WINDOW_CLASS,
    TIMER_CLASS,
    TTL_CLASS,
    VOID_NAMESPACE_CLASS,
)
from statekit.flink.state_meta import BYTE_ARRAY_WRAPPER_SNAPSHOT, SerializerNode
from statekit.flink.state_meta_writer import TIMER_STATE_PREFIX, StateMetaSpec
from statekit.flink.type_info import FlinkType, row_type
from statekit.statefmt.errors import BadInputError

__all__ = ["StateLayout", "KeyLayout", "NAMESPACES", "STATE_KINDS", "TIMER_KINDS", "PYTHON_STATE_PREFIX",
           "timer_state_name"]

PYTHON_STATE_PREFIX = "python-state-"
STATE_KINDS = ("value", "list", "map", "reducing", "aggregating")
TIMER_KINDS = ("event-timers", "processing-timers")
NAMESPACES = ("void", "window", "global")
GLOBAL_WINDOW_CLASS = ("org.apache.flink.streaming.api.windowing.windows.GlobalWindow$Serializer"
                       "$GlobalWindowSerializerSnapshot")
_I32, _I64 = struct.Struct(">i"), struct.Struct(">q")
_LONG = SerializerNode("org.apache.flink.api.common.typeutils.base.LongSerializer$LongSerializerSnapshot")
_FLIPPED_SIGN = 1 << 63


def timer_state_name(kind: str, service: str = "user-timers") -> str:
    """Flink's state name of a timer service's queue: ``_timer_state/event_user-timers``."""
    return f"{TIMER_STATE_PREFIX}{kind.split('-')[0]}_{service}"


@dataclass(frozen=True)
class KeyLayout:
    """The key of an operator: its type, and whether PyFlink wraps it in a one-field ``Row``."""

    key_type: FlinkType
    pyflink: bool

    def __post_init__(self) -> None:
        if not self.key_type.hashable:
            raise BadInputError(f"key type {self.key_type.text}: Flink cannot key by it (its Java hashCode is not "
                                "value-based); use string, long, int, ... or a row of those")
        if self.key_type.java is None:
            raise BadInputError(f"key type {self.key_type.text} has no Java serializer statekit writes")

    @property
    def serialized_type(self) -> FlinkType:
        """The type of the key Flink's key serializer writes (PyFlink: ``row<f0:T>``)."""
        return row_type([("f0", self.key_type)]) if self.pyflink else self.key_type

    @property
    def snapshot(self) -> SerializerNode:
        return self.serialized_type.snapshot

    def encode(self, key: Any) -> bytes:
        """The key's bytes (Java serializer; PyFlink: the one-field row)."""
        if key is None:
            raise BadInputError("a key is null: Flink keys must not be null")
        return self.serialized_type.encode_java([key] if self.pyflink else key)


def _ttl(node: SerializerNode) -> SerializerNode:
    return SerializerNode(TTL_CLASS, (_LONG, node))


@dataclass(frozen=True)
class StateLayout:
    """One keyed state: its name in Flink, header entry and entry encoding.

    Attributes:
        name: The name the job gives the state descriptor (PyFlink: the Python name).
        kind: ``value``, ``list``, ``map``, ``reducing``, ``aggregating``, ``event-timers`` or
            ``processing-timers``.
        key: The operator's key layout.
        value_type: The value type (list: the element type; map: the map value type; timers: none).
        user_key_type: The map key type (map state).
        namespace: ``void`` or ``window``.
        ttl_timestamp: The last-access timestamp (epoch ms) stored with each value of a state
            with a time-to-live; ``None`` for state without one.
        timer_service: The timer service of timers (``user-timers`` for a process function's).
    """

    name: str
    kind: str
    key: KeyLayout
    value_type: FlinkType | None = None
    user_key_type: FlinkType | None = None
    namespace: str = "void"
    ttl_timestamp: int | None = None
    timer_service: str = "user-timers"

    def __post_init__(self) -> None:
        if self.kind not in STATE_KINDS + TIMER_KINDS:
            raise BadInputError(f"state {self.name!r}: unknown kind {self.kind!r} (kinds: "
                                f"{', '.join(STATE_KINDS + TIMER_KINDS)})")
        if self.namespace not in NAMESPACES:
            raise BadInputError(f"state {self.name!r}: namespace {self.namespace!r} is not one of {', '.join(NAMESPACES)}")
        if self.is_timers:
            if self.value_type is not None or self.user_key_type is not None or self.ttl_timestamp is not None:
                raise BadInputError(f"timers {self.name!r} have a timestamp only: no value type, map key or TTL")
            return
        if self.value_type is None:
            raise BadInputError(f"state {self.name!r}: give the value type")
        if (self.kind == "map") != (self.user_key_type is not None):
            raise BadInputError(f"state {self.name!r}: a map key type is for map state only, and map state needs one")
        if self.key.pyflink and self.kind in ("reducing", "aggregating"):
            raise BadInputError(f"state {self.name!r}: PyFlink keeps {self.kind} state in Python; statekit writes "
                                "PyFlink value, list and map state")
        if self.key.pyflink and self.namespace != "void":
            raise BadInputError(f"state {self.name!r}: PyFlink state has no window namespace here")
        if not self.key.pyflink:
            for what, t in (("value", self.value_type), ("map key", self.user_key_type)):
                if t is not None and t.java is None:
                    raise BadInputError(f"state {self.name!r}: {what} type {t.text} has no Java serializer statekit "
                                        "writes (it is for PyFlink state)")

    @property
    def is_timers(self) -> bool:
        return self.kind in TIMER_KINDS

    @property
    def flink_name(self) -> str:
        """The state name in the savepoint."""
        if self.is_timers:
            return timer_state_name(self.kind, self.timer_service)
        return PYTHON_STATE_PREFIX + self.name if self.key.pyflink else self.name

    @property
    def flink_kind(self) -> str:
        """The kind Flink records (PyFlink value state is a Java list state)."""
        if self.is_timers:
            return "timers"
        return "list" if self.key.pyflink and self.kind == "value" else self.kind

    @property
    def namespace_snapshot(self) -> SerializerNode:
        classes = {"window": TIME_WINDOW_CLASS, "global": GLOBAL_WINDOW_CLASS, "void": VOID_NAMESPACE_CLASS}
        return SerializerNode(classes[self.namespace])

    @property
    def ambiguous(self) -> bool:
        """Key and namespace lengths follow them (both serializers have a variable length)."""
        return False  # VoidNamespace and TimeWindow have fixed lengths

    def meta(self) -> StateMetaSpec:
        """The state's entry of the stream header."""
        if self.is_timers:
            timer = SerializerNode(TIMER_CLASS, (self.key.snapshot, self.namespace_snapshot))
            return StateMetaSpec(self.flink_name, "timers", timer, None)
        return StateMetaSpec(self.flink_name, self.flink_kind, self._value_snapshot(), self.namespace_snapshot)

    def _wrap(self, node: SerializerNode) -> SerializerNode:
        return _ttl(node) if self.ttl_timestamp is not None else node

    def _value_snapshot(self) -> SerializerNode:
        assert self.value_type is not None
        if self.key.pyflink:
            element = self._wrap(SerializerNode(BYTES_CLASS))
            if self.kind == "map":
                return SerializerNode(MAP_CLASS, (SerializerNode(BYTE_ARRAY_WRAPPER_SNAPSHOT), element))
            return SerializerNode(LIST_CLASS, (element,))
        if self.kind == "list":
            return SerializerNode(LIST_CLASS, (self._wrap(self.value_type.snapshot),))
        if self.kind == "map":
            assert self.user_key_type is not None
            return SerializerNode(MAP_CLASS, (self.user_key_type.snapshot, self._wrap(self.value_type.snapshot)))
        return self._wrap(self.value_type.snapshot)

    # ------------------------------------------------------------------ entries

    def encode_namespace(self, namespace: Any) -> bytes:
        """``VoidNamespace`` (``None``), a ``TimeWindow`` (``{start, end}`` or ``(start, end)``), or the
        ``GlobalWindow`` (``None`` or ``[]``)."""
        if self.namespace == "global":
            if namespace not in (None, [], ()):
                raise BadInputError(f"state {self.name!r} is namespaced by the global window, got {namespace!r}")
            return b"\x00"
        if self.namespace == "void":
            if namespace is not None:
                raise BadInputError(f"state {self.name!r} has no namespace, got {namespace!r}")
            return b"\x00"
        if isinstance(namespace, dict) and set(namespace) == {"start", "end"}:
            start, end = namespace["start"], namespace["end"]
        elif isinstance(namespace, (list, tuple)) and len(namespace) == 2:
            start, end = namespace
        else:
            raise BadInputError(f"state {self.name!r}: a window namespace is (start, end) in epoch ms, got {namespace!r}")
        if isinstance(start, bool) or isinstance(end, bool) or not isinstance(start, int) or not isinstance(end, int):
            raise BadInputError(f"state {self.name!r}: window bounds must be integers (epoch ms), got {namespace!r}")
        return _I64.pack(start) + _I64.pack(end)

    def _stamped(self, data: bytes, timestamp: int | None) -> bytes:
        if self.ttl_timestamp is None:
            return data
        return _I64.pack(self.ttl_timestamp if timestamp is None else timestamp) + data

    def _element(self, value: Any, timestamp: int | None = None) -> bytes:
        """One value, list element or map value: Java bytes, or PyFlink's ``byte[]`` of coder bytes."""
        assert self.value_type is not None
        if value is None:
            raise BadInputError(f"state {self.name!r}: a null value (Flink stores no null values; leave the row out)")
        if self.key.pyflink:
            data = self.value_type.encode_python(value)
            return self._stamped(_I32.pack(len(data)) + data, timestamp)
        return self._stamped(self.value_type.encode_java(value), timestamp)

    def user_key_bytes(self, user_key: Any) -> bytes:
        """The map key appended to the composite key."""
        assert self.user_key_type is not None
        if user_key is None:
            raise BadInputError(f"state {self.name!r}: a null map key")
        if self.key.pyflink:
            data = self.user_key_type.encode_python(user_key)
            return _I32.pack(len(data)) + data
        return self.user_key_type.encode_java(user_key)

    def entry(self, key_bytes: bytes, namespace: Any, user_key: Any, value: Any, *,
              timestamp: int | None = None) -> tuple[bytes, bytes]:
        """The (composite key without prefix, value) of one entry.

        ``value`` is the whole value of value/reducing/aggregating state, the map value of map
        state, and for list state a list (the whole list) — use :meth:`list_element` for one
        element. For timers ``value`` is the timestamp (epoch ms). ``timestamp`` overrides the
        last-access time of state with a TTL for this entry.

        Raises:
            BadInputError: A value that does not fit its type (the message names the state).
        """
        try:
            return self._entry(key_bytes, namespace, user_key, value, timestamp)
        except BadInputError as exc:
            message = str(exc)
            raise BadInputError(message if message.startswith("state ") else f"state {self.name!r}: {message}") \
                from None

    def _entry(self, key_bytes: bytes, namespace: Any, user_key: Any, value: Any,
               timestamp: int | None) -> tuple[bytes, bytes]:
        ns = self.encode_namespace(namespace)
        if self.is_timers:
            if isinstance(value, bool) or not isinstance(value, int):
                raise BadInputError(f"a timer timestamp must be an integer (epoch ms), got {value!r}")
            flipped = (value & 0xFFFFFFFFFFFFFFFF) ^ _FLIPPED_SIGN
            return flipped.to_bytes(8, "big") + key_bytes + ns, b""
        composite = key_bytes + ns
        if self.kind == "map":
            return composite + self.user_key_bytes(user_key), b"\x00" + self._element(value, timestamp)
        if self.kind == "list" or (self.key.pyflink and self.kind == "value"):
            elements = value if self.kind == "list" else [value]
            if isinstance(elements, (str, bytes, dict)) or not isinstance(elements, (list, tuple)):
                raise BadInputError(f"a list state value must be a list, got {elements!r}")
            if not elements:
                raise BadInputError("an empty list (Flink stores no empty list state; leave the row out)")
            return composite, b",".join(self._element(e, timestamp) for e in elements)
        return composite, self._element(value, timestamp)

    def list_element(self, key_bytes: bytes, namespace: Any, element: Any) -> tuple[bytes, bytes]:
        """The entry of a list state holding the one ``element`` (entries of one key are joined later)."""
        return self.entry(key_bytes, namespace, None, [element])
