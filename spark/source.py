"""The ``statekit`` Spark data source (``pyspark.sql.datasource``, Spark 4).

Usage::

    register_data_source(spark)          # get_spark() does this
    df = (spark.read.format("statekit")
          .option("operator", "counter").option("state", "count")
          .load("/savepoints/savepoint-1a2b"))

Options (all optional):

* ``operator``, ``state`` — the state to read; without them the source is a metadata table,
  one row per operator and state (like Spark's ``state-metadata`` source). One of the two
  suffices when it names a single state.
* ``includeExpired`` — ``false`` (default): entries whose TTL expiry is before the planning
  time are dropped; ``true`` keeps them.
* ``trustPickle`` — ``true`` allows decoding pickle-serialized state (runs code).
* ``storageOptions`` — JSON object passed to fsspec in the driver and in every executor
  (``{"client_kwargs": {"endpoint_url": ...}}`` for an S3-compatible server).
* ``numPartitions`` — how many read tasks; ``minPartitions`` — at least this many (default:
  from the state size, at least 8; :func:`read_state` asks for two per core).
* ``keyType``, ``userKeyType``, ``valueType``, ``namespaceType`` — read a column as this
  declared type (``json`` turns any value into JSON text).
* ``raw`` — ``true``: serialized bytes instead of typed columns (the diff engine joins on them);
  a typed value column (state file format version 2) is serialized with the state's value
  serializer, giving the bytes a version 1 file holds for the same values.

Typed columns: ``key``, ``namespace`` (a namespaced state's declared ``namespace_type``,
e.g. ``array<bigint>`` for a window ``list<int>``; JSON text when none is declared; null for
the void namespace), ``user_key`` (map and broadcast state), ``value``, ``expiry``
(timestamp), ``key_group``, ``subtask``; the types follow :mod:`statekit.readers.typed_columns`.

Work is split by key-group ranges: each subtask file is cut into contiguous key-group slices,
more slices for bigger files, so all cores read. Executors open the files themselves through
fsspec, verify every block checksum, and return Arrow record batches. Filters on
``key_group`` (=, IN, <, <=, >, >=) are pushed down exactly; ``key = v`` / ``key IN (...)`` on
an int, string or binary key prunes to the key groups of those keys (Spark re-checks them).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from statekit.readers.state_columns import BATCH_ROWS, decode_pending, drop_expired, repeated, resolve_column_types
from statekit.readers.typed_columns import ColumnTypes, TypedDecoder
from statekit.statefmt.errors import BadInputError, StateNotFoundError
from statekit.statefmt.keygroups import assign_to_key_group
from statekit.statefmt.metadata import CheckpointMetadata, OperatorMetadata, StateDescriptor, StateKind
from statekit.statefmt.serializers import get_serializer, serialize_with
from statekit.statefmt.value_types import ValueType

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from statekit.readers.savepoint_reader import SavepointReader
    from statekit.statefmt.entries import StateCodec

# Import cost (invariant): a Python worker imports this module to unpickle the data source,
# its plan and its read function; the planner that only cuts partitions
# (``plan_data_source_read``) needs neither the snapshot reader nor fsspec, so the reading
# path (SavepointReader, Snapshot, FileIO) is imported by the functions that open files.

__all__ = [
    "StatekitDataSource",
    "StatekitReader",
    "KeyGroupSlice",
    "register_data_source",
    "read_state",
    "scan_state",
    "resolve_state",
    "spark_type",
    "FORMAT_NAME",
]

FORMAT_NAME = "statekit"
DEFAULT_MIN_PARTITIONS = 8
BYTES_PER_PARTITION = 32 << 20
_PUSHABLE_KEY_TYPES = ("int", "string", "bytes")


def register_data_source(spark: SparkSession) -> None:
    """Register format ``statekit`` on ``spark`` and enable Python filter pushdown."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(StatekitDataSource)


