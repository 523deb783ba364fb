"""Entries: Python rows of a state <-> Arrow batches of the state file schema.

Keyed entries are grouped by key group and sorted inside a group: by (key, namespace,
user key) bytes in format version 1, by (key hash, key, namespace, user key) in version 2.
The void namespace (no window) is stored as empty bytes and read back as None. A value is
serialized bytes, or (version 2, a state with a declared type) one element of a typed
column (:class:`~statekit.statefmt.encoding.TypedValues`). Serialized list state holds one
entry per (key, namespace) whose value frames all element bytes. Operator list and union
state keep element order; broadcast state is sorted by key.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any, NamedTuple

from statekit.statefmt.encoding import (
    TypedValues,
    current_write_format,
    empty_namespaces,
    is_serialized,
    keyed_schema,
    operator_schema,
    python_values,
)
from statekit.statefmt.errors import BadInputError, SerializationError
from statekit.statefmt.keygroups import key_hash_column
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.statefmt.numpy_support import integer_view, numpy_or_none, pooled_empty
from statekit.statefmt.serializers import (
    Serializer,
    decode_list,
    deserialize_column,
    deserialize_with,
    encode_list,
    get_serializer,
    serialize_column,
    serialize_many,
    serialize_with,
)
from statekit.statefmt.value_types import parse_value_type

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "KeyedColumns",
    "KeyedStateEntry",
    "MapStateEntry",
    "StateCodec",
    "group_by_key_group",
    "hash_order",
    "hash_sort_indices",
    "take_column",
    "trivial_columns",
]


@dataclass(frozen=True)
class KeyedColumns:
    """Rows of one keyed state already split into columns (a heap table's keys and values
    taken at C speed), for :meth:`StateCodec.encode_keyed_rows`; None: every row has none."""

    keys: list[Any]
    values: list[Any]
    namespaces: list[Any] | None = None
    user_keys: list[Any] | None = None
    expiries: list[int | None] | None = None

    def __len__(self) -> int:  # the number of rows, not of columns
        return len(self.keys)

    def __bool__(self) -> bool:
        return bool(self.keys)


class KeyedStateEntry(NamedTuple):
    """One entry of value, list, reducing or aggregating state."""

    key: Any
    namespace: Any
    value: Any
    expiry: int | None = None


class MapStateEntry(NamedTuple):
    """One user key of map state."""

    key: Any
    user_key: Any
    value: Any
    namespace: Any = None
    expiry: int | None = None


class StateCodec:
    """Encodes and decodes the entries of one state with its declared serializers."""

    def __init__(
        self,
        descriptor: StateDescriptor,
        key_serializer: str | None,
        *,
        trust_pickle: bool = False,
        for_write: bool = False,
        source: str | None = None,
    ) -> None:
        self.descriptor = descriptor
        self.source = source
        lookup: dict[str, Any] = dict(
            trust_pickle=trust_pickle, for_write=for_write, what=f"state {descriptor.name!r}", source=source
        )
        self.value: Serializer = get_serializer(descriptor.value_serializer, **lookup)
        self.namespace: Serializer = get_serializer(descriptor.namespace_serializer, **lookup)
        self.user_key: Serializer | None = (
            get_serializer(descriptor.user_key_serializer or "msgpack", **lookup)
            if descriptor.kind.has_user_key else None
        )
        self.key: Serializer | None = (
            get_serializer(key_serializer or "msgpack", **lookup) if descriptor.keyed else None
        )
        self.value_type = parse_value_type(descriptor.value_type)
        self.user_key_type = parse_value_type(descriptor.user_key_type)
        # version 2 stores the values of a typed keyed state as one typed column
        self.typed = TypedValues.for_descriptor(descriptor)

    # ------------------------------------------------------------ encode

    def _check(self, value: Any, user_key: bool = False) -> None:
        reason = (self.user_key_type if user_key else self.value_type).check(value)
        if reason:
            what = "user key" if user_key else "value"
            raise SerializationError(
                f"state {self.descriptor.name!r}: {what} {value!r:.60} does not match the declared type: {reason}"
            )

    def encode_value(self, value: Any) -> bytes:
        if self.descriptor.kind is StateKind.LIST:
            if not isinstance(value, (list, tuple)):
                raise SerializationError(f"list state {self.descriptor.name!r} needs a list per key, got {type(value).__name__}")
            for element in value:
                self._check(element)
            return encode_list([serialize_with(self.value, e, "list element") for e in value])
        self._check(value)
        return serialize_with(self.value, value, "value")

    def encode_namespace(self, namespace: Any) -> bytes:
        return b"" if namespace is None else serialize_with(self.namespace, namespace, "namespace")

    def encode_keyed_rows(self, rows: Iterable[Any] | KeyedColumns, *, version: int | None = None) -> pa.Table:
        """Keyed rows -> a table of the keyed schema (unsorted), for a file of ``version``
        (default: :func:`~statekit.statefmt.encoding.current_write_format`).

        Rows: ``(key, value)`` or ``(key, namespace, value)``; for map state
        ``(key, user_key, value)`` or ``(key, namespace, user_key, value)``; or the
        :class:`KeyedStateEntry` / :class:`MapStateEntry` tuples a reader yields.
        Encoding works a column at a time: keys are serialized and hashed by Arrow kernels
        where the serializer allows it, a typed state's values become one typed column
        (version 2), other values are serialized over a list.
        """
        import pyarrow as pa

        assert self.key is not None
        version = current_write_format().version if version is None else version
        is_map = self.descriptor.kind is StateKind.MAP
        keys, namespaces, user_keys, values, expiries = self._columns(rows, is_map)
        n = len(keys)
        key_column = serialize_column(self.key, keys, "key")
        if namespaces is None or all(ns is None for ns in namespaces):
            namespace_column = empty_namespaces(n)
        else:
            namespace_column = self._namespace_column(namespaces)
        if is_map:
            assert self.user_key is not None and user_keys is not None
            user_key_column = self._user_key_column(user_keys)
        else:
            user_key_column = _zeroed_nulls(n, pa.binary())
        value_column = self._value_column(values, version)
        expiry_column = _zeroed_nulls(n, pa.int64()) if expiries is None else pa.array(expiries, pa.int64())
        value_type = None if is_serialized(value_column.type) else value_column.type
        return pa.Table.from_arrays(
            [key_hash_column(key_column), key_column, namespace_column, user_key_column, value_column, expiry_column],
            schema=keyed_schema(value_type),
        )

    def _namespace_column(self, namespaces: list[Any]) -> pa.Array:
        """Serialized namespaces, a column at a time (the void namespace: empty bytes). Few
        distinct objects (window state: a few windows shared by every key) are serialized
        once each, then indexed (:func:`_by_object`)."""
        import pyarrow as pa

        found = _by_object(namespaces)
        if found is None:  # mostly distinct: serialize every one
            if any(namespace is None for namespace in namespaces):
                return pa.array([self.encode_namespace(namespace) for namespace in namespaces], pa.binary())
            return pa.array(serialize_many(self.namespace, namespaces, "namespace"), pa.binary())
        distinct, positions = found
        return pa.array([self.encode_namespace(namespace) for namespace in distinct], pa.binary()).take(positions)

    def _user_key_column(self, user_keys: list[Any]) -> pa.Array:
        """Checked and serialized user keys; few distinct objects (the timestamps of window
        timers) are checked and serialized once each, then indexed (:func:`_by_object`)."""
        assert self.user_key is not None
        found = _by_object(user_keys)
        if found is None:
            self._check_column(user_keys, user_key=True)
            return serialize_column(self.user_key, user_keys, "user key")
        distinct, positions = found
        self._check_column(distinct, user_key=True)  # the first bad one: also the first in row order
        return serialize_column(self.user_key, distinct, "user key").take(positions)

    def _value_column(self, values: list[Any], version: int) -> pa.Array:
        import pyarrow as pa

        is_list = self.descriptor.kind is StateKind.LIST
        if is_list and any(not isinstance(v, (list, tuple)) for v in values):
            bad = next(v for v in values if not isinstance(v, (list, tuple)))
            raise SerializationError(f"list state {self.descriptor.name!r} needs a list per key, got {type(bad).__name__}")
        if version >= 2 and self.typed is not None:
            if is_list:
                self._check_elements(values)
            return self.typed.to_arrow(values)
        if is_list:
            return pa.array([self.encode_value(v) for v in values], pa.binary())
        self._check_column(values)
        return serialize_column(self.value, values, "value")

    def _check_elements(self, lists: list[Any]) -> None:
        """Every element of list-state values against the declared element type."""
        if self.value_type.check_many([e for v in lists for e in v]):
            for element in (e for v in lists for e in v):
                self._check(element)

    def _check_column(self, values: list[Any], user_key: bool = False) -> None:
        reason = (self.user_key_type if user_key else self.value_type).check_many(values)
        if reason:
            what = "user key" if user_key else "value"
            raise SerializationError(f"state {self.descriptor.name!r}: a {what} does not match the declared type: {reason}")

    def _columns(self, rows: Iterable[Any] | KeyedColumns, is_map: bool) -> tuple[
            list[Any], list[Any] | None, list[Any] | None, list[Any], list[Any] | None]:
        """Keys, namespaces, user keys, values and expiries of ``rows`` (None: all None)."""
        if isinstance(rows, KeyedColumns):
            if len(rows.values) != len(rows.keys) or any(
                    c is not None and len(c) != len(rows.keys)
                    for c in (rows.namespaces, rows.user_keys, rows.expiries)):
                raise BadInputError(f"state {self.descriptor.name!r}: keyed columns of different lengths")
            if is_map and rows.user_keys is None:
                raise BadInputError(f"map state {self.descriptor.name!r}: keyed columns without user keys")
            expiries = rows.expiries
            if expiries is not None and all(e is None for e in expiries):
                expiries = None
            return rows.keys, rows.namespaces, rows.user_keys if is_map else None, rows.values, expiries
        rows = rows if isinstance(rows, list) else list(rows)
        if not is_map:
            try:  # the common shape: (key, value) pairs
                return [k for k, _ in rows], None, None, [v for _, v in rows], None
            except (TypeError, ValueError):
                pass
        if rows and rows[0].__class__ is tuple and is_map and len(rows[0]) == 3:
            try:  # map state: (key, user key, value)
                return [k for k, _, _ in rows], None, [u for _, u, _ in rows], [v for _, _, v in rows], None
            except (TypeError, ValueError):
                pass
        if rows and rows[0].__class__ is tuple and len(rows[0]) == (4 if is_map else 3):
            try:  # namespaced state: (key, namespace[, user key], value)
                if is_map:
                    return ([k for k, _, _, _ in rows], [n for _, n, _, _ in rows], [u for _, _, u, _ in rows],
                            [v for _, _, _, v in rows], None)
                return [k for k, _, _ in rows], [n for _, n, _ in rows], None, [v for _, _, v in rows], None
            except (TypeError, ValueError):
                pass
        unpacked = [self._unpack_row(row, is_map) for row in rows]
        if not unpacked:
            return [], None, [], [], None
        keys, namespaces, user_keys, values, expiries = (list(c) for c in zip(*unpacked))
        return keys, namespaces, user_keys, values, None if all(e is None for e in expiries) else expiries

    def _unpack_row(self, row: Any, is_map: bool) -> tuple[Any, Any, Any, Any, int | None]:
        if isinstance(row, MapStateEntry):
            return row.key, row.namespace, row.user_key, row.value, row.expiry
        if isinstance(row, KeyedStateEntry):
            return row.key, row.namespace, None, row.value, row.expiry
        if not isinstance(row, (tuple, list)):
            raise BadInputError(f"state {self.descriptor.name!r}: a row must be a tuple, got {type(row).__name__}")
        n = len(row)
        if is_map and n == 3:
            return row[0], None, row[1], row[2], None
        if is_map and n == 4:
            return row[0], row[1], row[2], row[3], None
        if not is_map and n == 2:
            return row[0], None, None, row[1], None
        if not is_map and n == 3:
            return row[0], row[1], None, row[2], None
        shape = "(key, user_key, value)" if is_map else "(key, value) or (key, namespace, value)"
        raise BadInputError(f"state {self.descriptor.name!r}: rows must be {shape}, got {n} fields")

    def encode_operator_elements(self, elements: Iterable[Any]) -> pa.RecordBatch:
        """Operator list/union elements (order kept) or broadcast (key, value) pairs (sorted)."""
        import pyarrow as pa

        keys: list[bytes | None] = []
        values: list[bytes] = []
        if self.descriptor.kind is StateKind.BROADCAST:
            assert self.user_key is not None
            items = elements.items() if isinstance(elements, dict) else elements
            pairs = []
            for k, v in items:
                self._check(k, user_key=True)
                self._check(v)
                pairs.append((serialize_with(self.user_key, k, "broadcast key"), serialize_with(self.value, v, "value")))
            pairs.sort()
            keys = [k for k, _ in pairs]
            values = [v for _, v in pairs]
        else:
            for element in elements:
                self._check(element)
                keys.append(None)
                values.append(serialize_with(self.value, element, "element"))
        return pa.record_batch([pa.array(keys, pa.binary()), pa.array(values, pa.binary())], schema=operator_schema())

    # ------------------------------------------------------------ decode

    def decode_namespace(self, data: bytes) -> Any:
        return None if not data else deserialize_with(self.namespace, data, "namespace", self.source)

    def decode_value(self, data: bytes) -> Any:
        if self.descriptor.kind is StateKind.LIST:
            try:
                elements = decode_list(data)
            except ValueError as exc:
                raise SerializationError(f"list state {self.descriptor.name!r}: {exc}", path=self.source) from exc
            return [deserialize_with(self.value, e, "list element", self.source) for e in elements]
        return deserialize_with(self.value, data, "value", self.source)

    def decode_values(self, column: Any) -> list[Any]:
        """The Python values of a value column: typed (version 2) or serialized."""
        if not is_serialized(column.type):
            return python_values(column)
        if self.descriptor.kind is StateKind.LIST:
            return [None if v is None else self.decode_value(v) for v in column.to_pylist()]
        return deserialize_column(self.value, column, "value", self.source)

    def serialized_values(self, column: Any) -> pa.Array:
        """A value column as serialized bytes (a typed column is serialized with the state's
        value serializer: the bytes a version 1 file holds for the same values)."""
        import pyarrow as pa

        if hasattr(column, "combine_chunks"):
            column = column.combine_chunks()
        if is_serialized(column.type):
            return column
        values = python_values(column)
        if self.descriptor.kind is StateKind.LIST:
            return pa.array([None if v is None else encode_list([serialize_with(self.value, e, "list element") for e in v])
                             for v in values], pa.binary())
        return pa.array(serialize_many(self.value, values, "value"), pa.binary())

    def decode_keyed_columns(self, batch: pa.RecordBatch) -> dict[str, list[Any]]:
        """The decoded columns of one block as Python lists of equal length, one element per
        entry: ``key``, ``namespace``, ``value``, ``expiry`` and, for map state,
        ``user_key``. Decoded a column at a time, no object per entry."""
        import pyarrow.compute as pc

        assert self.key is not None
        n, source = batch.num_rows, self.source
        columns: dict[str, list[Any]] = {"key": deserialize_column(self.key, batch.column("key"), "key", source)}
        namespace = batch.column("namespace")
        columns["namespace"] = [None] * n
        if n and (pc.max(pc.binary_length(namespace)).as_py() or 0) > 0:
            columns["namespace"] = [None if not ns else self.decode_namespace(ns) for ns in namespace.to_pylist()]
        if self.descriptor.kind is StateKind.MAP:
            assert self.user_key is not None
            columns["user_key"] = deserialize_column(self.user_key, batch.column("user_key"), "user key", source)
        columns["value"] = self.decode_values(batch.column("value"))
        expiry = batch.column("expiry")
        columns["expiry"] = [None] * n if expiry.null_count == n else expiry.to_pylist()
        return columns

    def decode_keyed_batch(self, batch: pa.RecordBatch) -> Iterator[KeyedStateEntry | MapStateEntry]:
        """Decoded entries of one block (its columns decoded when this is called; an
        iterator, not a generator, so a reader chaining blocks adds no frame per entry)."""
        c = self.decode_keyed_columns(batch)
        if self.descriptor.kind is StateKind.MAP:
            return map(_new_tuple, repeat(MapStateEntry),
                       zip(c["key"], c["user_key"], c["value"], c["namespace"], c["expiry"]))
        return map(_new_tuple, repeat(KeyedStateEntry), zip(c["key"], c["namespace"], c["value"], c["expiry"]))

    def decode_operator_batch(self, batch: pa.RecordBatch) -> list[Any]:
        columns = batch.to_pydict()
        if self.descriptor.kind is StateKind.BROADCAST:
            assert self.user_key is not None
            return [
                (deserialize_with(self.user_key, k, "broadcast key", self.source),
                 deserialize_with(self.value, v, "value", self.source))
                for k, v in zip(columns["key"], columns["value"])
            ]
        return [deserialize_with(self.value, v, "element", self.source) for v in columns["value"]]


# _by_object looks at this many leading values first: more than a quarter of them distinct
# and the column is taken as mostly distinct without finding every distinct object
_BY_OBJECT_PROBE = 1024


def _by_object(values: list[Any]) -> tuple[list[Any], pa.Array] | None:
    """The distinct objects of ``values`` in order of first appearance and each value's index
    among them (an int32 array), or None when more than a quarter of the values are distinct.

    Distinct by identity, never by equality: equal values may serialize differently
    (``(1, 2)`` and ``(True, 2)``), while one object always serializes the same, so a
    column built from the distinct objects' encodings by these indices is the column of
    every value encoded on its own."""
    import pyarrow as pa

    n = len(values)
    if n > 4 * _BY_OBJECT_PROBE and len(set(map(id, values[:_BY_OBJECT_PROBE]))) * 4 > _BY_OBJECT_PROBE:
        return None
    np = numpy_or_none()
    if np is None:
        ids = list(map(id, values))
        first_seen = dict.fromkeys(ids)
        if len(first_seen) * 4 > n:
            return None
        by_id = dict(zip(ids, values))
        position = dict(zip(first_seen, range(len(first_seen))))
        return [by_id[i] for i in first_seen], pa.array(list(map(position.__getitem__, ids)), pa.int32())
    ids = np.fromiter(map(id, values), np.uint64, n)
    unique, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    k = len(unique)
    if k * 4 > n:
        return None
    order = np.argsort(first, kind="stable")  # the distinct objects by first appearance
    rank = np.empty(k, np.int32)
    rank[order] = np.arange(k, dtype=np.int32)
    positions = np.ascontiguousarray(rank[inverse.reshape(-1)], np.int32)
    return [values[i] for i in first[order].tolist()], pa.Array.from_buffers(
        pa.int32(), n, [None, pa.py_buffer(positions)])


def group_by_key_group(table: pa.Table, max_parallelism: int, *,
                       version: int | None = None) -> Iterator[tuple[int, pa.RecordBatch]]:
    """Split a keyed table into per-key-group batches, key groups ascending, entries in the
    order of format ``version`` (1: key bytes; 2: key hash, then key bytes).

    Duplicate (key, namespace, user key) rows keep the last occurrence, so a table built
    from an update log holds each entry once.
    """
    version = current_write_format().version if version is None else version
    if table.num_rows == 0:
        return
    if version == 1:
        yield from _group_v1(table, max_parallelism)
    else:
        yield from _group_by_hash(table, max_parallelism)


def _group_v1(table: pa.Table, max_parallelism: int) -> Iterator[tuple[int, pa.RecordBatch]]:
    import pyarrow as pa
    import pyarrow.compute as pc

    groups = pc.remainder(table.column("key_hash"), pa.scalar(max_parallelism, pa.uint32()))
    with_group = table.append_column("__kg", groups).append_column(
        "__pos", pa.array(range(table.num_rows), pa.int64())
    )
    order = pc.sort_indices(
        with_group,
        sort_keys=[("__kg", "ascending"), ("key", "ascending"), ("namespace", "ascending"),
                   ("user_key", "ascending"), ("__pos", "ascending")],
    )
    ordered = with_group.take(order)
    ordered = _drop_superseded(ordered, ("__kg", "key", "namespace", "user_key"))
    result = ordered.drop_columns(["__kg", "__pos"]).combine_chunks()
    yield from _cut(result, ordered.column("__kg"))


def hash_order(table: pa.Table, max_parallelism: int) -> pa.Array:
    """``key group << 32 | key hash`` (uint64) of every row: the leading sort key of the
    version 2 order (key group ascending, then key hash, then key bytes)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    hashes = table.column("key_hash")
    hashes = hashes.combine_chunks() if hasattr(hashes, "combine_chunks") else hashes
    groups = pc.remainder(hashes, pa.scalar(max_parallelism, pa.uint32())).cast(pa.uint64())
    return pc.bit_wise_or(pc.shift_left(groups, pa.scalar(32, pa.uint64())), hashes.cast(pa.uint64()))


