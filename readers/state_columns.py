"""One state of a snapshot as typed columns: the column types (resolved once per state) and
its rows as Arrow batches of :data:`~statekit.readers.typed_columns.TYPED_COLUMNS`.

The ``statekit`` Spark data source (:mod:`statekit.spark.source`) and the local export engine
(:mod:`statekit.spark.local_export`) read through the same functions, so both give the same
types, the same rows and the same expiry rule:

* :func:`resolve_column_types` — the rules of :func:`~statekit.readers.typed_columns.column_type`,
  with keys (and user keys) of self-describing serializers typed from a sample of the first
  block of a few files;
* :func:`drop_expired` — entries whose TTL expiry lies before ``now_ms`` are dropped;
* :func:`typed_state_batches` — every row of a state, decoded block by block (bounded memory:
  about :data:`BATCH_ROWS` rows at a time).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from statekit.readers.typed_columns import ColumnTypes, TypedDecoder, column_type, namespace_type, python_values
from statekit.statefmt.metadata import OperatorMetadata, StateDescriptor, StateKind

if TYPE_CHECKING:
    import pyarrow as pa

    from statekit.readers.savepoint_reader import SavepointReader

__all__ = ["BATCH_ROWS", "SAMPLE_FILES", "resolve_column_types", "drop_expired", "typed_state_batches",
           "decode_pending", "repeated"]

BATCH_ROWS = 65536
SAMPLE_FILES = 4


def resolve_column_types(reader: SavepointReader, op: OperatorMetadata, descriptor: StateDescriptor,
                         overrides: Mapping[str, Any] | None = None) -> ColumnTypes:
    """The column types of one state; ``overrides`` may name ``keyType``, ``userKeyType``,
    ``valueType`` and ``namespaceType`` (the data source's options)."""
    options = overrides or {}
    key_override, user_key_override = options.get("keyType"), options.get("userKeyType")
    key_sample: list[Any] | None = None
    user_key_sample: list[Any] | None = None
    if descriptor.keyed and not key_override and (op.key_serializer or "msgpack") in ("msgpack", "json", "pickle"):
        key_sample = []
    if (descriptor.kind.has_user_key and not user_key_override and not descriptor.user_key_type
            and (descriptor.user_key_serializer or "msgpack") in ("msgpack", "json", "pickle")):
        user_key_sample = []
    if key_sample is not None or user_key_sample is not None:
        _sample(reader, op, descriptor, key_sample, user_key_sample)
    return ColumnTypes(
        key=column_type(op.key_serializer or "msgpack", None, override=key_override, sample=key_sample),
        user_key=column_type(descriptor.user_key_serializer or "msgpack", descriptor.user_key_type,
                             override=user_key_override, sample=user_key_sample),
        value=column_type(descriptor.value_serializer, descriptor.value_type, override=options.get("valueType")),
        namespace=namespace_type(descriptor, options.get("namespaceType")),
    )


def _sample(reader: SavepointReader, op: OperatorMetadata, descriptor: StateDescriptor,
            keys: list[Any] | None, user_keys: list[Any] | None) -> None:
    """Decoded keys (and user keys) of the first block of a few files: the key type's evidence."""
    codec = reader.codec(op.uid, descriptor.name)
    files = [f for st in op.subtasks for f in st.files if f.state == descriptor.name and f.entries > 0]
    for file in files[:SAMPLE_FILES]:
        with reader.open_file(file) as state_file:
            if not state_file.index:
                continue
            batch = state_file.read_block(state_file.index[0].key_group)
        assert batch is not None
        if descriptor.keyed:
            if keys is not None and codec.key is not None:
                keys.extend(python_values(batch.column("key"), codec.key, "key", reader.path))
            if user_keys is not None and codec.user_key is not None:
                user_keys.extend(python_values(batch.column("user_key"), codec.user_key, "user key", reader.path))
        elif user_keys is not None and codec.user_key is not None:
            user_keys.extend(python_values(batch.column("key"), codec.user_key, "user key", reader.path))


def drop_expired(batch: pa.RecordBatch, now_ms: int) -> pa.RecordBatch:
    """``batch`` (raw keyed rows) without the entries whose expiry is before ``now_ms``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    expiry = batch.column("expiry")
    if expiry.null_count == batch.num_rows:
        return batch
    keep = pc.or_kleene(pc.is_null(expiry), pc.greater_equal(expiry, pa.scalar(now_ms, pa.int64())))
    return batch.filter(keep)


def typed_state_batches(reader: SavepointReader, uid: str, state: str, types: ColumnTypes, *,
                        include_expired: bool = False, now_ms: int = 0) -> Iterator[pa.RecordBatch]:
    """Every row of one state as typed batches (:meth:`TypedDecoder.arrow_schema`), in
    key-group order; operator state subtask by subtask (broadcast state: one copy)."""

    op = reader.operator(uid)
    descriptor = op.state(state)
    decoder = TypedDecoder(descriptor, op.key_serializer, types, trust_pickle=reader.trust_pickle, source=reader.path)
    if not descriptor.keyed:
        subtasks = [st for st in op.subtasks if st.file_of(state) is not None]
        if descriptor.kind is StateKind.BROADCAST:
            subtasks = subtasks[:1]  # every subtask holds the same copy
        for owner in subtasks:
            file = owner.file_of(state)
            assert file is not None
            with reader.open_subtask_file(op, owner, file) as state_file:
                blocks = list(state_file.iter_blocks())
            for _, block in blocks:
                yield decoder.decode_operator(block, owner.index)
        return
    pending: list[tuple[int, int, pa.RecordBatch]] = []
    rows = 0
    for subtask, key_group, block in reader.read_keyed_batches(uid, state):
        if not include_expired:
            block = drop_expired(block, now_ms)
        if block.num_rows:
            pending.append((subtask, key_group, block))
            rows += block.num_rows
        if rows >= BATCH_ROWS:
            yield decode_pending(decoder, pending)
            pending, rows = [], 0
    if pending:
        yield decode_pending(decoder, pending)


def decode_pending(decoder: TypedDecoder, pending: list[tuple[int, int, pa.RecordBatch]]) -> pa.RecordBatch:
    """One typed batch of raw keyed blocks ``(subtask, key group, block)``."""
    import pyarrow as pa

    table = pa.Table.from_batches([b for _, _, b in pending])
    return decoder.decode_keyed(table, repeated([(kg, b.num_rows) for _, kg, b in pending]),
                                repeated([(st, b.num_rows) for st, _, b in pending]))


def repeated(runs: list[tuple[int, int]]) -> pa.Array:
    """An int32 column of each (value, count) run in turn: one Arrow fill per block, no Python
    object per row."""
    import pyarrow as pa

    arrays = [pa.repeat(pa.scalar(value, pa.int32()), count) for value, count in runs]
    return pa.concat_arrays(arrays) if arrays else pa.array([], pa.int32())
