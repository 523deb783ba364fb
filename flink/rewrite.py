"""Rewrite Apache Flink savepoints without a JVM: a new max parallelism, removed or renamed operators.

``rescale_flink_savepoint`` changes the max parallelism (the number of key groups) of a
canonical savepoint, which Flink itself cannot do: every keyed entry moves to the key group
Flink assigns its key under the new max parallelism (:mod:`statekit.flink.regroup`), each
subtask gets a new key-group stream with the same header (:mod:`statekit.flink.streams_writer`),
and ``_metadata`` gets the new max parallelism of every operator and the new keyed state
handles. Operators keep their parallelism: Flink redistributes keyed and operator state by
itself when a job restores at another parallelism, up to the max parallelism.

``modify_flink_savepoint`` removes operators and renames uids (the new operator id is Flink's
hash of the new uid, :mod:`statekit.flink.uids`); no state is decoded or changed.

Both write a new, self-contained savepoint directory (relative file handles,
:mod:`statekit.flink.savepoint_files`) of the source's ``_metadata`` version: whole or not at
all (staged, ``_metadata`` last, :func:`statekit.writers.staging.staged_output_dir`); temporary
files are removed also on failure. The source is only read, and checked first: a source whose
kept state ``verify`` finds damaged (a missing or resized file, an offset outside its stream,
a RocksDB block that fails its checksum) is refused before anything is written, and every
carried file is copied at exactly its recorded size.
"""

from __future__ import annotations

import posixpath
import tempfile
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import IO, Any, Protocol

from statekit.flink.metadata import read_flink_metadata
from statekit.flink.metadata_writer import (
    Edit,
    MetadataSpans,
    OperatorSpan,
    apply_edits,
    encode_new_subtask,
    encode_operator_identity,
    encode_relative_file_handle,
    encode_savepoint_key_groups_handle,
    metadata_spans,
)
from statekit.flink.model import FlinkOperatorState
from statekit.flink.regroup import DEFAULT_MEMORY_BUDGET, KeyGroupTally, Regrouper
from statekit.flink.rewrite_report import (
    KEPT,
    MAX_PARALLELISM_ONLY,
    MERGE,
    REGROUP,
    FlinkModifyReport,
    FlinkOperatorPlan,
    FlinkOperatorSummary,
    FlinkRescaleReport,
    FlinkSubtaskPlan,
    rescale_path,
)
from statekit.flink.savepoint_files import CarriedFiles
from statekit.flink.storage import FlinkSnapshot, load_snapshot
from statekit.flink.streams_writer import OperatorStreams, has_keyed_state, open_inputs, operator_streams, write_stream
from statekit.flink.uids import operator_id_for_uid
from statekit.flink.verify import verify_snapshot
from statekit.readers.progress import Advance, ProgressFactory, no_progress
from statekit.statefmt.allocator import retain_freed_memory
from statekit.statefmt.errors import BadInputError, CorruptStateError, MetadataError, StateNotFoundError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.keygroups import KeyGroupRange, check_parallelism, compute_key_group_range_for_operator_index
from statekit.statefmt.layout import MAX_METADATA_BYTES
from statekit.writers.staging import check_output_dir, staged_output_dir

__all__ = ["rescale_flink_savepoint", "modify_flink_savepoint", "RescaleTarget", "WrittenStream", "RegroupResult",
           "OperatorRegroup", "regroup_locally"]
_I32_BYTES = 4


# ----------------------------------------------------------------------------- shared steps


def _source_bytes(snapshot: FlinkSnapshot) -> bytes:
    """The ``_metadata`` bytes, read again (the model keeps no bytes); must be what was parsed."""
    io, path = FileIO.for_path(snapshot.metadata_path, snapshot.storage_options)
    data = io.read_bytes(path, limit=MAX_METADATA_BYTES)
    if len(data) != snapshot.metadata.size:
        raise MetadataError("changed while it was read; try again", path=snapshot.metadata_path)
    return data


