"""Checkpoint statistics of one job (Flink's ``CheckpointStatsTracker``): counts, the recent
history, the latest completed/savepoint/failed checkpoint, a min/avg/max summary over every
completed checkpoint since the job started, and per-subtask details.

Every figure is plain JSON (Flink's REST names in snake case). A checkpoint's entry
(:func:`checkpoint_entry`) holds its job-level figures; its details add ``subtasks``, one
record per subtask (:func:`subtask_details`): ack time, end-to-end duration, sizes, the
synchronous and asynchronous durations, alignment, start delay (trigger to the first barrier
at the subtask), whether it snapshotted unaligned. Listeners get each finished checkpoint's
entry with its details (job control appends them to the job's history file,
:mod:`statekit.runtime.control.checkpoint_history`).

Invariant: the tracker is changed only under the coordinator's lock; listeners are called
there too, so they see checkpoints in the order they finished, and must be quick.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from statekit.runtime.api.checkpoint_config import CheckpointConfig
    from statekit.runtime.checkpoint.handles import TaskStateSnapshot

__all__ = [
    "CheckpointStatsTracker",
    "CheckpointListener",
    "SUMMARY_FIGURES",
    "HISTORY_SIZE",
    "DETAILS_KEPT",
    "subtask_details",
    "summarize",
    "checkpoint_config_json",
]

log = logging.getLogger("statekit.runtime")

HISTORY_SIZE = 20
DETAILS_KEPT = 64  # per-subtask details of the latest checkpoints, for REST .../checkpoints/details/<id>

# the figures of a completed checkpoint the summary gives min/avg/max of
SUMMARY_FIGURES = ("end_to_end_duration", "state_size", "checkpointed_size", "alignment_duration",
                   "persisted_data", "sync_duration", "async_duration", "start_delay")

CheckpointListener = Callable[[dict[str, Any]], None]


@dataclass
class _Figure:
    """Running min, max and sum of one figure."""

    count: int = 0
    total: float = 0.0
    low: float | None = None
    high: float | None = None

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.low = value if self.low is None else min(self.low, value)
        self.high = value if self.high is None else max(self.high, value)

    def to_json(self) -> dict[str, Any]:
        if not self.count:
            return {"min": None, "avg": None, "max": None}
        return {"min": _plain(self.low), "avg": round(self.total / self.count, 3), "max": _plain(self.high)}


def _plain(value: float | None) -> float | int | None:
    return int(value) if value is not None and float(value).is_integer() else value


def summarize(entries: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """``{figure: {"min", "avg", "max"}}`` over the COMPLETED ``entries`` (others are skipped)."""
    figures = {name: _Figure() for name in SUMMARY_FIGURES}
    for entry in entries:
        _add(figures, entry)
    return {name: figure.to_json() for name, figure in figures.items()}


def _add(figures: dict[str, _Figure], entry: dict[str, Any]) -> None:
    if entry.get("status") != "COMPLETED":
        return
    for name, figure in figures.items():
        value = entry.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            figure.add(value)


def subtask_details(trigger_ms: int, keys: Sequence[tuple[int, int]], acks: dict[tuple[int, int], TaskStateSnapshot],
                    ack_ms: dict[tuple[int, int], int]) -> list[dict[str, Any]]:
    """One record per subtask of ``keys`` (vertex, subtask): what its acknowledgement said, or
    ``pending_or_failed`` (Flink's word) when it did not acknowledge."""
    records: list[dict[str, Any]] = []
    for key in sorted(set(keys) | set(acks)):
        vertex, subtask = key
        snapshot = acks.get(key)
        if snapshot is None:
            records.append({"vertex": vertex, "subtask": subtask, "status": "pending_or_failed"})
            continue
        stats = snapshot.stats
        acked = ack_ms.get(key, 0)
        records.append({
            "vertex": vertex, "subtask": subtask, "status": "completed",
            "ack_timestamp": acked or None,
            "end_to_end_duration": max(0, acked - trigger_ms) if acked else None,
            "state_size": snapshot.full_size,
            "checkpointed_size": snapshot.bytes_written,
            "sync_duration": round(stats.sync_ms, 3),
            "async_duration": round(stats.async_ms, 3),
            "alignment_duration": stats.alignment_ms,
            "start_delay": max(0, stats.barrier_ms - trigger_ms) if stats.barrier_ms else None,
            "unaligned_checkpoint": stats.unaligned,
            "persisted_data": snapshot.inflight_bytes,
        })
    return records


def _largest(records: list[dict[str, Any]], name: str) -> float | int | None:
    values = [r[name] for r in records if isinstance(r.get(name), (int, float)) and not isinstance(r.get(name), bool)]
    return max(values) if values else None


class CheckpointStatsTracker:
    """Counts, history, latest, summary and details of one job's checkpoints (thread-safe)."""

    def __init__(self, history_size: int = HISTORY_SIZE, details_kept: int = DETAILS_KEPT) -> None:
        self._lock = threading.RLock()
        self.history: collections.deque[dict[str, Any]] = collections.deque(maxlen=history_size)
        self.counts = {"completed": 0, "failed": 0, "savepoints": 0}
        self.latest: dict[str, dict[str, Any] | None] = {"completed": None, "savepoint": None, "failed": None}
        self._summary = {name: _Figure() for name in SUMMARY_FIGURES}
        self._details: collections.OrderedDict[int, dict[str, Any]] = collections.OrderedDict()
        self._details_kept = details_kept
        self._listeners: list[CheckpointListener] = []

    def add_listener(self, listener: CheckpointListener) -> None:
        """Call ``listener(entry with "subtasks")`` for every checkpoint that completes or fails."""
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: CheckpointListener) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def record(self, entry: dict[str, Any], subtasks: list[dict[str, Any]]) -> None:
        """A checkpoint ended (``entry["status"]`` COMPLETED or FAILED) with these subtask details."""
        entry.update(_subtask_maxima(subtasks))
        with self._lock:
            completed = entry["status"] == "COMPLETED"
            self.counts["completed" if completed else "failed"] += 1
            self.history.appendleft(entry)
            if completed:
                self.latest["savepoint" if entry.get("is_savepoint") else "completed"] = entry
                self.counts["savepoints"] += 1 if entry.get("is_savepoint") else 0
                _add(self._summary, entry)
            else:
                self.latest["failed"] = entry
            details = {**entry, "subtasks": subtasks}
            self._details[int(entry["id"])] = details
            while len(self._details) > self._details_kept:
                self._details.popitem(last=False)
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(dict(details))
            except Exception as exc:  # noqa: BLE001 - a statistics listener never fails a checkpoint
                log.warning("a checkpoint statistics listener failed: %s", exc)

    def details(self, checkpoint_id: int, in_progress: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The entry with per-subtask details of ``checkpoint_id`` (``in_progress``: its live
        details when it is pending), or None when it is unknown or too old."""
        if in_progress is not None:
            return in_progress
        with self._lock:
            found = self._details.get(checkpoint_id)
            return None if found is None else dict(found)

    def snapshot(self, in_progress: list[dict[str, Any]], restored: dict[str, Any] | None) -> dict[str, Any]:
        """Flink-like statistics: counts, latest, summary, history (newest first)."""
        with self._lock:
            history = sorted(in_progress, key=lambda e: -e["id"]) + [dict(e) for e in self.history]
            return {
                "counts": {
                    "completed": self.counts["completed"],
                    "failed": self.counts["failed"],
                    "in_progress": len(in_progress),
                    "restored": 1 if restored else 0,
                    "savepoints": self.counts["savepoints"],
                    "total": self.counts["completed"] + self.counts["failed"] + len(in_progress),
                },
                "latest": {
                    "completed": _copy(self.latest["completed"]),
                    "savepoint": _copy(self.latest["savepoint"]),
                    "failed": _copy(self.latest["failed"]),
                    "restored": restored,
                },
                "summary": {name: figure.to_json() for name, figure in self._summary.items()},
                "history": history,
            }


def _subtask_maxima(subtasks: list[dict[str, Any]]) -> dict[str, Any]:
    """The slowest subtask's synchronous, asynchronous part and start delay (job-level figures)."""
    return {"sync_duration": _largest(subtasks, "sync_duration"),
            "async_duration": _largest(subtasks, "async_duration"),
            "start_delay": _largest(subtasks, "start_delay")}


def _copy(entry: dict[str, Any] | None) -> dict[str, Any] | None:
    return dict(entry) if entry is not None else None


def checkpoint_config_json(config: CheckpointConfig, *, incremental: bool, state_backend: str,
                           storage: str | None) -> dict[str, Any]:
    """Flink's ``/jobs/<id>/checkpoints/config``: how the job checkpoints."""
    return {
        "mode": config.mode.value,
        "interval": config.interval_ms or None,
        "timeout": config.timeout_ms,
        "min_pause": config.min_pause_ms,
        "max_concurrent": config.max_concurrent,
        "unaligned_checkpoints": config.unaligned,
        "aligned_checkpoint_timeout": config.aligned_checkpoint_timeout_ms,
        "tolerable_failed_checkpoints": config.tolerable_failed,
        "retained_checkpoints": config.num_retained,
        "externalization": {"enabled": storage is not None,
                            "cleanup": config.externalized_cleanup.value},
        "state_backend": state_backend,
        "checkpoint_storage": storage,
        "incremental": incremental,
        "default_savepoint_dir": config.default_savepoint_dir,
    }
