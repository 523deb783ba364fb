"""Bootstrap at scale: a savepoint from a Spark-readable table, written by the executors.

The spec, its row semantics, declared types and encoding are the local engine's
(:mod:`statekit.writers.bootstrap_spec`, :mod:`statekit.writers.row_encoding`), so both
engines write the same entries. The plan:

1. Spark reads the input (Parquet, CSV with a header, JSON lines) and the executors encode
   each Arrow batch (``mapInArrow``): serialized key, namespace, user key and value, the
   key's hash and key group, cut into one Arrow IPC chunk per target subtask;
2. chunks are partitioned and sorted by subtask (DataFrame operations only: classic sessions
   and Spark Connect alike), so each subtask's chunks meet in one partition as one run; the
   task sorts a run's entries by key group with bounded memory
   (:class:`~statekit.writers.key_group_sorter.KeyGroupSorter`) and writes that subtask's
   state file into the staged output directory (a subtask no row maps to gets its empty file
   from the driver);
3. the driver collects (size, checksum, entries) of every file and commits ``_metadata``
   last (:func:`~statekit.writers.state_writer.commit_metadata`): the savepoint appears
   whole or not at all.

Only keyed state is written here; operator state (list, union, broadcast) is small by
nature and ``statekit.spark.engine.bootstrap`` gives it to the local engine. Duplicate keys
keep one row; which one is not defined (Spark has no input order) — use the local engine
for an ordered update log. The output must be storage the executors share with the driver
(a local path in local mode; an object store with ``output_storage_options`` on a cluster).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from statekit.spark.session import SparkSettings, map_in_arrow, spark_errors
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.metadata import StateFile
from statekit.writers.bootstrap import BootstrapReport, read_from_savepoint, target_max_parallelism
from statekit.writers.bootstrap_spec import BootstrapPlan, BootstrapSpec
from statekit.writers.key_group_sorter import DEFAULT_MEMORY_BUDGET, KeyGroupSorter
from statekit.writers.operator_copy import copy_operator
from statekit.writers.row_encoding import RowEncoder, plan_bootstrap
from statekit.writers.staging import staged_output_dir
from statekit.writers.state_writer import commit_metadata, write_keyed_file

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["bootstrap_with_spark"]

_ENCODED_SCHEMA = "subtask int, rows long, payload binary"
_WRITTEN_SCHEMA = "subtask int, path string, size long, checksum string, entries long, rows long"


def bootstrap_with_spark(spec: BootstrapSpec, spark: SparkSettings | None = None, *,
                         memory_budget: int = DEFAULT_MEMORY_BUDGET) -> BootstrapReport:
    """Write the keyed-state savepoint ``spec`` describes on Spark.

    Args:
        spec: what to write; ``input_format`` defaults to the first input's file name
            (CSV has a header row, types inferred; JSON is JSON lines).
        spark: Spark master, configuration and verbosity (default: embedded, quiet).
        memory_budget: bytes of entries each executor task sorts in memory before spilling.

    Returns:
        The :class:`~statekit.writers.bootstrap.BootstrapReport`, ``engine="spark"``.

    Raises:
        BadInputError: operator state (the local engine writes it), or an input that does
            not fit the spec.
    """
    if not spec.kind.keyed:
        raise BadInputError(f"{spec.kind.value} state is operator state: the Spark bootstrap writes keyed state only "
                            "(use the local engine)")
    started = time.monotonic()
    source = read_from_savepoint(spec)
    max_parallelism = target_max_parallelism(spec, source)
    fmt = spec.format_of(spec.inputs[0])
    settings = spark or SparkSettings()
    session = settings.session()
    with spark_errors(settings.verbose):
        frame = _read(session, fmt, list(spec.inputs))
        plan = plan_bootstrap(spec, _arrow_schema(frame), max_parallelism)
        report = BootstrapReport.start(plan, input_format=fmt, inputs=list(spec.inputs), source=source, engine="spark")
        with staged_output_dir(spec.output, spec.output_storage_options, inputs=spec.sources,
                               input_storage_options=spec.storage_options) as (io, directory):
            copied = [copy_operator(source, op, io, directory) for op in source.operators] if source else []
            results = _write_subtasks(frame, plan, io.url(directory), spec.output_storage_options, memory_budget)
            files = [StateFile(spec.state, relative, size, checksum, entries)
                     for _, relative, size, checksum, entries, _ in results]
            commit_metadata(io, directory, plan.metadata(source.metadata if source else None, copied, files))
    report.rows_read = sum(r[5] for r in results)
    return report.finish(plan, files, started)


def _read(spark: SparkSession, fmt: str, paths: list[str]) -> DataFrame:
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", "true")
    frame: DataFrame = reader.load(paths)
    return frame


def _arrow_schema(frame: DataFrame) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(frame.schema, timezone="UTC")


def _write_subtasks(frame: DataFrame, plan: BootstrapPlan, directory_url: str,
                    storage_options: dict[str, Any] | None, memory_budget: int) -> list[tuple[Any, ...]]:
    """Every subtask's state file, written by the executors: the chunks of one subtask meet in
    one partition, in a run of their own (partitioned and sorted by subtask: DataFrame
    operations only, so classic sessions and Spark Connect alike); a subtask without rows gets
    its empty file from the driver."""
    encoded = map_in_arrow(frame.select(*plan.spec.columns), _Encode(plan), _ENCODED_SCHEMA)
    grouped = encoded.repartition(plan.parallelism, "subtask").sortWithinPartitions("subtask")
    writer = _WriteSubtasks(plan, directory_url, storage_options, memory_budget)
    results = {int(row[0]): tuple(row) for row in map_in_arrow(grouped, writer, _WRITTEN_SCHEMA).collect()}
    for index in range(plan.parallelism):
        if index not in results:
            results[index] = writer.write(index)
    return [results[index] for index in range(plan.parallelism)]


class _Encode:
    """Executors: input rows -> encoded entries, one Arrow IPC chunk per target subtask."""

    def __init__(self, plan: BootstrapPlan) -> None:
        self.plan = plan

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        import pyarrow.compute as pc

        encoder = RowEncoder(self.plan)
        max_p, parallelism = self.plan.max_parallelism, self.plan.parallelism
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


class _WriteSubtasks:
    """Executors: runs of chunks, one run per subtask (the partition is sorted by subtask) ->
    that subtask's state file each, its entries sorted by key group with bounded memory (each
    chunk goes to the sorter as it comes); one row per file written."""

    def __init__(self, plan: BootstrapPlan, directory_url: str, storage_options: dict[str, Any] | None,
                 memory_budget: int) -> None:
        self.plan = plan
        self.directory_url = directory_url
        self.storage_options = storage_options
        self.memory_budget = memory_budget

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        run = _SubtaskRun(self)
        try:
            for batch in batches:
                for subtask, rows, payload in zip(*(batch.column(i).to_pylist() for i in range(3))):
                    if run.subtask is not None and subtask != run.subtask:
                        yield _written_batch(run.finish())
                    run.add(subtask, rows, payload)
            if run.subtask is not None:
                yield _written_batch(run.finish())
        finally:
            run.close()

    def write(self, index: int) -> tuple[Any, ...]:
        """Subtask ``index``'s state file without entries (a subtask no row maps to)."""
        run = _SubtaskRun(self)
        try:
            run.open(index)
            return run.finish()
        finally:
            run.close()