def read_state(
    spark: SparkSession,
    path: str,
    operator: str | None = None,
    state: str | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    partitions: int | None = None,
    options: Mapping[str, str] | None = None,
) -> DataFrame:
    """``spark.read.format("statekit")`` with at least two read tasks per core (``partitions`` sets the minimum)."""
    reader = spark.read.format(FORMAT_NAME)
    for key, value in _source_options(spark, operator, state, storage_options, partitions, options).items():
        reader = reader.option(key, value)
    return reader.load(path)


def _source_options(spark: SparkSession, operator: str | None, state: str | None,
                    storage_options: dict[str, Any] | None, partitions: int | None,
                    options: Mapping[str, str] | None) -> dict[str, str]:
    """The data source's options for :func:`read_state` and :func:`scan_state` (``options`` last: they win)."""
    from statekit.spark.session import default_parallelism

    chosen = {"operator": operator or "", "state": state or "",
              "storageOptions": json.dumps(storage_options) if storage_options else "",
              "minPartitions": str(partitions or 2 * default_parallelism(spark))}
    return {**{key: value for key, value in chosen.items() if value}, **(options or {})}


def scan_state(
    spark: SparkSession,
    path: str,
    operator: str | None = None,
    state: str | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    partitions: int | None = None,
    options: Mapping[str, str] | None = None,
) -> DataFrame:
    """The rows and schema of :func:`read_state`, planned in this process and read by ``mapInArrow``.

    The data source plans in Python processes of its own: a fresh session's first read starts
    three planner daemons and workers (lookup, ``create_data_source``, ``plan_data_source_read``)
    before any read task. Here the driver resolves the plan and cuts the key-group slices
    itself, and the read tasks are one per slice over ``spark.range``: only the executors'
    Python workers start. No filter pushdown: for reading whole states (export, diff).

    Raises:
        BadInputError, PathNotFoundError, StateNotFoundError, UntrustedSerializerError: As the
            data source does, here in the driver, before any Spark job.
    """
    from statekit.spark.session import map_slices

    settings = {"path": path, **_source_options(spark, operator, state, storage_options, partitions, options)}
    plan = _build_plan(settings)
    schema = plan.spark_schema()
    reader = StatekitReader(plan, schema)
    return map_slices(spark, reader.partitions(), reader.read, schema)


# ---------------------------------------------------------------- Spark types


def spark_type(value_type: ValueType) -> DataType:
    """The Spark SQL type of a declared type (``json`` is a string of JSON text)."""
    simple: dict[str, DataType] = {
        "int": LongType(), "float": DoubleType(), "string": StringType(), "bool": BooleanType(),
        "bytes": BinaryType(), "timestamp": TimestampType(), "json": StringType(),
    }
    if value_type.name in simple:
        return simple[value_type.name]
    if value_type.name == "list":
        return ArrayType(spark_type(value_type.args[0]), containsNull=True)
    if value_type.name == "map":
        return MapType(spark_type(value_type.args[0]), spark_type(value_type.args[1]), valueContainsNull=True)
    return StructType([StructField(n, spark_type(t), True) for n, t in zip(value_type.fields, value_type.args)])


def _typed_schema(descriptor: StateDescriptor, types: ColumnTypes) -> StructType:
    value = spark_type(types.value)
    if descriptor.kind is StateKind.LIST:
        value = ArrayType(value, containsNull=True)
    return StructType([
        StructField("key", spark_type(types.key) if descriptor.keyed else StringType(), True),
        StructField("namespace", spark_type(types.namespace) if descriptor.keyed else StringType(), True),
        StructField("user_key", spark_type(types.user_key) if descriptor.kind.has_user_key else StringType(), True),
        StructField("value", value, True),
        StructField("expiry", TimestampType(), True),
        StructField("key_group", IntegerType(), True),
        StructField("subtask", IntegerType(), True),
    ])


RAW_SCHEMA = StructType([
    StructField("key", BinaryType(), True),
    StructField("namespace", BinaryType(), True),
    StructField("user_key", BinaryType(), True),
    StructField("value", BinaryType(), True),
    StructField("key_hash", LongType(), True),
    StructField("expiry", TimestampType(), True),
    StructField("key_group", IntegerType(), True),
    StructField("subtask", IntegerType(), True),
])

