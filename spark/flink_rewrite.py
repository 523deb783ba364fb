"""``rescale FLINK_SAVEPOINT --max-parallelism M2 --engine spark``: regroup big savepoints on Spark.

The rescale itself (checks, the ``_metadata`` edits, carried files, publishing) is
:func:`statekit.flink.rewrite.rescale_flink_savepoint`; this module is its Spark
:class:`~statekit.flink.rewrite.OperatorRegroup`: per keyed operator

* **merge** path (``M2`` divides ``M``: old key group ``g`` goes whole to ``g % M2``): **one task
  per target key-group range** (a new subtask) reads only the source key groups that land in
  it (ranged reads), merges them with the vectorized local code (nothing hashed) and writes
  the subtask's stream into the staged output directory. Nothing is shuffled.
* **split** and **rehash** paths (every key hashed; any source key group can feed any target):
  1. *map* — the source key groups are cut into *slices* of about ``slice_bytes`` (never
     splitting a key group); one task per slice reads only its key groups and regroups them
     with the vectorized local code (:mod:`statekit.flink.fast_regroup`), spilling past its
     memory budget, then hands each target subtask its runs as one Arrow IPC payload;
  2. *shuffle* — payloads are partitioned by target subtask exactly (identity partitioner);
  3. *reduce* — one task per target key-group range puts the runs in source order (slice,
     then run) and writes the subtask's stream.

Either way the streams are byte for byte the local engine's, and the driver records their
offsets and writes ``_metadata``.

Memory per task is the budget plus one slice's key groups. The output must be storage the
executors share with the driver (a local path in local mode, an object store on a cluster).
"""

from __future__ import annotations

import posixpath
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statekit.flink.regroup import DEFAULT_MEMORY_BUDGET, KeyGroupTally, Regrouper, StreamInput
from statekit.flink.rewrite import RegroupResult, RescaleTarget, WrittenStream
from statekit.flink.storage import FlinkSnapshot, load_snapshot
from statekit.flink.streams_writer import OperatorStreams, open_inputs, operator_streams, write_stream
from statekit.spark.session import SparkSettings, spark_errors
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.keygroups import KeyGroupRange, compute_key_group_range_for_operator_index

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["SparkRegroup", "DEFAULT_SLICE_BYTES"]

DEFAULT_SLICE_BYTES = 32 << 20


@dataclass(frozen=True)
class _Slice:
    """Key groups of one source stream: ``(key group, offset, end)``, in stream order."""

    index: int
    source: int
    blocks: tuple[tuple[int, int, int], ...]

    @property
    def bytes(self) -> int:
        return sum(end - offset for _, offset, end in self.blocks)