def _refuse_checkpoint(snapshot: FlinkSnapshot, what: str) -> None:
    if snapshot.metadata.kind == "checkpoint":
        raise BadInputError(f"is a checkpoint; {what} rewrites savepoints (a checkpoint's files belong to its job "
                            "and its shared/ directory): take a savepoint of the job and rewrite that",
                            path=snapshot.path)
    # a _metadata that records no kind (v3-v4) but holds in-flight data is an unaligned checkpoint
    channels = sum(len(st.input_channel_state) + len(st.output_channel_state)
                   for op in snapshot.metadata.operators for st in op.subtasks)
    if channels:
        raise BadInputError(f"holds in-flight data ({channels} channel state handle(s)) of an unaligned checkpoint, "
                            f"which {what} cannot carry over; take a savepoint of the job (always aligned) and "
                            "rewrite that", path=snapshot.path)


def _output_url(output: str | None, options: dict[str, Any] | None, dry_run: bool,
                snapshot: FlinkSnapshot) -> str | None:
    if output is None:
        if not dry_run:
            raise BadInputError("give the output directory (-o OUT)", path=snapshot.path)
        return None
    io, path = FileIO.for_path(output, options)
    check_output_dir(io, path, [snapshot.path], snapshot.storage_options)
    return io.url(path)


def _spans(data: bytes, snapshot: FlinkSnapshot) -> MetadataSpans:
    spans = metadata_spans(data, source=snapshot.metadata_path)
    if len(spans.operators) != len(snapshot.metadata.operators):
        raise MetadataError("changed while it was read; try again", path=snapshot.metadata_path)
    return spans


def _carry(files: CarriedFiles, op: FlinkOperatorState, data: bytes, *, keyed_replaced: bool) -> None:
    """Keep the files of ``op``'s state, except the keyed streams a rescale replaces."""
    for _, role, handle in op.stream_handles():
        if not (keyed_replaced and role == "data"):
            files.carry(handle, data)


def _refuse_damaged(snapshot: FlinkSnapshot, operators: Iterable[FlinkOperatorState]) -> None:
    """Refuse a source whose state the output keeps is damaged, before anything is written: every
    check of ``verify`` on those operators (files present with their recorded sizes, offsets inside
    their streams, key-group ranges, the block checksums of RocksDB stores).

    Raises:
        CorruptStateError: The first problem found (the message says how many more).
    """
    problems = verify_snapshot(snapshot, operators={op.label for op in operators})
    if problems:
        more = f" (and {len(problems) - 1} more: `statekit verify` lists them)" if len(problems) > 1 else ""
        raise CorruptStateError(f"damaged: {problems[0].message}{more}; nothing was written", path=snapshot.path)


def _publish(io: FileIO, directory: str, data: bytes, edits: Iterable[Edit], source: str) -> int:
    """Write the edited ``_metadata`` last, after checking that it parses; its size."""
    new = apply_edits(data, edits)
    target = posixpath.join(directory, "_metadata")
    read_flink_metadata(new, source=f"{source} (rewritten)")
    io.write_atomic(target, new)
    return len(new)


# ----------------------------------------------------------------------------- rescale


@dataclass(frozen=True)
class RescaleTarget:
    """One operator of a rescale: its index, spans and, for keyed state, its checked streams."""

    index: int
    op: FlinkOperatorState
    span: OperatorSpan
    changed: bool
    streams: OperatorStreams | None


def _changed(ops: Sequence[FlinkOperatorState]) -> list[bool]:
    """Which operators get the new max parallelism: those with keyed state, and those that share
    the keyed operators' max parallelism (the job's setting: they may be chained with them).
    Others keep theirs: a max parallelism set apart, such as 1 for a non-parallel source,
    must match the restoring job's."""
    keyed = {op.max_parallelism for op in ops if has_keyed_state(op)}
    return [has_keyed_state(op) or op.max_parallelism in keyed for op in ops]


def _check_max_parallelism(snapshot: FlinkSnapshot, max_parallelism: int) -> None:
    check_parallelism(1, max_parallelism)
    ops = snapshot.metadata.operators
    if not any(has_keyed_state(op) for op in ops):
        raise BadInputError("has no keyed state: nothing to regroup into new key groups", path=snapshot.path)
    changed = [op for op, change in zip(ops, _changed(ops)) if change]
    if all(op.max_parallelism == max_parallelism for op in changed):
        raise BadInputError(f"its keyed operators already have max parallelism {max_parallelism}: nothing to do",
                            path=snapshot.path)
    for op in changed:
        if op.parallelism > max_parallelism:
            raise BadInputError(f"operator {op.label} runs at parallelism {op.parallelism}, more than the max "
                                f"parallelism {max_parallelism}", path=snapshot.path)
        if has_keyed_state(op) and op.finished_subtasks:
            raise BadInputError(f"operator {op.label} has finished subtasks {list(op.finished_subtasks)} and keyed "
                                "state; not rewritten", path=snapshot.path)