METADATA_SCHEMA = StructType([
    StructField("operator_uid", StringType(), False),
    StructField("operator_name", StringType(), True),
    StructField("state_name", StringType(), True),
    StructField("kind", StringType(), True),
    StructField("keyed", BooleanType(), True),
    StructField("parallelism", IntegerType(), True),
    StructField("max_parallelism", IntegerType(), True),
    StructField("key_serializer", StringType(), True),
    StructField("value_serializer", StringType(), True),
    StructField("value_type", StringType(), True),
    StructField("ttl_ms", LongType(), True),
    StructField("bytes", LongType(), True),
    StructField("entries", LongType(), True),
    StructField("files", IntegerType(), True),
])


# ---------------------------------------------------------------- plan


def _flag(options: Any, name: str, default: bool = False) -> bool:
    value = options.get(name)
    if value is None:
        return default
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise BadInputError(f"option {name} must be true or false, got {value!r}")
    return text == "true"


def _int_option(options: Any, name: str) -> int | None:
    value = options.get(name)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise BadInputError(f"option {name} must be an integer, got {value!r}") from None
    if number < 1:
        raise BadInputError(f"option {name} must be at least 1, got {number}")
    return number


def resolve_state(metadata: CheckpointMetadata, operator: str | None, state: str | None) -> tuple[str, str]:
    """The (uid, state) that ``operator``/``state`` name; one of them may be left out when unambiguous."""
    if operator:
        op = metadata.operator(operator)
        if state:
            op.state(state)
            return op.uid, state
        if len(op.states) == 1:
            return op.uid, op.states[0].name
        names = ", ".join(d.name for d in op.states) or "none"
        raise BadInputError(f"operator {operator!r} has {len(op.states)} states ({names}); choose one with the state option")
    assert state
    owners = [op.uid for op in metadata.operators if any(d.name == state for d in op.states)]
    if len(owners) == 1:
        return owners[0], state
    if not owners:
        raise StateNotFoundError(f"no operator has a state named {state!r}")
    raise BadInputError(f"state {state!r} exists in operators {', '.join(owners)}; choose one with the operator option")


@dataclass
class _Plan:
    """What the driver resolved once; pickled into every read task."""

    mode: str  # "metadata" | "keyed" | "operator"
    url: str
    storage_options: dict[str, Any]
    trust_pickle: bool
    metadata: CheckpointMetadata
    uid: str = ""
    state: str = ""
    types: ColumnTypes | None = None
    include_expired: bool = False
    raw: bool = False
    num_partitions: int | None = None
    min_partitions: int = DEFAULT_MIN_PARTITIONS
    now_ms: int = 0

    @property
    def operator(self) -> OperatorMetadata:
        return self.metadata.operator(self.uid)

    @property
    def descriptor(self) -> StateDescriptor:
        return self.operator.state(self.state)

    def spark_schema(self) -> StructType:
        if self.mode == "metadata":
            return METADATA_SCHEMA
        if self.raw:
            return RAW_SCHEMA
        assert self.types is not None
        return _typed_schema(self.descriptor, self.types)

    def open_reader(self) -> SavepointReader:
        from statekit.readers.savepoint_reader import SavepointReader
        from statekit.readers.snapshot import Snapshot
        from statekit.statefmt.fileio import FileIO

        io, directory = FileIO.for_path(self.url, self.storage_options)
        return SavepointReader(Snapshot(io=io, directory=directory, metadata=self.metadata),
                               trust_pickle=self.trust_pickle)


