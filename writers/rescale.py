"""Offline rescale of a savepoint: a new parallelism, and a new max parallelism.

Three actions per operator:

* ``copy`` — parallelism and max parallelism unchanged: every file is copied byte for byte
  (size and whole-file CRC verified while copying).
* ``rescale`` — a new parallelism, same max parallelism: each new subtask's keyed file is
  the header of the old files, **runs of whole key-group blocks** copied by byte range from
  the one or two old files that overlap its key-group range (by the kernel between local
  files: :func:`statekit.writers.state_writer.write_block_runs`), a new index and footer; no
  entry is decoded. Every block's CRC is checked against the source and carried into the
  new index; the new whole-file CRC is combined from the block CRCs. Old files with
  different headers (format version, compression, value type) are re-encoded block by
  block into one. Operator state is redistributed by mode
  (:mod:`statekit.writers.operator_state_redistribution`).
* ``regroup`` — a new max parallelism: every entry's key group is recomputed from its stored
  ``key_hash`` (``key_hash % M2``, vectorized), written in the current format
  (:func:`statekit.statefmt.encoding.current_write_format`). When ``M2`` is a multiple of the
  old max parallelism and the old files are in the current format, each old block is cut
  into its new key groups by sweeps over the old blocks, nothing spilled
  (:mod:`statekit.writers.key_group_split`), unless that would read the old blocks more than
  :data:`~statekit.writers.key_group_split.MAX_READS_PER_PARENT` times; otherwise entries
  are regrouped and re-sorted with bounded memory
  (:class:`statekit.writers.key_group_sorter.KeyGroupSorter`). Both give the same bytes.

In-flight records of an unaligned checkpoint go along with their operators
(:mod:`statekit.writers.in_flight`): a copied operator's channel-state files are copied, a
rescaled one's sections are written into its new subtasks' files, unchanged, and the restore
routes them by key group; an exchange whose records cannot follow the change (forward or
broadcast at a new parallelism, keyed at a new max parallelism) is refused.

Guarantees: the source is only read; the output directory appears whole (``_metadata``
last) or not at all, so a damaged source (bad block CRC, truncated file, wrong size) fails
the whole rescale with nothing at the output. The output is a canonical savepoint.
"""

from __future__ import annotations

import posixpath
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import IO, TYPE_CHECKING, Any, ClassVar

from statekit.readers.progress import Advance, ProgressFactory, no_progress
from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt import layout
from statekit.statefmt.encoding import BlockCodec, current_write_format, is_serialized, keyed_schema
from statekit.statefmt.entries import StateCodec
from statekit.statefmt.errors import BadInputError, CorruptStateError, StateNotFoundError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.json_contract import JsonShape
from statekit.statefmt.keygroups import (
    KeyGroupRange,
    check_parallelism,
    compute_key_group_range_for_operator_index,
    subtask_skew,
)
from statekit.statefmt.metadata import OperatorMetadata, StateDescriptor, StateFile, SubtaskState
from statekit.statefmt.statefile import IndexEntry, StateFileReader, StateFileWriter
from statekit.writers.in_flight import InFlightRecords, ParallelismChange
from statekit.writers.key_group_sorter import (
    DEFAULT_MEMORY_BUDGET,
    DuplicateMode,
    KeyGroupSorter,
    in_block_order,
    sort_key_group_table,
)
from statekit.writers.key_group_split import (
    MAX_READS_PER_PARENT,
    MAX_SPLIT_OUTPUTS,
    SplitStep,
    children,
    split_reads,
    split_schedule,
)
from statekit.writers.metadata_builder import SnapshotMetadataBuilder, subtask_states
from statekit.writers.operator_copy import copy_operator
from statekit.writers.operator_state_redistribution import planned_operator_elements, redistribute_operator_state
from statekit.writers.staging import check_output_dir, staged_output_dir
from statekit.writers.state_writer import BlockRun, commit_metadata, start_writeback, write_block_runs, write_keyed_file

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "RescaleTarget", "StateRegroup", "needed_key_groups", "regroup_subtask_files",
    "SubtaskPlan",
    "OperatorStatePlan",
    "OperatorPlan",
    "RescaleReport",
    "rescale_savepoint",
    "plan_rescale",
    "keyed_file_size",
]

COPY, RESCALE, REGROUP = "copy", "rescale", "regroup"
_WRITERS = 2
_SPLIT_AHEAD = 4  # old blocks cut ahead, and new blocks cut and not yet written, at most
_CUTTERS = 2  # threads reading, checking and cutting old blocks for a split
_WRITEBACK_BYTES = 8 << 20  # a split's new file starts its writeback every this many bytes


def keyed_file_size(block_bytes: int, blocks: int, header_size: int = layout.STATE_FILE_HEADER.size) -> int:
    """Exact size of a state file with a header of ``header_size`` bytes holding ``blocks``
    blocks of ``block_bytes`` bytes in total."""
    entry_size: int = layout.INDEX_ENTRY.size
    return header_size + layout.STATE_FILE_FOOTER.size + block_bytes + blocks * entry_size


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class SubtaskPlan:
    """Keyed state of one new subtask: its key-group range and what lands in it."""

    index: int
    key_group_range: KeyGroupRange
    key_groups: int
    bytes: int
    entries: int


