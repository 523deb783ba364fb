"""Job metrics: the job master's view of what its tasks report.

:class:`JobMetrics` (one per job master) keeps the recent :class:`~statekit.runtime.task.metrics.TaskReport`
of every task and derives rates over :data:`RATE_WINDOW_S`; :func:`job_metrics` joins them with
the coordinator's checkpoint figures into the REST ``/jobs/<id>/metrics`` JSON and the live status
line (the Prometheus exposition of the same figures: :mod:`statekit.runtime.jobmaster.prometheus`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statekit.runtime.task.metrics import Latency, TaskFigures, TaskReport, percentile

if TYPE_CHECKING:
    from statekit.runtime.dataflow.job_handle import JobHandle

__all__ = [
    "JobMetrics",
    "LiveStatus",
    "live_status",
    "JobMetricsView",
    "job_metrics",
    "RATE_WINDOW_S",
    "metrics_json",
]

RATE_WINDOW_S = 3.0
LATENCY_WINDOW_S = 10.0
MAX_LATENCY_SAMPLES = 10_000






class JobMetrics:
    """The reports of every task of a job (thread-safe); rates over ``window_s`` seconds."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._lock = threading.Lock()
        self._reports: dict[tuple[int, int], deque[TaskReport]] = {}
        self._latencies: deque[tuple[float, int]] = deque(maxlen=MAX_LATENCY_SAMPLES)  # (reported at, ms)

    def update(self, report: TaskReport) -> None:
        """Record a task's report; a restarted task (counters behind) starts a new history."""
        key = (report.vertex_id, report.subtask)
        with self._lock:
            self._latencies.extend((report.time_s, ms) for ms in report.latencies)
            history = self._reports.get(key)
            if history is None or (history and report.records_in < history[-1].records_in):
                history = self._reports[key] = deque()
            history.append(report)
            horizon = report.time_s - self.window_s
            while len(history) > 2 and history[1].time_s <= horizon:
                history.popleft()  # keep one report at or before the window's start: the baseline

    def latency(self, now_s: float | None = None) -> Latency | None:
        """End-to-end latency of the latency markers measured in the last :data:`LATENCY_WINDOW_S`."""
        now = time.time() if now_s is None else now_s
        with self._lock:
            samples = sorted(ms for at, ms in self._latencies if at >= now - LATENCY_WINDOW_S)
        if not samples:
            return None
        return Latency(percentile(samples, 0.5), percentile(samples, 0.99), samples[-1], len(samples))

    def tasks(self, now_s: float | None = None) -> list[TaskFigures]:
        """Every task that reported, by vertex and subtask."""
        now = time.time() if now_s is None else now_s
        with self._lock:
            histories = {key: list(history) for key, history in self._reports.items()}
        return [_figures(histories[key], now, self.window_s) for key in sorted(histories)]


def _figures(history: list[TaskReport], now: float, window_s: float) -> TaskFigures:
    latest = history[-1]
    baseline = next((r for r in reversed(history) if r.time_s <= now - window_s), history[0])
    if latest.finished:
        return TaskFigures(latest, 0.0, 0.0, 0.0)
    # counts did not change after the latest report (a task reports before it waits): rates run to now
    span = max(now - baseline.time_s, 1e-3)
    reported_span = latest.time_s - baseline.time_s
    ratio = (latest.backpressured_s - baseline.backpressured_s) / reported_span if reported_span > 0 else 0.0
    return TaskFigures(latest, (latest.records_in - baseline.records_in) / span,
                       (latest.records_out - baseline.records_out) / span, min(1.0, max(0.0, ratio)))


# ------------------------------------------------------------------------- the job's view


