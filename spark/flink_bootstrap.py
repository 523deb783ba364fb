"""``bootstrap --format flink --engine spark``: a canonical Flink savepoint from a table too big for one machine.

The spec, its row semantics and its encoding are the local engine's
(:mod:`statekit.flink.savepoint_bootstrap`), so both engines write the same entries. Per
operator:

1. Spark reads each state's input; the executors encode every Arrow batch
   (``mapInArrow``, :class:`~statekit.flink.savepoint_bootstrap.RowEncoder`): key group and
   entry bytes, cut into one Arrow IPC chunk per target subtask (one key-group range);
2. the chunks are partitioned by subtask exactly (one Spark partition per subtask, an
   identity partitioner): **one task per key-group range**, each sorting its entries by key
   group with bounded memory (:class:`~statekit.flink.entry_sorter.EntrySorter`) and writing
   that subtask's key-group stream into the staged output directory, in parallel;
3. the driver collects every stream's name, size and key-group offsets and writes
   ``_metadata`` last: the savepoint appears whole or not at all.

Spark has no input order: of several rows of one key (value, map state) one is kept, and
list elements given one per row are joined in no defined order — use the local engine for an
ordered update log. The output must be storage the executors share with the driver (a local
path in local mode; an object store with ``output_storage_options`` on a cluster).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from statekit.flink.entry_sorter import DEFAULT_MEMORY_BUDGET, EntrySorter
from statekit.flink.savepoint_bootstrap import (
    FlinkBootstrapReport,
    FlinkBootstrapSpec,
    FlinkOperatorSpec,
    OperatorPlan,
    RowEncoder,
    new_operator,
    operator_report,
    plan_operator,
)
from statekit.flink.savepoint_writer import WrittenSubtask, publish_savepoint, write_subtask_stream
from statekit.spark.bootstrap import _arrow_schema, _read
from statekit.spark.session import SparkSettings, map_in_arrow, spark_errors
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.fileio import FileIO
from statekit.writers.bootstrap_spec import format_from_name
from statekit.writers.staging import staged_output_dir

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

__all__ = ["bootstrap_flink_with_spark"]

_ENCODED_SCHEMA = "subtask int, rows long, payload binary"


def bootstrap_flink_with_spark(spec: FlinkBootstrapSpec, spark: SparkSettings | None = None, *,
                               memory_budget: int = DEFAULT_MEMORY_BUDGET) -> FlinkBootstrapReport:
    """Write the canonical Flink savepoint ``spec`` describes on Spark.

    Raises:
        BadInputError: An input that does not fit the spec, a non-empty output.
    """
    started = time.monotonic()
    settings = spark or SparkSettings()
    session = settings.session()
    out_io, out_path = FileIO.for_path(spec.output, spec.output_storage_options)
    report = FlinkBootstrapReport(out_io.url(out_path), spec.metadata_version, spec.checkpoint_id, engine="spark")
    with spark_errors(settings.verbose):
        frames = [[_read(session, state.input_format or state_format(state.inputs[0]), list(state.inputs))
                   for state in op.states] for op in spec.operators]
        plans = [plan_operator(op, [_arrow_schema(f) for f in op_frames])
                 for op, op_frames in zip(spec.operators, frames)]
        with staged_output_dir(spec.output, spec.output_storage_options) as (io, directory):
            operators = []
            for plan, op_frames in zip(plans, frames):
                op_report = operator_report(plan)
                results = _write_operator(plan, op_frames, io.url(directory), spec.output_storage_options,
                                          memory_budget)
                written = {index: (subtask, rows) for index, subtask, rows in results}
                for index in range(plan.spec.parallelism):
                    if index not in written:  # no partition reached it: no rows in its key groups
                        empty = write_subtask_stream(io, directory, index, plan.header, plan.max_parallelism,
                                                     plan.key_groups(index), ())
                        written[index] = (empty, [0] * len(plan.states))
                    op_report.subtasks.append(written[index][0])
                for state_index, state in enumerate(op_report.states):
                    state.rows = sum(rows[state_index] for _, rows in written.values())
                report.rows_read += sum(state.rows for state in op_report.states)
                operators.append(new_operator(plan, op_report.subtasks))
                report.operators.append(op_report)
            report.metadata_bytes = publish_savepoint(io, directory, operators, version=spec.metadata_version,
                                                      checkpoint_id=spec.checkpoint_id)
    report.elapsed_s = time.monotonic() - started
    return report


def state_format(path: str) -> str:
    """The input format of ``path`` by its name."""
    fmt = format_from_name(path)
    if fmt is None:
        raise BadInputError(f"cannot tell the format of {path} from its name; give input_format in the spec")
    return fmt


def _write_operator(plan: OperatorPlan, frames: list[DataFrame], directory_url: str,
                    storage_options: dict[str, Any] | None, memory_budget: int) -> list[tuple[int, WrittenSubtask, list[int]]]:
    schemas = [_arrow_schema(f) for f in frames]
    encoded = None
    for index, (state, frame) in enumerate(zip(plan.states, frames)):
        part = map_in_arrow(frame.select(*state.spec.columns), _Encode(plan.spec, schemas, index), _ENCODED_SCHEMA)
        encoded = part if encoded is None else encoded.unionByName(part)
    assert encoded is not None
    pairs = encoded.rdd.map(lambda row: (row[0], (row[1], row[2])))
    writer = _WriteSubtask(plan.spec, schemas, directory_url, storage_options, memory_budget)
    return sorted(pairs.partitionBy(plan.spec.parallelism, _identity).mapPartitionsWithIndex(writer).collect(),
                  key=lambda r: r[0])


def _identity(subtask: int) -> int:
    return subtask


class _Encode:
    """Executors: rows of one state -> entries, one Arrow IPC chunk per target subtask.

    The plan is rebuilt on the executor from the spec and the input schemas (small to ship;
    the same function of the same inputs as on the driver)."""

    def __init__(self, spec: FlinkOperatorSpec, schemas: list[pa.Schema], state: int) -> None:
        self.spec, self.schemas, self.state = spec, schemas, state

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import numpy as np
        import pyarrow as pa

        plan = plan_operator(self.spec, self.schemas)
        encoder = RowEncoder(plan, self.state)
        max_p, parallelism = plan.max_parallelism, plan.spec.parallelism
        for batch in batches:
            if not batch.num_rows:
                continue
            table = encoder.encode(batch)
            subtask = table.column("key_group").to_numpy() * parallelism // max_p
            order = np.argsort(subtask, kind="stable")
            ordered, subtask = table.take(pa.array(order)), subtask[order]
            bounds = np.flatnonzero(np.diff(subtask)) + 1
            ids, rows, payloads = [], [], []
            for start, end in zip(np.concatenate(([0], bounds)), np.concatenate((bounds, [len(order)]))):
                part = ordered.slice(int(start), int(end - start))
                sink = pa.BufferOutputStream()
                with pa.ipc.new_stream(sink, part.schema) as stream:
                    stream.write_table(part)
                ids.append(int(subtask[start]))
                rows.append(int(end - start))
                payloads.append(sink.getvalue().to_pybytes())
            yield pa.RecordBatch.from_arrays(
                [pa.array(ids, pa.int32()), pa.array(rows, pa.int64()), pa.array(payloads, pa.binary())],
                names=["subtask", "rows", "payload"])


class _WriteSubtask:
    """Executors: every chunk of one subtask -> that subtask's key-group stream (sorted, bounded memory)."""

    def __init__(self, spec: FlinkOperatorSpec, schemas: list[pa.Schema], directory_url: str,
                 storage_options: dict[str, Any] | None, memory_budget: int) -> None:
        self.spec, self.schemas = spec, schemas
        self.directory_url, self.storage_options, self.memory_budget = directory_url, storage_options, memory_budget

    def __call__(self, index: int, chunks: Iterable[tuple[int, tuple[int, bytes]]]
                 ) -> Iterator[tuple[int, WrittenSubtask, list[int]]]:
        import pyarrow as pa
        import pyarrow.compute as pc

        plan = plan_operator(self.spec, self.schemas)
        rows = [0] * len(plan.states)
        seen = False
        with EntrySorter(plan.max_parallelism, plan.spec.parallelism, concat_states=plan.concat_states,
                         memory_budget=self.memory_budget) as sorter:
            for subtask, (count, payload) in chunks:
                assert subtask == index, f"chunk of subtask {subtask} in partition {index}"
                table = pa.ipc.open_stream(payload).read_all()
                for pair in pc.value_counts(table.column("state")).to_pylist():
                    rows[pair["values"]] += pair["counts"]
                sorter.add(table)
                seen = seen or count > 0
            if not seen:
                return
            io, directory = FileIO.for_path(self.directory_url, self.storage_options)
            written = write_subtask_stream(io, directory, index, plan.header, plan.max_parallelism,
                                           plan.key_groups(index), sorter.groups(index))
        yield index, written, rows
