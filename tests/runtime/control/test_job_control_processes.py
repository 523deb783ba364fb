"""Job control across processes: ``statekit run`` (detached and attached) with a job script
whose job master is a stub (no dataflow), so that process handling is tested fast:
registration, REST API of a background job, SIGKILL shown as CRASHED, SIGTERM cancels,
failures before start reported with the log tail.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.runtime.control.registry import JobRegistry, process_alive

FAKE_JOB = '''
"""A job without dataflow: savepoints are empty directories; stop finishes, cancel cancels."""
import concurrent.futures, os, sys
from statekit.runtime.dataflow.graph import JobTopology, OperatorDescription
from statekit.runtime.dataflow.job_handle import JobHandle, JobStatus
from statekit.runtime.dataflow.run_options import get_run_options, notify_job_listeners

class Master:
    def trigger_savepoint(self, target_dir, *, stop, drain):
        future = concurrent.futures.Future()
        path = os.path.join(target_dir, "savepoint-" + handle.job_id[:6] + "-" + os.urandom(3).hex())
        os.makedirs(path)
        future.set_result(path)
        if stop:
            handle.set_status(JobStatus.FINISHED)
        return future

    def cancel(self):
        handle.set_status(JobStatus.CANCELED)

    def checkpoint_stats(self):
        return {"counts": {"completed": 0, "failed": 0, "in_progress": 0}, "latest": {}, "history": []}

if sys.argv[1] == "--fail-early":
    raise RuntimeError("boom before the job started")
options = get_run_options()
handle = JobHandle(options.job_id, "fake", JobTopology.of(OperatorDescription("counter", "counter", 1)), None, Master())
notify_job_listeners(handle)
handle.set_status(JobStatus.RUNNING)
print("fake job running", flush=True)
handle.wait(float(sys.argv[1]))
handle.set_status(JobStatus.FINISHED)
'''

STATEKIT = [sys.executable, "-m", "statekit.cli.main"]


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """STATEKIT_HOME in tmp_path (for this process and children); kills leftover jobs on teardown."""
    home = tmp_path / "home"
    monkeypatch.setenv("STATEKIT_HOME", str(home))
    yield {**os.environ, "STATEKIT_HOME": str(home)}
    for entry in JobRegistry(home).entries():
        if process_alive(entry.pid, entry.pid_start) and entry.pid != os.getpid():
            os.kill(entry.pid, signal.SIGKILL)


@pytest.fixture
def job_file(tmp_path: Path) -> str:
    path = tmp_path / "fake_job.py"
    path.write_text(FAKE_JOB)
    return str(path)


def submit(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*STATEKIT, "run", "--detached", *args], env=env, capture_output=True, text=True, timeout=60)


def test_detached_job_list_savepoint_cancel(env: dict[str, str], job_file: str, tmp_path: Path) -> None:
    submitted = submit(env, "-p", "2", job_file, "60")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{32}", job_id)
    assert f"Job has been submitted with JobID {job_id}" in submitted.stderr
    entry = JobRegistry().get(job_id)
    assert entry.status == "RUNNING" and entry.log_path == str(Path(env["STATEKIT_HOME"]) / "jobs" / job_id / "job.log")
    assert process_alive(entry.pid, entry.pid_start) and entry.pid != os.getpid()

    runner = CliRunner()
    [listed] = json.loads(runner.invoke(cli, ["--json", "list"]).stdout)["jobs"]
    assert (listed["job_id"], listed["state"], listed["pid"]) == (job_id, "RUNNING", entry.pid)
    taken = runner.invoke(cli, ["savepoint", job_id[:7], str(tmp_path / "sp")])
    assert taken.exit_code == 0, taken.output
    assert Path(taken.stdout.strip()).parent == tmp_path / "sp"
    cancelled = runner.invoke(cli, ["cancel", job_id])
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stdout.strip() == f"Cancelled job {job_id}."
    _wait_exit(entry.pid, entry.pid_start)
    assert JobRegistry().get(job_id).status == "CANCELED"
    assert "fake job running" in Path(entry.log_path or "").read_text()
    assert json.loads(runner.invoke(cli, ["--json", "list"]).stdout) == {"schema_version": 1, "jobs": []}


def test_killed_job_shows_as_crashed(env: dict[str, str], job_file: str, tmp_path: Path) -> None:
    job_id = submit(env, job_file, "60").stdout.strip()
    entry = JobRegistry().get(job_id)
    os.kill(entry.pid, signal.SIGKILL)
    _wait_exit(entry.pid, entry.pid_start)
    runner = CliRunner()
    assert runner.invoke(cli, ["list"]).stdout.strip() == "No running jobs."
    [listed] = json.loads(runner.invoke(cli, ["--json", "list", "--all"]).stdout)["jobs"]
    assert listed["state"] == "CRASHED" and listed["crash_reason"] == f"process {entry.pid} is gone"
    text = runner.invoke(cli, ["list", "--all"]).stdout
    assert "CRASHED" in text and "RUNNING" not in text
    refused = runner.invoke(cli, ["savepoint", job_id, str(tmp_path)])
    assert refused.exit_code == 2
    assert refused.stderr.strip() == f"statekit: error: no running job {job_id} (it crashed: process {entry.pid} is gone)"


def test_detached_job_dying_before_start_fails_with_log_tail(env: dict[str, str], job_file: str) -> None:
    failed = submit(env, job_file, "--fail-early")
    assert failed.returncode == 1, failed.stderr
    assert failed.stdout == ""
    assert re.match(r"statekit: error: job [0-9a-f]{32} (failed|exited with code 1 before it ran)", failed.stderr)
    assert "boom before the job started" in failed.stderr.split("; log ")[-1]
    assert len(failed.stderr.strip().splitlines()) == 1


def test_detached_bad_input_keeps_exit_2(env: dict[str, str], job_file: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad_args.py"
    bad.write_text("import argparse\nargparse.ArgumentParser().parse_args()\n")
    failed = submit(env, str(bad), "--no-such-flag")
    assert failed.returncode == 2, failed.stderr
    assert "exited with code 2" in failed.stderr or "the job script exited with code 2" in failed.stderr
    assert "unrecognized arguments: --no-such-flag" in failed.stderr


def test_attached_run_finishes_and_sigterm_cancels(env: dict[str, str], job_file: str) -> None:
    runner = CliRunner()
    finished = runner.invoke(cli, ["--json", "run", job_file, "0"])
    assert finished.exit_code == 0, finished.output
    result = json.loads(finished.stdout.split("fake job running\n")[-1])
    assert result["state"] == "FINISHED" and result["detached"] is False
    assert JobRegistry().get(result["job_id"]).status == "FINISHED"

    attached = subprocess.Popen([*STATEKIT, "run", job_file, "60"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        job_id = _wait_running()
        attached.send_signal(signal.SIGTERM)
        out, err = attached.communicate(timeout=30)
    finally:
        attached.kill()
    assert attached.returncode == 128 + signal.SIGTERM, err
    assert f"Job with JobID {job_id} was cancelled." in out
    assert JobRegistry().get(job_id).status == "CANCELED"


def test_attached_script_failure_exits_1(env: dict[str, str], job_file: str) -> None:
    failed = CliRunner().invoke(cli, ["run", job_file, "--fail-early"])
    assert failed.exit_code == 1
    where = re.fullmatch(rf"statekit: error: job script {re.escape(job_file)} failed: RuntimeError: boom before "
                         rf"the job started \(at {re.escape(job_file)}:(\d+), in <module>\)", failed.stderr.strip())
    assert where is not None, failed.stderr
    line = where.group(1)
    [entry] = JobRegistry().entries()
    assert entry.status == "FAILED" and entry.failure == f"RuntimeError: boom before the job started (at {job_file}:{line}, in <module>)"


def _wait_running(timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = [e for e in JobRegistry().entries() if e.status == "RUNNING" and e.port is not None]
        if running:
            return running[0].job_id
        time.sleep(0.05)
    raise AssertionError("no job became RUNNING")


def _wait_exit(pid: int, start: int | None, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while process_alive(pid, start):
        assert time.monotonic() < deadline, f"process {pid} still alive"
        time.sleep(0.02)