def trivial_columns(table: Any) -> set[str]:
    """Optional keyed columns with nothing in them: only empty namespaces, only nulls."""
    import pyarrow.compute as pc

    out = set()
    if (pc.max(pc.binary_length(table.column("namespace"))).as_py() or 0) == 0:
        out.add("namespace")
    for name in ("user_key", "expiry"):
        if table.column(name).null_count == table.num_rows:
            out.add(name)
    return out


def _group_by_hash(table: pa.Table, max_parallelism: int) -> Iterator[tuple[int, pa.RecordBatch]]:
    import pyarrow as pa
    import pyarrow.compute as pc

    trivial = trivial_columns(table)
    ties = ["key"] + [c for c in ("namespace", "user_key") if c not in trivial]
    indices = hash_sort_indices(table, max_parallelism, ties)
    ordered = pa.table({c: take_column(table.column(c), indices) for c in table.column_names if c not in trivial})
    # equal key hashes mean equal key groups: (key_hash, *ties) identifies an entry here
    ordered = _drop_superseded(ordered, ("key_hash", *ties))
    n = ordered.num_rows
    columns = [_fill(c, n) if c in trivial else ordered.column(c) for c in table.column_names]
    result = pa.Table.from_arrays(columns, schema=table.schema).combine_chunks()
    groups = pc.remainder(result.column("key_hash"), pa.scalar(max_parallelism, pa.uint32()))
    yield from _cut(result, groups)


