"""What ``statekit report`` reports on: a statekit or Apache Flink snapshot, or a checkpoint directory.

:func:`build_report` chooses: a snapshot (a directory holding ``_metadata``, or the file)
is described by :func:`statekit.writers.report.statekit_report` or :func:`flink_report`;
any other directory is listed (``checkpoints list``) and its latest complete snapshot is
described, with every snapshot of the listing as the checkpoint history.

Flink records per key group only the offset of each key group in a key-groups handle's
stream (heap checkpoints, canonical and native savepoints): those give the bytes per key
group. Incremental RocksDB checkpoints record files, not key groups: no skew chart then.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import replace

from statekit.flink.dispatch import list_any
from statekit.flink.model import FlinkOperatorState
from statekit.flink.snapshot import open_flink_snapshot
from statekit.flink.snapshot_kind import flink_snapshot_path
from statekit.flink.summary import FlinkOperatorSummary, summarize_snapshot
from statekit.statefmt import layout
from statekit.statefmt.errors import BadInputError, PathNotFoundError
from statekit.statefmt.fileio import FileIO
from statekit.writers.report import (
    DEFAULT_PARALLELISMS,
    HistoryPoint,
    KeyedSizes,
    ReportOperator,
    ReportState,
    SnapshotReport,
    preview_from_sizes,
    statekit_report,
)

__all__ = ["build_report", "flink_report"]


def build_report(url: str, parallelisms: Sequence[int] = DEFAULT_PARALLELISMS) -> SnapshotReport:
    """The report of the snapshot at ``url``, or of the latest complete one below it with the history.

    Raises:
        PathNotFoundError: Nothing at ``url``.
        NotACheckpointError: A directory that holds no snapshot.
        BadInputError: A directory whose snapshots are all incomplete or damaged.
    """
    io, path = FileIO.for_path(url)
    if not io.exists(path):
        raise PathNotFoundError("no such file or directory", path=url)
    if io.isfile(path) or io.exists(posixpath.join(path, layout.METADATA_FILE)):
        return snapshot_report(url, parallelisms)
    listing = list_any(url)
    history = tuple(sorted((HistoryPoint(r.checkpoint_id, r.status, r.kind, r.size, r.path) for r in listing.listings),
                           key=lambda p: (p.checkpoint_id is None, p.checkpoint_id or 0, p.path)))
    complete = [p for p in history if p.status == "complete"]
    if not complete:
        raise BadInputError(f"no complete snapshot to report on ({len(history)} incomplete or damaged)", path=url)
    latest = max(complete, key=lambda p: (p.checkpoint_id or -1, p.path))
    return replace(snapshot_report(latest.path, parallelisms), history=history, history_path=listing.path)


def snapshot_report(url: str, parallelisms: Sequence[int] = DEFAULT_PARALLELISMS) -> SnapshotReport:
    """The report of one snapshot, statekit's or Flink's."""
    flink = flink_snapshot_path(url, allow_job_dir=False)
    if flink is not None:
        return flink_report(flink, parallelisms)
    return statekit_report(url, parallelisms)


def flink_report(url: str, parallelisms: Sequence[int] = DEFAULT_PARALLELISMS) -> SnapshotReport:
    """The report of a Flink checkpoint or savepoint (``inspect`` figures, sizes per key group)."""
    snapshot = open_flink_snapshot(url)
    summary = summarize_snapshot(snapshot)
    models = {op.operator_id: op for op in snapshot.metadata.operators}
    operators = tuple(_operator(op, models[op.operator_id], parallelisms) for op in summary.operators)
    facts = (("metadata version", str(summary.metadata_version)), ("files", f"{summary.file_bytes:,} bytes"),
             ("inline", f"{summary.inline_bytes:,} bytes"), ("shared", f"{summary.shared_bytes:,} bytes"))
    return SnapshotReport(summary.path, "flink", summary.kind or "snapshot", summary.format, summary.checkpoint_id,
                          summary.bytes, operators, facts=facts)


def _operator(op: FlinkOperatorSummary, model: FlinkOperatorState, parallelisms: Sequence[int]) -> ReportOperator:
    states = [ReportState(s.name, s.kind, s.backend_type, None, None) for s in op.keyed_states]
    modes = {s.name: s.mode for sub in op.subtasks for s in sub.operator_states}
    states += [ReportState(name, "operator", mode, None, None) for name, mode in modes.items()]
    sizes = key_group_sizes(model)
    note = ""
    if sizes is None and any(sub.keyed_handle for sub in op.subtasks):
        note = "keyed state without per-key-group offsets (incremental RocksDB): no skew chart or rescale preview"
    if op.keyed_state_problem:
        note = f"{note}; {op.keyed_state_problem}" if note else op.keyed_state_problem
    rescale = preview_from_sizes(sizes, parallelisms) if sizes is not None else ()
    return ReportOperator(op.label, op.name or "", op.parallelism, op.max_parallelism, op.bytes, tuple(states),
                          sizes, rescale, note)


def key_group_sizes(model: FlinkOperatorState) -> KeyedSizes | None:
    """Bytes per key group from the key-groups handles' offsets; None without such handles."""
    sizes = [0] * model.max_parallelism
    found = False
    for subtask in model.subtasks:
        for handle in subtask.keyed_handles:
            offsets = handle.key_group_offsets
            if not offsets or handle.delegate is None:
                continue
            found = True
            ends = [*offsets[1:], handle.delegate.size]
            for key_group, start, end in zip(range(handle.key_group_range.start, handle.key_group_range.end + 1), offsets, ends):
                if 0 <= key_group < len(sizes):
                    sizes[key_group] += max(0, end - start)
    return KeyedSizes(tuple(sizes)) if found else None