def _slices(streams: OperatorStreams, slice_bytes: int, tasks: int) -> list[_Slice]:
    """Contiguous runs of each stream's key groups, about ``slice_bytes`` each, at least ``tasks`` in all."""
    blocks_per_source = []
    for source in streams.sources:
        handle = source.handle
        starts = sorted((o, kg) for kg, o in zip(handle.key_group_range, handle.key_group_offsets) if o)
        blocks_per_source.append([(kg, offset, starts[i + 1][0] if i + 1 < len(starts) else source.delegate.size)
                                  for i, (offset, kg) in enumerate(starts)])
    total = sum(end - offset for blocks in blocks_per_source for _, offset, end in blocks)
    target = max(1, min(slice_bytes, -(-total // max(1, tasks))))
    slices: list[_Slice] = []
    for number, blocks in enumerate(blocks_per_source):
        current: list[tuple[int, int, int]] = []
        size = 0
        for block in blocks:
            current.append(block)
            size += block[2] - block[1]
            if size >= target:
                slices.append(_Slice(len(slices), number, tuple(current)))
                current, size = [], 0
        if current:
            slices.append(_Slice(len(slices), number, tuple(current)))
    return slices


def _streams(path: str, operator_id: str, storage_options: dict[str, Any] | None) -> tuple[FlinkSnapshot,
                                                                                             OperatorStreams]:
    snapshot = load_snapshot(path, storage_options=storage_options)
    op = next(o for o in snapshot.metadata.operators if o.operator_id == operator_id)
    return snapshot, operator_streams(snapshot, op)


def _payload(rows: list[tuple[int, bytes, int, int]]) -> bytes:
    import pyarrow as pa

    table = pa.table({"group": pa.array([r[0] for r in rows], pa.int64()),
                      "data": pa.array([r[1] for r in rows], pa.binary()),
                      "last": pa.array([r[2] for r in rows], pa.int64()),
                      "entries": pa.array([r[3] for r in rows], pa.int64())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _runs(payload: bytes) -> pa.Table:
    import pyarrow as pa

    return pa.ipc.open_stream(payload).read_all()


@dataclass(frozen=True)
class _Job:
    """What every task needs to find its part (shipped to the executors)."""

    path: str
    operator_id: str
    storage_options: dict[str, Any] | None
    max_parallelism: int
    parallelism: int
    memory_budget: int
    directory_url: str
    output_storage_options: dict[str, Any] | None

    def key_groups(self, index: int) -> KeyGroupRange:
        return compute_key_group_range_for_operator_index(self.max_parallelism, self.parallelism, index)


class _MapSlice:
    """Executors: one slice of source key groups -> per target subtask, one payload of runs."""

    def __init__(self, job: _Job) -> None:
        self.job = job

    def __call__(self, item: _Slice) -> Iterator[tuple[int, tuple[int, bytes]]]:
        job = self.job
        snapshot, streams = _streams(job.path, job.operator_id, job.storage_options)
        with tempfile.TemporaryFile() as spill, open_inputs(snapshot, streams) as inputs:
            regrouper = Regrouper(streams.hasher, streams.operator.max_parallelism, job.max_parallelism, spill,
                                  job.memory_budget)
            whole = inputs[item.source]
            regrouper.add_stream(StreamInput(whole.stream, whole.source, tuple((kg, o) for kg, o, _ in item.blocks),
                                             whole.state_ids, whole.timers, tuple(e for _, _, e in item.blocks)))
            for index in range(job.parallelism):
                rows = list(regrouper.runs(job.key_groups(index)))
                if rows:
                    yield index, (item.index, _payload(rows))


class _WriteSubtask:
    """Executors: every payload of one target subtask, in source order -> that subtask's stream."""

    def __init__(self, job: _Job) -> None:
        self.job = job

    def __call__(self, index: int, items: Iterable[tuple[int, tuple[int, bytes]]]) -> Iterator[tuple[Any, ...]]:
        job = self.job
        _, streams = _streams(job.path, job.operator_id, job.storage_options)
        payloads = sorted((slice_id, payload) for subtask, (slice_id, payload) in items if subtask == index)
        key_groups = job.key_groups(index)
        tally = KeyGroupTally(job.max_parallelism)
        with tempfile.TemporaryFile() as spill:
            regrouper = Regrouper(streams.hasher, streams.operator.max_parallelism, job.max_parallelism, spill,
                                  job.memory_budget)
            for _, payload in payloads:
                table = _runs(payload)
                for group, data, last, entries in zip(table.column("group").to_pylist(),
                                                      table.column("data").to_pylist(),
                                                      table.column("last").to_pylist(),
                                                      table.column("entries").to_pylist()):
                    regrouper.add_run(group, data, last, entries)
                regrouper.flush_if_full()
            io, directory = FileIO.for_path(job.directory_url, job.output_storage_options)
            name = str(uuid.uuid4())
            with io.open_output(posixpath.join(directory, name)) as out:
                offsets, size = write_stream(out, streams.header, key_groups, regrouper.groups(key_groups))
            part = range(key_groups.start, key_groups.end + 1)
            tally.entries[key_groups.start:key_groups.end + 1] = [regrouper.tally.entries[kg] for kg in part]
            tally.bytes[key_groups.start:key_groups.end + 1] = [regrouper.tally.bytes[kg] for kg in part]
            spilled = regrouper.spilled_bytes
        yield index, tuple(offsets), name, size, tally.entries[key_groups.start:key_groups.end + 1], \
            tally.bytes[key_groups.start:key_groups.end + 1], spilled


def _identity(subtask: int) -> int:
    return subtask


class _MergeSubtask:
    """Executors (merge path): the source key groups of one target range -> its stream, no shuffle."""

    def __init__(self, job: _Job, slices: list[_Slice]) -> None:
        self.job, self.slices = job, slices

    def __call__(self, index: int) -> Iterator[tuple[Any, ...]]:
        job = self.job
        snapshot, streams = _streams(job.path, job.operator_id, job.storage_options)
        key_groups = job.key_groups(index)
        with tempfile.TemporaryFile() as spill, open_inputs(snapshot, streams) as inputs:
            regrouper = Regrouper(streams.hasher, streams.operator.max_parallelism, job.max_parallelism, spill,
                                  job.memory_budget)
            for item in self.slices:
                blocks = [b for b in item.blocks if key_groups.start <= b[0] % job.max_parallelism <= key_groups.end]
                if blocks:
                    whole = inputs[item.source]
                    regrouper.add_stream(StreamInput(whole.stream, whole.source, tuple((kg, o) for kg, o, _ in blocks),
                                                     whole.state_ids, whole.timers, tuple(e for _, _, e in blocks)))
            io, directory = FileIO.for_path(job.directory_url, job.output_storage_options)
            name = str(uuid.uuid4())
            with io.open_output(posixpath.join(directory, name)) as out:
                offsets, size = write_stream(out, streams.header, key_groups, regrouper.groups(key_groups))
            part = slice(key_groups.start, key_groups.end + 1)
            yield (index, tuple(offsets), name, size, regrouper.tally.entries[part], regrouper.tally.bytes[part],
                   regrouper.spilled_bytes)


class SparkRegroup:
    """The Spark engine of a Flink rescale (see the module docstring).

    Args:
        settings: Spark master and configuration.
        memory_budget: Bytes of runs each task holds before it spills.
        slice_bytes: Source bytes per map task (at most).
        storage_options / output_storage_options: fsspec options the executors open the source and output with.
    """

    def __init__(self, settings: SparkSettings | None = None, *, memory_budget: int = DEFAULT_MEMORY_BUDGET,
                 slice_bytes: int = DEFAULT_SLICE_BYTES, storage_options: dict[str, Any] | None = None,
                 output_storage_options: dict[str, Any] | None = None) -> None:
        self.settings = settings or SparkSettings()
        self.memory_budget, self.slice_bytes = memory_budget, slice_bytes
        self.storage_options, self.output_storage_options = storage_options, output_storage_options

    def __call__(self, snapshot: FlinkSnapshot, target: RescaleTarget, max_parallelism: int, io: FileIO,
                 directory: str) -> RegroupResult:
        from statekit.spark.session import default_parallelism

        streams = target.streams
        assert streams is not None
        session = self.settings.session()
        op = target.op
        job = _Job(snapshot.path, op.operator_id, self.storage_options, max_parallelism, op.parallelism,
                   self.memory_budget, io.url(directory), self.output_storage_options)
        with spark_errors(self.settings.verbose):
            slices = _slices(streams, self.slice_bytes, 2 * default_parallelism(session))
            context = session.sparkContext
            if op.max_parallelism % max_parallelism == 0:  # merge: each target reads its own source key groups
                subtasks = list(range(op.parallelism))
                results = context.parallelize(subtasks, len(subtasks)).flatMap(_MergeSubtask(job, slices)).collect()
            else:
                mapped = context.parallelize(slices, max(1, len(slices))).flatMap(_MapSlice(job))
                results = mapped.partitionBy(op.parallelism, _identity).mapPartitionsWithIndex(
                    _WriteSubtask(job)).collect()
        tally = KeyGroupTally(max_parallelism)
        written = []
        spilled = 0
        for index, offsets, name, size, entries, sizes, spill in sorted(results, key=lambda r: r[0]):
            kgs = job.key_groups(index)
            tally.entries[kgs.start:kgs.end + 1] = entries
            tally.bytes[kgs.start:kgs.end + 1] = sizes
            written.append(WrittenStream(index, kgs, offsets, name, size))
            spilled += spill
        return RegroupResult(written, tally, sum(s.bytes for s in slices), spilled)