def _targets(snapshot: FlinkSnapshot, spans: MetadataSpans, max_parallelism: int) -> list[RescaleTarget]:
    targets = []
    ops = snapshot.metadata.operators
    for index, (op, span, change) in enumerate(zip(ops, spans.operators, _changed(ops))):
        changed = change and op.max_parallelism != max_parallelism
        streams = operator_streams(snapshot, op) if changed and has_keyed_state(op) else None
        targets.append(RescaleTarget(index, op, span, changed, streams))
    return targets


def _operator_plan(target: RescaleTarget, max_parallelism: int, tally: KeyGroupTally | None) -> FlinkOperatorPlan:
    op = target.op
    if not target.changed:
        return FlinkOperatorPlan(op.label, op.operator_id, KEPT, op.parallelism, op.max_parallelism,
                                 op.max_parallelism)
    if target.streams is None or tally is None:
        return FlinkOperatorPlan(op.label, op.operator_id, MAX_PARALLELISM_ONLY, op.parallelism,
                                 op.max_parallelism, max_parallelism)
    subtasks = []
    for index in range(op.parallelism):
        key_groups = compute_key_group_range_for_operator_index(max_parallelism, op.parallelism, index)
        filled, entries, size = tally.in_range(key_groups)
        subtasks.append(FlinkSubtaskPlan(index, key_groups, filled, entries, size))
    return FlinkOperatorPlan(op.label, op.operator_id, REGROUP, op.parallelism, op.max_parallelism, max_parallelism,
                             target.streams.state_names, target.streams.hasher.name, tuple(subtasks),
                             rescale_path(op.max_parallelism, max_parallelism), False, target.streams.bytes)


def _estimated_plan(snapshot: FlinkSnapshot, target: RescaleTarget, max_parallelism: int) -> FlinkOperatorPlan:
    """The plan from the key-group offsets and one sampled key group per stream; no other entry read.

    Bytes per new key group: a source key group's bytes go to ``g % M2`` on the merge path,
    and spread evenly over the new key groups otherwise; entries from the sampled bytes per entry.
    """
    streams = target.streams
    op = target.op
    if streams is None or not target.changed:
        return _operator_plan(target, max_parallelism, None)
    path = rescale_path(op.max_parallelism, max_parallelism)
    sizes = [0] * op.max_parallelism
    for source in streams.sources:
        handle = source.handle
        starts = sorted((o, kg) for kg, o in zip(handle.key_group_range, handle.key_group_offsets) if o)
        for i, (offset, kg) in enumerate(starts):
            end = starts[i + 1][0] if i + 1 < len(starts) else source.delegate.size
            sizes[kg] += end - offset
    per_entry = _sampled_bytes_per_entry(snapshot, streams)
    tally = KeyGroupTally(max_parallelism)
    total = sum(sizes)
    if path == MERGE:
        for kg, size in enumerate(sizes):
            tally.bytes[kg % max_parallelism] += size
    else:
        for kg in range(max_parallelism):
            tally.bytes[kg] = total * (kg + 1) // max_parallelism - total * kg // max_parallelism
    for kg, size in enumerate(tally.bytes):
        tally.entries[kg] = round(size / per_entry) if size else 0
    plan = _operator_plan(target, max_parallelism, tally)
    return FlinkOperatorPlan(plan.label, plan.operator_id, plan.action, plan.parallelism, plan.old_max_parallelism,
                             plan.max_parallelism, plan.states, plan.key_type, plan.subtasks, plan.path, True,
                             plan.source_bytes)


