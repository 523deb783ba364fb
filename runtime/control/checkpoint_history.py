"""The checkpoint history of a job that outlives it: a file beside its registry entry.

The job's process appends every checkpoint and savepoint that completes or fails, with its
per-subtask details (:mod:`statekit.runtime.jobmaster.checkpoint_stats`), to
``$STATEKIT_HOME/jobs/<job_id>/checkpoints.jsonl``: one JSON object a line, written with one
``write`` on a file opened for appending, so a reader sees whole lines (a process killed in
the middle of one leaves a last line that is not JSON; readers skip it and count it). The file
is bounded: past :data:`MAX_HISTORY_BYTES` it becomes ``checkpoints.1.jsonl`` (replacing an
older one) and a new file starts, so at least the newest ``MAX_HISTORY_BYTES`` of history are
kept. A job id reused after a crash continues the same file.

Readers (``statekit checkpoints history``, ``statekit report``, the dashboard) read both
files, oldest first, whether the job runs or ended.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from statekit.runtime.control.registry import JobEntry, JobRegistry
from statekit.runtime.jobmaster.checkpoint_stats import summarize
from statekit.statefmt.errors import BadInputError, JobError
from statekit.statefmt.job_id import is_job_id_prefix
from statekit.writers.report import SnapshotReport, TimelinePoint

__all__ = [
    "MAX_HISTORY_BYTES",
    "ROTATED_SUFFIX",
    "CheckpointHistoryWriter",
    "CheckpointHistory",
    "HistoryRecords",
    "read_history",
    "job_checkpoint_history",
    "history_of",
    "report_with_statistics",
]

MAX_HISTORY_BYTES = 8 * 1024 * 1024
ROTATED_SUFFIX = ".1"


def _rotated(path: Path) -> Path:
    return path.with_name(f"{path.stem}{ROTATED_SUFFIX}{path.suffix}")


class CheckpointHistoryWriter:
    """Appends checkpoint records to one job's history file (its :meth:`append` is a
    :data:`~statekit.runtime.jobmaster.checkpoint_stats.CheckpointListener`)."""

    def __init__(self, path: Path, max_bytes: int = MAX_HISTORY_BYTES) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._lock = threading.Lock()

    def append(self, record: dict[str, Any]) -> None:
        """Write ``record`` as one line; rotate the file once it grew past ``max_bytes``."""
        data = (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode()
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
            if size > self.max_bytes:
                os.replace(self.path, _rotated(self.path))


@dataclass(frozen=True)
class HistoryRecords:
    """What a history file held: its records in the order they were written, and the lines
    that were not a JSON object (a write cut short by a kill)."""

    records: tuple[dict[str, Any], ...]
    damaged_lines: int = 0


def read_history(path: Path) -> HistoryRecords:
    """The records of ``path`` and its rotated predecessor, oldest first (none: no file)."""
    records: list[dict[str, Any]] = []
    damaged = 0
    for part in (_rotated(path), path):
        try:
            lines = part.read_bytes().splitlines()
        except FileNotFoundError:
            continue
        except OSError as error:
            raise JobError(f"{part}: cannot read the checkpoint history ({error.strerror or error})") from None
        for line in lines:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                damaged += 1
                continue
            if isinstance(record, dict) and isinstance(record.get("id"), int):
                records.append(record)
            else:
                damaged += 1
    return HistoryRecords(tuple(records), damaged)


@dataclass(frozen=True)
class CheckpointHistory:
    """A job's checkpoint history (``statekit checkpoints history``).

    Attributes:
        job_id, name, state: The job, as the registry knows it.
        path: The history file.
        entries: Every recorded checkpoint without its subtask details, newest first.
        summary: ``{figure: {"min", "avg", "max"}}`` over the completed ones.
        damaged_lines: Lines of the file that could not be read.
        checkpoint: One checkpoint's entry with ``"subtasks"`` (when asked for one).
    """

    job_id: str
    name: str
    state: str
    path: str
    entries: tuple[dict[str, Any], ...]
    summary: dict[str, Any]
    damaged_lines: int = 0
    checkpoint: dict[str, Any] | None = None
    counts: dict[str, int] = field(default_factory=dict)


def history_of(entry: JobEntry, registry: JobRegistry | None = None,
               checkpoint_id: int | None = None) -> CheckpointHistory:
    """The history of the job of ``entry`` (``checkpoint_id``: with that checkpoint's subtask details).

    Raises:
        BadInputError: ``checkpoint_id`` is not in the history.
    """
    registry = registry or JobRegistry()
    path = registry.history_path(entry.job_id)
    read = read_history(path)
    chosen = None
    if checkpoint_id is not None:
        matches = [r for r in read.records if r["id"] == checkpoint_id]
        if not matches:
            known = ", ".join(str(r["id"]) for r in read.records[-8:]) or "none"
            raise BadInputError(f"checkpoint {checkpoint_id} is not in the history of job {entry.job_id} "
                                f"(latest recorded: {known})", path=str(path))
        chosen = matches[-1]
    entries = tuple(sorted(({k: v for k, v in r.items() if k != "subtasks"} for r in read.records),
                           key=lambda e: -int(e["id"])))
    counts = {"completed": sum(1 for e in entries if e.get("status") == "COMPLETED"),
              "failed": sum(1 for e in entries if e.get("status") == "FAILED"),
              "savepoints": sum(1 for e in entries if e.get("is_savepoint"))}
    return CheckpointHistory(entry.job_id, entry.name, entry.status, str(path), entries, summarize(entries),
                             read.damaged_lines, chosen, counts)


def job_checkpoint_history(reference: str, checkpoint_id: int | None = None) -> CheckpointHistory:
    """The checkpoint history of a job by id or unique prefix, running or ended."""
    registry = JobRegistry()
    return history_of(registry.find(reference), registry, checkpoint_id)


def report_with_statistics(reference: str, parallelisms: Sequence[int]) -> SnapshotReport:
    """What ``statekit report`` describes: a snapshot or checkpoint directory (``build_report``)
    with the checkpoint statistics of its job when the registry knows the job, or a job by id or
    unique prefix (its checkpoint directory, with its statistics).

    Raises:
        BadInputError: A job that ran without a checkpoint directory (nothing to report on but
            its statistics: ``statekit checkpoints history`` shows them).
    """
    from statekit.flink.report import build_report

    registry = JobRegistry()
    entry: JobEntry | None = None
    if "://" not in reference and not os.path.exists(reference) and is_job_id_prefix(reference.strip().lower()):
        entry = registry.find(reference)
        if entry.checkpoint_dir is None:
            raise BadInputError(f"job {entry.job_id} has no checkpoint directory (it ran without --checkpoint-dir); "
                                f"`statekit checkpoints history {entry.job_id}` shows its checkpoint statistics")
        report = build_report(entry.checkpoint_dir, parallelisms)
    else:
        report = build_report(reference, parallelisms)
        if report.job_id is not None:
            try:
                entry = registry.get(report.job_id)
            except JobError:
                entry = None  # not a job of this registry (or another user's): the snapshot alone
    if entry is None:
        return report
    path = registry.history_path(entry.job_id)
    records = read_history(path).records
    if not records:
        return report
    return replace(report, timeline=tuple(TimelinePoint.of(r) for r in records), timeline_path=str(path))
