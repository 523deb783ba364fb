"""``rescale FLINK_SAVEPOINT --max-parallelism M2 --engine spark``: regroup big savepoints on Spark.

The rescale itself (checks, the ``_metadata`` edits, carried files, publishing) is
:func:`statekit.flink.rewrite.rescale_flink_savepoint`; this module is its Spark
:class:`~statekit.flink.rewrite.OperatorRegroup`: per keyed operator

* **merge** path (``M2`` divides ``M``: old key group ``g`` goes whole to ``g % M2``): **one task
  per target key-group range** (a new subtask) reads only the source key groups that land in
  it (ranged reads), merges them with the vectorized local code (nothing hashed) and writes
  the subtask's stream into the staged output directory. One Spark job.
* **split** (``M`` divides ``M2``) and **rehash** paths (every key hashed):
  1. *map* (one Spark job) — each source stream's key groups are cut into contiguous
     *slices* of about equal size (never splitting a key group): as many as the default
     parallelism, more only past ``slice_bytes`` each. One task per slice reads only its key
     groups (ranged reads), regroups them with the vectorized local code
     (:mod:`statekit.flink.fast_regroup`) and writes its *fragment file* into a staging
     directory inside the output (storage every task and the driver share), returning only
     the fragment's index. On the split path every target key group comes from one source
     key group, so from one slice: the fragment holds whole target key groups, framed as
     in a stream (:func:`~statekit.flink.streams_writer.write_stream`, compressed when the
     savepoint is). On the rehash path a target key group gathers entries from several
     slices: the fragment is the regrouper's spill file, runs of entries per (key group,
     state), indexed by (group, offset, length, last entry, entries).
  2. *gather* — per target subtask, its stream: on the split path the header and then the
     fragments' ranges, copied; on the rehash path its runs by group, then slice (the order
     in which the local engine reads entries), read back through one window per fragment
     and framed. Nothing is decoded: on a local master the driver's threads do it (a Spark
     job would add its fixed cost), elsewhere one Spark task per subtask (no byte passes
     through the driver). The staging directory is removed afterwards, also when the
     rescale fails.

No Spark shuffle. Either way the streams are byte for byte the local engine's (compressed
streams too), and the driver records their offsets and writes ``_metadata``.

Memory per task is the budget plus one key group (map), or 64 MiB of read windows (gather). The
output must be storage the executors share with the driver (a local path in local mode, an
object store on a cluster).
"""

from __future__ import annotations

import os
import posixpath
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from typing import IO, Any

from statekit.flink.regroup import DEFAULT_MEMORY_BUDGET, KeyGroupTally, Regrouper
from statekit.flink.rewrite import RegroupResult, RescaleTarget, WrittenStream
from statekit.flink.sources import META_FOLLOWS
from statekit.flink.storage import FlinkSnapshot, load_snapshot
from statekit.flink.streams_writer import OperatorStreams, key_group_blocks, open_input, operator_streams, write_stream
from statekit.spark.session import SparkSettings, spark_errors
from statekit.statefmt.allocator import retain_freed_memory
from statekit.statefmt.errors import CorruptStateError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.keygroups import (
    KeyGroupRange,
    compute_key_group_range_for_operator_index,
    compute_operator_index_for_key_group,
)

__all__ = ["SparkRegroup", "DEFAULT_SLICE_BYTES", "FRAGMENTS_PREFIX"]