@dataclass(frozen=True)
class OperatorStatePlan:
    """One operator (non-keyed) state: its mode and the elements per new subtask."""

    name: str
    kind: str
    elements: tuple[int, ...]


@dataclass(frozen=True)
class OperatorPlan:
    """What rescale does (or did) to one operator.

    ``subtasks`` sums the keyed state files of each new subtask (bytes are file sizes,
    entries come from the block indexes). For ``regroup`` a plan's bytes are an estimate
    (``bytes_estimated``); its entries are exact.
    """

    json_shape: ClassVar[JsonShape] = JsonShape(extra=("bytes", "entries", "skew"), digits={"skew": 4})

    uid: str
    action: str
    old_parallelism: int
    parallelism: int
    old_max_parallelism: int
    max_parallelism: int
    keyed_states: tuple[str, ...]
    subtasks: tuple[SubtaskPlan, ...]
    operator_states: tuple[OperatorStatePlan, ...] = ()
    bytes_estimated: bool = False

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.subtasks)

    @property
    def entries(self) -> int:
        return sum(s.entries for s in self.subtasks)

    @property
    def skew(self) -> float:
        """Largest subtask's keyed bytes over the mean (1.0 = perfectly even)."""
        return subtask_skew([s.bytes for s in self.subtasks])


@dataclass
class RescaleReport:
    """The plan (``dry_run``) or the outcome of a rescale."""

    json_shape: ClassVar[JsonShape] = JsonShape(digits={"elapsed_s": 3})

    source: str
    output: str | None
    dry_run: bool
    operators: list[OperatorPlan] = field(default_factory=list)
    bytes_read: int = 0
    bytes_written: int = 0
    elapsed_s: float = 0.0
    engine: str = "local"


# ---------------------------------------------------------------- targets


@dataclass(frozen=True)
class RescaleTarget:
    op: OperatorMetadata
    parallelism: int
    max_parallelism: int

    @property
    def action(self) -> str:
        if self.parallelism == self.op.parallelism and self.max_parallelism == self.op.max_parallelism:
            return COPY
        if self.max_parallelism != self.op.max_parallelism and self.op.keyed:
            return REGROUP
        return RESCALE

    def keyed_states(self) -> list[StateDescriptor]:
        return [d for d in self.op.states if d.keyed]

    def operator_states(self) -> list[StateDescriptor]:
        return [d for d in self.op.states if not d.keyed]

    def new_range(self, index: int) -> KeyGroupRange:
        return compute_key_group_range_for_operator_index(self.max_parallelism, self.parallelism, index)


def _targets(
    reader: SavepointReader,
    parallelism: int | None,
    operator_parallelism: Mapping[str, int],
    max_parallelism: int | None,
) -> list[RescaleTarget]:
    source = reader.path
    if parallelism is None and not operator_parallelism and max_parallelism is None:
        raise BadInputError("nothing to do: give -p N, --operator UID=N or --max-parallelism M", path=source)
    uids = [op.uid for op in reader.operators]
    for uid, p in operator_parallelism.items():
        if uid not in uids:
            raise StateNotFoundError(
                f"--operator {uid}={p}: no operator with uid {uid!r} (operators: {', '.join(uids) or 'none'})",
                path=source,
            )
    targets = []
    for op in reader.operators:
        named = op.uid in operator_parallelism
        p = operator_parallelism[op.uid] if named else (
            parallelism if parallelism is not None and op.keyed else op.parallelism
        )
        m = max_parallelism if max_parallelism is not None and (op.keyed or named) else op.max_parallelism
        try:
            check_parallelism(p, m)
        except BadInputError as exc:
            hint = " (raise it with --max-parallelism)" if p > m and max_parallelism is None else ""
            raise BadInputError(f"operator {op.uid!r}: {exc}{hint}", path=source) from None
        targets.append(RescaleTarget(op, p, m))
    return targets


# ---------------------------------------------------------------- plan


@dataclass(frozen=True)
class _OldFile:
    """One old file of a keyed state: its subtask, range, metadata, block index and codec."""

    subtask: int
    key_group_range: KeyGroupRange
    file: StateFile
    index: tuple[IndexEntry, ...]
    codec: BlockCodec


@dataclass
class _KeyedIndex:
    """The block index of every old file of one keyed state."""

    state: str
    files: list[_OldFile]

    @property
    def codecs(self) -> list[BlockCodec]:
        return [f.codec for f in self.files if f.index]

    def header_size(self) -> int:
        """Header bytes of a new file of this state: the old files' header when they share
        one, else the current format's (an estimate for planning)."""
        codecs = {c.header for c in self.codecs}
        if len(codecs) == 1:
            return len(next(iter(codecs)))
        return len(BlockCodec.for_writing(layout.FILE_KIND_KEYED, None, current_write_format()).header)


def _read_indexes(reader: SavepointReader, op: OperatorMetadata, state: str) -> _KeyedIndex:
    files = []
    for st in op.subtasks:
        file = st.file_of(state)
        if file is None:
            continue
        with reader.open_subtask_file(op, st, file) as source:
            files.append(_OldFile(st.index, st.key_group_range, file, source.index, source.codec))
    return _KeyedIndex(state, files)


