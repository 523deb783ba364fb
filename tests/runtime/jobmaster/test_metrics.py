"""Job metrics: task reports, rates, backpressure, checkpoint figures; REST JSON and Prometheus text."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from statekit.runtime.connectors.sources import NumberSequenceSource
from statekit.runtime.control.rest import JobRestServer
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.dataflow.job_handle import JobHandle, JobStatus
from statekit.runtime.jobmaster.metrics import JobMetrics, job_metrics, live_status
from statekit.runtime.task.metrics import TaskMetrics, TaskReport

TOKEN = "t0k3n"


def report(time_s: float, records_in: int, *, vertex: int = 0, subtask: int = 0, records_out: int = 0,
           backpressured_s: float = 0.0, source: bool = False, sink: bool = False,
           finished: bool = False) -> TaskReport:
    return TaskReport(vertex, subtask, f"v{vertex} ({subtask + 1}/2)", time_s, records_in, records_out,
                      backpressured_s, 0, None, None, None, False, source, sink, finished)


# ---------------------------------------------------------------- units


def test_rates_run_over_the_window_and_fall_when_a_task_idles() -> None:
    metrics = JobMetrics(window_s=2.0)
    for second in range(6):
        metrics.update(report(100.0 + second, 1000 * second, records_out=500 * second))
    (busy,) = metrics.tasks(now_s=105.0)
    assert busy.records_in_per_s == pytest.approx(1000.0) and busy.records_out_per_s == pytest.approx(500.0)
    (idle,) = metrics.tasks(now_s=125.0)  # no report for 20 s: nothing came in
    assert idle.records_in_per_s == pytest.approx(0.0, abs=1.0)
    assert idle.report.records_in == 5000


def test_a_restarted_task_starts_a_new_history() -> None:
    metrics = JobMetrics(window_s=2.0)
    metrics.update(report(100.0, 9000))
    metrics.update(report(101.0, 10))  # a new attempt: counters start again
    metrics.update(report(102.0, 2010))
    (task,) = metrics.tasks(now_s=102.0)
    assert task.records_in_per_s == pytest.approx(2000.0)  # 10 -> 2010 in one second, never 9000 -> 2010


def test_backpressure_levels_follow_the_waiting_share() -> None:
    metrics = JobMetrics(window_s=1.0)
    metrics.update(report(100.0, 0, vertex=0, backpressured_s=0.0))
    metrics.update(report(101.0, 10, vertex=0, backpressured_s=0.8))
    metrics.update(report(100.0, 0, vertex=1, backpressured_s=0.0))
    metrics.update(report(101.0, 10, vertex=1, backpressured_s=0.3))
    metrics.update(report(100.0, 0, vertex=2))
    metrics.update(report(101.0, 10, vertex=2, backpressured_s=0.05))
    levels = [(t.report.vertex_id, t.backpressure) for t in metrics.tasks(now_s=101.0)]
    assert levels == [(0, "high"), (1, "low"), (2, "ok")]
    status = live_status("j", "RUNNING", metrics.tasks(now_s=101.0), {})
    assert status.backpressured_tasks == 2 and status.tasks == 3


def test_a_finished_task_has_no_rate() -> None:
    metrics = JobMetrics()
    metrics.update(report(100.0, 0))
    metrics.update(report(100.5, 500, finished=True))
    (task,) = metrics.tasks(now_s=100.6)
    assert (task.records_in_per_s, task.report.records_in) == (0.0, 500)


class _Writer:
    records_out = 0
    pending = 0


def test_a_task_reports_values_not_itself() -> None:
    reports: list[TaskReport] = []
    writer = _Writer()
    counters = TaskMetrics(3, 1, "map (2/2)", [writer], reports.append)
    counters.count_in(10)  # the first count reports at once
    writer.records_out = 7
    counters.checkpoint_taken(4, alignment_ms=12, unaligned=False, sync_ms=1.5)
    counters.report(finished=True)
    assert [(r.records_in, r.records_out, r.last_checkpoint_id, r.finished) for r in reports] == [
        (10, 0, None, False), (10, 7, 4, True)]
    assert reports[0].sink is False and TaskMetrics(0, 0, "sink", [], reports.append).report() is None
    assert reports[-1].sink is True


class _Handle:
    """What the Prometheus collector reads of a job (a stand-in for a JobHandle)."""

    def __init__(self, job_id: str, name: str, metrics: JobMetrics, checkpoints: dict[str, Any]) -> None:
        self.job_id, self.job_name, self._metrics, self._checkpoints = job_id, name, metrics, checkpoints
        self.status = JobStatus.RUNNING
        self.listeners: list[Any] = []

    def task_metrics(self) -> list[Any]:
        return self._metrics.tasks(now_s=101.0)

    def checkpoint_stats(self) -> dict[str, Any]:
        return self._checkpoints

    def add_checkpoint_listener(self, listener: Any) -> None:
        self.listeners.append(listener)

    def latency(self) -> None:
        return None

    def task_manager_pids(self) -> list[tuple[int, int]]:
        import os

        return [(0, os.getpid())]  # this process stands in for a TaskManager


def _families(text: str) -> dict[str, Any]:
    from prometheus_client.parser import text_string_to_metric_families

    return {family.name: family for family in text_string_to_metric_families(text)}


def test_prometheus_exposition_parses_and_escapes_labels() -> None:
    from statekit.runtime.jobmaster.prometheus import JobPrometheus

    metrics = JobMetrics()
    metrics.update(report(100.0, 0, source=True))
    metrics.update(report(101.0, 300, source=True, records_out=300))
    metrics.update(TaskReport(1, 0, "v1 (1/2)", 101.0, 300, 0, 0.0, 0, None, None, None, False, sink=True,
                              input_watermark=1_700_000_000_000, output_watermark=1_699_999_999_000))
    checkpoints = {"counts": {"completed": 3, "failed": 1, "in_progress": 0},
                   "latest": {"completed": {"id": 7, "end_to_end_duration": 42, "checkpointed_size": 2048}}}
    handle = _Handle("abc", 'my "job"\\x\n', metrics, checkpoints)
    prometheus = JobPrometheus(handle)  # type: ignore[arg-type]
    try:
        for duration, size in ((40, 1000), (2500, 5_000_000)):
            for listener in handle.listeners:
                listener({"status": "COMPLETED", "is_savepoint": False, "end_to_end_duration": duration,
                          "state_size": size})
        text = prometheus.exposition().decode()
        families = _families(text)  # prometheus_client's own parser reads it back
        job = {"job_id": "abc", "job_name": 'my "job"\\x\n'}
        completed = families["statekit_job_checkpoints_completed"]
        assert completed.type == "counter" and [(s.labels, s.value) for s in completed.samples] == [(job, 3.0)]
        assert [s.value for s in families["statekit_job_last_checkpoint_size_bytes"].samples] == [2048.0]
        records = {s.labels["task"]: s.value for s in families["statekit_task_records_in"].samples}
        assert records == {"v0 (1/2)": 300.0, "v1 (1/2)": 300.0}
        watermark = families["statekit_task_current_input_watermark_ms"].samples
        assert [(s.labels["task"], s.value) for s in watermark] == [("v1 (1/2)", 1_700_000_000_000.0)]
        assert [s.value for s in families["statekit_job_low_watermark_ms"].samples] == [1_700_000_000_000.0]
        duration = {s.labels.get("le"): s.value for s in families["statekit_job_checkpoint_duration_seconds"].samples
                    if s.name.endswith("_bucket")}
        assert duration["0.05"] == 1.0 and duration["2.5"] == 2.0 and duration["+Inf"] == 2.0
        sizes = families["statekit_job_checkpoint_size_bytes"]
        assert [s.value for s in sizes.samples if s.name.endswith("_count")] == [2.0]
        assert "process_resident_memory_bytes" in families and "process_cpu_seconds" in families
        memory = families["statekit_taskmanager_resident_memory_bytes"].samples
        assert [(s.labels["taskmanager"], s.value > 0) for s in memory] == [("0", True)]
        assert 'job_name="my \\"job\\"\\\\x\\n"' in text  # escaped as the text format wants
    finally:
        prometheus.close()


# ---------------------------------------------------------------- a real job, over REST


def _slow(value: int) -> int:
    time.sleep(0.001)
    return value


@pytest.fixture
def running_job() -> Iterator[JobHandle]:
    env = StreamEnvironment().set_parallelism(2)
    env.enable_checkpointing(100)
    (env.from_source(NumberSequenceSource(1, 10_000_000), "numbers").uid("numbers")
     .key_by(lambda v: v % 16).map(_slow).uid("slow")
     .sink_to(lambda v: None).uid("sink"))
    handle = env.execute_async("metrics probe")
    try:
        yield handle
    finally:
        handle.cancel()
        assert handle.wait(60).is_terminal


def _get(server: JobRestServer, path: str, token: str = TOKEN) -> tuple[int, str, str]:
    request = urllib.request.Request(f"{server.url}{path}", headers={"Authorization": f"Bearer {token}"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def _wait_for(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.1)


def test_rest_metrics_of_a_running_job(running_job: JobHandle) -> None:
    handle = running_job
    _wait_for(lambda: handle.status is JobStatus.RUNNING)
    _wait_for(lambda: job_metrics(handle).live.checkpoints_completed >= 1
              and job_metrics(handle).live.backpressured_tasks >= 1
              and all(t.report.checkpoints_taken >= 1 for t in job_metrics(handle).tasks))
    server = JobRestServer(handle, TOKEN).start()
    try:
        status, content_type, body = _get(server, f"/jobs/{handle.job_id}/metrics")
        assert (status, content_type) == (200, "application/json")
        data = json.loads(body)
        assert data["jid"] == handle.job_id and data["state"] == "RUNNING"
        tasks = data["tasks"]
        assert sorted((t["vertex"], t["subtask"]) for t in tasks) == sorted(
            {(t["vertex"], t["subtask"]) for t in tasks})  # one entry per task
        assert len(tasks) == 4  # numbers, and slow chained with the sink, at parallelism 2
        assert all(t["records_in"] >= 0 and t["records_in_per_second"] >= 0 for t in tasks)
        assert any(t["backpressure"] != "ok" for t in tasks)
        assert all(t["checkpoints"]["taken"] >= 1 for t in tasks)
        assert data["checkpoints"]["completed"] >= 1
        assert data["checkpoints"]["last_completed"]["size"] > 0
        assert data["records_in_per_second"] > 0

        status, content_type, text = _get(server, "/metrics")
        assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
        families = _families(text)
        assert f'statekit_job_checkpoints_completed_total{{job_id="{handle.job_id}"' in text
        assert len(families["statekit_task_records_in"].samples) == 4

        def observed() -> float:  # checkpoints completed while the API served, observed as they completed
            samples = _families(_get(server, "/metrics")[2])["statekit_job_checkpoint_duration_seconds"].samples
            return sum(s.value for s in samples if s.name.endswith("_count"))

        _wait_for(lambda: observed() >= 1)

        for path in ("/metrics", f"/jobs/{handle.job_id}/metrics"):
            assert _get(server, path, token="wrong")[0] == 401  # behind the same token
    finally:
        server.close()


def test_counts_add_up_when_a_bounded_job_ends() -> None:
    env = StreamEnvironment().set_parallelism(2)
    (env.from_source(NumberSequenceSource(1, 5000), "numbers").uid("numbers")
     .key_by(lambda v: v % 7).map(lambda v: v).uid("map")
     .sink_to(lambda v: None).uid("sink"))
    handle = env.execute_async("counts")
    assert handle.wait(60) is JobStatus.FINISHED
    view = job_metrics(handle)
    by_vertex: dict[int, list[dict[str, Any]]] = {}
    for task in view.to_json()["tasks"]:
        assert task["finished"] is True
        by_vertex.setdefault(task["vertex"], []).append(task)
    totals = [(sum(t["records_in"] for t in ts), sum(t["records_out"] for t in ts)) for _, ts in sorted(by_vertex.items())]
    assert totals == [(5000, 5000), (5000, 0)]  # numbers; map chained with the sink
