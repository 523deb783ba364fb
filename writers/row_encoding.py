"""Input rows to state entries: the declared types an Arrow schema implies, and the encoder.

Both bootstrap engines run the same code here (the local one in-process, the Spark one in
its executors), so they write the same entries for the same rows:

* :func:`plan_bootstrap` resolves a :class:`~statekit.writers.bootstrap_spec.BootstrapSpec`
  against the input schema: every named column exists; the declared value (and map-key)
  type is the spec's or the one the column's Arrow type implies (several value columns
  make ``struct<a:T,b:U>``; a list column of a list state gives whole lists);
* :class:`RowEncoder` turns Arrow batches of input rows into the keyed table the key-group
  sorter takes, or into operator-state elements. A declared primitive type casts its
  column; timestamps and dates become epoch milliseconds.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from statekit.statefmt.entries import StateCodec
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.statefmt.value_types import MAX_DEPTH, ValueType, parse_value_type, to_arrow_type
from statekit.writers.bootstrap_spec import BootstrapPlan, BootstrapSpec

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["plan_bootstrap", "RowEncoder", "one_line"]

_PRIMITIVES = {"int", "float", "string", "bool", "bytes", "timestamp"}


def one_line(exc: BaseException) -> str:
    """An exception's message on one line, at most 300 characters (for one-line errors)."""
    return " ".join(str(exc).split())[:300]


# ---------------------------------------------------------------- plan


def plan_bootstrap(spec: BootstrapSpec, schema: pa.Schema, max_parallelism: int, *,
                   where: str | None = None) -> BootstrapPlan:
    """``spec`` resolved against the input ``schema`` (``where`` names the input in errors)."""
    import pyarrow.types as t

    missing = [c for c in spec.columns if c not in schema.names]
    if missing:
        raise BadInputError(f"no column {missing[0]!r} in the input (columns: {', '.join(schema.names)})", path=where)
    for column in spec.columns:
        if _nesting(schema.field(column).type) > MAX_DEPTH:
            raise BadInputError(f"column {column!r} nests lists or structs more than {MAX_DEPTH} levels deep; "
                                f"statekit stores values nested at most {MAX_DEPTH} levels deep", path=where)
    first = schema.field(spec.value_columns[0]).type
    list_per_row = (spec.kind is StateKind.LIST and len(spec.value_columns) == 1
                    and (t.is_list(first) or t.is_large_list(first)))
    user_key_type = spec.user_key_type
    if spec.user_key_column and user_key_type is None:
        user_key_type = _infer_type(schema.field(spec.user_key_column).type, spec.user_key_column)
    descriptor = StateDescriptor(
        name=spec.state, kind=spec.kind, value_serializer=spec.value_serializer,
        value_type=_value_type(spec, schema, list_per_row),
        user_key_serializer=spec.user_key_serializer if spec.kind.has_user_key else None,
        user_key_type=user_key_type if spec.kind.has_user_key else None, ttl_ms=spec.ttl_ms,
        namespace_type=(_infer_type(schema.field(spec.namespace_column).type, spec.namespace_column) or "json")
        if spec.namespace_column else None,
    )
    return BootstrapPlan(spec, descriptor, max_parallelism, list_per_row)


def _value_type(spec: BootstrapSpec, schema: pa.Schema, list_per_row: bool) -> str | None:
    """The declared value type: the spec's, else what the value column(s) imply."""
    if spec.value_type is not None:
        return spec.value_type
    if len(spec.value_columns) > 1:
        return _struct_type([(c, _infer_type(schema.field(c).type, c)) for c in spec.value_columns])
    column = schema.field(spec.value_columns[0]).type
    return _infer_type(column.value_type if list_per_row else column, spec.value_columns[0])


# ---------------------------------------------------------------- types


def _nesting(arrow_type: pa.DataType) -> int:
    """How deep lists, maps and structs nest in ``arrow_type`` (0 for a primitive; counted up to one
    past :data:`MAX_DEPTH`), without recursion."""
    deepest, pending = 0, [(arrow_type, 0)]
    while pending:
        current, depth = pending.pop()
        deepest = max(deepest, depth)
        if depth > MAX_DEPTH:
            break  # deep enough to refuse: the rest need not be walked
        children = [current.field(i).type for i in range(current.num_fields)]
        if getattr(current, "value_type", None) is not None and not children:
            children = [current.value_type]  # a dictionary's values
            pending += [(child, depth) for child in children]
            continue
        pending += [(child, depth + 1) for child in children]
    return deepest


def _infer_type(arrow_type: pa.DataType, column: str) -> str | None:
    """The declared type for an Arrow type (None: any value, stored as is)."""
    import pyarrow.types as t

    if t.is_dictionary(arrow_type):
        return _infer_type(arrow_type.value_type, column)
    if t.is_boolean(arrow_type):
        return "bool"
    if t.is_integer(arrow_type):
        return "int"
    if t.is_floating(arrow_type) or t.is_decimal(arrow_type):
        return "float"
    if t.is_string(arrow_type) or t.is_large_string(arrow_type):
        return "string"
    if t.is_binary(arrow_type) or t.is_large_binary(arrow_type) or t.is_fixed_size_binary(arrow_type):
        return "bytes"
    if t.is_timestamp(arrow_type) or t.is_date(arrow_type):
        return "timestamp"
    if t.is_null(arrow_type):
        return None
    if t.is_list(arrow_type) or t.is_large_list(arrow_type):
        inner = _infer_type(arrow_type.value_type, column)
        return f"list<{inner or 'json'}>"
    if t.is_struct(arrow_type):
        fields = [arrow_type.field(i) for i in range(arrow_type.num_fields)]
        return _struct_type([(f.name, _infer_type(f.type, column)) for f in fields])
    raise BadInputError(
        f"column {column!r} has Arrow type {arrow_type}, which statekit cannot store; "
        "cast it in the input or select other columns"
    )