def _plan_blocks(target: RescaleTarget, indexes: list[_KeyedIndex], action: str) -> OperatorPlan:
    subtasks = []
    for i in range(target.parallelism):
        kg_range = target.new_range(i)
        groups: set[int] = set()
        size = entries = 0
        for index in indexes:
            if action == COPY:
                old = next((f for f in index.files if f.subtask == i), None)
                if old is None:
                    continue  # copied as is: no file stays no file
                size += old.file.size
                entries += old.file.entries
                groups.update(e.key_group for e in old.index)
                continue
            blocks = [e for f in index.files for e in f.index if e.key_group in kg_range]
            groups.update(e.key_group for e in blocks)
            size += keyed_file_size(sum(e.length for e in blocks), len(blocks), index.header_size())
            entries += sum(e.entries for e in blocks)
        subtasks.append(SubtaskPlan(i, kg_range, len(groups), size, entries))
    return _operator_plan(target, action, subtasks)


def _operator_plan(target: RescaleTarget, action: str, subtasks: list[SubtaskPlan], estimated: bool = False) -> OperatorPlan:
    op = target.op
    return OperatorPlan(
        uid=op.uid, action=action, old_parallelism=op.parallelism, parallelism=target.parallelism,
        old_max_parallelism=op.max_parallelism, max_parallelism=target.max_parallelism,
        keyed_states=tuple(d.name for d in target.keyed_states()),
        subtasks=tuple(subtasks),
        operator_states=tuple(
            OperatorStatePlan(d.name, d.kind.value, tuple(
                [_entries(st, d.name) for st in op.subtasks] if action == COPY
                else planned_operator_elements(op, d, target.parallelism)
            ))
            for d in target.operator_states()
        ),
        bytes_estimated=estimated,
    )


def _entries(subtask: SubtaskState, state: str) -> int:
    file = subtask.file_of(state)
    return file.entries if file else 0