def take_column(column: Any, indices: pa.Array) -> pa.Array:
    """``column.take(indices)``. A null-free binary column whose values all have one width
    (serialized fixed-width keys) is taken as fixed-size binary — a plain gather of equal
    rows, about twice as fast — and keeps its offsets (row ``i`` starts at ``i * width``);
    one of short values of several lengths is taken in slots (:func:`_take_in_slots`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if hasattr(column, "combine_chunks"):
        column = column.combine_chunks()
    n, m = len(column), len(indices)
    if column.type != pa.binary() or column.null_count or column.offset or not 0 < m <= n:
        return column.take(indices)
    _, offsets, data = column.buffers()
    if memoryview(offsets).cast("i")[0]:
        return column.take(indices)
    bounds = pc.min_max(pc.binary_length(column)).as_py()
    width = bounds["max"]
    if bounds["min"] != width:  # values of several lengths
        slotted = _take_in_slots(column, indices, width)
        return column.take(indices) if slotted is None else slotted
    if not width:
        return column.take(indices)
    rows = pa.Array.from_buffers(pa.binary(width), n, [None, data])
    taken = pc.take(rows, indices)
    return pa.Array.from_buffers(pa.binary(), m, [None, offsets.slice(0, 4 * (m + 1)), taken.buffers()[1]])


# Values of at most this many bytes are taken in slots (``_take_in_slots``).
_SLOT_LIMIT = 16


def _take_in_slots(column: pa.Array, indices: pa.Array, longest: int) -> pa.Array | None:
    """``column.take(indices)`` of a null-free binary column of short values (at most
    ``_SLOT_LIMIT`` bytes; msgpack ints, short keys) with NumPy (None without it, or for
    longer values): each value is put left-aligned in a slot of 8 or 16 bytes, zero past
    its end (whole 8-byte words read at its offset, masked to its length), the slots are
    taken as fixed-size binary (a plain gather, several times faster than a variable-width
    take), and the taken values are packed back together, each exactly its length — the
    same array. The column starts at offset 0 (its offsets begin at 0)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    np = numpy_or_none()
    if np is None or longest > _SLOT_LIMIT or sys.byteorder != "little":  # slots: little-endian words
        return None
    n, m = len(column), len(indices)
    words = 1 if longest <= 8 else 2
    width = 8 * words
    _, offsets_buffer, data_buffer = column.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int32, n + 1)
    lengths = np.diff(offsets)
    size = int(offsets[n])
    data = np.zeros(size + width, np.uint8)  # zeros past the end: a value's last slot word reads them
    data[:size] = np.frombuffer(data_buffer, np.uint8, size)
    window = np.ndarray((size + width - 7,), "<u8", data, 0, (1,))  # element i: bytes i .. i + 8 (unaligned)
    # low_bytes[k]: the mask of a word's first k bytes (little-endian: its k lowest bytes)
    low_bytes = np.array([(1 << 8 * k) - 1 for k in range(8)] + [(1 << 64) - 1], np.uint64)
    slots = np.empty((n, words), np.uint64)
    for j in range(words):  # word j of every slot: bytes 8j .. 8j + 8 of its value, zero past its end
        np.bitwise_and(window[offsets[:-1] + 8 * j], low_bytes[np.clip(lengths - 8 * j, 0, 8)], out=slots[:, j])
    taken_slots = pc.take(pa.Array.from_buffers(pa.binary(width), n, [None, pa.py_buffer(slots)]), indices)
    taken_lengths = integer_view(np, pc.take(pa.array(lengths), indices))
    rows = np.frombuffer(taken_slots.buffers()[1], np.uint8, m * width).reshape(m, width)
    taken_offsets = np.zeros(m + 1, np.int32)
    np.cumsum(taken_lengths, out=taken_offsets[1:])
    # the first ``length`` bytes of each taken slot, row after row
    kept = rows[(np.arange(width + 1)[:, None] > np.arange(width)[None, :])[taken_lengths]]
    return pa.Array.from_buffers(pa.binary(), m, [None, pa.py_buffer(taken_offsets), pa.py_buffer(kept)])