def _struct_type(fields: list[tuple[str, str | None]]) -> str | None:
    if not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) for name, _ in fields):
        return None  # field names the type grammar cannot spell: store as untyped values
    return "struct<" + ",".join(f"{name}:{tp or 'json'}" for name, tp in fields) + ">"


def _has_temporal(arrow_type: pa.DataType) -> bool:
    import pyarrow.types as t

    if t.is_timestamp(arrow_type) or t.is_date(arrow_type):
        return True
    if t.is_list(arrow_type) or t.is_large_list(arrow_type):
        return _has_temporal(arrow_type.value_type)
    if t.is_struct(arrow_type):
        return any(_has_temporal(arrow_type.field(i).type) for i in range(arrow_type.num_fields))
    return False


def _prepared(array: pa.Array, declared: ValueType | None, column: str) -> pa.Array:
    """The column cast to a declared primitive type, timestamps as epoch milliseconds."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.types as t

    if t.is_dictionary(array.type):
        array = array.dictionary_decode()
    if declared is not None and declared.name in _PRIMITIVES:
        target = to_arrow_type(declared)
        if array.type != target and not (declared.name == "timestamp" and t.is_timestamp(array.type)):
            try:
                array = pc.cast(array, target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise BadInputError(
                    f"column {column!r} ({array.type}) cannot be cast to the declared type {declared}: {one_line(exc)}"
                ) from exc
    if t.is_date(array.type):
        array = pc.cast(array, pa.timestamp("ms"))
    if t.is_timestamp(array.type):
        return pc.cast(pc.cast(array, pa.timestamp("ms", tz=array.type.tz), safe=False), pa.int64())
    if t.is_decimal(array.type):
        return pc.cast(array, pa.float64())
    if _has_temporal(array.type):
        raise BadInputError(
            f"column {column!r} ({array.type}) nests timestamps or dates; cast them to int (epoch ms) in the input"
        )
    return array


# ---------------------------------------------------------------- encode


class RowEncoder:
    """Arrow batches of input rows -> keyed tables (or operator elements) of one planned state."""

    def __init__(self, plan: BootstrapPlan) -> None:
        descriptor = plan.descriptor
        self.spec = plan.spec
        self.codec = StateCodec(descriptor, plan.key_serializer, for_write=True)
        self.value_type = parse_value_type(descriptor.value_type) if descriptor.value_type else None
        self.user_key_type = parse_value_type(descriptor.user_key_type) if descriptor.user_key_type else None
        self.list_per_row = plan.list_per_row

    def _values(self, batch: pa.RecordBatch) -> list[Any]:
        spec = self.spec
        if len(spec.value_columns) == 1:
            name = spec.value_columns[0]
            declared = None if self.list_per_row else self.value_type
            return _python(batch.column(name), declared, name)
        fields = self.value_type.fields if self.value_type and self.value_type.name == "struct" else ()
        types = dict(zip(fields, self.value_type.args)) if self.value_type and fields else {}
        columns = [_python(batch.column(n), types.get(n), n) for n in spec.value_columns]
        return [dict(zip(spec.value_columns, row)) for row in zip(*columns)]

    def keyed_table(self, batch: pa.RecordBatch, first_row: int) -> pa.Table:
        spec = self.spec
        assert spec.key_column is not None
        keys = _python(batch.column(spec.key_column), None, spec.key_column)
        _refuse_nulls(keys, spec.key_column, "key", first_row)
        values = self._values(batch)
        if spec.kind is StateKind.LIST:
            values = [[] if v is None else v for v in values] if self.list_per_row else [[v] for v in values]
        columns: list[list[Any]] = [keys]
        if spec.namespace_column:
            columns.append(_python(batch.column(spec.namespace_column), None, spec.namespace_column))
        if spec.kind is StateKind.MAP:
            assert spec.user_key_column is not None
            user_keys = _python(batch.column(spec.user_key_column), self.user_key_type, spec.user_key_column)
            _refuse_nulls(user_keys, spec.user_key_column, "user key", first_row)
            columns.append(user_keys)
        columns.append(values)
        table = self.codec.encode_keyed_rows(list(zip(*columns)))
        if spec.expiry_ms is not None:  # every bootstrapped entry expires at reference time + TTL
            import pyarrow as pa

            expiry = table.schema.get_field_index("expiry")
            table = table.set_column(expiry, table.schema.field(expiry), pa.array([spec.expiry_ms] * table.num_rows,
                                                                                  pa.int64()))
        return table

    def operator_elements(self, batch: pa.RecordBatch, first_row: int) -> list[Any]:
        values = self._values(batch)
        if self.spec.kind is not StateKind.BROADCAST:
            return values
        assert self.spec.user_key_column is not None
        keys = _python(batch.column(self.spec.user_key_column), self.user_key_type, self.spec.user_key_column)
        _refuse_nulls(keys, self.spec.user_key_column, "broadcast key", first_row)
        return list(zip(keys, values))


def _python(array: Any, declared: ValueType | None, column: str) -> list[Any]:
    import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    return _prepared(array, declared, column).to_pylist()  # type: ignore[no-any-return]


def _refuse_nulls(values: list[Any], column: str, what: str, first_row: int) -> None:
    if None in values:
        row = first_row + values.index(None)
        raise BadInputError(f"row {row}: column {column!r} (the {what}) is null; every row needs a {what}")
