"""Bootstrap at scale: a savepoint from a Spark-readable table, written by the executors.

The row semantics, declared types and encoding are those of the local engine
(:mod:`statekit.writers.bootstrap`, whose spec and encoder this module reuses), so both
engines write the same entries. The plan:

1. Spark reads the input (Parquet, CSV with a header, JSON lines) and the executors encode
   each Arrow batch (``mapInArrow``): serialized key, namespace, user key and value, the
   key's hash and key group, cut into one Arrow IPC chunk per target subtask;
2. chunks are partitioned by subtask exactly (one Spark partition per subtask, an
   identity partitioner), and each partition sorts its entries by key group with bounded
   memory (:class:`~statekit.writers.key_group_sorter.KeyGroupSorter`) and writes that
   subtask's state file into the staged output directory;
3. the driver collects (size, checksum, entries) of every file and commits ``_metadata``
   last (:func:`~statekit.writers.state_writer.commit_metadata`): the savepoint appears
   whole or not at all.

Operator state (list, union, broadcast) is small by nature and is written by the local
engine. Duplicate keys keep one row; which one is not defined (Spark has no input order) —
use the local engine for an ordered update log. The output must be storage the executors
share with the driver (a local path in local mode; an object store with
``output_storage_options`` on a cluster).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt import layout
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.keygroups import check_parallelism, compute_key_group_range_for_operator_index
from statekit.statefmt.metadata import (
    CheckpointMetadata,
    OperatorMetadata,
    SnapshotFormat,
    SnapshotKind,
    StateFile,
    StateKind,
    SubtaskState,
)
from statekit.writers import bootstrap as local
from statekit.writers.key_group_sorter import DEFAULT_MEMORY_BUDGET, DuplicateMode, KeyGroupSorter
from statekit.writers.operator_copy import copy_operator
from statekit.writers.savepoint_writer import new_job_id
from statekit.writers.staging import staged_output_dir
from statekit.writers.state_writer import commit_metadata, write_keyed_file

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["bootstrap_with_spark"]

_ENCODED_SCHEMA = "subtask int, rows long, payload binary"


def bootstrap_with_spark(
    input: str | Sequence[str] | None = None,  # noqa: A002 - the CLI's keyword
    input_format: str | None = None,
    uid: str = "",
    state: str = "",
    kind: str = "value",
    key_column: str | None = None,
    value_columns: Sequence[str] = (),
    user_key_column: str | None = None,
    value_type: str | None = None,
    key_serializer: str = "msgpack",
    value_serializer: str = "msgpack",
    max_parallelism: int | None = None,
    parallelism: int = 1,
    output: str = "",
    master: str = "local[*]",
    conf: Mapping[str, str] | None = None,
    *,
    inputs: Sequence[str] | None = None,
    namespace_column: str | None = None,
    user_key_type: str | None = None,
    user_key_serializer: str = "msgpack",
    name: str | None = None,
    ttl_ms: int | None = None,
    from_savepoint: str | None = None,
    storage_options: dict[str, Any] | None = None,
    output_storage_options: dict[str, Any] | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    verbose: bool = False,
) -> local.BootstrapReport:
    """Write a savepoint with one operator state bootstrapped from rows, on Spark.

    Args:
        input: a file or directory (or several) Spark can read; ``inputs`` is an alias.
        input_format: ``parquet``, ``csv`` (header row, inferred types) or ``json`` (JSON
            lines); default from the first input's file name.
        uid, state, kind, name: the operator, its state name and kind.
        key_column, value_columns, user_key_column, namespace_column: the input columns
            (several value columns make a struct value).
        value_type, user_key_type: declared types (default: from the input schema).
        key_serializer, value_serializer, user_key_serializer: serializer names.
        max_parallelism, parallelism: key groups and subtasks of the new operator.
        output: the new savepoint directory (must not exist or be empty).
        master, conf: Spark master and configuration.
        ttl_ms: TTL recorded in the state descriptor.
        from_savepoint: copy this savepoint's operators into the output too.
        storage_options, output_storage_options: fsspec options for ``from_savepoint`` and the output.
        memory_budget: bytes of entries each executor task sorts in memory before spilling.
        verbose: show Spark's logs.

    Returns:
        The local engine's :class:`~statekit.writers.bootstrap.BootstrapReport`, ``engine="spark"``.
    """
    paths = _paths(input, inputs)
    state_kind = local._parse_kind(kind)
    local._check_columns(state_kind, key_column, value_columns, user_key_column, namespace_column)
    if not state_kind.keyed:
        return local.bootstrap_savepoint(  # type: ignore[no-any-return, unused-ignore]
            inputs=paths, output=output, uid=uid, state=state, kind=state_kind, key_column=key_column,
            value_columns=value_columns, user_key_column=user_key_column, namespace_column=namespace_column,
            input_format=input_format, value_type=value_type, user_key_type=user_key_type,
            key_serializer=key_serializer, value_serializer=value_serializer,
            user_key_serializer=user_key_serializer, max_parallelism=max_parallelism, parallelism=parallelism,
            name=name, ttl_ms=ttl_ms, from_savepoint=from_savepoint, storage_options=storage_options,
            output_storage_options=output_storage_options, engine="local")
    if not uid or not state or not output:
        raise BadInputError("uid, state and output must not be empty")
    started = time.monotonic()
    source = SavepointReader.read(from_savepoint, storage_options=storage_options) if from_savepoint else None
    if source is not None and uid in [op.uid for op in source.operators]:
        raise BadInputError(f"operator {uid!r} exists already in {source.path}; choose another uid")
    max_p = max_parallelism or local._default_max_parallelism(source, parallelism)
    check_parallelism(parallelism, max_p)
    fmt = input_format or local._extension_format(paths[0])
    if fmt not in local.INPUT_FORMATS:
        raise BadInputError(f"cannot tell the input format of {paths[0]}; pass --input-format parquet|csv|json")

    from statekit.spark.session import get_spark, spark_errors
    from statekit.statefmt.fileio import FileIO

    out_io, out_path = FileIO.for_path(output, output_storage_options)
    final = out_io.url(out_path)
    spark = get_spark(master, conf, verbose)
    with spark_errors(verbose):
        frame = _read(spark, fmt, paths)
        spec, list_per_row = _spec(frame, uid, state, state_kind, key_column, value_columns, user_key_column,
                                   namespace_column, value_type, user_key_type, key_serializer, value_serializer,
                                   user_key_serializer, ttl_ms, parallelism, max_p, name or uid)
        with staged_output_dir(output, output_storage_options) as (io, directory):
            operators = [copy_operator(source, op, io, directory) for op in source.operators] if source else []
            results = _write_subtasks(frame, spec, list_per_row, io.url(directory), output_storage_options,
                                      memory_budget)
            files = [StateFile(state, relative, size, checksum, entries)
                     for _, relative, size, checksum, entries, _ in results]
            operators.append(OperatorMetadata(
                uid=uid, name=spec.name, parallelism=parallelism, max_parallelism=max_p, key_serializer=key_serializer,
                states=(spec.descriptor,), subtasks=tuple(
                    SubtaskState(i, compute_key_group_range_for_operator_index(max_p, parallelism, i), (f,))
                    for i, f in enumerate(files)),
            ))
            commit_metadata(io, directory, CheckpointMetadata(
                job_id=source.metadata.job_id if source else new_job_id(),
                job_name=source.metadata.job_name if source else "",
                checkpoint_id=source.metadata.checkpoint_id if source else 0,
                kind=SnapshotKind.SAVEPOINT, format=SnapshotFormat.CANONICAL,
                created_at_ms=CheckpointMetadata.now_ms(), operators=tuple(operators),
                properties={**(source.metadata.properties if source else {}),
                            "statekit.bootstrapped": f"{uid}/{state}"},
            ))
    report = local.BootstrapReport(
        output=final, uid=uid, state=state, kind=state_kind.value, parallelism=parallelism, max_parallelism=max_p,
        key_serializer=key_serializer, value_serializer=value_serializer, value_type=spec.descriptor.value_type,
        user_key_type=spec.descriptor.user_key_type, input_format=fmt, inputs=list(paths),
        from_savepoint=source.path if source else None, engine="spark",
    )
    report.copied_operators = [op.uid for op in source.operators] if source else []
    report.rows_read = sum(r[5] for r in results)
    report.subtasks = [local.BootstrapSubtask(i, compute_key_group_range_for_operator_index(max_p, parallelism, i),
                                              f.size, f.entries) for i, f in enumerate(files)]
    report.elapsed_s = time.monotonic() - started
    return report


def _paths(input: str | Sequence[str] | None, inputs: Sequence[str] | None) -> list[str]:  # noqa: A002
    paths = [input] if isinstance(input, str) else list(input or [])
    paths += list(inputs or [])
    if not paths:
        raise BadInputError("give an input (a file or directory of Parquet, CSV or JSON lines)")
    return paths


def _read(spark: SparkSession, fmt: str, paths: list[str]) -> DataFrame:
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", "true")
    frame: DataFrame = reader.load(paths)
    return frame


def _spec(frame: DataFrame, uid: str, state: str, kind: StateKind, key_column: str | None,
          value_columns: Sequence[str], user_key_column: str | None, namespace_column: str | None,
          value_type: str | None, user_key_type: str | None, key_serializer: str, value_serializer: str,
          user_key_serializer: str, ttl_ms: int | None, parallelism: int, max_p: int, name: str) -> tuple[Any, bool]:
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(frame.schema, timezone="UTC")
    for column in [key_column, namespace_column]:
        if column and column not in schema.names:
            raise BadInputError(f"no column {column!r} in the input (columns: {', '.join(schema.names)})")
    descriptor, list_per_row = local._descriptor(schema, state, kind, value_columns, user_key_column, value_type,
                                                 user_key_type, value_serializer, user_key_serializer, ttl_ms)
    spec = local._Spec(uid, descriptor, key_column, tuple(value_columns), user_key_column, namespace_column,
                       key_serializer, parallelism, max_p, name)
    return spec, list_per_row


def _write_subtasks(frame: DataFrame, spec: Any, list_per_row: bool, directory_url: str,
                    storage_options: dict[str, Any] | None, memory_budget: int) -> list[tuple[Any, ...]]:
    from statekit.spark.session import map_in_arrow

    encoded = map_in_arrow(frame.select(*spec.columns), _Encode(spec, list_per_row), _ENCODED_SCHEMA)
    pairs = encoded.rdd.map(lambda row: (row[0], (row[1], row[2])))
    writer = _WriteSubtask(spec, list_per_row, directory_url, storage_options, memory_budget)
    results = pairs.partitionBy(spec.parallelism, _identity).mapPartitionsWithIndex(writer).collect()
    return sorted(results)


def _identity(subtask: int) -> int:
    return subtask


class _Encode:
    """Executors: input rows -> encoded entries, one Arrow IPC chunk per target subtask."""

    def __init__(self, spec: Any, list_per_row: bool) -> None:
        self.spec = spec
        self.list_per_row = list_per_row

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        import pyarrow.compute as pc

        encoder = local._Encoder(self.spec, self.list_per_row)
        max_p, parallelism = self.spec.max_parallelism, self.spec.parallelism
        for batch in batches:
            if not batch.num_rows:
                continue
            table = encoder.keyed_table(batch, 0)
            key_group = pc.remainder(table.column("key_hash"), pa.scalar(max_p, pa.uint32())).cast(pa.int64())
            subtask = pc.divide(pc.multiply(key_group, parallelism), max_p)
            order = pc.sort_indices(subtask)
            ordered, subtask = table.take(order), subtask.take(order)
            runs = pc.run_end_encode(subtask.combine_chunks())
            ids, rows, payloads, start = [], [], [], 0
            for value, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist()):
                part = ordered.slice(start, end - start)
                sink = pa.BufferOutputStream()
                with pa.ipc.new_stream(sink, part.schema) as stream:
                    stream.write_table(part)
                ids.append(value)
                rows.append(end - start)
                payloads.append(sink.getvalue().to_pybytes())
                start = end
            yield pa.RecordBatch.from_arrays(
                [pa.array(ids, pa.int32()), pa.array(rows, pa.int64()), pa.array(payloads, pa.binary())],
                names=["subtask", "rows", "payload"])


class _WriteSubtask:
    """Executors: all chunks of one subtask -> that subtask's state file (sorted, bounded memory)."""

    def __init__(self, spec: Any, list_per_row: bool, directory_url: str, storage_options: dict[str, Any] | None,
                 memory_budget: int) -> None:
        self.spec = spec
        self.list_per_row = list_per_row
        self.directory_url = directory_url
        self.storage_options = storage_options
        self.memory_budget = memory_budget

    def __call__(self, index: int, chunks: Iterable[tuple[int, tuple[int, bytes]]]) -> Iterator[tuple[Any, ...]]:
        import pyarrow as pa

        from statekit.statefmt.fileio import FileIO

        spec = self.spec
        mode = DuplicateMode.CONCAT_LISTS if spec.kind is StateKind.LIST and not self.list_per_row else DuplicateMode.LAST
        rows_in = 0
        with KeyGroupSorter(spec.max_parallelism, spec.parallelism, memory_budget=self.memory_budget,
                            duplicates=mode) as sorter:
            for subtask, (rows, payload) in chunks:
                assert subtask == index, f"chunk of subtask {subtask} in partition {index}"
                rows_in += rows
                sorter.add(pa.ipc.open_stream(payload).read_all())
            io, directory = FileIO.for_path(self.directory_url, self.storage_options)
            relative = layout.state_file_path(spec.uid, spec.descriptor.name, index, spec.parallelism)
            file = write_keyed_file(io, directory, relative, spec.descriptor.name, sorter.subtask_groups(index))
        yield index, file.path, file.size, file.checksum, file.entries, rows_in