def hash_sort_indices(table: Any, max_parallelism: int, ties: list[str]) -> pa.Array:
    """Indices that sort ``table`` stably by (key group, key hash, *ties*): the version 2 order.

    A least-significant-digit radix sort (8-bit counting-sort passes), far cheaper than a
    comparison sort of 32-bit values. With a power-of-two max parallelism the key group is
    the hash's low bits, and (key group, key hash) is the order of one 32-bit number, the
    hash rotated right by those bits: four passes. Otherwise four passes over the hash and
    one over the key group. Rows of equal key hash (collisions, or one key in several
    namespaces) are then ordered by ``ties``.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    hashes = table.column("key_hash")
    hashes = hashes.combine_chunks() if hasattr(hashes, "combine_chunks") else hashes
    sorted_by_numpy = _numpy_hash_sort(hashes, max_parallelism)
    if sorted_by_numpy is not None:
        return _order_ties(table, max_parallelism, sorted_by_numpy, ties)
    if max_parallelism & (max_parallelism - 1) == 0:
        bits = max_parallelism.bit_length() - 1
        key = hashes if not bits else pc.bit_wise_or(pc.shift_right(hashes, pa.scalar(bits, pa.uint32())),
                                                     pc.shift_left(hashes, pa.scalar(32 - bits, pa.uint32())))
        digits = _digits(key, 32, 8)
    else:
        groups = pc.remainder(hashes, pa.scalar(max_parallelism, pa.uint32()))
        digits = _digits(hashes, 32, 8) + _digits(groups, max(1, (max_parallelism - 1).bit_length()), 12)
    return _order_ties(table, max_parallelism, _radix_sort(digits), ties)


# mean run length from which NumPy's merge of sorted runs beats its quicksort (measured: 20
# and 128 runs of 200,000 keys 0.3x and 0.5x; random keys 1.2x)
_RUN_LENGTH = 64


def _numpy_hash_sort(hashes: pa.Array, max_parallelism: int) -> pa.Array | None:
    """What ``_radix_sort`` gives, with NumPy (None without it, or with nulls, or 2**32
    rows or more): the rows' sort keys made unique by their positions, ``(key, row)`` in
    one uint64 each, sorted by NumPy — with unique keys any sort is the stable sort. Keys
    made of long sorted runs (blocks of several key groups one after the other, as a diff
    across max parallelisms reads them) go to NumPy's stable sort, a merge of the runs it
    finds (128 runs: half the time of the quicksort; 20 runs: a third); other keys to its
    quicksort, a fifth faster than the merge on random keys. The key is the hash rotated
    right by log2(M) bits for a power-of-two M (the order of (key group, key hash));
    otherwise the hash, followed by a stable counting sort of the rows in that order by
    their 16-bit key group."""
    import pyarrow as pa

    np = numpy_or_none()
    n = len(hashes)
    if np is None or hashes.null_count or not 0 < n < 1 << 32:
        return None
    keys, scratch = pooled_empty(np, n, np.uint64), pooled_empty(np, n, np.uint64)
    keys[:] = integer_view(np, hashes)
    bits = max_parallelism.bit_length() - 1
    power_of_two = max_parallelism & (max_parallelism - 1) == 0
    if power_of_two and bits:  # rotated right by ``bits`` within 32 bits
        np.right_shift(keys, np.uint64(bits), out=scratch)
        np.left_shift(keys, np.uint64(32 - bits), out=keys)
        np.bitwise_and(keys, np.uint64(0xFFFFFFFF), out=keys)
        np.bitwise_or(keys, scratch, out=keys)
    np.left_shift(keys, np.uint64(32), out=keys)
    np.bitwise_or(keys, np.arange(n, dtype=np.uint32), out=keys)
    descents = int(np.count_nonzero(keys[1:] < keys[:-1]))
    keys.sort(kind="stable" if descents * _RUN_LENGTH < n else "quicksort")
    rows = pooled_empty(np, n, np.uint32)
    np.copyto(rows, keys, casting="unsafe")  # the low 32 bits: row positions
    if not power_of_two:
        groups = ((keys >> np.uint64(32)) % np.uint64(max_parallelism)).astype(np.uint16)
        rows = rows[np.argsort(groups, kind="stable")]
    return pa.array(rows, pa.uint32())


def _digits(values: pa.Array, bits: int, width: int) -> list[pa.Array]:
    """The ``width``-bit digits (``width`` <= 12: Arrow sorts so small a range by counting)
    of the low ``bits`` bits of uint32 ``values``, least significant first, each as the
    smallest unsigned type that holds it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = pa.uint8() if width <= 8 else pa.uint16()
    digits = []
    for shift in range(0, bits, width):
        digit = pc.shift_right(values, pa.scalar(shift, pa.uint32())) if shift else values
        if width % 8:  # the cast to ``kind`` keeps 8 or 16 bits: mask the rest
            digit = pc.bit_wise_and(digit, pa.scalar((1 << width) - 1, pa.uint32()))
        digits.append(digit.cast(kind, safe=False))
    return digits