DEFAULT_SLICE_BYTES = 256 << 20
FRAGMENTS_PREFIX = ".statekit-fragments-"
_GATHER_MEMORY = 64 << 20  # a gather's read windows, all fragments together
_MAX_WINDOW = 8 << 20
_MIN_WINDOW = 64 << 10
_COPY_BUFFER = 4 << 20  # the split path's gather copies through one buffer
_STATE_BITS = 16


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
    """Each stream's key groups cut into contiguous slices of about equal size: about the source
    bytes over ``tasks``, and at most about ``slice_bytes`` (a slice ends with the key group
    that reaches its share)."""
    per_source = [key_group_blocks(source) for source in streams.sources]
    total = sum(end - offset for blocks in per_source for _, offset, end in blocks)
    even = max(1, total / max(1, tasks))
    slices: list[_Slice] = []
    for number, blocks in enumerate(per_source):
        size = sum(end - offset for _, offset, end in blocks)
        parts = max(1, round(size / even), -(-size // max(1, slice_bytes)))
        current: list[tuple[int, int, int]] = []
        done, part = 0, 1
        for block in blocks:
            current.append(block)
            done += block[2] - block[1]
            if part < parts and done * parts >= size * part:
                slices.append(_Slice(len(slices), number, tuple(current)))
                current, part = [], part + 1
        if current:
            slices.append(_Slice(len(slices), number, tuple(current)))
    return slices


def _streams(path: str, operator_id: str, storage_options: dict[str, Any] | None) -> tuple[FlinkSnapshot,
                                                                                             OperatorStreams]:
    snapshot = load_snapshot(path, storage_options=storage_options)
    op = next(o for o in snapshot.metadata.operators if o.operator_id == operator_id)
    return snapshot, operator_streams(snapshot, op)


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
    fragments_url: str
    header: bytes
    compressed: bool

    def key_groups(self, index: int) -> KeyGroupRange:
        return compute_key_group_range_for_operator_index(self.max_parallelism, self.parallelism, index)

    def fragment(self, slice_index: int) -> tuple[FileIO, str]:
        io, directory = FileIO.for_path(self.fragments_url, self.output_storage_options)
        return io, posixpath.join(directory, f"{slice_index:06d}")

    def write(self, index: int,
              groups: Iterator[tuple[int, int, Iterator[bytes | memoryview]]]) -> tuple[tuple[int, ...], str, int]:
        """Subtask ``index``'s stream (header, then ``groups``) in the output: offsets, file name, size."""
        io, directory = FileIO.for_path(self.directory_url, self.output_storage_options)
        name = str(uuid.uuid4())
        with io.open_output(posixpath.join(directory, name)) as out:
            offsets, size = write_stream(out, self.header, self.key_groups(index), groups, compressed=self.compressed)
        return tuple(offsets), name, size


# a run of one slice: (group, slice, offset in the slice's fragment, length, offset of its last entry, entries)
_Piece = tuple[int, int, int, int, int, int]


class _MapSlice:
    """Executors, rehash path: one slice of source key groups, regrouped -> its fragment file (the regrouper's
    spill file: runs of entries, flags clear) and the index of its runs."""

    def __init__(self, job: _Job) -> None:
        self.job = job

    def __call__(self, item: _Slice) -> tuple[list[_Piece], int]:
        retain_freed_memory()  # Python workers run many tasks: NumPy's temporaries are reused
        job = self.job
        snapshot, streams = _streams(job.path, job.operator_id, job.storage_options)
        io, path = job.fragment(item.index)
        with io.open_scratch(path) as fragment, open_input(snapshot, streams, item.source, item.blocks) as entries:
            regrouper = Regrouper(streams.hasher, streams.operator.max_parallelism, job.max_parallelism, fragment,
                                  job.memory_budget)
            regrouper.add_stream(entries)
            spilled = regrouper.spilled_bytes  # past the memory budget; the rest was held until now
            regrouper.flush()
        pieces = [(group, item.index, offset, length, last, count)
                  for group, offset, length, last, count in regrouper.spilled_runs()]
        return pieces, spilled


# split path, a whole target key group of one slice, framed as in a stream:
# (key group, slice, offset in the slice's fragment, length, entries, entry bytes)
_Block = tuple[int, int, int, int, int, int]
_PAD = b"\x00"  # a split fragment's first byte: no key group starts at offset 0 (0 means empty, as in a handle)


class _MapWholeKeyGroups:
    """Executors, split path (``M`` divides ``M2``: every target key group comes from one source
    key group, so from one slice): one slice regrouped -> its fragment of whole target key
    groups, framed by :func:`~statekit.flink.streams_writer.write_stream` (compressed when the
    savepoint is), and their index. The gather then only copies ranges."""

    def __init__(self, job: _Job) -> None:
        self.job = job

    def __call__(self, item: _Slice) -> tuple[list[_Block], int]:
        retain_freed_memory()
        job = self.job
        snapshot, streams = _streams(job.path, job.operator_id, job.storage_options)
        everything = KeyGroupRange(0, job.max_parallelism - 1)
        io, path = job.fragment(item.index)
        with tempfile.TemporaryFile() as spill, open_input(snapshot, streams, item.source, item.blocks) as entries:
            regrouper = Regrouper(streams.hasher, streams.operator.max_parallelism, job.max_parallelism, spill,
                                  job.memory_budget)
            regrouper.add_stream(entries)
            with io.open_scratch(path) as out:
                offsets, size = write_stream(out, _PAD, everything, regrouper.groups(everything),
                                             compressed=job.compressed)
        present = [(kg, offset) for kg, offset in enumerate(offsets) if offset]
        ends = [offset for _, offset in present[1:]] + [size]
        tally = regrouper.tally
        blocks = [(kg, item.index, offset, end - offset, tally.entries[kg], tally.bytes[kg])
                  for (kg, offset), end in zip(present, ends)]
        return blocks, regrouper.spilled_bytes


class _CopySubtask:
    """Split path: one target subtask's whole key groups, ascending -> its stream: the header,
    then the fragments' ranges (neighbours in one fragment copied as one)."""

    def __init__(self, job: _Job) -> None:
        self.job = job

    def __call__(self, work: tuple[int, list[_Block]]) -> tuple[Any, ...]:
        index, blocks = work
        job = self.job
        key_groups = job.key_groups(index)
        offsets = [0] * len(key_groups)
        ranges: list[tuple[int, int, int]] = []  # (slice, offset, length)
        position = len(job.header)
        for key_group, slice_index, offset, length, _, _ in blocks:
            offsets[key_group - key_groups.start] = position
            position += length
            if ranges and ranges[-1][0] == slice_index and sum(ranges[-1][1:]) == offset:
                ranges[-1] = (slice_index, ranges[-1][1], ranges[-1][2] + length)
            else:
                ranges.append((slice_index, offset, length))
        io, directory = FileIO.for_path(job.directory_url, job.output_storage_options)
        name = str(uuid.uuid4())
        buffer = memoryview(bytearray(_COPY_BUFFER))
        with ExitStack() as stack, io.open_output(posixpath.join(directory, name)) as out:
            out.write(job.header)
            opened: dict[int, tuple[IO[bytes], str]] = {}
            for slice_index, offset, length in ranges:
                if slice_index not in opened:
                    fragment_io, path = job.fragment(slice_index)
                    opened[slice_index] = stack.enter_context(fragment_io.open_input(path)), fragment_io.url(path)
                stream, source = opened[slice_index]
                done = _copy_in_kernel(stream, out, offset, length) if io.is_local else 0
                stream.seek(offset + done)
                while done < length:
                    got = stream.readinto(buffer[:min(len(buffer), length - done)])  # type: ignore[attr-defined]
                    if not got:
                        raise CorruptStateError(f"truncated: {length} bytes expected at byte offset {offset}",
                                                path=source)
                    out.write(buffer[:got])
                    done += got
        return index, tuple(offsets), name, position


def _copy_in_kernel(source: IO[bytes], out: IO[bytes], offset: int, length: int) -> int:
    """Copy up to ``length`` bytes at ``offset`` of a local file to the end of another with
    ``copy_file_range`` (no pass through Python, the GIL released); how many were copied (0
    where the system cannot: the caller copies the rest)."""
    copy = getattr(os, "copy_file_range", None)
    if copy is None:
        return 0
    out.flush()
    done = 0
    try:
        while done < length:
            got = copy(source.fileno(), out.fileno(), length - done, offset + done)
            if not got:
                break
            done += got
    except OSError:  # another file system (EXDEV), or not supported here
        pass
    return done


class _Fragment:
    """A slice's fragment file, read through one window: pieces asked for by ascending offset
    (a gather's, within one fragment) cost one read per window, and come as views of it."""

    def __init__(self, stream: IO[bytes], name: str, window: int) -> None:
        self.stream, self.name, self.window = stream, name, window
        self.base, self.data = 0, b""

    def read(self, offset: int, length: int, flag: int) -> Iterator[bytes | memoryview]:
        """The ``length`` bytes at ``offset``; the meta-data-follows flag set in the byte at ``flag``
        (relative; -1: none)."""
        done = 0
        while done < length:
            at = offset + done
            if not self.base <= at < self.base + len(self.data):
                self.stream.seek(at)
                self.base, self.data = at, self.stream.read(self.window)
                if not self.data:
                    raise CorruptStateError(f"truncated: {length} bytes expected at byte offset {offset}",
                                            path=self.name)
            start = at - self.base
            view = memoryview(self.data)[start:start + length - done]
            if done <= flag < done + len(view):
                at_flag = flag - done
                yield view[:at_flag]
                yield bytes([view[at_flag] | META_FOLLOWS])
                yield view[at_flag + 1:]
            else:
                yield view
            done += len(view)


class _WriteSubtask:
    """Rehash path: one target subtask's pieces, by group then slice (source order) -> its stream."""

    def __init__(self, job: _Job) -> None:
        self.job = job

    def __call__(self, work: tuple[int, list[_Piece]]) -> tuple[Any, ...]:
        index, pieces = work
        slices = sorted({piece[1] for piece in pieces})
        window = max(_MIN_WINDOW, min(_MAX_WINDOW, _GATHER_MEMORY // max(1, len(slices))))
        with ExitStack() as stack:
            fragments: dict[int, _Fragment] = {}
            for slice_index in slices:
                io, path = self.job.fragment(slice_index)
                fragments[slice_index] = _Fragment(stack.enter_context(io.open_input(path)), io.url(path), window)

            def chunks(group: list[_Piece]) -> Iterator[bytes | memoryview]:
                for number, (_, slice_index, offset, length, last, _) in enumerate(group):
                    flag = last + 4 if number == len(group) - 1 else -1  # the group's last entry
                    yield from fragments[slice_index].read(offset, length, flag)

            def groups() -> Iterator[tuple[int, int, Iterator[bytes | memoryview]]]:
                start = 0
                while start < len(pieces):
                    group = pieces[start][0]
                    end = start
                    while end < len(pieces) and pieces[end][0] == group:
                        end += 1
                    yield group >> _STATE_BITS, group & ((1 << _STATE_BITS) - 1), chunks(pieces[start:end])
                    start = end

            offsets, name, size = self.job.write(index, groups())
        return index, offsets, name, size


class _MergeSubtask:
    """Executors (merge path): the source key groups of one target range -> its stream, no shuffle."""

    def __init__(self, job: _Job, slices: list[_Slice]) -> None:
        self.job, self.slices = job, slices

    def __call__(self, index: int) -> tuple[Any, ...]:
        retain_freed_memory()
        job = self.job
        snapshot, streams = _streams(job.path, job.operator_id, job.storage_options)
        key_groups = job.key_groups(index)
        with tempfile.TemporaryFile() as spill:
            regrouper = Regrouper(streams.hasher, streams.operator.max_parallelism, job.max_parallelism, spill,
                                  job.memory_budget)
            for item in self.slices:
                blocks = [b for b in item.blocks if key_groups.start <= b[0] % job.max_parallelism <= key_groups.end]
                if blocks:
                    with open_input(snapshot, streams, item.source, blocks) as entries:
                        regrouper.add_stream(entries)
            offsets, name, size = job.write(index, regrouper.groups(key_groups))
            part = slice(key_groups.start, key_groups.end + 1)
            return (index, offsets, name, size, regrouper.tally.entries[part], regrouper.tally.bytes[part],
                    regrouper.spilled_bytes)


class SparkRegroup:
    """The Spark engine of a Flink rescale (see the module docstring).

    Args:
        settings: Spark master and configuration.
        memory_budget: Bytes of runs each task holds before it spills.
        slice_bytes: Source bytes per map task (at most, unless one key group is larger).
        storage_options / output_storage_options: fsspec options the executors open the source and output with.
        gather_in_driver: Write the split and rehash paths' streams in the driver's threads
            (default: on a local master only; see :meth:`_write`).
    """

    def __init__(self, settings: SparkSettings | None = None, *, memory_budget: int = DEFAULT_MEMORY_BUDGET,
                 slice_bytes: int = DEFAULT_SLICE_BYTES, storage_options: dict[str, Any] | None = None,
                 output_storage_options: dict[str, Any] | None = None, gather_in_driver: bool | None = None) -> None:
        self.settings = settings or SparkSettings()
        self.gather_in_driver = gather_in_driver
        self.memory_budget, self.slice_bytes = memory_budget, slice_bytes
        self.storage_options, self.output_storage_options = storage_options, output_storage_options

    def __call__(self, snapshot: FlinkSnapshot, target: RescaleTarget, max_parallelism: int, io: FileIO,
                 directory: str) -> RegroupResult:
        from statekit.spark.session import default_parallelism

        streams = target.streams
        assert streams is not None
        session = self.settings.session()
        op = target.op
        fragments = posixpath.join(directory, FRAGMENTS_PREFIX + uuid.uuid4().hex)
        job = _Job(snapshot.path, op.operator_id, self.storage_options, max_parallelism, op.parallelism,
                   self.memory_budget, io.url(directory), self.output_storage_options, io.url(fragments),
                   streams.header, streams.meta.compressed)
        tally = KeyGroupTally(max_parallelism)
        spilled = 0
        with spark_errors(self.settings.verbose):
            slices = _slices(streams, self.slice_bytes, default_parallelism(session))
            context = session.sparkContext
            if op.max_parallelism % max_parallelism == 0:  # merge: each target reads its own source key groups
                subtasks = list(range(op.parallelism))
                results = context.parallelize(subtasks, len(subtasks)).map(_MergeSubtask(job, slices)).collect()
                for index, _, _, _, entries, sizes, spill in results:
                    kgs = job.key_groups(index)
                    tally.entries[kgs.start:kgs.end + 1] = entries
                    tally.bytes[kgs.start:kgs.end + 1] = sizes
                    spilled += spill
            else:
                split = max_parallelism % op.max_parallelism == 0
                try:
                    if split:
                        blocks = context.parallelize(slices, max(1, len(slices))).map(_MapWholeKeyGroups(job)).collect()
                        spilled = sum(spill for _, spill in blocks)
                        results = self._write(context, _CopySubtask(job),
                                              self._plan_blocks(job, [part for part, _ in blocks], tally))
                    else:
                        mapped = context.parallelize(slices, max(1, len(slices))).map(_MapSlice(job)).collect()
                        spilled = sum(spill for _, spill in mapped)
                        results = self._write(context, _WriteSubtask(job),
                                              self._plan(job, [pieces for pieces, _ in mapped], tally))
                finally:
                    if io.exists(fragments):
                        io.rm(fragments, recursive=True)
        written = [WrittenStream(index, job.key_groups(index), offsets, name, size)
                   for index, offsets, name, size, *_ in sorted(results, key=lambda r: int(r[0]))]
        return RegroupResult(written, tally, sum(s.bytes for s in slices), spilled)

    def _write(self, context: Any, writer: Callable[[Any], tuple[Any, ...]],
               work: Sequence[tuple[int, Sequence[Any]]]) -> list[tuple[Any, ...]]:
        """The gather: per target subtask, its stream from the fragments. Pure file I/O (nothing is
        decoded), so on a local master the driver's threads do it (the executors are this machine;
        a Spark job would add its fixed cost, about 0.1 s); elsewhere one Spark task per subtask,
        so no byte passes through the driver."""
        from statekit.spark.shipping import is_local_master

        in_driver = self.gather_in_driver if self.gather_in_driver is not None else is_local_master(context.master)
        if not in_driver:
            results: list[tuple[Any, ...]] = context.parallelize(work, len(work)).map(writer).collect()
            return results
        with ThreadPoolExecutor(max(1, min(len(work), int(context.defaultParallelism)))) as pool:
            return list(pool.map(writer, work))

    @staticmethod
    def _plan_blocks(job: _Job, mapped: list[list[_Block]], tally: KeyGroupTally) -> list[tuple[int, list[_Block]]]:
        """Per target subtask its whole key groups, ascending; counts each into ``tally``."""
        work: list[tuple[int, list[_Block]]] = [(index, []) for index in range(job.parallelism)]
        blocks = sorted(block for part in mapped for block in part)
        assert len({block[0] for block in blocks}) == len(blocks), "a target key group from two slices"
        for block in blocks:
            key_group = block[0]
            tally.entries[key_group] += block[4]
            tally.bytes[key_group] += block[5]
            work[compute_operator_index_for_key_group(job.max_parallelism, job.parallelism, key_group)][1].append(block)
        return work

    @staticmethod
    def _plan(job: _Job, mapped: list[list[_Piece]], tally: KeyGroupTally) -> list[tuple[int, list[_Piece]]]:
        """Per target subtask its pieces, by group then slice (the order the local engine reads
        entries in); counts every piece into ``tally``."""
        pieces = sorted((piece for part in mapped for piece in part), key=lambda p: (p[0], p[1]))
        work: list[tuple[int, list[_Piece]]] = [(index, []) for index in range(job.parallelism)]
        for piece in pieces:
            key_group = piece[0] >> _STATE_BITS
            tally.entries[key_group] += piece[5]
            tally.bytes[key_group] += piece[3]
            work[compute_operator_index_for_key_group(job.max_parallelism, job.parallelism, key_group)][1].append(piece)
        return work