def _sampled_bytes_per_entry(snapshot: FlinkSnapshot, streams: OperatorStreams) -> float:
    """Stream bytes per entry in the first non-empty key group of each stream (vectorized parse)."""
    from statekit.flink.fast_regroup import parse_block
    from statekit.flink.sources import prefix_bytes

    sampled_bytes = sampled_entries = 0
    prefix = prefix_bytes(streams.operator.max_parallelism)
    with open_inputs(snapshot, streams) as inputs:
        for entries in inputs:
            if not entries.offsets:
                continue
            kg, offset = entries.offsets[0]
            end = entries.offsets[1][1] if len(entries.offsets) > 1 else None
            entries.stream.seek(offset)
            data = entries.stream.read(end - offset) if end is not None else entries.stream.read(1 << 20)
            parsed = parse_block(data, kg, prefix) if end is not None else None
            if parsed is not None:
                sampled_bytes += len(data)
                sampled_entries += len(parsed.starts)
    return sampled_bytes / sampled_entries if sampled_entries else 64.0


@dataclass(frozen=True)
class WrittenStream:
    """One new key-group stream of a subtask: its range, key-group offsets, file name and size."""

    index: int
    key_groups: KeyGroupRange
    offsets: tuple[int, ...]
    name: str
    size: int


@dataclass
class RegroupResult:
    """What regrouping one operator wrote: a stream per subtask, and what it read."""

    streams: list[WrittenStream]
    tally: KeyGroupTally
    bytes_read: int
    spilled_bytes: int = 0


class OperatorRegroup(Protocol):
    """Writes the new streams of one keyed operator into ``directory`` (the engine's seam)."""

    def __call__(self, snapshot: FlinkSnapshot, target: RescaleTarget, max_parallelism: int, io: FileIO,
                 directory: str) -> RegroupResult: ...


def regroup_locally(spill_dir: str | None, memory_budget: int, advance: Advance) -> OperatorRegroup:
    """The local engine: one process reads every stream (vectorized), spills, writes each subtask's stream."""

    def regroup(snapshot: FlinkSnapshot, target: RescaleTarget, max_parallelism: int, io: FileIO,
                directory: str) -> RegroupResult:
        streams = target.streams
        assert streams is not None
        with tempfile.TemporaryFile(dir=spill_dir) as spill:
            regrouper = _regroup(snapshot, streams, max_parallelism, spill, memory_budget, advance)
            written = []
            for index in range(target.op.parallelism):
                key_groups = compute_key_group_range_for_operator_index(max_parallelism, target.op.parallelism, index)
                name = str(uuid.uuid4())
                with io.open_output(posixpath.join(directory, name)) as out:
                    offsets, size = write_stream(out, streams.header, key_groups, regrouper.groups(key_groups),
                                                 compressed=streams.meta.compressed)
                written.append(WrittenStream(index, key_groups, tuple(offsets), name, size))
        return RegroupResult(written, regrouper.tally, regrouper.bytes_read, regrouper.spilled_bytes)

    return regroup


class _Rescale:
    """One rescale: regroups each keyed operator, then collects the ``_metadata`` edits."""

    def __init__(self, snapshot: FlinkSnapshot, data: bytes, spans: MetadataSpans, max_parallelism: int,
                 regroup: OperatorRegroup) -> None:
        self.snapshot, self.data, self.spans = snapshot, data, spans
        self.max_parallelism, self.regroup = max_parallelism, regroup
        self.edits: list[Edit] = []
        self.bytes_read = self.bytes_written = self.spilled = 0

    def write_streams(self, target: RescaleTarget, io: FileIO, directory: str) -> KeyGroupTally:
        """One new stream per subtask; its handle replaces the old one, or a new subtask holds it."""
        result = self.regroup(self.snapshot, target, self.max_parallelism, io, directory)
        self.bytes_read += result.bytes_read
        self.spilled += result.spilled_bytes
        existing = {sub.index: sub for sub in target.span.subtasks}
        added = b""
        for stream in result.streams:
            self.bytes_written += stream.size
            handle = encode_savepoint_key_groups_handle(stream.key_groups, stream.offsets,
                                                        encode_relative_file_handle(stream.name, stream.size))
            span = existing.get(stream.index)
            if span is not None and span.managed_keyed is not None:
                self.edits.append(Edit(*span.managed_keyed, handle))
            else:
                added += encode_new_subtask(stream.index, handle, self.spans.version)
        if added:
            count = len(target.span.subtasks) + sum(1 for i in range(target.op.parallelism) if i not in existing)
            at = target.span.count_at
            self.edits += [Edit(at, at + _I32_BYTES, count.to_bytes(4, "big", signed=True)),
                           Edit(target.span.end, target.span.end, added)]
        return result.tally

    def max_parallelism_edit(self, target: RescaleTarget) -> None:
        at = target.span.max_parallelism_at
        self.edits.append(Edit(at, at + _I32_BYTES, self.max_parallelism.to_bytes(4, "big", signed=True)))