def _radix_sort(digits: list[pa.Array]) -> pa.Array:
    """Indices that sort stably by ``digits`` (least significant first): one counting sort
    per digit of the rows in the order so far (uint32 indices where they fit: cheaper to
    permute)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    indices = None
    for digit in digits:
        order = pc.array_sort_indices(digit if indices is None else pc.take(digit, indices))
        if indices is None:
            indices = order.cast(pa.uint32()) if len(order) < 1 << 32 else order
        else:
            indices = pc.take(indices, order)
    assert indices is not None
    return indices


def _order_ties(table: Any, max_parallelism: int, indices: pa.Array, ties: list[str]) -> pa.Array:
    """Runs of rows with one key hash, re-sorted by (key hash, *ties*) in their places."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(indices)
    if n < 2:
        return indices
    hashes = pc.take(table.column("key_hash"), indices)
    hashes = hashes.combine_chunks() if hasattr(hashes, "combine_chunks") else hashes
    same = pc.equal(hashes.slice(0, n - 1), hashes.slice(1))
    if not pc.any(same).as_py():
        return indices
    false = pa.array([False])
    in_tie = pc.or_(pa.concat_arrays([same, false]), pa.concat_arrays([false, same]))
    rows = pc.filter(indices, in_tie)
    sub = table.take(rows)
    order_key = hash_order(sub, max_parallelism)
    keys = pa.table([order_key] + [sub.column(c) for c in ties], names=["__order", *ties])
    order = pc.sort_indices(keys, sort_keys=[(c, "ascending") for c in keys.column_names])
    return pc.replace_with_mask(indices, in_tie, pc.take(rows, order))


