"""Value bytes -> typed Arrow columns, from the declared type of a state.

Which type a column gets (:func:`column_type`):

1. a type the reader was told (``keyType``/``userKeyType``/``valueType``/``namespaceType`` options);
2. the ``bytes`` serializer: always ``bytes`` (binary), whatever else is declared;
3. a declared type (``value_type``/``user_key_type``/``namespace_type`` of the descriptor);
4. a serializer that only makes one type: ``int64`` -> int, ``utf8`` -> string;
5. for keys and user keys of the self-describing serializers (msgpack, json, pickle): the
   type of a sample when every sampled key is a string (string) or an integer (int);
6. otherwise ``json``: a string column holding each value as JSON text.

The namespace column follows rules 1-3 only (:func:`namespace_type`): without a declared
``namespace_type`` (or ``namespaceType`` option) it is ``json``; the void namespace is null.

The ``json`` rendering (:func:`to_json_text`) is canonical — compact separators, keys in
their stored order, bytes as ``{"$bytes": "<base64>"}`` — so two readers (the local and the
Spark diff engines) print the same text for the same value.

Decoding is a column at a time: a msgpack column is unpacked in one pass over the Arrow
data buffer (the concatenated values), an ``int64`` column with one ``struct.unpack``, a
``utf8`` column by an Arrow cast. Values that do not fit the column type raise
:class:`SerializationError` naming the state and how to read it anyway (as JSON).
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgpack

from statekit.statefmt.encoding import is_serialized
from statekit.statefmt.encoding import python_values as typed_python_values
from statekit.statefmt.entries import StateCodec
from statekit.statefmt.errors import SerializationError
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.statefmt.serializers import Serializer, decode_list, deserialize_many, get_serializer
from statekit.statefmt.value_types import ANY, ValueType, parse_value_type, to_arrow_type

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "ColumnTypes",
    "TypedDecoder",
    "column_type",
    "namespace_type",
    "infer_type",
    "decode_values",
    "decode_list_values",
    "to_json_text",
    "python_values",
    "TYPED_COLUMNS",
]

TYPED_COLUMNS = ("key", "namespace", "user_key", "value", "expiry", "key_group", "subtask")

_SELF_DESCRIBING = ("msgpack", "json", "pickle")
_INT = ValueType("int")
_STRING = ValueType("string")
_BYTES = ValueType("bytes")


def column_type(
    serializer: str, declared: str | None, *, override: str | None = None, sample: Sequence[Any] | None = None
) -> ValueType:
    """The type of a decoded column (the rules in the module docstring, in order)."""
    if override:
        return parse_value_type(override)
    if serializer == "bytes":
        return _BYTES
    if declared:
        return parse_value_type(declared)
    if serializer == "int64":
        return _INT
    if serializer == "utf8":
        return _STRING
    if sample is not None and serializer in _SELF_DESCRIBING:
        return infer_type(sample)
    return ANY


def infer_type(sample: Sequence[Any]) -> ValueType:
    """``string`` when every value is a str, ``int`` when every value is an int, else ``json``."""
    if sample and all(type(v) is str for v in sample):
        return _STRING
    if sample and all(type(v) is int for v in sample):
        return _INT
    return ANY


# ---------------------------------------------------------------- JSON text


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    if isinstance(value, msgpack.ExtType):
        return {"$ext": value.code, "data": base64.b64encode(value.data).decode("ascii")}
    return repr(value)


def _plain_keys(value: Any) -> Any:
    """A copy whose dict keys JSON accepts (other keys become their JSON text)."""
    if isinstance(value, dict):
        return {
            (k if isinstance(k, (str, int, float, bool)) or k is None else to_json_text(k)): _plain_keys(v)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_plain_keys(v) for v in value]
    return value


def to_json_text(value: Any) -> str | None:
    """One value as canonical JSON text (None stays None: SQL NULL, not ``"null"``)."""
    if value is None:
        return None
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default)
    except (TypeError, ValueError):
        return json.dumps(_plain_keys(value), separators=(",", ":"), ensure_ascii=False, default=_json_default)


# ---------------------------------------------------------------- column decoding


def _binary_buffer(column: pa.Array) -> tuple[memoryview, int] | None:
    """The concatenated bytes of a null-free binary column and its length, or None."""
    import pyarrow as pa

    if column.null_count or not pa.types.is_binary(column.type):
        return None
    _, offsets, data = column.buffers()
    first, last = (
        memoryview(offsets).cast("i")[column.offset],
        memoryview(offsets).cast("i")[column.offset + len(column)],
    )
    view = memoryview(data)[first:last] if data is not None else memoryview(b"")
    return view, len(column)


def python_values(column: pa.Array, serializer: Serializer, what: str, source: str | None = None) -> list[Any]:
    """Decode a binary column to Python values (nulls stay None)."""
    if serializer.name == "msgpack":
        fast = _binary_buffer(column)
        if fast is not None:
            view, count = fast
            try:
                unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=max(len(view), 1))
                unpacker.feed(view)
                values = list(unpacker)
            except Exception:  # noqa: BLE001 - redo value by value for a precise error
                values = []
            if len(values) == count:
                return values
    if serializer.name == "int64":
        fast = _binary_buffer(column)
        if fast is not None and len(fast[0]) == 8 * fast[1]:
            return list(struct.unpack(f">{fast[1]}q", fast[0]))
    raw = column.to_pylist()
    present = [b for b in raw if b is not None]
    decoded = iter(deserialize_many(serializer, present, what, source))
    return [None if b is None else next(decoded) for b in raw]


def _needs_prepare(value_type: ValueType) -> bool:
    if value_type.name in ("json", "float"):
        return True
    return any(_needs_prepare(t) for t in value_type.args)


def _preparer(value_type: ValueType) -> Callable[[Any], Any]:
    """A function that turns a decoded value into what ``pa.array`` accepts for the type."""
    name = value_type.name
    if name == "json":
        return to_json_text
    if name == "float":
        return lambda v: float(v) if isinstance(v, int) and not isinstance(v, bool) else v
    if not _needs_prepare(value_type):
        return lambda v: v
    if name == "list":
        element = _preparer(value_type.args[0])
        return lambda v: None if v is None else [element(e) for e in v]
    if name == "map":
        key, item = _preparer(value_type.args[0]), _preparer(value_type.args[1])
        return lambda v: None if v is None else [(key(k), item(x)) for k, x in v.items()]
    fields = list(zip(value_type.fields, map(_preparer, value_type.args)))
    return lambda v: None if v is None else {n: p(v.get(n)) for n, p in fields}


def decode_values(
    column: pa.Array, serializer: Serializer, value_type: ValueType, *, what: str, state: str, source: str | None = None
) -> pa.Array:
    """A binary column of serialized values as an Arrow column of ``value_type``."""
    import pyarrow as pa

    arrow_type = to_arrow_type(value_type)
    if not is_serialized(column.type):  # a typed column (format version 2): already the values
        return _typed_to_arrow(column, value_type, arrow_type, what=what, state=state, source=source)
    if serializer.name == "bytes":
        return column.cast(pa.binary())
    if serializer.name == "utf8" and value_type.name == "string":
        try:
            return column.cast(pa.string())
        except pa.ArrowInvalid as exc:
            raise SerializationError(f"state {state!r}: a {what} is not valid UTF-8: {exc}", path=source) from exc
    values = python_values(column, serializer, what, source)
    return _to_arrow(values, value_type, arrow_type, what=what, state=state, source=source)


def _typed_to_arrow(column: pa.Array, value_type: ValueType, arrow_type: Any, *, what: str, state: str,
                    source: str | None) -> pa.Array:
    """A typed value column as ``value_type``: cast when Arrow can, else through Python values."""
    import pyarrow as pa

    if column.type == arrow_type:
        return column
    if value_type.name != "json":
        try:
            return column.cast(arrow_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass
    return _to_arrow(typed_python_values(column), value_type, arrow_type, what=what, state=state, source=source)


def _to_arrow(values: list[Any], value_type: ValueType, arrow_type: Any, *, what: str, state: str,
              source: str | None) -> pa.Array:
    import pyarrow as pa

    if _needs_prepare(value_type):
        prepare = _preparer(value_type)
        values = [None if v is None else prepare(v) for v in values]
    try:
        return pa.array(values, type=arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
        reason = value_type.check_many([v for v in values if v is not None]) or str(exc)
        raise SerializationError(
            f"state {state!r}: a {what} does not fit the column type {value_type}: {reason}; "
            f"read it as JSON text instead (data source option {what_option(what)}=json)",
            path=source,
        ) from exc


def what_option(what: str) -> str:
    return {"key": "keyType", "user key": "userKeyType", "namespace": "namespaceType"}.get(what, "valueType")


def decode_list_values(
    column: pa.Array, serializer: Serializer, element_type: ValueType, *, state: str, source: str | None = None
) -> pa.Array:
    """List-state values (framed element lists, or a typed list column) as an Arrow list
    column of ``element_type``."""
    import pyarrow as pa

    if not is_serialized(column.type):
        list_type = ValueType("list", (element_type,))
        return _typed_to_arrow(column, list_type, to_arrow_type(list_type), what="value", state=state, source=source)

    offsets = [0]
    elements: list[bytes] = []
    for frame in column.to_pylist():
        try:
            parts = decode_list(frame)
        except ValueError as exc:
            raise SerializationError(f"list state {state!r}: {exc}", path=source) from exc
        elements.extend(parts)
        offsets.append(len(elements))
    flat = decode_values(pa.array(elements, pa.binary()), serializer, element_type,
                         what="list element", state=state, source=source)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), flat)


# ---------------------------------------------------------------- whole batches


@dataclass(frozen=True)
class ColumnTypes:
    """The resolved types of the key, user key, value and namespace columns of one state.

    ``namespace``: the declared ``namespace_type`` of a namespaced state
    (:func:`namespace_type`), else ``json`` (JSON text)."""

    key: ValueType
    user_key: ValueType
    value: ValueType
    namespace: ValueType = ANY

    def to_json(self) -> dict[str, str]:
        return {"key": str(self.key), "user_key": str(self.user_key), "value": str(self.value),
                "namespace": str(self.namespace)}


def namespace_type(descriptor: StateDescriptor, override: str | None = None) -> ValueType:
    """The type of a state's namespace column: ``override``, else its declared ``namespace_type``
    (the rules of :func:`column_type`), else ``json`` — JSON text, as for any undeclared namespace."""
    if descriptor.namespace_type is None and not override:
        return ANY
    return column_type(descriptor.namespace_serializer, descriptor.namespace_type, override=override)


class TypedDecoder:
    """Decodes raw blocks of one state into batches of :data:`TYPED_COLUMNS`.

    Columns: ``key`` (key type; null for operator state), ``namespace`` (the namespace type
    of :class:`ColumnTypes`; null for the void namespace), ``user_key`` (map and broadcast
    state; else null), ``value`` (list state: a list of the element type), ``expiry``
    (timestamp, UTC), ``key_group`` and ``subtask`` (int32).
    """

    def __init__(self, descriptor: StateDescriptor, key_serializer: str | None, types: ColumnTypes, *,
                 trust_pickle: bool = False, source: str | None = None) -> None:
        self.descriptor = descriptor
        self.types = types
        self.source = source
        self.codec = StateCodec(descriptor, key_serializer, trust_pickle=trust_pickle, source=source)
        self.value_serializer = self.codec.value
        self.key_serializer = self.codec.key
        self.user_key_serializer = self.codec.user_key or get_serializer("msgpack")

    @property
    def has_user_key(self) -> bool:
        return bool(self.descriptor.kind.has_user_key)

    def arrow_schema(self) -> pa.Schema:
        import pyarrow as pa

        value = to_arrow_type(self.types.value)
        if self.descriptor.kind is StateKind.LIST:
            value = pa.list_(value)
        return pa.schema([
            pa.field("key", to_arrow_type(self.types.key) if self.descriptor.keyed else pa.string()),
            pa.field("namespace", to_arrow_type(self.types.namespace) if self.descriptor.keyed else pa.string()),
            pa.field("user_key", to_arrow_type(self.types.user_key) if self.has_user_key else pa.string()),
            pa.field("value", value),
            pa.field("expiry", pa.timestamp("ms", tz="UTC")),
            pa.field("key_group", pa.int32()),
            pa.field("subtask", pa.int32()),
        ])

    def _namespace_column(self, column: pa.Array) -> pa.Array:
        """Namespaces as the namespace type; the void namespace (empty bytes) is null."""
        import pyarrow as pa
        import pyarrow.compute as pc

        void = pc.equal(pc.binary_length(column), 0)
        if pc.all(void).as_py() is not False:
            return pa.nulls(len(column), to_arrow_type(self.types.namespace))
        present = pc.if_else(void, pa.scalar(None, column.type), column)
        return decode_values(present, self.codec.namespace, self.types.namespace, what="namespace",
                             state=self.descriptor.name, source=self.source)

    def _value_column(self, column: pa.Array) -> pa.Array:
        name = self.descriptor.name
        if self.descriptor.kind is StateKind.LIST:
            return decode_list_values(column, self.value_serializer, self.types.value, state=name, source=self.source)
        return decode_values(column, self.value_serializer, self.types.value, what="value", state=name,
                             source=self.source)

    def decode_keyed(self, batch: pa.RecordBatch | pa.Table, key_groups: pa.Array, subtasks: pa.Array) -> pa.RecordBatch:
        """Typed columns of raw keyed rows (keyed schema) with their key groups and subtasks."""
        import pyarrow as pa

        assert self.key_serializer is not None
        name = self.descriptor.name
        key = decode_values(_chunk(batch.column("key")), self.key_serializer, self.types.key, what="key",
                            state=name, source=self.source)
        namespace = self._namespace_column(_chunk(batch.column("namespace")))
        if self.has_user_key:
            user_key = decode_values(_chunk(batch.column("user_key")), self.user_key_serializer, self.types.user_key,
                                     what="user key", state=name, source=self.source)
        else:
            user_key = pa.nulls(batch.num_rows, pa.string())
        value = self._value_column(_chunk(batch.column("value")))
        expiry = _chunk(batch.column("expiry")).cast(pa.timestamp("ms", tz="UTC"))
        return pa.RecordBatch.from_arrays(
            [key, namespace, user_key, value, expiry, key_groups.cast(pa.int32()), subtasks.cast(pa.int32())],
            schema=self.arrow_schema(),
        )

    def decode_operator(self, batch: pa.RecordBatch, subtask: int) -> pa.RecordBatch:
        """Typed columns of one subtask's operator state (broadcast keys in ``user_key``)."""
        import pyarrow as pa

        n = batch.num_rows
        name = self.descriptor.name
        if self.has_user_key:
            user_key = decode_values(batch.column("key"), self.user_key_serializer, self.types.user_key,
                                     what="user key", state=name, source=self.source)
        else:
            user_key = pa.nulls(n, pa.string())
        value = decode_values(batch.column("value"), self.value_serializer, self.types.value, what="value",
                              state=name, source=self.source)
        return pa.RecordBatch.from_arrays(
            [pa.nulls(n, pa.string()), pa.nulls(n, pa.string()), user_key, value,
             pa.nulls(n, pa.timestamp("ms", tz="UTC")), pa.nulls(n, pa.int32()), pa.array([subtask] * n, pa.int32())],
            schema=self.arrow_schema(),
        )


def _chunk(column: Any) -> pa.Array:
    """A table column or batch column as one Arrow array."""
    return column.combine_chunks() if hasattr(column, "combine_chunks") else column