@dataclass(frozen=True)
class LiveStatus:
    """The one-line status of a running job (``statekit run`` on a terminal).

    Attributes:
        records_in_per_s: Records read by the sources per second.
        records_out_per_s: Records the sinks took in per second (what the job emits).
        last_checkpoint_duration_ms: End to end, trigger to completion.
        last_checkpoint_size: The full state size of the last completed checkpoint, bytes.
        backpressured_tasks: Tasks whose backpressure level is ``low`` or ``high``.
        low_watermark: The lowest input watermark of the running non-source tasks (epoch ms;
            None: no task has one), how far event time has come through the whole job.
    """

    job_id: str
    state: str
    records_in_per_s: float
    records_out_per_s: float
    checkpoints_completed: int
    checkpoints_failed: int
    last_checkpoint_id: int | None
    last_checkpoint_duration_ms: int | None
    last_checkpoint_size: int | None
    backpressured_tasks: int
    tasks: int
    low_watermark: int | None = None
    latency: Latency | None = None


def live_status(job_id: str, state: str, tasks: list[TaskFigures], checkpoints: dict[str, Any],
                latency: Latency | None = None) -> LiveStatus:
    """The live status from task figures, the coordinator's checkpoint statistics and the latency."""
    counts = checkpoints.get("counts", {})
    last = (checkpoints.get("latest") or {}).get("completed") or {}
    return LiveStatus(
        job_id=job_id, state=state,
        records_in_per_s=sum(t.records_in_per_s for t in tasks if t.report.source),
        records_out_per_s=sum(t.records_in_per_s for t in tasks if t.report.sink),
        checkpoints_completed=int(counts.get("completed", 0)), checkpoints_failed=int(counts.get("failed", 0)),
        last_checkpoint_id=last.get("id"), last_checkpoint_duration_ms=last.get("end_to_end_duration"),
        last_checkpoint_size=last.get("state_size", last.get("checkpointed_size")),
        backpressured_tasks=sum(1 for t in tasks if t.backpressure != "ok"), tasks=len(tasks), latency=latency,
        low_watermark=_low_watermark(tasks),
    )


def _low_watermark(tasks: list[TaskFigures]) -> int | None:
    """The lowest input watermark over non-source tasks that have not finished; None when one of
    them has none yet (event time has not reached it) or no task has one."""
    inputs = [t.report.input_watermark for t in tasks if not t.report.source and not t.report.finished]
    if not inputs or any(w is None for w in inputs):
        return None
    return min(w for w in inputs if w is not None)


def metrics_json(job_id: str, name: str, state: str, tasks: list[TaskFigures], checkpoints: dict[str, Any],
                 status: LiveStatus) -> dict[str, Any]:
    """The body of REST ``GET /jobs/<id>/metrics``."""
    counts = checkpoints.get("counts", {})
    return {
        "jid": job_id, "name": name, "state": state, "timestamp": int(time.time() * 1000),
        "records_in_per_second": round(status.records_in_per_s, 3),
        "records_out_per_second": round(status.records_out_per_s, 3),
        "backpressured_tasks": status.backpressured_tasks,
        "low_watermark": status.low_watermark,
        "checkpoints": {
            "completed": int(counts.get("completed", 0)), "failed": int(counts.get("failed", 0)),
            "in_progress": int(counts.get("in_progress", 0)),
            "last_completed": {"id": status.last_checkpoint_id, "duration_ms": status.last_checkpoint_duration_ms,
                               "size": status.last_checkpoint_size} if status.last_checkpoint_id is not None else None,
        },
        "latency": status.latency.to_json() if status.latency is not None else None,
        "tasks": [t.to_json() for t in tasks],
    }


@dataclass(frozen=True)
class JobMetricsView:
    """The metrics of one job at one moment: tasks, checkpoint statistics and the live status."""

    job_id: str
    name: str
    state: str
    tasks: list[TaskFigures]
    checkpoints: dict[str, Any]
    live: LiveStatus

    def to_json(self) -> dict[str, Any]:
        """REST ``GET /jobs/<id>/metrics``."""
        return metrics_json(self.job_id, self.name, self.state, self.tasks, self.checkpoints, self.live)


def job_metrics(handle: JobHandle) -> JobMetricsView:
    """The metrics of the job behind ``handle`` now."""
    tasks = handle.task_metrics()
    checkpoints = handle.checkpoint_stats()
    state = handle.status.value
    live = live_status(handle.job_id, state, tasks, checkpoints, handle.latency())
    return JobMetricsView(handle.job_id, handle.job_name, state, tasks, checkpoints, live)