def _plan_regroup(reader: SavepointReader, target: RescaleTarget, on_progress: Advance | None) -> OperatorPlan:
    """Exact entries per new subtask from every block's key_hash column; bytes estimated
    from the stored bytes per entry of the old blocks (their fixed per-block cost taken
    out), their mean per-block cost, and the per-file cost of the current format."""
    import pyarrow as pa
    import pyarrow.compute as pc

    m2, p2 = target.max_parallelism, target.parallelism
    entries = [0] * p2
    weight = [0.0] * p2
    state_groups: list[list[set[int]]] = []
    block_costs: list[tuple[int, float]] = []  # (blocks, mean cost of a block) per state
    file_overhead = 0
    for descriptor in target.keyed_states():
        groups: list[set[int]] = [set() for _ in range(p2)]
        file_overhead += _new_codec(_read_indexes(reader, target.op, descriptor.name)).header_size \
            + layout.STATE_FILE_FOOTER.size
        costs = []
        for _, batch, length, codec in _read_blocks(reader, target.op, descriptor.name, on_progress):
            new_groups = pc.remainder(batch.column("key_hash"), pa.scalar(m2, pa.uint32()))
            owners = pc.divide(pc.multiply(new_groups.cast(pa.int64()), p2), m2)
            fixed, data = codec.overhead(batch)
            costs.append(fixed + _PADDING_ESTIMATE)
            per_row = min(data, max(0, length - fixed)) / batch.num_rows  # compressed blocks: their stored size
            for item in pc.value_counts(owners).to_pylist():
                entries[item["values"]] += item["counts"]
                weight[item["values"]] += per_row * item["counts"]
            for g in pc.unique(new_groups).to_pylist():
                groups[g * p2 // m2].add(g)
        state_groups.append(groups)
        block_costs.append((len(costs), sum(costs) / len(costs) if costs else 0.0))
    subtasks = []
    for i in range(p2):
        blocks = sum(len(groups[i]) * (layout.INDEX_ENTRY.size + cost)
                     for groups, (_, cost) in zip(state_groups, block_costs))
        groups_union = set().union(*(groups[i] for groups in state_groups)) if state_groups else set()
        size = file_overhead + round(weight[i] + blocks)
        subtasks.append(SubtaskPlan(i, target.new_range(i), len(groups_union), size, entries[i]))
    return _operator_plan(target, REGROUP, subtasks, estimated=True)


def _new_codec(index: _KeyedIndex) -> BlockCodec:
    """The codec of the files a max-parallelism change writes for a state (current format)."""
    import pyarrow as pa

    fmt = current_write_format()
    types = {c.schema.field("value").type for c in index.codecs}
    only = next(iter(types)) if len(types) == 1 and fmt.version >= 2 else pa.binary()
    return BlockCodec.for_writing(layout.FILE_KIND_KEYED, keyed_schema(None if is_serialized(only) else only), fmt)


_PADDING_ESTIMATE = 16  # bytes of buffer alignment padding in a typical block (2-4 buffers)


def _read_blocks(
    reader: SavepointReader, op: OperatorMetadata, state: str, on_progress: Advance | None
) -> Iterator[tuple[int, pa.RecordBatch, int, BlockCodec]]:
    """(old key group, verified decoded block, block length, its file's codec) of every old
    file, in order."""
    for st in op.subtasks:
        file = st.file_of(state)
        if file is None:
            continue
        with reader.open_subtask_file(op, st, file) as source:
            for entry in source.index:
                batch = source.read_block(entry.key_group)
                assert batch is not None
                if on_progress:
                    on_progress(file.path, entry.length)
                yield entry.key_group, batch, entry.length, source.codec


def plan_rescale(
    reader: SavepointReader,
    *,
    parallelism: int | None = None,
    operator_parallelism: Mapping[str, int] | None = None,
    max_parallelism: int | None = None,
    on_progress: Advance | None = None,
) -> list[OperatorPlan]:
    """The plan of a rescale: per operator and new subtask, key-group range, bytes, entries.

    Reads only block indexes, except for a new max parallelism, whose plan reads every
    block's ``key_hash`` column to count entries exactly.
    """
    plans = []
    for target in _targets(reader, parallelism, operator_parallelism or {}, max_parallelism):
        action = target.action
        if action == REGROUP:
            plans.append(_plan_regroup(reader, target, on_progress))
        else:
            indexes = [_read_indexes(reader, target.op, d.name) for d in target.keyed_states()]
            plans.append(_plan_blocks(target, indexes, action))
    return plans


# ---------------------------------------------------------------- execute


def rescale_savepoint(
    source: str,
    output: str | None,
    *,
    parallelism: int | None = None,
    operator_parallelism: Mapping[str, int] | None = None,
    max_parallelism: int | None = None,
    dry_run: bool = False,
    storage_options: dict[str, Any] | None = None,
    output_storage_options: dict[str, Any] | None = None,
    spill_dir: str | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    progress: ProgressFactory | None = None,
    regroup_state: StateRegroup | None = None,
) -> RescaleReport:
    """Rescale the savepoint (or checkpoint) ``source`` into a new savepoint at ``output``.

    Args:
        source: savepoint/checkpoint directory, its ``_metadata``, or a job checkpoint dir.
        output: a new directory (must not exist or be empty); local path or fsspec URL.
            Optional with ``dry_run`` (checked when given).
        parallelism: new parallelism of every keyed operator.
        operator_parallelism: ``{uid: parallelism}`` for single operators (overrides ``parallelism``).
        max_parallelism: new max parallelism (key-group count) of every keyed operator.
        dry_run: only plan; read indexes (or key hashes), write nothing.
        storage_options / output_storage_options: fsspec options of source / output.
        spill_dir: where a max-parallelism change spills sorted runs (default: system temp).
        memory_budget: bytes of entries a max-parallelism change holds in memory at once.
        progress: opens a progress bar (``Output.progress``); advanced in bytes of work.
        regroup_state: writes one keyed state's new files for a new max parallelism (the
            engine's seam; ``statekit.spark.rescale`` runs it on Spark); default: this process.

    Raises:
        BadInputError: bad parallelism, unknown uid, nothing to do, output not empty.
        NotACheckpointError / IncompleteCheckpointError: the source is not a complete snapshot.
        CorruptStateError: a source file fails its size or a checksum (nothing is written).
    """
    started = time.monotonic()
    progress = progress or no_progress
    # a native snapshot is rescaled from its canonical view: the output is canonical
    opened = SavepointReader.read(source, storage_options=storage_options)
    inputs = [source, opened.path]
    reader = opened.canonical()
    targets = _targets(reader, parallelism, operator_parallelism or {}, max_parallelism)
    in_flight = InFlightRecords.read(reader)
    in_flight.check_rescale({t.op.uid: ParallelismChange((t.op.parallelism, t.parallelism),
                                                         (t.op.max_parallelism, t.max_parallelism))
                             for t in targets})
    report = RescaleReport(source=reader.path, output=None, dry_run=dry_run)
    if output is not None:
        out_io, out_path = FileIO.for_path(output, output_storage_options)
        check_output_dir(out_io, out_path, inputs, storage_options)
        report.output = out_io.url(out_path)
    elif not dry_run:
        raise BadInputError("give the output directory (-o OUT)", path=reader.path)
    if dry_run:
        regroup_bytes = sum(_keyed_bytes(t.op) for t in targets if t.action == REGROUP)
        with progress("planning", total=regroup_bytes) as advance:
            report.operators = plan_rescale(
                reader, parallelism=parallelism, operator_parallelism=operator_parallelism,
                max_parallelism=max_parallelism, on_progress=advance,
            )
        report.elapsed_s = time.monotonic() - started
        return report
    assert output is not None
    work = sum(t.op.total_bytes + (_keyed_bytes(t.op) if t.action == REGROUP else 0) for t in targets)
    with progress("rescaling", total=work) as advance, \
            staged_output_dir(output, output_storage_options, inputs=inputs,
                              input_storage_options=storage_options) as (io, directory):
        job = _Job(reader, report, spill_dir, memory_budget, advance, in_flight, regroup_state)
        operators = tuple(job.operator(io, directory, target) for target in targets)
        header = SnapshotMetadataBuilder.continuing(reader.metadata, {"statekit.rescaled-from": reader.path})
        commit_metadata(io, directory, header.build(operators))
    report.elapsed_s = time.monotonic() - started
    return report


def _keyed_bytes(op: OperatorMetadata) -> int:
    keyed = {d.name for d in op.states if d.keyed}
    return sum(f.size for st in op.subtasks for f in st.files if f.state in keyed)


class _Job:
    """Executes the targets of one rescale into a staged output directory."""

    def __init__(self, reader: SavepointReader, report: RescaleReport, spill_dir: str | None,
                 memory_budget: int, on_progress: Advance | None, in_flight: InFlightRecords,
                 regroup_state: StateRegroup | None = None) -> None:
        self.regroup_state = regroup_state
        self.reader = reader
        self.in_flight = in_flight
        self.report = report
        self.spill_dir = spill_dir
        self.memory_budget = memory_budget
        self.on_progress = on_progress
        self._owed = 0.0
        self._done = 0
        self._lock = threading.Lock()

    def _advance(self, name: str, amount: int) -> None:
        with self._lock:
            self._done += amount
            if self.on_progress:
                self.on_progress(name, amount)

    def _tick(self, name: str, amount: float) -> None:
        """Progress of work that reads nothing (sorting and writing regrouped entries)."""
        with self._lock:
            self._owed += amount
            whole = int(self._owed)
            self._done += whole
            if whole and self.on_progress:
                self.on_progress(name, whole)
            self._owed -= whole

    def operator(self, io: FileIO, directory: str, target: RescaleTarget) -> OperatorMetadata:
        op, action = target.op, target.action
        self.report.bytes_read += op.total_bytes  # every file of the operator is read whole
        p2 = target.parallelism
        files: list[list[StateFile]] = [[] for _ in range(p2)]
        written: dict[str, list[tuple[StateFile, set[int]]]] = {}
        if action == COPY:
            return self._copy(io, directory, target)
        for descriptor in op.states:
            source_bytes = sum(f.size for st in op.subtasks for f in st.files if f.state == descriptor.name)
            work = source_bytes * (2 if descriptor.keyed and action == REGROUP else 1)
            done_before = self._done
            if not descriptor.keyed:
                new_files = redistribute_operator_state(self.reader, op, descriptor, p2, io, directory)
            elif action == RESCALE:
                written[descriptor.name] = self._rescale_state(io, directory, target, descriptor.name)
                new_files = [f for f, _ in written[descriptor.name]]
            elif self.regroup_state is not None:
                written[descriptor.name] = self.regroup_state(self.reader, target, descriptor.name, io, directory)
                new_files = [f for f, _ in written[descriptor.name]]
            else:
                written[descriptor.name] = self._regroup_state(io, directory, target, descriptor.name)
                new_files = [f for f, _ in written[descriptor.name]]
            for i, f in enumerate(new_files):
                files[i].append(f)
            # headers, indexes and footers are read too: settle the state's work in full
            self._advance(descriptor.name, max(0, work - (self._done - done_before)))
        self.report.bytes_written += sum(f.size for fs in files for f in fs)
        self.report.operators.append(self._outcome(target, action, written))
        subtasks = subtask_states(target.max_parallelism, p2, files)
        rescaled = replace(op, parallelism=p2, max_parallelism=target.max_parallelism, subtasks=subtasks)
        return self.in_flight.attach(io, directory, rescaled)  # sections keep their channels: the restore routes

    def _outcome(self, target: RescaleTarget, action: str, written: dict[str, list[tuple[StateFile, set[int]]]]) -> OperatorPlan:
        subtasks = []
        for i in range(target.parallelism):
            per_state = [w[i] for w in written.values()]
            groups = set().union(*(g for _, g in per_state)) if per_state else set()
            subtasks.append(SubtaskPlan(i, target.new_range(i), len(groups),
                                        sum(f.size for f, _ in per_state), sum(f.entries for f, _ in per_state)))
        return _operator_plan(target, action, subtasks)

    def _copy(self, io: FileIO, directory: str, target: RescaleTarget) -> OperatorMetadata:
        op = target.op
        written: dict[str, list[tuple[StateFile, set[int]]]] = {}
        for descriptor in target.keyed_states():
            index = _read_indexes(self.reader, op, descriptor.name)
            by_subtask = {f.subtask: (f.file, {e.key_group for e in f.index}) for f in index.files}
            empty = StateFile(descriptor.name, "", 0, "", 0)
            written[descriptor.name] = [by_subtask.get(i, (empty, set())) for i in range(op.parallelism)]
        copied = copy_operator(self.reader, op, io, directory, on_bytes=self._advance)
        self.report.bytes_written += copied.total_bytes
        self.report.operators.append(self._outcome(target, COPY, written))
        return copied

    def _rescale_state(self, io: FileIO, directory: str, target: RescaleTarget, state: str) -> list[tuple[StateFile, set[int]]]:
        index = _read_indexes(self.reader, target.op, state)
        shared = {c.header: c for c in index.codecs}
        copying = len(shared) <= 1
        codec = next(iter(shared.values())) if copying and shared else None

        def write(i: int) -> tuple[StateFile, set[int]]:
            relative = layout.state_file_path(target.op.uid, state, i, target.parallelism)
            kg_range = target.new_range(i)
            groups = {e.key_group for f in index.files for e in f.index if e.key_group in kg_range}
            if copying:
                runs = self._runs_in(index, kg_range)
                file_codec = codec or BlockCodec.for_writing(layout.FILE_KIND_KEYED, None, current_write_format())
                return write_block_runs(io, directory, relative, state, file_codec, self.reader.snapshot.io, runs,
                                        on_bytes=self._advance), groups
            return self._write_transcoded(io, directory, relative, target.op, state, index, kg_range), groups

        # Two writers overlap one file's copy and checks with another's fsync (both release the GIL).
        with ThreadPoolExecutor(max_workers=_WRITERS) as pool:
            return list(pool.map(write, range(target.parallelism)))

    def _runs_in(self, index: _KeyedIndex, kg_range: KeyGroupRange) -> list[BlockRun]:
        """The blocks of ``kg_range``: one run per old file that overlaps it, in key-group order
        (an old file's blocks of a contiguous range are contiguous in the file)."""
        snapshot = self.reader.snapshot
        runs = []
        for old in index.files:
            blocks = tuple(e for e in old.index if e.key_group in kg_range)
            if blocks:
                path = snapshot.file_path(old.file.path)
                runs.append(BlockRun(path, snapshot.io.url(path), blocks))
        return runs

    def _write_transcoded(self, io: FileIO, directory: str, relative: str, op: OperatorMetadata, state: str,
                          index: _KeyedIndex, kg_range: KeyGroupRange) -> StateFile:
        """A new file from old files of different headers: every block re-encoded into the
        current format, values in one form (:class:`_ValueConformer`)."""
        forms = _ValueConformer(index, op, state)
        blocks = self._decoded_in(index, kg_range, forms)
        return write_keyed_file(io, directory, relative, state, blocks)

    def _decoded_in(self, index: _KeyedIndex, kg_range: KeyGroupRange,
                    forms: _ValueConformer) -> Iterator[tuple[int, pa.RecordBatch]]:
        version = current_write_format().version
        for old in index.files:
            wanted = [e.key_group for e in old.index if e.key_group in kg_range]
            if not wanted:
                continue
            with self.reader.open_file(old.file) as source:
                for entry, data in source.iter_raw_blocks(wanted):
                    self._advance(old.file.path, entry.length)
                    batch = forms.conform(source.decode(entry.key_group, data))
                    if old.codec.version != version:  # another version's entry order
                        import pyarrow as pa

                        (_, batch), = sort_key_group_table(pa.Table.from_batches([batch]), 1 << 32, version=version)
                    yield entry.key_group, batch

    def _regroup_state(self, io: FileIO, directory: str, target: RescaleTarget, state: str) -> list[tuple[StateFile, set[int]]]:
        op = target.op
        expected = sum(f.size for st in op.subtasks for f in st.files if f.state == state)
        index = _read_indexes(self.reader, op, state)
        forms = _ValueConformer(index, op, state)
        version = current_write_format().version
        # blocks of a source whose max parallelism divides the new one keep their order, in
        # a version whose order sorts by key hash first the same way
        in_order = target.max_parallelism % op.max_parallelism == 0 and \
            all(c.version == version for c in index.codecs)
        # the split keeps every new file open: local files only (an object store's writer
        # buffers a part per file), at most MAX_SPLIT_OUTPUTS of them; version 2 blocks only
        if in_order and version >= 2 and io.is_local and target.parallelism <= MAX_SPLIT_OUTPUTS:
            ranges = [target.new_range(i) for i in range(target.parallelism)]
            steps = split_schedule(op.max_parallelism, target.max_parallelism, ranges)
            if split_reads(steps, op.max_parallelism) <= MAX_READS_PER_PARENT:
                return self._split_state(io, directory, target, index, forms, steps)
        with KeyGroupSorter(target.max_parallelism, target.parallelism, memory_budget=self.memory_budget,
                            expected_bytes=expected, duplicates=DuplicateMode.LAST, spill_dir=self.spill_dir,
                            presorted=in_order, version=version) as sorter:
            for _, batch, _, _ in _read_blocks(self.reader, op, state, self._advance):
                sorter.add(forms.conform(batch))
            per_row = expected / max(1, sorter.rows_in)

            def write(i: int, blocks: Iterator[tuple[int, pa.RecordBatch]]) -> tuple[StateFile, set[int]]:
                groups: set[int] = set()
                relative = layout.state_file_path(op.uid, state, i, target.parallelism)
                recorded = _recording(blocks, groups, lambda rows: self._tick(state, rows * per_row))
                return write_keyed_file(io, directory, relative, state, recorded), groups

            return sorter.drain(write)


    def _split_state(self, io: FileIO, directory: str, target: RescaleTarget, index: _KeyedIndex,
                     forms: _ValueConformer, steps: list[SplitStep]) -> list[tuple[StateFile, set[int]]]:
        """Write the new files of a state whose new max parallelism is a multiple of the old
        one by sweeps over the old blocks (:mod:`statekit.writers.key_group_split`), nothing
        spilled. :data:`_CUTTERS` threads read, check and cut the old blocks, up to
        :data:`_SPLIT_AHEAD` steps ahead, each through a reader of its own; this thread hands
        the new blocks, in schedule order, to a writer thread, which encodes and writes them
        (at most :data:`_SPLIT_AHEAD` waiting) and finishes each new file (index, footer, fsync)
        after its last key group while the sweeps go on. Pyarrow's compute, the reads, the
        CRCs and the writes release the GIL."""
        op = target.op
        state = index.state
        version = current_write_format().version
        owners = {e.key_group: f for f in index.files for e in f.index}
        lengths = {e.key_group: e.length for f in index.files for e in f.index}
        per_row = sum(f.file.size for f in index.files) / max(1, sum(e.entries for f in index.files for e in f.index))
        ranges = [target.new_range(i) for i in range(target.parallelism)]
        groups: list[set[int]] = [set() for _ in ranges]
        written: list[StateFile | None] = [None] * len(ranges)
        by_index = {st.index: st for st in op.subtasks}
        # Each cutting thread reads through one reader of its own at a time: a sweep reads the
        # old files one after another, so a thread reopens a file at most once per sweep.
        open_readers: dict[int, tuple[_OldFile, StateFileReader, ExitStack]] = {}  # by thread
        registry = threading.Lock()

        def source(old: _OldFile) -> StateFileReader:
            thread = threading.get_ident()
            with registry:
                current = open_readers.get(thread)
            if current is not None and current[0] is old:
                return current[1]
            with registry:
                open_readers.pop(thread, None)
            if current is not None:
                current[2].close()
            closing = ExitStack()
            try:
                reader = closing.enter_context(self.reader.open_subtask_file(op, by_index[old.subtask], old.file))
            except BaseException:
                closing.close()
                raise
            with registry:
                open_readers[thread] = (old, reader, closing)
            return reader

        def close_readers() -> None:
            with registry:
                for _, _, closing in open_readers.values():
                    closing.close()
                open_readers.clear()

        with ExitStack() as stack:
            stack.callback(close_readers)  # after both pools have stopped (callbacks run last first)

            def cut(step: SplitStep) -> list[pa.RecordBatch] | None:
                old = owners.get(step.parent)
                if old is None:
                    return None  # an old key group without entries has none to give
                parent = source(old).read_block(step.parent)
                assert parent is not None
                length = lengths.pop(step.parent, None)
                if length is not None:
                    self._advance(old.file.path, length)  # read progress, once per block
                parent = _ordered_parent(forms.conform(parent), op.max_parallelism, step.parent, version,
                                         old.file.path)
                return children(parent, target.max_parallelism, [k for _, k in step.targets])

            outputs: list[tuple[str, StateFileWriter, ExitStack]] = []
            flushed: list[tuple[IO[bytes], int]] = []  # each output, and the bytes handed to the OS
            for i in range(len(ranges)):
                relative = layout.state_file_path(op.uid, state, i, target.parallelism)
                closing = stack.enter_context(ExitStack())  # closed early by finish(i), else on the way out
                out = closing.enter_context(io.open_output(posixpath.join(directory, relative)))
                outputs.append((relative, StateFileWriter(out, layout.FILE_KIND_KEYED, path=relative), closing))
                flushed.append((out, 0))
            pool = ThreadPoolExecutor(max_workers=1)
            stack.callback(pool.shutdown, wait=True, cancel_futures=True)  # before any output closes
            cutters = ThreadPoolExecutor(max_workers=_CUTTERS)
            stack.callback(cutters.shutdown, wait=True, cancel_futures=True)
            pending: deque[Future[None]] = deque()

            def write(i: int, key_group: int, child: pa.RecordBatch) -> None:
                writer = outputs[i][1]
                writer.write_block(key_group, child)
                self._tick(state, child.num_rows * per_row)
                out, done = flushed[i]
                if writer.position - done >= _WRITEBACK_BYTES:  # the disk starts while the sweeps go on
                    out.flush()
                    start_writeback(out.fileno(), done, writer.position - done)
                    flushed[i] = out, writer.position

            def finish(i: int) -> None:
                relative, writer, closing = outputs[i]
                summary = writer.finish()
                closing.close()
                written[i] = StateFile(state, relative, summary.size, summary.checksum, summary.entries)

            def submit(task: Callable[..., None], *args: Any) -> None:
                pending.append(pool.submit(task, *args))
                while pending and (len(pending) > _SPLIT_AHEAD or pending[0].done()):
                    pending.popleft().result()  # a failed write fails the split here

            cuts: deque[Future[list[pa.RecordBatch] | None]] = deque()
            ahead = iter(steps)
            for step in steps:  # cut up to _SPLIT_AHEAD steps ahead; written in schedule order
                while len(cuts) <= _SPLIT_AHEAD:
                    upcoming = next(ahead, None)
                    if upcoming is None:
                        break
                    cuts.append(cutters.submit(cut, upcoming))
                pieces = cuts.popleft().result()
                for (i, key_group), child in zip(step.targets, pieces or ()):
                    if child.num_rows:
                        groups[i].add(key_group)
                        submit(write, i, key_group, child)
                for i, key_group in step.targets:
                    if key_group == ranges[i].end:
                        submit(finish, i)
            while pending:
                pending.popleft().result()
        done = [file for file in written if file is not None]
        assert len(done) == len(written), "every new subtask ends at the last key group of its range"
        return list(zip(done, groups))


def _ordered_parent(batch: pa.RecordBatch, max_parallelism: int, key_group: int, version: int,
                    path: str) -> pa.RecordBatch:
    """An old block in the entry order of ``version``, its entries unique (sorted and resolved as
    the sorter does when they are not); an entry of another key group is corruption."""
    import pyarrow as pa

    if not batch.num_rows or in_block_order(batch, max_parallelism, key_group, version):
        return batch  # an empty block (valid, if pointless) has no entries to cut
    blocks = list(sort_key_group_table(pa.Table.from_batches([batch]), max_parallelism, DuplicateMode.LAST,
                                       presorted=True, version=version))
    foreign = [g for g, _ in blocks if g != key_group]
    if foreign:
        raise CorruptStateError(f"the block holds entries of key group {foreign[0]} (key_hash % {max_parallelism})",
                                path=path, key_group=key_group)
    return blocks[0][1]


class _ValueConformer:
    """Old blocks of one state in one value form: their common typed column type when every
    old file has it (and the current format can hold it), else serialized bytes — typed
    columns are serialized with the state's value serializer (no value is decoded from
    bytes, so pickled state needs no trust)."""

    def __init__(self, index: _KeyedIndex, op: OperatorMetadata, state: str) -> None:
        import pyarrow as pa

        types = {c.schema.field("value").type for c in index.codecs}
        only = next(iter(types)) if len(types) == 1 else pa.binary()
        self.type = only if current_write_format().version >= 2 else pa.binary()
        self._codec = StateCodec(op.state(state), op.key_serializer, for_write=True)

    def conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        import pyarrow as pa

        if batch.schema.field("value").type == self.type:
            return batch
        columns = list(batch.columns)
        columns[batch.schema.get_field_index("value")] = self._codec.serialized_values(batch.column("value"))
        return pa.RecordBatch.from_arrays(columns, schema=keyed_schema(None if is_serialized(self.type) else self.type))


StateRegroup = Callable[[SavepointReader, RescaleTarget, str, FileIO, str], list[tuple[StateFile, set[int]]]]


def needed_key_groups(old_max_parallelism: int, max_parallelism: int, key_groups: KeyGroupRange) -> set[int] | None:
    """The old key groups whose entries can land in the new ``key_groups`` (``None``: any of them).

    With ``h`` a key hash, old ``h % M`` and new ``h % M2``: when ``M2`` divides ``M`` the new
    key group is the old one modulo ``M2``; when ``M`` divides ``M2`` the old one is the new one
    modulo ``M``; otherwise any old key group can hold keys of any new one.
    """
    if old_max_parallelism % max_parallelism == 0:
        return {g for g in range(old_max_parallelism) if key_groups.start <= g % max_parallelism <= key_groups.end}
    if max_parallelism % old_max_parallelism == 0:
        return {t % old_max_parallelism for t in range(key_groups.start, key_groups.end + 1)}
    return None


def regroup_subtask_files(reader: SavepointReader, target: RescaleTarget, state: str, index: int, io: FileIO,
                          directory: str, memory_budget: int = DEFAULT_MEMORY_BUDGET,
                          spill_dir: str | None = None) -> tuple[StateFile, set[int]]:
    """New subtask ``index``'s file of ``state``: the old blocks that can hold its key groups
    (:func:`needed_key_groups`), filtered by ``key_hash % M2``, sorted with bounded memory.
    One subtask of :meth:`_Job._regroup_state`, for engines that write subtasks apart."""
    import pyarrow as pa
    import pyarrow.compute as pc

    op = target.op
    kg_range = target.new_range(index)
    wanted = needed_key_groups(op.max_parallelism, target.max_parallelism, kg_range)
    old = _read_indexes(reader, op, state)
    forms = _ValueConformer(old, op, state)
    version = current_write_format().version
    groups: set[int] = set()
    with KeyGroupSorter(target.max_parallelism, target.parallelism, memory_budget=memory_budget,
                        duplicates=DuplicateMode.LAST, spill_dir=spill_dir, version=version) as sorter:
        for source in old.files:
            keep = [e.key_group for e in source.index if wanted is None or e.key_group in wanted]
            if not keep:
                continue
            with reader.open_file(source.file) as opened:
                for entry, data in opened.iter_raw_blocks(keep):
                    batch = forms.conform(opened.decode(entry.key_group, data))
                    new = pc.remainder(batch.column("key_hash"), pa.scalar(target.max_parallelism, pa.uint32()))
                    mask = pc.and_(pc.greater_equal(new, pa.scalar(kg_range.start, pa.uint32())),
                                   pc.less_equal(new, pa.scalar(kg_range.end, pa.uint32())))
                    part = batch.filter(mask)
                    if part.num_rows:
                        sorter.add(pa.Table.from_batches([part]))
        relative = layout.state_file_path(op.uid, state, index, target.parallelism)
        blocks = _recording(sorter.subtask_groups(index), groups, lambda _rows: None)
        return write_keyed_file(io, directory, relative, state, blocks), groups


def _recording(blocks: Iterator[tuple[int, pa.RecordBatch]], groups: set[int],
               on_rows: Callable[[int], None]) -> Iterator[tuple[int, pa.RecordBatch]]:
    for key_group, batch in blocks:
        groups.add(key_group)
        on_rows(batch.num_rows)
        yield key_group, batch