def _build_plan(options: Any) -> _Plan:
    path = options.get("path")
    if not path:
        raise BadInputError("no path: use spark.read.format('statekit').load(PATH)")
    raw_options = options.get("storageOptions")
    try:
        storage_options = json.loads(raw_options) if raw_options else {}
    except ValueError as exc:
        raise BadInputError(f"option storageOptions is not valid JSON: {exc}") from None
    trust_pickle = _flag(options, "trustPickle")
    from statekit.readers.savepoint_reader import SavepointReader

    reader = SavepointReader.read(path, trust_pickle=trust_pickle, storage_options=storage_options)
    plan = _Plan(
        mode="metadata", url=reader.path, storage_options=storage_options, trust_pickle=trust_pickle,
        metadata=reader.metadata, include_expired=_flag(options, "includeExpired"), raw=_flag(options, "raw"),
        num_partitions=_int_option(options, "numPartitions"),
        min_partitions=_int_option(options, "minPartitions") or DEFAULT_MIN_PARTITIONS,
        now_ms=int(time.time() * 1000),
    )
    operator, state = options.get("operator"), options.get("state")
    if not operator and not state:
        return plan
    uid, name = resolve_state(reader.metadata, operator, state)
    op = reader.metadata.operator(uid)
    descriptor = op.state(name)
    reader.codec(uid, name)  # refuses pickle without trust, before any task starts
    plan = replace(plan, mode="keyed" if descriptor.keyed else "operator", uid=uid, state=name,
                   metadata=replace(reader.metadata, operators=(op,)))
    if not plan.raw:
        plan.types = resolve_column_types(reader, op, descriptor, options)
    return plan


def _metadata_rows(metadata: CheckpointMetadata) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for op in metadata.operators:
        base = (op.uid, op.name)
        layout = (op.parallelism, op.max_parallelism, op.key_serializer)
        if not op.states:
            rows.append((*base, None, None, None, *layout, None, None, None, 0, 0, 0))
        for d in op.states:
            files = [f for st in op.subtasks for f in st.files if f.state == d.name]
            rows.append((*base, d.name, d.kind.value, d.keyed, *layout, d.value_serializer, d.value_type,
                         d.ttl_ms, sum(f.size for f in files), sum(f.entries for f in files), len(files)))
    return rows


# ---------------------------------------------------------------- the data source


class StatekitDataSource(DataSource):
    """Format ``statekit``: the state of one operator and state name, or the metadata table."""

    _plan_cache: _Plan | None = None

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def _plan(self) -> _Plan:
        if self._plan_cache is None:
            self._plan_cache = _build_plan(self.options)
        return self._plan_cache

    def schema(self) -> StructType:
        return self._plan().spark_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        return StatekitReader(self._plan(), schema)


@dataclass
class KeyGroupSlice(InputPartition):
    """One read task: contiguous key groups of one subtask's file (operator state: the file)."""

    subtask: int
    key_groups: list[int] = field(default_factory=list)


