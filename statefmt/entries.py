"""Entries: Python rows of a state <-> Arrow batches of the state file schema.

Keyed entries are grouped by key group and sorted by (key, namespace, user key) inside a
group. The void namespace (no window) is stored as empty bytes and read back as None.
List state holds one entry per (key, namespace) whose value frames all element bytes.
Operator list and union state keep element order; broadcast state is sorted by key.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import mmh3

from statekit.statefmt.errors import BadInputError, SerializationError
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.statefmt.serializers import (
    Serializer,
    decode_list,
    deserialize_with,
    encode_list,
    get_serializer,
    deserialize_many,
    serialize_many,
    serialize_with,
)
from statekit.statefmt.value_types import parse_value_type

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "KeyedStateEntry",
    "MapStateEntry",
    "StateCodec",
    "group_by_key_group",
]


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

    def encode_keyed_rows(self, rows: Iterable[Any]) -> pa.Table:
        """Keyed rows -> a table of the keyed schema (unsorted).

        Rows: ``(key, value)`` or ``(key, namespace, value)``; for map state
        ``(key, user_key, value)`` or ``(key, namespace, user_key, value)``; or the
        :class:`KeyedStateEntry` / :class:`MapStateEntry` tuples a reader yields.
        Encoding works a column at a time (serializers and type checks over lists).
        """
        import pyarrow as pa

        from statekit.statefmt.statefile import keyed_schema

        assert self.key is not None
        is_map = self.descriptor.kind is StateKind.MAP
        keys, namespaces, user_keys, values, expiries = self._columns(rows, is_map)
        key_bytes = serialize_many(self.key, keys, "key")
        hash32 = mmh3.hash
        hashes = [hash32(k, 0, False) for k in key_bytes]
        if any(ns is not None for ns in namespaces):
            namespace_bytes = [self.encode_namespace(ns) for ns in namespaces]
        else:
            namespace_bytes = [b""] * len(keys)
        if is_map:
            assert self.user_key is not None
            self._check_column(user_keys, user_key=True)
            user_key_bytes: list[bytes | None] = list(serialize_many(self.user_key, user_keys, "user key"))
            self._check_column(values)
            value_bytes = serialize_many(self.value, values, "value")
        else:
            user_key_bytes = [None] * len(keys)
            if self.descriptor.kind is StateKind.LIST:
                value_bytes = [self.encode_value(v) for v in values]
            else:
                self._check_column(values)
                value_bytes = serialize_many(self.value, values, "value")
        return pa.table(
            [
                pa.array(hashes, pa.uint32()),
                pa.array(key_bytes, pa.binary()),
                pa.array(namespace_bytes, pa.binary()),
                pa.array(user_key_bytes, pa.binary()),
                pa.array(value_bytes, pa.binary()),
                pa.array(expiries, pa.int64()),
            ],
            schema=keyed_schema(),
        )

    def _check_column(self, values: list[Any], user_key: bool = False) -> None:
        reason = (self.user_key_type if user_key else self.value_type).check_many(values)
        if reason:
            what = "user key" if user_key else "value"
            raise SerializationError(f"state {self.descriptor.name!r}: a {what} does not match the declared type: {reason}")

    def _columns(self, rows: Iterable[Any], is_map: bool) -> tuple[list[Any], list[Any], list[Any], list[Any], list[Any]]:
        rows = rows if isinstance(rows, list) else list(rows)
        n = len(rows)
        if not is_map:
            try:  # the common shape: (key, value) pairs
                return [k for k, _ in rows], [None] * n, [None] * n, [v for _, v in rows], [None] * n
            except (TypeError, ValueError):
                pass
        unpacked = [self._unpack_row(row, is_map) for row in rows]
        if not unpacked:
            return [], [], [], [], []
        keys, namespaces, user_keys, values, expiries = (list(c) for c in zip(*unpacked))
        return keys, namespaces, user_keys, values, expiries

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

        from statekit.statefmt.statefile import operator_schema

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

    def decode_keyed_batch(self, batch: pa.RecordBatch) -> Iterator[KeyedStateEntry | MapStateEntry]:
        """Decoded entries of one block, a column at a time."""
        assert self.key is not None
        columns = batch.to_pydict()
        source = self.source
        keys = deserialize_many(self.key, columns["key"], "key", source)
        namespaces = [None if not ns else self.decode_namespace(ns) for ns in columns["namespace"]]
        expiries = columns["expiry"]
        if self.descriptor.kind is StateKind.MAP:
            assert self.user_key is not None
            user_keys = deserialize_many(self.user_key, columns["user_key"], "user key", source)
            values = deserialize_many(self.value, columns["value"], "value", source)
            for k, uk, v, ns, exp in zip(keys, user_keys, values, namespaces, expiries):
                yield MapStateEntry(k, uk, v, ns, exp)
            return
        if self.descriptor.kind is StateKind.LIST:
            values = [self.decode_value(v) for v in columns["value"]]
        else:
            values = deserialize_many(self.value, columns["value"], "value", source)
        for k, ns, v, exp in zip(keys, namespaces, values, expiries):
            yield KeyedStateEntry(k, ns, v, exp)

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


def group_by_key_group(table: pa.Table, max_parallelism: int) -> Iterator[tuple[int, pa.RecordBatch]]:
    """Split a keyed table into per-key-group batches, key groups ascending, entries sorted.

    Duplicate (key, namespace, user key) rows keep the last occurrence, so a table built
    from an update log holds each entry once.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return
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
    ordered = _drop_superseded(ordered)
    result = ordered.drop_columns(["__kg", "__pos"]).combine_chunks()
    runs = pc.run_end_encode(ordered.column("__kg").combine_chunks())
    start = 0
    for key_group, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist()):
        yield int(key_group), result.slice(start, end - start).to_batches()[0]
        start = end


def _drop_superseded(ordered: pa.Table) -> pa.Table:
    """Keep the last of rows with equal (key group, key, namespace, user key)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = ordered.num_rows
    if n < 2:
        return ordered
    same = None
    for name in ("__kg", "key", "namespace", "user_key"):
        column = ordered.column(name).combine_chunks()
        left, right = column.slice(0, n - 1), column.slice(1)
        equal = pc.fill_null(pc.equal(left, right), pc.and_(pc.is_null(left), pc.is_null(right)))
        same = equal if same is None else pc.and_(same, equal)
    assert same is not None
    if not pc.any(same).as_py():
        return ordered
    keep = pa.concat_arrays([pc.invert(same), pa.array([True])])
    return ordered.filter(keep)
