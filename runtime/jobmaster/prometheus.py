"""A job's metrics in the Prometheus exposition format, through ``prometheus_client``.

What is exposed (labels ``job_id``, ``job_name``; per task also ``task``, ``vertex``, ``subtask``):

* job gauges and counters built from :func:`statekit.runtime.jobmaster.metrics.job_metrics` at
  every scrape (``statekit_job_*``, ``statekit_task_*``: see :data:`JOB_FIGURES`, :data:`TASK_FIGURES`),
  the task watermarks among them;
* histograms of every completed checkpoint's end-to-end duration (seconds) and full state size
  (bytes), observed as checkpoints complete (``statekit_job_checkpoint_duration_seconds``,
  ``statekit_job_checkpoint_size_bytes``, label ``kind``: checkpoint or savepoint);
* the process's own figures (``process_*``: CPU seconds, resident memory, open files, start
  time; ``python_info``): the JobManager (with the thread executor also the one TaskManager);
* the same figures of each TaskManager process of the job (``statekit_taskmanager_*``, labels
  ``taskmanager`` and ``pid``), read from ``/proc`` on this machine at each scrape.

:class:`JobPrometheus` is one job's registry (the job's REST ``/metrics``);
:func:`process_registry` holds every job of this process (``statekit run --metrics-port``).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Histogram, PlatformCollector, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector

from statekit.runtime.jobmaster.metrics import JobMetricsView, LiveStatus, job_metrics
from statekit.runtime.task.metrics import TaskFigures

if TYPE_CHECKING:
    from statekit.runtime.dataflow.job_handle import JobHandle

__all__ = [
    "CONTENT_TYPE",
    "JobPrometheus",
    "JOB_FIGURES",
    "TASK_FIGURES",
    "DURATION_BUCKETS_S",
    "SIZE_BUCKETS_BYTES",
    "process_registry",
]

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

DURATION_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
SIZE_BUCKETS_BYTES = tuple(float(1 << shift) for shift in range(10, 41, 2))  # 1 KiB .. 1 TiB, x4

# (name, counter or gauge, help, value); a counter's name without its ``_total``
JOB_FIGURES: list[tuple[str, str, str, Callable[[LiveStatus, dict[str, Any]], float | None]]] = [
    ("statekit_job_checkpoints_completed", "counter", "Completed checkpoints and savepoints.",
     lambda s, _c: s.checkpoints_completed),
    ("statekit_job_checkpoints_failed", "counter", "Failed checkpoints.", lambda s, _c: s.checkpoints_failed),
    ("statekit_job_checkpoints_in_progress", "gauge", "Checkpoints in progress.",
     lambda _s, c: int(c.get("counts", {}).get("in_progress", 0))),
    ("statekit_job_last_checkpoint_id", "gauge", "Id of the last completed checkpoint.",
     lambda s, _c: s.last_checkpoint_id),
    ("statekit_job_last_checkpoint_duration_ms", "gauge", "End-to-end duration of the last completed checkpoint.",
     lambda s, _c: s.last_checkpoint_duration_ms),
    ("statekit_job_last_checkpoint_size_bytes", "gauge", "Full state size of the last completed checkpoint.",
     lambda s, _c: s.last_checkpoint_size),
    ("statekit_job_backpressured_tasks", "gauge", "Tasks whose backpressure is low or high.",
     lambda s, _c: s.backpressured_tasks),
    ("statekit_job_low_watermark_ms", "gauge",
     "The lowest input watermark of the job's non-source tasks (epoch ms).", lambda s, _c: s.low_watermark),
    ("statekit_job_latency_p50_ms", "gauge", "Median end-to-end latency of the latency markers (last 10 s).",
     lambda s, _c: s.latency.p50_ms if s.latency is not None else None),
    ("statekit_job_latency_p99_ms", "gauge", "99th percentile end-to-end latency of the latency markers (last 10 s).",
     lambda s, _c: s.latency.p99_ms if s.latency is not None else None),
]

TASK_FIGURES: list[tuple[str, str, str, Callable[[TaskFigures], float | None]]] = [
    ("statekit_task_records_in", "counter", "Records a task took in (a source: from its reader).",
     lambda t: t.report.records_in),
    ("statekit_task_records_out", "counter", "Records a task handed to downstream channels.",
     lambda t: t.report.records_out),
    ("statekit_task_records_in_per_second", "gauge", "Records in per second over the rate window.",
     lambda t: t.records_in_per_s),
    ("statekit_task_records_out_per_second", "gauge", "Records out per second over the rate window.",
     lambda t: t.records_out_per_s),
    ("statekit_task_backpressured_time_ratio", "gauge", "Share of time the task waited for room downstream.",
     lambda t: t.backpressured_ratio),
    ("statekit_task_checkpoints_taken", "counter", "Snapshots the task took.",
     lambda t: t.report.checkpoints_taken),
    ("statekit_task_last_checkpoint_alignment_ms", "gauge", "Alignment of the task's last snapshot, in ms.",
     lambda t: t.report.last_alignment_ms),
    ("statekit_task_last_checkpoint_sync_ms", "gauge", "Synchronous part of the task's last snapshot, in ms.",
     lambda t: t.report.last_sync_ms),
    ("statekit_task_input_buffers_queued", "gauge", "Buffers and events queued in the task's input gate.",
     lambda t: t.report.input_queued),
    ("statekit_task_output_buffers_backlogged", "gauge", "Buffers and events waiting for room downstream.",
     lambda t: t.report.output_backlogged),
    ("statekit_task_current_input_watermark_ms", "gauge",
     "The task's input watermark: the minimum over its live, active input channels (epoch ms).",
     lambda t: t.report.input_watermark),
    ("statekit_task_current_output_watermark_ms", "gauge", "The last watermark the task sent on (epoch ms).",
     lambda t: t.report.output_watermark),
]

_JOB_LABELS = ["job_id", "job_name"]
_TASK_LABELS = [*_JOB_LABELS, "task", "vertex", "subtask"]

_lock = threading.Lock()
_jobs: dict[str, JobHandle] = {}
_histograms: tuple[Histogram, Histogram] | None = None
_process: CollectorRegistry | None = None


def _shared_histograms() -> tuple[Histogram, Histogram]:
    """The checkpoint histograms of this process (one series per job and kind)."""
    global _histograms
    with _lock:
        if _histograms is None:
            labels = [*_JOB_LABELS, "kind"]
            _histograms = (
                Histogram("statekit_job_checkpoint_duration_seconds", "End-to-end duration of completed checkpoints.",
                          labels, buckets=DURATION_BUCKETS_S, registry=None),
                Histogram("statekit_job_checkpoint_size_bytes", "Full state size of completed checkpoints.",
                          labels, buckets=SIZE_BUCKETS_BYTES, registry=None),
            )
        return _histograms


class _JobsCollector(Collector):
    """The figures of one job (``job_id``) or of every job of this process (None), at each scrape."""

    def __init__(self, job_id: str | None) -> None:
        self.job_id = job_id

    def collect(self) -> Iterator[Metric]:
        with _lock:
            handles = [h for jid, h in _jobs.items() if self.job_id is None or jid == self.job_id]
        views = [job_metrics(h) for h in handles]
        yield from _job_families(views)
        yield from _task_families(views)
        yield from _task_manager_families(handles)
        for histogram in _shared_histograms():
            for family in histogram.collect():
                yield _only_job(family, self.job_id)


def _only_job(family: Metric, job_id: str | None) -> Metric:
    if job_id is None:
        return family
    kept = Metric(family.name, family.documentation, family.type, family.unit)
    kept.samples = [s for s in family.samples if s.labels.get("job_id") == job_id]
    return kept


def _family(name: str, kind: str, help_text: str, labels: list[str]) -> GaugeMetricFamily | CounterMetricFamily:
    if kind == "counter":
        return CounterMetricFamily(name, help_text, labels=labels)
    return GaugeMetricFamily(name, help_text, labels=labels)


def _job_families(views: list[JobMetricsView]) -> Iterator[Metric]:
    for name, kind, help_text, value in JOB_FIGURES:
        family = _family(name, kind, help_text, _JOB_LABELS)
        for view in views:
            figure = value(view.live, view.checkpoints)
            if figure is not None:
                family.add_metric([view.job_id, view.name], float(figure))
        yield family


def _task_families(views: list[JobMetricsView]) -> Iterator[Metric]:
    for name, kind, help_text, value in TASK_FIGURES:
        family = _family(name, kind, help_text, _TASK_LABELS)
        for view in views:
            for task in view.tasks:
                figure = value(task)
                if figure is not None:
                    r = task.report
                    family.add_metric([view.job_id, view.name, r.name, str(r.vertex_id), str(r.subtask)], float(figure))
        yield family


def _task_manager_families(handles: list[JobHandle]) -> Iterator[Metric]:
    """``process_*`` of every TaskManager process, renamed ``statekit_taskmanager_*`` and labelled."""
    merged: dict[str, Metric] = {}
    for handle in handles:
        for index, pid in handle.task_manager_pids():
            labels = {"job_id": handle.job_id, "job_name": handle.job_name, "taskmanager": str(index), "pid": str(pid)}
            for family in ProcessCollector(pid=functools.partial(int, pid), registry=None).collect():
                name = "statekit_taskmanager_" + family.name.removeprefix("process_")
                target = merged.setdefault(name, Metric(name, f"{family.documentation} (per TaskManager)",
                                                        family.type, family.unit))
                for sample in family.samples:
                    target.add_sample("statekit_taskmanager_" + sample.name.removeprefix("process_"),
                                      {**labels, **sample.labels}, sample.value)
    yield from merged.values()


def _registry(job_id: str | None) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_JobsCollector(job_id))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry


def process_registry() -> CollectorRegistry:
    """Every job of this process (the ``--metrics-port`` endpoint), and the process's figures."""
    global _process
    with _lock:
        if _process is None:
            _process = _registry(None)
        return _process


class JobPrometheus:
    """One job's Prometheus registry; observes its checkpoints from the moment it is created.

    :meth:`close` (the job ended and its REST API closes) removes the job from this process's
    registry; its histogram series stay until the process exits.
    """

    def __init__(self, handle: JobHandle) -> None:
        self.handle = handle
        self.registry = _registry(handle.job_id)
        with _lock:
            _jobs[handle.job_id] = handle
        handle.add_checkpoint_listener(self._observe)

    def _observe(self, details: dict[str, Any]) -> None:
        if details.get("status") != "COMPLETED":
            return
        duration, size = _shared_histograms()
        labels = (self.handle.job_id, self.handle.job_name, "savepoint" if details.get("is_savepoint") else "checkpoint")
        if isinstance(details.get("end_to_end_duration"), (int, float)):
            duration.labels(*labels).observe(details["end_to_end_duration"] / 1000.0)
        if isinstance(details.get("state_size"), int):
            size.labels(*labels).observe(details["state_size"])

    def exposition(self) -> bytes:
        """The text exposition (format 0.0.4) of this job and its process."""
        return generate_latest(self.registry)

    def close(self) -> None:
        with _lock:
            if _jobs.get(self.handle.job_id) is self.handle:
                del _jobs[self.handle.job_id]