class _SubtaskRun:
    """The subtask being written: its sorter and the rows it took."""

    def __init__(self, writer: _WriteSubtasks) -> None:
        self.writer = writer
        self.subtask: int | None = None
        self.rows = 0
        self.sorter: KeyGroupSorter | None = None

    def open(self, subtask: int) -> None:
        plan = self.writer.plan
        self.subtask, self.rows = subtask, 0
        self.sorter = KeyGroupSorter(plan.max_parallelism, plan.parallelism, memory_budget=self.writer.memory_budget,
                                     duplicates=plan.duplicates)

    def add(self, subtask: int, rows: int, payload: bytes) -> None:
        import pyarrow as pa

        if self.subtask != subtask or self.sorter is None:
            self.open(subtask)
        assert self.sorter is not None
        self.rows += rows
        self.sorter.add(pa.ipc.open_stream(payload).read_all())

    def finish(self) -> tuple[Any, ...]:
        """Write the subtask's file; (subtask, path, size, checksum, entries, rows read)."""
        from statekit.statefmt.fileio import FileIO

        assert self.subtask is not None and self.sorter is not None
        plan, index = self.writer.plan, self.subtask
        io, directory = FileIO.for_path(self.writer.directory_url, self.writer.storage_options)
        file = write_keyed_file(io, directory, plan.file_path(index), plan.descriptor.name,
                                self.sorter.subtask_groups(index))
        result = (index, file.path, file.size, file.checksum, file.entries, self.rows)
        self.close()
        return result

    def close(self) -> None:
        if self.sorter is not None:
            self.sorter.close()
        self.sorter, self.subtask = None, None


def _written_batch(row: tuple[Any, ...]) -> pa.RecordBatch:
    import pyarrow as pa

    types = [pa.int32(), pa.string(), pa.int64(), pa.string(), pa.int64(), pa.int64()]
    return pa.RecordBatch.from_arrays([pa.array([value], type_) for value, type_ in zip(row, types)],
                                      names=["subtask", "path", "size", "checksum", "entries", "rows"])