def _regroup(snapshot: FlinkSnapshot, streams: OperatorStreams, max_parallelism: int, spill: IO[bytes] | None,
             memory_budget: int, advance: Advance) -> Regrouper:
    """Every entry of the operator's streams, hashed into its new key group (``spill=None``: counted only).

    Freed NumPy temporaries are kept for the next key group (:mod:`statekit.statefmt.allocator`).
    """
    retain_freed_memory()
    regrouper = Regrouper(streams.hasher, streams.operator.max_parallelism, max_parallelism, spill, memory_budget)
    with open_inputs(snapshot, streams) as inputs:
        for entries in inputs:
            before = regrouper.bytes_read
            regrouper.add_stream(entries)
            advance(entries.source, regrouper.bytes_read - before)
    return regrouper


def _rescale_plan(snapshot: FlinkSnapshot, targets: list[RescaleTarget], max_parallelism: int,
                  advance: Advance, exact: bool) -> tuple[list[FlinkOperatorPlan], int]:
    plans, bytes_read = [], 0
    for target in targets:
        tally = None
        if not exact:
            plans.append(_estimated_plan(snapshot, target, max_parallelism))
            continue
        if target.streams is not None:
            regrouper = _regroup(snapshot, target.streams, max_parallelism, None, DEFAULT_MEMORY_BUDGET, advance)
            tally, bytes_read = regrouper.tally, bytes_read + regrouper.bytes_read
        plans.append(_operator_plan(target, max_parallelism, tally))
    return plans, bytes_read


def rescale_flink_savepoint(
    path: str,
    output: str | None,
    *,
    max_parallelism: int,
    dry_run: bool = False,
    exact_plan: bool = False,
    spill_dir: str | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    storage_options: dict[str, Any] | None = None,
    output_storage_options: dict[str, Any] | None = None,
    progress: ProgressFactory | None = None,
    regroup: OperatorRegroup | None = None,
    execution: str = "local",
) -> FlinkRescaleReport:
    """Write a copy of a canonical Flink savepoint with a new max parallelism.

    The path is chosen per operator (:func:`statekit.flink.rewrite_report.rescale_path`):
    ``merge`` when the new max parallelism divides the old one (key group ``g`` goes whole to
    ``g % M2``: no key hashed), ``split`` or ``rehash`` otherwise (every key hashed).

    Args:
        path: The savepoint directory or its ``_metadata`` (local or fsspec URL).
        output: The new savepoint directory (must not exist, or be empty); optional with ``dry_run``.
        max_parallelism: The new max parallelism of every operator (1..32768, at least each
            operator's parallelism).
        dry_run: Write nothing: the path, its estimated cost and the plan per subtask, from the
            key-group offsets and one sampled key group per stream (``exact_plan``: read and hash
            every key for exact figures, which costs about as much as the rescale).
        exact_plan: With ``dry_run``, the exact plan.
        spill_dir: Where temporary files go (default: the system's temporary directory).
        memory_budget: Bytes of entries held in memory before they spill.
        storage_options / output_storage_options: fsspec options of source and output.
        progress: Opens a progress bar (``Output.progress``), advanced in bytes of streams read.
        regroup: Writes each keyed operator's new streams (default :func:`regroup_locally`;
            ``statekit.spark.flink_rewrite`` runs it on Spark); ``execution`` names it in the report.

    Raises:
        BadInputError: A max parallelism out of range or below a parallelism, nothing to do, a
            checkpoint, a native savepoint, keys of a serializer statekit cannot hash (the
            message names the operator, state and serializer), an output that is not empty.
        CorruptStateError: Damaged state (names the file, key group and offset); nothing is written.
    """
    started = time.monotonic()
    snapshot = load_snapshot(path, storage_options=storage_options)
    _refuse_checkpoint(snapshot, "rescale")
    _check_max_parallelism(snapshot, max_parallelism)
    data = _source_bytes(snapshot)
    spans = _spans(data, snapshot)
    targets = _targets(snapshot, spans, max_parallelism)
    report = FlinkRescaleReport(snapshot.path, None, dry_run, snapshot.metadata.version, execution=execution)
    report.output = _output_url(output, output_storage_options, dry_run, snapshot)
    work = sum(t.streams.bytes for t in targets if t.streams is not None)
    factory = progress or no_progress
    if dry_run:
        with factory("planning", total=work) as advance:
            report.operators, report.bytes_read = _rescale_plan(snapshot, targets, max_parallelism, advance,
                                                                exact_plan)
        report.elapsed_s = time.monotonic() - started
        return report
    assert output is not None
    _refuse_damaged(snapshot, snapshot.metadata.operators)
    with factory("rescaling", total=work) as advance, \
            staged_output_dir(output, output_storage_options, inputs=[snapshot.path],
                              input_storage_options=snapshot.storage_options) as (io, directory), \
            tempfile.TemporaryDirectory(prefix="statekit-flink-rescale-", dir=spill_dir) as scratch:
        job = _Rescale(snapshot, data, spans, max_parallelism, regroup or regroup_locally(scratch, memory_budget,
                                                                                          advance))
        files = CarriedFiles(snapshot)
        for target in targets:
            report.operators.append(_rescale_operator(job, target, files, io, directory))
        report.files_copied = len(files.files)
        job.bytes_written += files.copy_to(io, directory, lambda _name, _size: None)
        job.bytes_written += _publish(io, directory, data, job.edits + files.edits, snapshot.metadata_path)
    report.bytes_read, report.bytes_written, report.spilled_bytes = job.bytes_read, job.bytes_written, job.spilled
    report.elapsed_s = time.monotonic() - started
    return report


