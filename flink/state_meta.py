"""Read the keyed-state meta information at the start of Flink keyed state streams.

Heap (hashmap) checkpoints and canonical savepoints start their key-group stream with it;
RocksDB incremental checkpoints keep it in the handle's meta stream. Layout (Flink's
``KeyedBackendSerializationProxy`` v6 and ``StateMetaInfoSnapshotReadersWriters`` v6)::

    version int (6) | key-group compression boolean
    key serializer snapshot
    state count short, each:
        name utf | backend state type int (KEY_VALUE, OPERATOR, BROADCAST, PRIORITY_QUEUE)
        option count int, each: key utf | value utf      (KEYED_STATE_TYPE = VALUE, LIST, MAP...)
        serializer count int, each: key utf | serializer snapshot

    serializer snapshot  = proxy version int (2) | versioned snapshot
    versioned snapshot   = class name utf | snapshot version int | class-specific content

Class-specific content has no length prefix, so a snapshot can only be skipped when its
class is known: simple snapshots (empty from version 3) and composite snapshots
(``CompositeTypeSerializerSnapshot``: magic, outer version, outer snapshot, nested
snapshots). For any other class the state is flagged with the reason, and reading resumes
at the next state header, found by its shape (name, type, options, serializer keys).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from statekit.flink.cursor import ByteCursor, decode_modified_utf8
from statekit.flink.logical_type import LogicalType, read_logical_type
from statekit.flink.properties import UnsupportedJava, read_java_object
from statekit.statefmt.errors import CorruptStateError
from statekit.statefmt.json_contract import JsonShape

__all__ = [
    "SerializerNode", "SerializerInfo", "FlinkStateMeta", "KeyedBackendMeta", "read_keyed_backend_meta",
    "BYTE_ARRAY_WRAPPER_SNAPSHOT", "POJO_SNAPSHOT", "AVRO_SNAPSHOT", "KRYO_SNAPSHOTS", "TUPLE_SNAPSHOT",
    "ENUM_SNAPSHOT", "SCALA_CASE_CLASS_SNAPSHOT", "ROW_DATA_SNAPSHOT", "BINARY_ROW_DATA_SNAPSHOT", "STRING_DATA_SNAPSHOT",
    "DECIMAL_DATA_SNAPSHOT", "TIMESTAMP_DATA_SNAPSHOT", "EXTERNAL_SNAPSHOT", "RAW_VALUE_SNAPSHOT", "NULL_SNAPSHOT",
    "SORTED_MAP_SNAPSHOT",
]

PROXY_VERSION = 6
SNAPSHOT_PROXY_VERSION = 2
COMPOSITE_MAGIC = 911108  # CompositeTypeSerializerSnapshot.MAGIC_NUMBER
NESTED_MAGIC = 1333245  # NestedSerializersSnapshotDelegate.MAGIC_NUMBER
MAX_SNAPSHOT_DEPTH = 32

BACKEND_STATE_TYPES = ("key-value", "operator", "broadcast", "priority-queue")
SERIALIZER_KEYS = frozenset({"KEY_SERIALIZER", "NAMESPACE_SERIALIZER", "VALUE_SERIALIZER"})

_BASE = "org.apache.flink.api.common.typeutils.base."
# the serializer of a SQL accumulator's data-view field (its MapView/ListView lives in its own state)
NULL_SNAPSHOT = "org.apache.flink.table.dataview.NullSerializer$NullSerializerSnapshot"
# PyFlink keys map state by this wrapper of the Python-encoded user key (int length + bytes).
BYTE_ARRAY_WRAPPER_SNAPSHOT = (
    "org.apache.flink.streaming.api.utils.ByteArrayWrapperSerializer$ByteArrayWrapperSerializerSnapshot"
)
POJO_SNAPSHOT = "org.apache.flink.api.java.typeutils.runtime.PojoSerializerSnapshot"
AVRO_SNAPSHOT = "org.apache.flink.formats.avro.typeutils.AvroSerializerSnapshot"
KRYO_SNAPSHOTS = frozenset({
    "org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializerSnapshot",
    "org.apache.flink.api.java.typeutils.runtime.kryo.Kryo5SerializerSnapshot",
})
OPTIONAL_MAP_HEADER = 0x4F2C69A3D70  # LinkedOptionalMapSerializer.HEADER
_ARRAY = _BASE + "array."
# SimpleTypeSerializerSnapshot subclasses: no content from version 3 (version 2: a class name).
SIMPLE_SNAPSHOTS = frozenset(
    [
        _BASE + f"{name}Serializer${name}SerializerSnapshot"
        for name in (
            "Boolean", "Byte", "Char", "Double", "Float", "Int", "Long", "Short", "String",
            "Void", "Date", "SqlDate", "SqlTime", "SqlTimestamp", "BigInt", "BigDec",
            "Instant", "LocalDate", "LocalTime", "LocalDateTime", "BooleanValue", "ByteValue",
            "CharValue", "DoubleValue", "FloatValue", "IntValue", "LongValue", "NullValue",
            "ShortValue", "StringValue",
        )
    ]
    + [
        _ARRAY + f"{name}PrimitiveArraySerializer${name}PrimitiveArraySerializerSnapshot"
        for name in ("Boolean", "Byte", "Char", "Double", "Float", "Int", "Long", "Short")
    ]
    + [
        _ARRAY + "StringArraySerializer$StringArraySerializerSnapshot",
        "org.apache.flink.runtime.state.VoidNamespaceSerializer$VoidNamespaceSerializerSnapshot",
        "org.apache.flink.streaming.api.windowing.windows.TimeWindow$Serializer"
        "$TimeWindowSerializerSnapshot",
        "org.apache.flink.streaming.api.windowing.windows.GlobalWindow$Serializer"
        "$GlobalWindowSerializerSnapshot",
        BYTE_ARRAY_WRAPPER_SNAPSHOT,
        "org.apache.flink.table.runtime.typeutils.StringDataSerializer$StringDataSerializerSnapshot",
        NULL_SNAPSHOT,
    ]
)
ROW_SNAPSHOT = "org.apache.flink.api.java.typeutils.runtime.RowSerializer$RowSerializerSnapshot"
TUPLE_SNAPSHOT = "org.apache.flink.api.java.typeutils.runtime.TupleSerializerSnapshot"
ENUM_SNAPSHOT = _BASE + "EnumSerializer$EnumSerializerSnapshot"
SCALA_CASE_CLASS_SNAPSHOT = "org.apache.flink.api.scala.typeutils.ScalaCaseClassSerializerSnapshot"
# Flink SQL's rows (keys and values of SQL operators' state) and the serializers of their fields
_TABLE = "org.apache.flink.table.runtime.typeutils."
ROW_DATA_SNAPSHOT = _TABLE + "RowDataSerializer$RowDataSerializerSnapshot"
BINARY_ROW_DATA_SNAPSHOT = _TABLE + "BinaryRowDataSerializer$BinaryRowDataSerializerSnapshot"  # text: the arity
TTL_SNAPSHOT = "org.apache.flink.runtime.state.ttl.TtlStateFactory$TtlSerializerSnapshot"
EXTERNAL_SNAPSHOT = _TABLE + "ExternalSerializer$ExternalSerializerSnapshot"
STRING_DATA_SNAPSHOT = _TABLE + "StringDataSerializer$StringDataSerializerSnapshot"
DECIMAL_DATA_SNAPSHOT = _TABLE + "DecimalDataSerializer$DecimalSerializerSnapshot"
TIMESTAMP_DATA_SNAPSHOT = _TABLE + "TimestampDataSerializer$TimestampDataSerializerSnapshot"
RAW_VALUE_SNAPSHOT = _TABLE + "RawValueDataSerializer$RawValueDataSerializerSnapshot"
# RetractableTopNFunction's sort keys -> counts: a Java-serialized comparator, then the key and value snapshots
SORTED_MAP_SNAPSHOT = _TABLE + "SortedMapSerializerSnapshot"
# snapshot class -> the ints it writes (DecimalData: precision, scale; TimestampData: precision)
_TABLE_INT_SNAPSHOTS = {DECIMAL_DATA_SNAPSHOT: 2, TIMESTAMP_DATA_SNAPSHOT: 1,
                        BINARY_ROW_DATA_SNAPSHOT: 1}
# snapshot class -> the Java-serialized objects it writes (logical types, then serializers)
_TABLE_JAVA_SNAPSHOTS = {_TABLE + "ArrayDataSerializer$ArrayDataSerializerSnapshot": 2,
                         _TABLE + "MapDataSerializer$MapDataSerializerSnapshot": 4}
# composite snapshots whose outer snapshot is the class name (utf): the tuple or case class
CLASS_NAMED_OUTER = frozenset({TUPLE_SNAPSHOT, SCALA_CASE_CLASS_SNAPSHOT})


class _Unskippable(Exception):
    """A serializer snapshot whose content cannot be skipped without knowing its class."""


@dataclass(frozen=True)
class SerializerNode:
    """A serializer snapshot class and its nested snapshots (a composite's fields, in order).

    ``names`` are the field names of a POJO (one per child), the symbols of an enum or the
    classes a Kryo serializer registered (in registration order); ``text`` is what else the
    snapshot says that decoding needs: the class of a POJO, tuple, enum, case class or Kryo
    type, the schema of an Avro type. ``subclasses`` are a POJO's subclass serializers by
    class name: the ``registered`` first ones in tag order, then those met at run time.
    """

    snapshot_class: str
    children: tuple[SerializerNode, ...] = ()
    names: tuple[str, ...] = ()
    text: str | None = None
    subclasses: tuple[tuple[str, SerializerNode], ...] = ()
    registered: int = 0
    logical_types: tuple[LogicalType, ...] = ()

    def descendants(self) -> tuple[str, ...]:
        """The classes of every nested snapshot, depth first."""
        return tuple(name for child in self.children for name in (child.snapshot_class, *child.descendants()))


@dataclass(frozen=True)
class SerializerInfo:
    """One serializer snapshot: its role key, snapshot class and nested snapshot classes.

    ``nested`` lists every nested class depth first; ``tree`` keeps their structure.
    """

    json_shape: ClassVar[JsonShape] = JsonShape(omit=("tree",), extra=("short_name",))

    key: str
    snapshot_class: str | None
    nested: tuple[str, ...] = ()
    tree: SerializerNode | None = None

    @property
    def short_name(self) -> str:
        """The snapshot class without package, outer class and ``Snapshot`` suffix; a SQL row
        with its field types (``RowData<STRING, BIGINT>``)."""
        if not self.snapshot_class:
            return "?"
        if self.tree is not None:
            return _short_name(self.tree)
        return _simple_name(self.snapshot_class)


def _simple_name(snapshot_class: str) -> str:
    simple = snapshot_class.rsplit(".", 1)[-1].rsplit("$", 1)[-1]
    return simple[: -len("Snapshot")] if simple.endswith("Snapshot") else simple


def _short_name(node: SerializerNode) -> str:
    """A SQL row with its types (``RowData<STRING, BIGINT>``), a TTL wrapper of one
    (``Ttl<RowData<..>>``), else the snapshot's simple class name."""
    if node.snapshot_class == ROW_DATA_SNAPSHOT:
        return "RowData<" + ", ".join(t.sql() for t in node.logical_types) + ">"
    if node.snapshot_class == TTL_SNAPSHOT and len(node.children) == 2 \
            and node.children[1].snapshot_class == ROW_DATA_SNAPSHOT:
        return f"Ttl<{_short_name(node.children[1])}>"
    return _simple_name(node.snapshot_class)


@dataclass(frozen=True)
class FlinkStateMeta:
    """The meta information of one state registered in a keyed backend.

    Attributes:
        name: The state name (e.g. ``python-state-count``).
        kind: ``value``, ``list``, ``map``, ``reducing``, ``aggregating`` (keyed states),
            ``timers`` (priority queues), ``operator`` or ``broadcast``.
        backend_type: Flink's backend state type in lower case.
        options: The raw options (``KEYED_STATE_TYPE``, ...).
        serializers: The serializer snapshots read, in file order.
        problem: Why not all serializer snapshots could be read, else ``None``.
    """

    name: str
    kind: str
    backend_type: str
    options: dict[str, str] = field(default_factory=dict)
    serializers: tuple[SerializerInfo, ...] = ()
    problem: str | None = None


@dataclass(frozen=True)
class KeyedBackendMeta:
    """The header of a keyed state stream.

    Attributes:
        version: The ``KeyedBackendSerializationProxy`` version.
        compressed: True when key groups are compressed (snappy).
        key_serializer: The key serializer snapshot, when it could be read.
        states: Every state found, in file order.
        header_size: Bytes of the header, when every snapshot was read.
        problem: A reason when the header could not be read completely, else ``None``.
    """

    version: int
    compressed: bool
    key_serializer: SerializerInfo | None
    states: tuple[FlinkStateMeta, ...]
    header_size: int | None
    problem: str | None = None


def _skip_outer(cur: ByteCursor, class_name: str, outer_version: int) -> str | None:
    """Read a composite snapshot's outer snapshot; the class it names, if any."""
    if class_name == EXTERNAL_SNAPSHOT:  # the DataType (Java-serialized), isInternalInput
        try:
            read_java_object(cur, "external serializer data type")
        except UnsupportedJava as exc:
            raise _Unskippable(f"{class_name}: its data type ({exc})") from None
        cur.boolean("external serializer isInternalInput")
        return None
    if class_name == ROW_SNAPSHOT:
        if outer_version >= 4:
            cur.u8("row serializer supportsRowKind")
        return None
    if class_name in CLASS_NAMED_OUTER:
        return cur.utf("composite snapshot class name")
    if cur.peek_i32() != NESTED_MAGIC:
        raise _Unskippable(f"composite snapshot {class_name} has an unknown outer snapshot")
    return None


def _versioned_snapshot(cur: ByteCursor, depth: int) -> SerializerNode:
    if depth > MAX_SNAPSHOT_DEPTH:
        raise cur.error("serializer snapshots nested too deeply")
    class_name = cur.utf("serializer snapshot class")
    version = cur.i32("serializer snapshot version")
    if class_name in SIMPLE_SNAPSHOTS:
        if version == 2:
            cur.utf("legacy serializer class name")
        elif version < 2:
            raise _Unskippable(f"{class_name} snapshot version {version}")
        return SerializerNode(class_name)
    special = _SPECIAL.get(class_name)
    if special is not None:
        return special(cur, class_name, version, depth)
    if version >= 3 and cur.peek_i32() == COMPOSITE_MAGIC:
        cur.i32("composite snapshot magic")
        named = _skip_outer(cur, class_name, cur.i32("outer snapshot version"))
        return SerializerNode(class_name, _nested_snapshots(cur, depth), text=named)
    raise _Unskippable(f"cannot skip serializer snapshot {class_name} (version {version})")


def _optional_map(cur: ByteCursor, which: str, depth: int,
                  value: bool = True) -> list[tuple[str, SerializerNode | None]]:
    """A ``LinkedOptionalMapSerializer`` map of names to framed serializer snapshots.

    Header long, size int, each: name utf | [has key: framed key] | [has value: framed
    value]; a frame is an int length and the bytes. With ``value`` the frames are versioned
    serializer snapshots (an unknown one becomes a node named by its problem); else skipped.
    """
    at = cur.pos
    if cur.i64(f"{which} header") != OPTIONAL_MAP_HEADER:
        raise cur.error(f"wrong {which} header in a serializer snapshot", at=at)
    out: list[tuple[str, SerializerNode | None]] = []
    for _ in range(cur.count(f"number of {which}", min_item_size=4)):
        name = cur.utf(f"{which} name")
        if cur.boolean(f"{which} key flag"):
            cur.skip(cur.count(f"{which} key length"), f"{which} key")
        node = None
        if cur.boolean(f"{which} value flag"):
            frame = cur.take(cur.count(f"{which} value length"), f"{which} value")
            if value:
                try:  # framed: an unknown snapshot leaves the rest readable
                    node = _versioned_snapshot(ByteCursor(frame, source=cur.source, error=cur.error_class), depth + 1)
                except _Unskippable as exc:
                    node = SerializerNode(str(exc))
        out.append((name, node))
    return out


def _pojo(cur: ByteCursor, class_name: str, version: int, depth: int) -> SerializerNode:
    """``PojoSerializerSnapshot`` v2: class name, then three optional maps: fields, registered
    subclasses (in tag order), subclasses met at run time (written with their class name)."""
    if version != 2:
        raise _Unskippable(f"{class_name} snapshot version {version}")
    pojo_class = cur.utf("POJO class name")
    fields = _optional_map(cur, "POJO fields", depth)
    registered = _optional_map(cur, "registered subclasses", depth)
    others = _optional_map(cur, "non-registered subclasses", depth)
    if any(node is None for _, node in fields):
        raise _Unskippable(f"POJO {pojo_class}: a field serializer snapshot is missing")
    subclasses = tuple((name, node) for name, node in registered + others if node is not None)
    return SerializerNode(class_name, tuple(node for _, node in fields if node is not None),
                          tuple(name for name, _ in fields), pojo_class, subclasses, len(registered))


def _enum(cur: ByteCursor, class_name: str, version: int, depth: int) -> SerializerNode:
    """``EnumSerializerSnapshot`` v3: enum class, then its symbols in ordinal order."""
    if version != 3:
        raise _Unskippable(f"{class_name} snapshot version {version}")
    enum_class = cur.utf("enum class name")
    symbols = tuple(cur.utf("enum symbol") for _ in range(cur.count("number of enum symbols", min_item_size=2)))
    return SerializerNode(class_name, names=symbols, text=enum_class)


def _kryo(cur: ByteCursor, class_name: str, version: int, depth: int) -> SerializerNode:
    """``KryoSerializerSnapshot`` v2: the type class, then three optional maps: the Kryo
    registrations (class name → registration, in registration order), default serializers
    and default serializer classes (skipped)."""
    if version != 2:
        raise _Unskippable(f"{class_name} snapshot version {version}")
    type_class = cur.utf("Kryo type class")
    registrations = _optional_map(cur, "Kryo registrations", depth, value=False)
    _optional_map(cur, "Kryo default serializers", depth, value=False)
    _optional_map(cur, "Kryo default serializer classes", depth, value=False)
    return SerializerNode(class_name, names=tuple(name for name, _ in registrations), text=type_class)


def _avro(cur: ByteCursor, class_name: str, version: int, depth: int) -> SerializerNode:
    """``AvroSerializerSnapshot``: v1 the schema, v2 the runtime class then the schema (utf)."""
    if version == 1:
        return SerializerNode(class_name, text=cur.utf("Avro schema"))
    if version == 2:
        runtime_class = cur.utf("Avro runtime class")
        return SerializerNode(class_name, names=(runtime_class,), text=cur.utf("Avro schema"))
    raise _Unskippable(f"{class_name} snapshot version {version}")


def _row_data(cur: ByteCursor, class_name: str, version: int, depth: int) -> SerializerNode:
    """``RowDataSerializerSnapshot`` v3: field count int, each field's ``LogicalType`` as its
    own Java serialization stream, then the fields' serializer snapshots (nested)."""
    if version != 3:
        raise _Unskippable(f"{class_name} snapshot version {version}")
    count = cur.count("number of row fields", min_item_size=4)
    try:
        types = tuple(read_logical_type(cur) for _ in range(count))
    except UnsupportedJava as exc:
        raise _Unskippable(f"{class_name}: a field type ({exc})") from None
    return SerializerNode(class_name, _nested_snapshots(cur, depth), logical_types=types)


def _table_ints(cur: ByteCursor, class_name: str, version: int, depth: int) -> SerializerNode:
    """Snapshots of SQL field serializers that write a few ints (decimal precision and scale...)."""
    ints = tuple(cur.i32(f"{class_name} parameter") for _ in range(_TABLE_INT_SNAPSHOTS[class_name]))
    return SerializerNode(class_name, text=",".join(map(str, ints)))


def _table_java(cur: ByteCursor, class_name: str, version: int, depth: int) -> SerializerNode:
    """``ArrayDataSerializerSnapshot`` / ``MapDataSerializerSnapshot``: the element (key, value)
    logical types, then their serializers, each a Java serialization stream (read as data)."""
    count = _TABLE_JAVA_SNAPSHOTS[class_name]
    try:
        types = tuple(read_logical_type(cur) for _ in range(count // 2))
        for _ in range(count // 2):
            read_java_object(cur, f"{class_name} element serializer")
    except UnsupportedJava as exc:
        raise _Unskippable(f"{class_name}: {exc}") from None
    return SerializerNode(class_name, logical_types=types)


def _sorted_map(cur: ByteCursor, class_name: str, version: int, depth: int) -> SerializerNode:
    """``SortedMapSerializerSnapshot`` v3: the key comparator (a Java serialization stream, read
    as data and dropped: the entries are written in its order), then the key and value snapshots."""
    if version != 3:
        raise _Unskippable(f"{class_name} snapshot version {version}")
    try:
        read_java_object(cur, "sorted map comparator")
    except UnsupportedJava as exc:
        raise _Unskippable(f"{class_name}: its comparator ({exc})") from None
    return SerializerNode(class_name, _nested_snapshots(cur, depth))


_SPECIAL = {POJO_SNAPSHOT: _pojo, SORTED_MAP_SNAPSHOT: _sorted_map, ROW_DATA_SNAPSHOT: _row_data,
            **dict.fromkeys(_TABLE_INT_SNAPSHOTS, _table_ints), **dict.fromkeys(_TABLE_JAVA_SNAPSHOTS, _table_java), AVRO_SNAPSHOT: _avro, ENUM_SNAPSHOT: _enum,
            **dict.fromkeys(KRYO_SNAPSHOTS, _kryo)}


def _nested_snapshots(cur: ByteCursor, depth: int) -> tuple[SerializerNode, ...]:
    at = cur.pos
    if cur.i32("nested snapshots magic") != NESTED_MAGIC:
        raise cur.error("wrong nested serializer snapshots magic number", at=at)
    version_at = cur.pos
    if cur.i32("nested snapshots version") != 1:
        raise _Unskippable(f"nested serializer snapshots version at byte offset {version_at}")
    return tuple(
        _versioned_snapshot(cur, depth + 1)
        for _ in range(cur.count("number of nested serializer snapshots", min_item_size=6))
    )


def _serializer(cur: ByteCursor, key: str) -> SerializerInfo:
    at = cur.pos
    proxy_version = cur.i32("serializer snapshot proxy version")
    if proxy_version != SNAPSHOT_PROXY_VERSION:
        raise _Unskippable(f"serializer snapshot format {proxy_version} at byte offset {at}")
    tree = _versioned_snapshot(cur, 0)
    return SerializerInfo(key, tree.snapshot_class, tree.descendants(), tree)


def _kind(backend_type: str, options: dict[str, str]) -> str:
    if backend_type == "priority-queue":
        return "timers"
    if backend_type != "key-value":
        return backend_type
    return options.get("KEYED_STATE_TYPE", "unknown").lower()


def _state_header(cur: ByteCursor) -> tuple[str, str, dict[str, str], int]:
    name = cur.utf("state name")
    type_at = cur.pos
    ordinal = cur.i32("backend state type")
    if not 0 <= ordinal < len(BACKEND_STATE_TYPES):
        raise cur.error(f"unknown backend state type {ordinal}", at=type_at)
    options = {}
    for _ in range(cur.count("number of state options", min_item_size=4)):
        key = cur.utf("state option key")
        options[key] = cur.utf("state option value")
    return name, BACKEND_STATE_TYPES[ordinal], options, cur.count("number of serializers", min_item_size=6)


def _state(cur: ByteCursor) -> FlinkStateMeta:
    name, backend_type, options, count = _state_header(cur)
    serializers: list[SerializerInfo] = []
    try:
        for _ in range(count):
            serializers.append(_serializer(cur, cur.utf("serializer key")))
    except _Unskippable as exc:
        return FlinkStateMeta(
            name, _kind(backend_type, options), backend_type, options, tuple(serializers), str(exc)
        )
    return FlinkStateMeta(name, _kind(backend_type, options), backend_type, options, tuple(serializers))


def _looks_like_state(data: bytes, pos: int, source: str) -> bool:
    probe = ByteCursor(data, source=source, pos=pos, error=CorruptStateError)
    try:
        length = probe.u16("state name length")
        if not 0 < length <= 512:
            return False
        text = decode_modified_utf8(probe.take(length, "state name"))
        if text is None or not text.isprintable():
            return False
        probe.pos = pos
        _, _, _, count = _state_header(probe)
        return 0 < count <= 16 and probe.utf("serializer key") in SERIALIZER_KEYS
    except CorruptStateError:
        return False


def _resync(cur: ByteCursor, start: int) -> int | None:
    for pos in range(start, len(cur.data) - 2):
        if _looks_like_state(cur.data, pos, cur.source):
            return pos
    return None


def read_keyed_backend_meta(data: bytes, *, source: str) -> KeyedBackendMeta:
    """Read the keyed backend meta information from the start of ``data``.

    Args:
        data: The first bytes of a keyed state stream (at least the whole header).
        source: The file the bytes came from, for messages.

    Returns:
        The header; states whose serializers could not be skipped carry a ``problem``.

    Raises:
        CorruptStateError: The header is malformed or truncated.
    """
    cur = ByteCursor(data, source=source, error=CorruptStateError)
    version = cur.i32("keyed backend meta version")
    if version != PROXY_VERSION:
        return KeyedBackendMeta(
            version, False, None, (), None,
            problem=f"keyed backend meta version {version} is not supported (only {PROXY_VERSION})",
        )
    compressed = cur.boolean("key-group compression flag")
    problem = None
    key_serializer = None
    count_at = cur.pos
    try:
        key_serializer = _serializer(cur, "KEY_SERIALIZER")
        count = cur.i16("number of states")
    except _Unskippable as exc:
        problem = f"key serializer: {exc}"
        count = -1
    states: list[FlinkStateMeta] = []
    if count < 0 and problem is None:
        raise cur.error(f"invalid number of states {count}", at=count_at)
    if count < 0:
        resumed = _resync(cur, cur.pos)
        if resumed is None:
            return KeyedBackendMeta(version, compressed, None, (), None, problem)
        cur.pos = resumed
        count = 1 << 15  # unknown: read states until the data stops looking like state headers
    complete = problem is None
    while len(states) < count:
        state = _state(cur)
        states.append(state)
        if state.problem is not None:
            complete = False
            resumed = _resync(cur, cur.pos)
            if resumed is None:
                break
            cur.pos = resumed
        elif not complete and not _looks_like_state(cur.data, cur.pos, source):
            break
    return KeyedBackendMeta(
        version, compressed, key_serializer, tuple(states), cur.pos if complete else None, problem
    )