def _zeroed_nulls(n: int, kind: pa.DataType) -> pa.Array:
    """``n`` nulls of ``binary`` or ``int64`` in zero-filled buffers (not ``pa.nulls``, which
    may share one buffer): what ``pa.array([None] * n, kind)`` builds, so a taken slice of
    it serializes to the same bytes every time, without a Python list of ``n`` Nones."""
    import pyarrow as pa

    validity = pa.py_buffer(bytes((n + 7) // 8))
    if kind == pa.binary():
        return pa.Array.from_buffers(kind, n, [validity, pa.py_buffer(bytes(4 * (n + 1))), pa.py_buffer(b"")], n)
    return pa.Array.from_buffers(kind, n, [validity, pa.py_buffer(bytes(8 * n))], n)


def _fill(name: str, n: int) -> pa.Array:
    import pyarrow as pa

    return empty_namespaces(n) if name == "namespace" else pa.nulls(n, pa.binary() if name == "user_key" else pa.int64())


def _cut(result: pa.Table, groups: Any) -> Iterator[tuple[int, pa.RecordBatch]]:
    """One batch per run of equal key groups."""
    import pyarrow.compute as pc

    runs = pc.run_end_encode(groups.combine_chunks() if hasattr(groups, "combine_chunks") else groups)
    batch = result.to_batches()[0] if result.num_rows else None
    start = 0
    for key_group, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist()):
        assert batch is not None
        yield int(key_group), batch.slice(start, end - start)
        start = end


def _drop_superseded(ordered: pa.Table, identity: tuple[str, ...]) -> pa.Table:
    """Keep the last of adjacent rows equal in every ``identity`` column (the first is the
    cheapest: when it never repeats, the others are not compared; when it rarely does —
    key hashes — the others are compared only at those rows)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = ordered.num_rows
    if n < 2:
        return ordered
    first = ordered.column(identity[0]).combine_chunks()
    same = _adjacent_equal(first.slice(0, n - 1), first.slice(1))
    for name in identity[1:]:
        if not pc.any(same).as_py():
            return ordered
        column = ordered.column(name)
        rows = pc.indices_nonzero(same)
        if 8 * len(rows) > n:  # many candidates: compare whole columns
            column = column.combine_chunks()
            same = pc.and_(same, _adjacent_equal(column.slice(0, n - 1), column.slice(1)))
        else:  # few: compare those rows with their successors, and put the answers in place
            equal = _adjacent_equal(column.take(rows).combine_chunks(), column.take(pc.add(rows, 1)).combine_chunks())
            same = pc.replace_with_mask(same, same, equal)
    if not pc.any(same).as_py():
        return ordered
    keep = pa.concat_arrays([pc.invert(same), pa.array([True])])
    return ordered.filter(keep)


def _adjacent_equal(left: pa.Array, right: pa.Array) -> pa.Array:
    """``left == right`` row by row, two nulls being equal (the same identity)."""
    import pyarrow.compute as pc

    equal = pc.equal(left, right)
    if left.null_count or right.null_count:
        equal = pc.fill_null(equal, pc.and_(pc.is_null(left), pc.is_null(right)))
    return equal


# An entry made from the tuple of its fields: ``tuple.__new__(KeyedStateEntry, fields)``
# called by ``map`` itself — no Python frame (as ``KeyedStateEntry(*fields)`` has) and no
# ``functools.partial`` call per entry.
_new_tuple: Callable[[type, tuple[Any, ...]], Any] = tuple.__new__