def _rescale_operator(job: _Rescale, target: RescaleTarget, files: CarriedFiles, io: FileIO,
                      directory: str) -> FlinkOperatorPlan:
    if not target.changed:
        _carry(files, target.op, job.data, keyed_replaced=False)
        return _operator_plan(target, job.max_parallelism, None)
    job.max_parallelism_edit(target)
    _carry(files, target.op, job.data, keyed_replaced=target.streams is not None)
    if target.streams is None:
        return _operator_plan(target, job.max_parallelism, None)
    tally = job.write_streams(target, io, directory)
    return _operator_plan(target, job.max_parallelism, tally)


# ----------------------------------------------------------------------------- modify


def _find(ops: Sequence[FlinkOperatorState], name: str, option: str, source: str) -> int:
    """The index of the operator named by its uid, or by its hex operator id."""
    by_uid = [i for i, op in enumerate(ops) if op.uid == name]
    by_id = [i for i, op in enumerate(ops) if op.operator_id == name.lower()]
    if by_uid or by_id:
        return (by_uid or by_id)[0]
    known = ", ".join(op.label for op in ops) or "none"
    raise StateNotFoundError(f"{option} {name!r}: no operator with that uid or id (operators: {known})", path=source)


def _modifications(snapshot: FlinkSnapshot, remove: Sequence[str],
                   renames: Sequence[tuple[str, str]]) -> tuple[set[int], dict[int, str]]:
    """(indexes to remove, {index: new uid}), checked: each operator touched once, new ids unique."""
    ops, source = snapshot.metadata.operators, snapshot.path
    if not remove and not renames:
        raise BadInputError("nothing to do: give --remove-operator or --rename-uid", path=source)
    removed = {_find(ops, name, "--remove-operator", source) for name in remove}
    renamed: dict[int, str] = {}
    for old, new in renames:
        index = _find(ops, old, "--rename-uid", source)
        if not new:
            raise BadInputError(f"--rename-uid {old}=: the new uid must not be empty", path=source)
        if index in removed or index in renamed:
            raise BadInputError(f"operator {ops[index].label} is named by more than one operation", path=source)
        if ops[index].operator_id == operator_id_for_uid(new):
            raise BadInputError(f"--rename-uid {old}={new}: operator {ops[index].label} already has that uid",
                                path=source)
        renamed[index] = new
    ids: dict[str, str] = {}
    for index, op in enumerate(ops):
        if index in removed:
            continue
        new_uid = renamed.get(index)
        op_id = operator_id_for_uid(new_uid) if new_uid is not None else op.operator_id
        if op_id in ids:
            raise BadInputError(f"two operators would have operator id {op_id} ({ids[op_id]} and "
                                f"{new_uid or op.label}); Flink maps state by that id", path=source)
        ids[op_id] = new_uid or op.label
    return removed, renamed


