"""Metrics of a job on TaskManager processes, as the job master gathers them from the processes'
reports: the REST metrics of each task (records in and out, backpressure) with the latency
markers' p50/p99, the Prometheus exposition (job latency gauges, per-task counters, per
TaskManager process figures) and the live status line of `statekit run`."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from tm_support import RunningJob

from statekit.cli.renderers.jobs import live_status_line
from statekit.runtime import RunOptions
from statekit.runtime.control.rest import JobRestServer
from statekit.runtime.jobmaster.metrics import job_metrics

pytestmark = pytest.mark.slow

TOKEN = "tm-metrics"


def _get(server: JobRestServer, path: str) -> str:
    request = urllib.request.Request(f"{server.url}{path}", headers={"Authorization": f"Bearer {TOKEN}"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=10) as answer:
        assert answer.status == 200
        body: bytes = answer.read()
    return body.decode()


def _families(text: str) -> dict[str, Any]:
    from prometheus_client.parser import text_string_to_metric_families

    return {family.name: family for family in text_string_to_metric_families(text)}


def test_rest_prometheus_and_status_line_show_what_task_manager_processes_report(tmp_path: Path) -> None:
    # a slow sink chained to the keyed sum backpressures the sources across processes; latency
    # markers go from every source subtask to the sinks every 50 ms
    options = RunOptions(job_args=("--count", "10000000", "--rate", "2000", "--slow-sink", "0.001", "--latency",
                                   str(tmp_path / "latency")),
                         executor="processes", parallelism=2, checkpoint_dir=str(tmp_path / "chk"),
                         checkpoint_interval_ms=200, latency_interval_ms=50)
    with RunningJob(options) as job:
        handle = job.handle

        def ready() -> bool:
            view = job_metrics(handle)
            latency = view.live.latency
            return (len(handle.task_manager_pids()) == 2 and view.live.checkpoints_completed >= 1
                    and latency is not None and latency.samples >= 10 and view.live.backpressured_tasks >= 1
                    and len(view.tasks) == 4 and all(t.report.records_out > 0 for t in view.tasks if t.report.source))

        job.wait_for(ready, "no latency, checkpoint, backpressure and records reported from the TaskManagers")
        pids = {str(pid) for _, pid in handle.task_manager_pids()}
        server = JobRestServer(handle, TOKEN).start()
        try:
            data = json.loads(_get(server, f"/jobs/{handle.job_id}/metrics"))
            text = _get(server, "/metrics")
        finally:
            server.close()
        line = live_status_line(job_metrics(handle).live)

    assert data["jid"] == handle.job_id and data["state"] == "RUNNING"
    tasks = data["tasks"]
    assert sorted((t["name"].split(" (")[0], t["subtask"]) for t in tasks) == [
        ("numbers -> Map", 0), ("numbers -> Map", 1), ("sum -> latency", 0), ("sum -> latency", 1)], tasks
    sources = [t for t in tasks if t["name"].startswith("numbers")]
    sums = [t for t in tasks if t["name"].startswith("sum")]
    assert all(t["records_in"] > 0 and t["records_out"] > 0 for t in sources), sources
    assert sum(t["records_in"] for t in sums) > 0, sums
    assert all(t["backpressure"] in ("ok", "low", "high") for t in tasks)
    assert [t for t in sources if t["backpressure"] != "ok"], sources  # the slow sink holds them back
    assert data["backpressured_tasks"] >= 1
    latency = data["latency"]
    assert latency["samples"] >= 10 and 0 <= latency["p50_ms"] <= latency["p99_ms"] <= latency["max_ms"], latency

    families = _families(text)

    def job_gauge(name: str) -> float:
        (sample,) = [s for s in families[name].samples if s.labels["job_id"] == handle.job_id]
        return float(sample.value)

    assert 0 <= job_gauge("statekit_job_latency_p50_ms") <= job_gauge("statekit_job_latency_p99_ms")
    for name in ("statekit_task_records_in", "statekit_task_records_out"):
        samples = [s for s in families[name].samples if s.labels["job_id"] == handle.job_id]
        assert len(samples) == 4, samples
        assert all(s.value > 0 for s in samples if s.labels["task"].startswith("numbers")), samples
    taken = [s for s in families["statekit_task_checkpoints_taken"].samples if s.labels["job_id"] == handle.job_id]
    assert len(taken) == 4 and all(s.value >= 1 for s in taken), taken
    # each TaskManager process has figures of its own (resident memory, CPU) under its pid
    memory = [s for s in families["statekit_taskmanager_resident_memory_bytes"].samples
              if s.labels["job_id"] == handle.job_id]
    assert {s.labels["pid"] for s in memory} == pids and all(s.value > 0 for s in memory), memory

    plain = re.sub(r"\[/?[a-z ]*\]", "", line)  # without the rich markup
    assert plain.startswith("RUNNING"), line
    rate = re.search(r"in ([\d,]+) rec/s", plain)
    assert rate is not None and int(rate.group(1).replace(",", "")) > 0, line
    done = re.search(r"checkpoints (\d+) done", plain)
    assert done is not None and int(done.group(1)) >= 1, line
    pressure = re.search(r"backpressured (\d+)/4 tasks", plain)
    assert pressure is not None and int(pressure.group(1)) >= 1, line
