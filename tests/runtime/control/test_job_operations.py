"""Operations on a running job from the CLI: ``checkpoint [--full]``, ``savepoint`` into the job's
default directory (and the error that names both ways when there is none), ``savepoint
--detached`` / ``--status``, ``checkpoints history`` while the job runs and after it ended, and
Prometheus on a fixed ``--metrics-port``."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekit.runtime.connectors.sources import NumberSequenceSource
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.statefmt.errors import BadInputError

ROOT = Path(__file__).resolve().parents[3]
JOB = ROOT / "tests" / "runtime" / "jobs" / "event_time_counts.py"
STATEKIT = [sys.executable, "-m", "statekit.cli.main"]


def statekit(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*STATEKIT, *args], capture_output=True, text=True, timeout=timeout)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STATEKIT_HOME", str(tmp_path / "home"))
    return tmp_path


@pytest.fixture
def job(home: Path) -> Iterator[tuple[str, int]]:
    port = free_port()
    done = statekit("run", "--detached", "-p", "2", "--checkpoint-dir", str(home / "chk"), "--checkpoint-interval",
                    "200ms", "--metrics-port", str(port), str(JOB), "--rate", "200")
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    try:
        yield job_id, port
    finally:
        statekit("cancel", job_id)


def _json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _history(job_id: str, *more: str) -> dict[str, Any]:
    return _json(statekit("--json", "checkpoints", "history", job_id, *more))  # type: ignore[no-any-return]


def test_operations_on_a_running_job(job: tuple[str, int], home: Path) -> None:
    job_id, port = job
    refused = statekit("savepoint", job_id[:8])
    assert refused.returncode == 2
    assert "give TARGET_DIR, or start the job with `statekit run --savepoint-dir DIR`" in refused.stderr

    taken = statekit("checkpoint", job_id)
    assert taken.returncode == 0, taken.stderr
    location = Path(taken.stdout.strip())
    assert location.parent == home / "chk" / job_id and location.name.startswith("chk-")
    taken_id = int(location.name[len("chk-"):])  # retention (1) disposes it soon: the history keeps its figures
    full = _json(statekit("--json", "checkpoint", job_id, "--full"))
    assert full["full"] is True and full["location"].endswith(f"chk-{full['checkpoint_id']}")

    trigger = statekit("savepoint", job_id, str(home / "sp"), "--detached")
    assert trigger.returncode == 0, trigger.stderr
    trigger_id = trigger.stdout.strip()
    deadline = time.monotonic() + 60
    while True:
        status = _json(statekit("--json", "savepoint", "--status", trigger_id))
        if status["status"] != "IN_PROGRESS":
            break
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert status["status"] == "COMPLETED" and status["job_id"] == job_id
    assert (Path(status["location"]) / "_metadata").is_file() and Path(status["location"]).parent == home / "sp"
    text = statekit("savepoint", "--status", trigger_id)
    assert text.returncode == 0 and text.stdout.strip() == status["location"]
    assert statekit("savepoint", "--status", "0" * 32).returncode == 2

    history = _history(job_id)
    assert history["state"] == "RUNNING"
    ids = {e["id"] for e in history["entries"]}
    assert full["checkpoint_id"] in ids
    manual = next(e for e in history["entries"] if e["id"] == taken_id)
    assert manual["status"] == "COMPLETED" and manual["external_path"] == str(location)
    assert any(e["is_savepoint"] and e["external_path"] == status["location"] for e in history["entries"])
    assert history["summary"]["end_to_end_duration"]["max"] >= history["summary"]["end_to_end_duration"]["min"] > 0
    details = _history(job_id, "--checkpoint", str(full["checkpoint_id"]))["checkpoint"]
    assert [(s["vertex"], s["subtask"]) for s in details["subtasks"]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(s["status"] == "completed" and s["async_duration"] > 0 and s["ack_timestamp"] for s in details["subtasks"])

    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
            f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:  # no token: the fixed scrape target
        metrics = answer.read().decode()
    assert f'statekit_job_checkpoint_duration_seconds_count{{job_id="{job_id}"' in metrics
    assert "process_resident_memory_bytes" in metrics
    # -p 2 runs on TaskManager processes (--executor auto): each one's process figures, labelled
    for index in (0, 1):
        assert re.search(rf'statekit_taskmanager_resident_memory_bytes{{job_id="{job_id}",.*taskmanager="{index}"}} [1-9]',
                         metrics), metrics
    assert "statekit_task_current_input_watermark_ms{" in metrics

    cancelled = statekit("cancel", job_id)
    assert cancelled.returncode == 0, cancelled.stderr
    after = _history(job_id)  # after the end: the file is all there is
    assert after["state"] == "CANCELED" and {e["id"] for e in after["entries"]} >= ids
    table = statekit("checkpoints", "history", job_id[:6])
    assert table.returncode == 0 and "Summary of completed checkpoints" in table.stdout

    for source in (job_id[:10], str(home / "chk" / job_id)):  # a job id, or a checkpoint directory of a known job
        page = home / "report.html"
        written = _json(statekit("--json", "report", source, "-o", str(page)))
        assert written["timeline"] >= len(ids)
        html = page.read_text()
        assert "Checkpoint statistics over time" in html and html.count('<svg class="timeline"') == 2
        assert "Watermark per subtask" in html  # the window operator's, as it snapshotted


def test_a_job_without_checkpoint_storage_refuses_a_checkpoint() -> None:
    env = StreamEnvironment()
    env.from_source(NumberSequenceSource(1, 10**9), "numbers").uid("numbers").sink_to(lambda v: None).uid("sink")
    handle = env.execute_async("no storage")
    try:
        deadline = time.monotonic() + 30
        while handle.status.value != "RUNNING":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        with pytest.raises(BadInputError, match="stores no checkpoints"):
            handle.trigger_checkpoint().result(10)
    finally:
        handle.cancel()
        handle.wait(30)


def test_history_of_an_unknown_job_is_bad_input(home: Path) -> None:
    done = statekit("checkpoints", "history", "ab" * 16)
    assert done.returncode == 2 and "no job" in done.stderr