def _summary(op: FlinkOperatorState, new_uid: str | None) -> FlinkOperatorSummary:
    leaves = [handle for _, _, handle in op.stream_handles()]
    files = {handle.path for handle in leaves if handle.path is not None}
    label = new_uid if new_uid is not None else op.label
    op_id = operator_id_for_uid(new_uid) if new_uid is not None else op.operator_id
    return FlinkOperatorSummary(label, op_id, op.label if new_uid is not None else None, op.parallelism,
                                op.max_parallelism, len(files), sum(handle.size for handle in leaves))


def _modify_edits(snapshot: FlinkSnapshot, spans: MetadataSpans, removed: set[int],
                  renamed: dict[int, str]) -> list[Edit]:
    edits = []
    ops = snapshot.metadata.operators
    if removed:
        count = (len(ops) - len(removed)).to_bytes(4, "big", signed=True)
        edits.append(Edit(spans.count_at, spans.count_at + _I32_BYTES, count))
    for index, span in enumerate(spans.operators):
        if index in removed:
            edits.append(Edit(span.start, span.end, b""))
        elif index in renamed:
            new_uid = renamed[index]
            identity = encode_operator_identity(spans.version, ops[index].name, new_uid, operator_id_for_uid(new_uid))
            edits.append(Edit(span.start, span.identity_end, identity))
    return edits


def modify_flink_savepoint(
    path: str,
    output: str | None,
    *,
    remove_operators: Iterable[str] = (),
    rename_uids: Iterable[tuple[str, str]] = (),
    dry_run: bool = False,
    storage_options: dict[str, Any] | None = None,
    output_storage_options: dict[str, Any] | None = None,
    progress: ProgressFactory | None = None,
) -> FlinkModifyReport:
    """Write a copy of a Flink savepoint without some operators, or with new uids.

    Operators are named by uid, by hex operator id (operators without a uid), or — for
    metadata that records no uids (v3, v4) — by a uid whose hash is their id. A renamed
    operator gets the new uid and the operator id Flink derives from it; all operations
    apply together (``a=b`` and ``b=a`` swap). State bytes are copied, never decoded.

    Raises:
        StateNotFoundError: A name that matches no operator (the message lists them).
        BadInputError: Nothing to do, an operator named twice, two operators with one id, a
            checkpoint, an output that is not empty.
    """
    started = time.monotonic()
    remove, renames = list(dict.fromkeys(remove_operators)), list(rename_uids)
    # metadata v3/v4 records no uids: label the operators whose id is the hash of a given name
    names = [name for name in remove + [old for old, _ in renames] if name]
    snapshot = load_snapshot(path, storage_options=storage_options, uids=names, strict_uids=False)
    _refuse_checkpoint(snapshot, "modify")
    removed, renamed = _modifications(snapshot, remove, renames)
    ops = snapshot.metadata.operators
    report = FlinkModifyReport(snapshot.path, None, dry_run, snapshot.metadata.version)
    report.output = _output_url(output, output_storage_options, dry_run, snapshot)
    report.removed = [(ops[i].label, ops[i].operator_id) for i in sorted(removed)]
    report.renamed = [(ops[i].label, new, operator_id_for_uid(new)) for i, new in sorted(renamed.items())]
    report.operators = [_summary(op, renamed.get(i)) for i, op in enumerate(ops) if i not in removed]
    data = _source_bytes(snapshot)
    spans = _spans(data, snapshot)
    files = CarriedFiles(snapshot)
    for index, op in enumerate(ops):
        if index not in removed:
            _carry(files, op, data, keyed_replaced=False)
    if not dry_run:
        assert output is not None
        _refuse_damaged(snapshot, [op for index, op in enumerate(ops) if index not in removed])
        with (progress or no_progress)("copying", total=files.bytes) as advance, \
                staged_output_dir(output, output_storage_options, inputs=[snapshot.path],
                              input_storage_options=snapshot.storage_options) as (io, directory):
            report.bytes_written = files.copy_to(io, directory, advance)
            edits = _modify_edits(snapshot, spans, removed, renamed) + files.edits
            report.bytes_written += _publish(io, directory, data, edits, snapshot.metadata_path)
    report.elapsed_s = time.monotonic() - started
    return report