class StatekitReader(DataSourceReader):
    """Plans key-group slices on the driver; reads them in the executors."""

    def __init__(self, plan: _Plan, schema: StructType) -> None:
        self.plan = plan
        self.schema = schema
        self.key_groups: set[int] | None = None
        self.key_bytes: set[bytes] | None = None

    # ------------------------------------------------------------ pushdown

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for f in filters:
            if self.plan.mode == "keyed" and self._push_key_group(f):
                continue
            if self.plan.mode == "keyed":
                self._push_key(f)
            yield f

    def _narrow(self, groups: Iterable[int]) -> None:
        wanted = set(groups)
        self.key_groups = wanted if self.key_groups is None else self.key_groups & wanted

    def _push_key_group(self, f: Filter) -> bool:
        if getattr(f, "attribute", None) != ("key_group",):
            return False
        max_p = self.plan.operator.max_parallelism
        value = getattr(f, "value", None)
        if isinstance(f, EqualTo) and isinstance(value, int):
            self._narrow([value])
        elif isinstance(f, In) and all(isinstance(v, int) for v in f.value):
            self._narrow(f.value)
        elif isinstance(f, (GreaterThan, GreaterThanOrEqual)) and isinstance(value, int):
            self._narrow(range(max(0, value + (1 if isinstance(f, GreaterThan) else 0)), max_p))
        elif isinstance(f, (LessThan, LessThanOrEqual)) and isinstance(value, int):
            self._narrow(range(min(max_p, value + (1 if isinstance(f, LessThanOrEqual) else 0))))
        else:
            return False
        return True

    def _push_key(self, f: Filter) -> None:
        if getattr(f, "attribute", None) != ("key",):
            return
        if isinstance(f, EqualTo):
            values: Sequence[Any] = [f.value]
        elif isinstance(f, In):
            values = list(f.value)
        else:
            return
        encoded = self._encode_keys(values)
        if encoded is None:
            return
        self.key_bytes = encoded if self.key_bytes is None else self.key_bytes & encoded
        max_p = self.plan.operator.max_parallelism
        self._narrow(assign_to_key_group(k, max_p) for k in encoded)

    def _encode_keys(self, values: Sequence[Any]) -> set[bytes] | None:
        if self.plan.raw:
            return {bytes(v) for v in values} if all(isinstance(v, (bytes, bytearray)) for v in values) else None
        assert self.plan.types is not None
        if self.plan.types.key.name not in _PUSHABLE_KEY_TYPES:
            return None
        serializer = get_serializer(self.plan.operator.key_serializer or "msgpack", for_write=True)
        try:
            return {serialize_with(serializer, bytes(v) if isinstance(v, bytearray) else v, "key") for v in values}
        except Exception:  # noqa: BLE001 - a literal the key serializer cannot encode matches nothing we can prune
            return None

    # ------------------------------------------------------------ planning

    def partitions(self) -> list[InputPartition]:
        if self.plan.mode == "metadata":
            return [InputPartition("metadata")]
        op = self.plan.operator
        files = [(st.index, st.key_group_range, f) for st in op.subtasks for f in st.files
                 if f.state == self.plan.state and f.entries > 0]
        if self.plan.mode == "operator":
            if self.plan.descriptor.kind is StateKind.BROADCAST:
                files = files[:1]  # every subtask holds the same copy
            return [KeyGroupSlice(subtask) for subtask, _, _ in files]
        weighted = []
        for subtask, kg_range, file in files:
            groups = [g for g in kg_range if self.key_groups is None or g in self.key_groups]
            if groups:
                weighted.append((subtask, groups, file.size * len(groups) / max(1, len(kg_range))))
        total = sum(w for _, _, w in weighted)
        wanted = self.plan.num_partitions or max(self.plan.min_partitions, math.ceil(total / BYTES_PER_PARTITION))
        slices: list[InputPartition] = []
        for subtask, groups, weight in weighted:
            parts = max(1, min(len(groups), round(wanted * weight / total) if total else 1))
            size = math.ceil(len(groups) / parts)
            slices.extend(KeyGroupSlice(subtask, groups[i:i + size]) for i in range(0, len(groups), size))
        return slices

    # ------------------------------------------------------------ reading (executors)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from pyspark.sql.pandas.types import to_arrow_schema

        target = to_arrow_schema(self.schema, timezone="UTC")
        if self.plan.mode == "metadata":
            yield _metadata_batch(self.plan.metadata, target)
            return
        if not isinstance(partition, KeyGroupSlice):
            return
        reader = self.plan.open_reader()
        if self.plan.mode == "operator":
            yield from self._read_operator(reader, partition, target)
            return
        pending: list[tuple[int, int, pa.RecordBatch]] = []
        rows = 0
        for subtask, key_group, batch in reader.read_keyed_batches(self.plan.uid, self.plan.state, partition.key_groups):
            batch = self._filter(batch)
            if batch.num_rows:
                pending.append((subtask, key_group, batch))
                rows += batch.num_rows
            if rows >= BATCH_ROWS:
                yield self._emit(pending, target)
                pending, rows = [], 0
        if pending:
            yield self._emit(pending, target)

    def _filter(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        import pyarrow as pa
        import pyarrow.compute as pc

        if not self.plan.include_expired:
            batch = drop_expired(batch, self.plan.now_ms)
        if self.key_bytes is not None:
            batch = batch.filter(pc.is_in(batch.column("key"), value_set=pa.array(sorted(self.key_bytes), pa.binary())))
        return batch

    def _emit(self, pending: list[tuple[int, int, pa.RecordBatch]], target: pa.Schema) -> pa.RecordBatch:
        import pyarrow as pa

        if not self.plan.raw:
            return _conform(decode_pending(self._decoder(), pending), target)
        table = pa.Table.from_batches([b for _, _, b in pending])
        key_groups = repeated([(kg, b.num_rows) for _, kg, b in pending])
        subtasks = repeated([(st, b.num_rows) for st, _, b in pending])
        value = self._serializer().serialized_values(table.column("value"))  # typed columns as stored bytes
        batch = pa.RecordBatch.from_arrays(
            [table.column(n).combine_chunks() for n in ("key", "namespace", "user_key")] + [value]
            + [table.column("key_hash").combine_chunks().cast(pa.int64()),
               table.column("expiry").combine_chunks().cast(pa.timestamp("ms", tz="UTC")), key_groups, subtasks],
            names=["key", "namespace", "user_key", "value", "key_hash", "expiry", "key_group", "subtask"],
        )
        return _conform(batch, target)

    def _serializer(self) -> StateCodec:
        """Serializes typed value columns (format version 2) into the bytes raw mode returns;
        never decodes, so it needs no trust."""
        codec: StateCodec | None = getattr(self, "_serializer_cache", None)
        if codec is None:
            from statekit.statefmt.entries import StateCodec

            codec = StateCodec(self.plan.descriptor, self.plan.operator.key_serializer, for_write=True)
            self._serializer_cache = codec
        return codec

    def _decoder(self) -> TypedDecoder:
        decoder: TypedDecoder | None = getattr(self, "_decoder_cache", None)
        if decoder is None:
            assert self.plan.types is not None
            decoder = TypedDecoder(self.plan.descriptor, self.plan.operator.key_serializer, self.plan.types,
                                   trust_pickle=self.plan.trust_pickle, source=self.plan.url)
            self._decoder_cache = decoder
        return decoder

    def _read_operator(self, reader: SavepointReader, partition: KeyGroupSlice, target: pa.Schema) -> Iterator[pa.RecordBatch]:
        subtask = self.plan.operator.subtasks[partition.subtask]
        file = subtask.file_of(self.plan.state)
        if file is None:
            return
        with reader.open_subtask_file(self.plan.operator, subtask, file) as state_file:
            blocks = list(state_file.iter_blocks())
        for _, batch in blocks:
            if self.plan.raw:
                import pyarrow as pa

                n = batch.num_rows
                raw = pa.RecordBatch.from_arrays(
                    [pa.nulls(n, pa.binary()), pa.nulls(n, pa.binary()), batch.column("key"), batch.column("value"),
                     pa.nulls(n, pa.int64()), pa.nulls(n, pa.timestamp("ms", tz="UTC")), pa.nulls(n, pa.int32()),
                     pa.array([partition.subtask] * n, pa.int32())],
                    names=["key", "namespace", "user_key", "value", "key_hash", "expiry", "key_group", "subtask"],
                )
                yield _conform(raw, target)
            else:
                yield _conform(self._decoder().decode_operator(batch, partition.subtask), target)


def _conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """The batch with exactly Spark's Arrow schema (names, order, units, nullability)."""
    import pyarrow as pa

    columns = [batch.column(f.name).cast(f.type) for f in target]
    return pa.RecordBatch.from_arrays(columns, schema=target)


def _metadata_batch(metadata: CheckpointMetadata, target: pa.Schema) -> pa.RecordBatch:
    import pyarrow as pa

    rows = _metadata_rows(metadata)
    columns = list(zip(*rows)) if rows else [() for _ in target]
    return pa.RecordBatch.from_arrays([pa.array(list(c), f.type) for c, f in zip(columns, target)], schema=target)
