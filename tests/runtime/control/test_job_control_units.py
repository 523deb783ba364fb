"""Job control without the dataflow engine: registry, REST API and client against a fake job.

The fake job is a real :class:`JobHandle` whose job master (``JobControl``) is a stub, so
everything from the REST API up is exercised as with the engine.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import stat
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.runtime.api.time import parse_duration
from statekit.runtime.control import client as control
from statekit.runtime.control import submission
from statekit.runtime.control.registry import (
    CRASHED,
    JobEntry,
    JobRegistry,
    current_process_entry,
    new_job_id,
    process_start_ticks,
)
from statekit.runtime.control.rest import JobRestServer
from statekit.runtime.dataflow.graph import JobTopology, OperatorDescription
from statekit.runtime.dataflow.job_handle import JobHandle, JobStatus
from statekit.statefmt.errors import BadInputError, JobError


class FakeControl:
    """A job master stub: savepoints are directories, stop finishes, cancel cancels."""

    def __init__(self) -> None:
        self.handle: JobHandle | None = None
        self.release = threading.Event()
        self.release.set()
        self.calls: list[tuple[str | None, bool, bool]] = []

    def trigger_savepoint(self, target_dir: str | None, *, stop: bool, drain: bool) -> concurrent.futures.Future[str]:
        self.calls.append((target_dir, stop, drain))
        future: concurrent.futures.Future[str] = concurrent.futures.Future()

        def complete() -> None:
            self.release.wait(10)
            if target_dir is None:
                future.set_exception(JobError("no default savepoint directory configured"))
                return
            path = os.path.join(target_dir, f"savepoint-{self.handle.job_id[:6]}-{len(self.calls):06x}")  # type: ignore[union-attr]
            os.makedirs(path)
            future.set_result(path)
            if stop:
                self.handle.set_status(JobStatus.FINISHED)  # type: ignore[union-attr]

        threading.Thread(target=complete, daemon=True).start()
        return future

    def cancel(self) -> None:
        assert self.handle is not None
        self.handle.set_status(JobStatus.CANCELLING)
        self.handle.set_status(JobStatus.CANCELED)

    def checkpoint_stats(self) -> dict[str, Any]:
        return {"counts": {"completed": 0, "failed": 0, "in_progress": 0}, "latest": {"completed": None, "savepoint": None},
                "history": []}

    def trigger_checkpoint(self, *, full: bool) -> concurrent.futures.Future[str]:
        future: concurrent.futures.Future[str] = concurrent.futures.Future()
        future.set_result(f"/chk/{self.handle.job_id}/chk-{7 if full else 6}")  # type: ignore[union-attr]
        return future

    def checkpoint_details(self, checkpoint_id: int) -> dict[str, Any] | None:
        return {"id": 6, "subtasks": []} if checkpoint_id == 6 else None

    def checkpoint_config(self) -> dict[str, Any]:
        return {"interval": 100}


def fake_handle(job_id: str | None = None) -> tuple[JobHandle, FakeControl]:
    stub = FakeControl()
    handle = JobHandle(job_id or new_job_id(), "fake-job", JobTopology.of(OperatorDescription("counter", "counter", 2)), None, stub)
    stub.handle = handle
    handle.set_status(JobStatus.RUNNING)
    return handle, stub


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STATEKIT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def served(home: Path) -> Iterator[tuple[JobHandle, FakeControl, str]]:
    """A fake job registered for this process, with its REST API and registry watcher."""
    handle, stub = fake_handle()
    registry = JobRegistry()
    token = registry.register(current_process_entry(handle.job_id, "fake-job"))
    supervisor = submission._Supervisor(registry, handle.job_id, token, None)
    supervisor.job_started(handle)
    yield handle, stub, token
    if not handle.status.is_terminal:
        handle.set_status(JobStatus.FINISHED)
    supervisor.finish("FINISHED", None)


def http(url: str, method: str = "GET", body: Any = None, token: str | None = None,
         header: str = "Authorization") -> tuple[int, dict[str, Any]]:
    headers = {}
    if token is not None:
        headers[header] = f"Bearer {token}" if header == "Authorization" else token
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


# -- registry ------------------------------------------------------------------------------------


def test_register_writes_entry_and_owner_only_token(home: Path) -> None:
    registry = JobRegistry()
    job_id = new_job_id()
    token = registry.register(current_process_entry(job_id, "wc", log_path="/x/job.log"))
    job_dir = home / "jobs" / job_id
    assert stat.S_IMODE((job_dir / "token").stat().st_mode) == 0o600
    assert stat.S_IMODE(job_dir.stat().st_mode) == 0o700
    assert (job_dir / "token").read_text() == token == registry.token(job_id)
    stored = json.loads((job_dir / "job.json").read_text())
    assert stored["job_id"] == job_id and stored["pid"] == os.getpid() and stored["status"] == "CREATED"
    assert not [p for p in job_dir.iterdir() if p.name.startswith(".job.")]
    with pytest.raises(JobError, match="already registered"):
        registry.register(current_process_entry(job_id, "wc"))


def test_find_by_prefix_ambiguous_and_unknown(home: Path) -> None:
    registry = JobRegistry()
    a, b = "ab" + "0" * 30, "ac" + "1" * 30
    for job_id in (a, b):
        registry.register(current_process_entry(job_id, "wc"))
    assert registry.find("ab").job_id == a
    assert registry.find(b.upper()).job_id == b
    with pytest.raises(JobError, match="ambiguous"):
        registry.find("a")
    with pytest.raises(JobError, match="no job ff in the registry"):
        registry.find("ff")
    with pytest.raises(JobError, match="invalid job id"):
        registry.find("../etc")


def test_dead_and_reused_pids_are_crashed_never_running(home: Path) -> None:
    registry = JobRegistry()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = current_process_entry(new_job_id(), "dead")
    registry.register(JobEntry(**{**dead.__dict__, "pid": gone.pid, "status": "RUNNING"}))
    reused = current_process_entry(new_job_id(), "reused")
    registry.register(JobEntry(**{**reused.__dict__, "pid_start": (reused.pid_start or 0) + 1, "status": "RUNNING"}))
    alive = current_process_entry(new_job_id(), "alive")
    registry.register(JobEntry(**{**alive.__dict__, "status": "RUNNING"}))
    finished = current_process_entry(new_job_id(), "done")
    registry.register(JobEntry(**{**finished.__dict__, "pid": gone.pid, "status": "FINISHED"}))

    states = {e.name: (e.status, e.crash_reason) for e in registry.entries()}
    assert states["dead"] == (CRASHED, f"process {gone.pid} is gone")
    assert states["reused"][0] == CRASHED and "belongs to another process" in str(states["reused"][1])
    assert states["alive"] == ("RUNNING", None)
    assert states["done"] == ("FINISHED", None)
    assert process_start_ticks(gone.pid) is None

    with pytest.raises(JobError, match=rf"^no running job {dead.job_id} \(it crashed: process {gone.pid} is gone\)$"):
        control.running_job(dead.job_id[:8])
    with pytest.raises(JobError, match=r"\(it is FINISHED\)"):
        control.running_job(finished.job_id)


@pytest.mark.parametrize(("text", "millis"), [("200ms", 200), ("1s", 1000), ("1.5 s", 1500), ("2min", 120_000),
                                              ("2m", 120_000), ("1h", 3_600_000), ("750", 750), (" 3 SECONDS ", 3000)])
def test_parse_duration(text: str, millis: int) -> None:
    assert parse_duration(text) == millis


@pytest.mark.parametrize("text", ["", "ms", "abc", "0s", "-1s", "5 parsecs", "1e400s", "nan s", "0.1ms"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(BadInputError, match="invalid duration"):
        parse_duration(text)


# -- REST API ------------------------------------------------------------------------------------


def test_rest_refuses_requests_without_the_token() -> None:
    handle, _ = fake_handle()
    server = JobRestServer(handle, "s3cret").start()
    try:
        for path in ("/jobs", f"/jobs/{handle.job_id}", f"/jobs/{handle.job_id}/checkpoints", "/nowhere"):
            assert http(server.url + path)[0] == 401
            code, body = http(server.url + path, token="wrong")
            assert code == 401 and body["errors"][0].startswith("Unauthorized")
        assert http(server.url + f"/jobs/{handle.job_id}", "PATCH")[0] == 401
        assert http(server.url + f"/jobs/{handle.job_id}/savepoints", "POST", {"target-directory": "/tmp"})[0] == 401
        assert handle.status is JobStatus.RUNNING
        assert http(server.url + "/jobs", token="s3cret") == (200, {"jobs": [{"id": handle.job_id, "status": "RUNNING"}]})
        assert http(server.url + "/jobs", token="s3cret", header="X-Statekit-Token")[0] == 200
    finally:
        server.close()


def test_rest_endpoints_and_errors(tmp_path: Path) -> None:
    handle, stub = fake_handle()
    outcomes: list[tuple[str, dict[str, Any]]] = []
    server = JobRestServer(handle, "t", on_savepoint=lambda t, o: outcomes.append((t, o))).start()
    base, jid = server.url, handle.job_id
    try:
        code, details = http(f"{base}/jobs/{jid}", token="t")
        assert code == 200 and details["jid"] == jid and details["state"] == "RUNNING" and details["end-time"] == -1
        assert http(f"{base}/jobs/overview", token="t")[1]["jobs"][0]["name"] == "fake-job"
        assert http(f"{base}/jobs/{jid}/checkpoints", token="t")[1]["counts"]["completed"] == 0
        assert http(f"{base}/jobs/{'0' * 32}", token="t") == (404, {"errors": [f"Job {'0' * 32} not found"]})
        assert http(f"{base}/jobs/{jid}/nothing", token="t")[0] == 404
        assert http(f"{base}/jobs/{jid}/savepoints/feed", token="t")[0] == 404
        assert http(f"{base}/jobs/{jid}/checkpoints", "PUT", {}, token="t")[0] == 405
        assert http(f"{base}/jobs/{jid}/checkpoints", "POST", {"checkpointType": "SOME"}, token="t")[0] == 400
        for body, expected in (({}, 6), ({"checkpointType": "FULL"}, 7)):
            code, answer = http(f"{base}/jobs/{jid}/checkpoints", "POST", body, token="t")
            assert code == 202
            status = http(f"{base}/jobs/{jid}/checkpoints/{answer['request-id']}", token="t")[1]
            assert status == {"status": {"id": "COMPLETED"},
                              "operation": {"location": f"/chk/{jid}/chk-{expected}", "checkpoint-id": expected}}
        assert http(f"{base}/jobs/{jid}/savepoints/{answer['request-id']}", token="t")[0] == 404  # not a savepoint
        assert http(f"{base}/jobs/{jid}/checkpoints/details/6", token="t") == (200, {"id": 6, "subtasks": []})
        assert http(f"{base}/jobs/{jid}/checkpoints/details/5", token="t")[0] == 404
        assert http(f"{base}/jobs/{jid}/checkpoints/details/x", token="t")[0] == 400
        assert http(f"{base}/jobs/{jid}/checkpoints/config", token="t") == (200, {"interval": 100})
        assert http(f"{base}/jobs/{jid}/savepoints", "POST", b"{nope", token="t")[0] == 400
        assert http(f"{base}/jobs/{jid}/savepoints", "POST", {"cancel-job": "yes"}, token="t")[0] == 400

        stub.release.clear()
        code, answer = http(f"{base}/jobs/{jid}/savepoints", "POST", {"target-directory": str(tmp_path)}, token="t")
        assert code == 202
        trigger = answer["request-id"]
        assert http(f"{base}/jobs/{jid}/savepoints/{trigger}", token="t")[1] == {"status": {"id": "IN_PROGRESS"}}
        stub.release.set()
        assert server.wait_fetched(0.2) is False
        location = control._poll_trigger(control.RestClient(_entry(handle, server), "t"), trigger, deadline=1e18)
        assert Path(location["location"]).parent == tmp_path and server.wait_fetched(1)
        assert [t for t, _ in outcomes] == [trigger, trigger]  # triggered, then its outcome
        assert outcomes[0][1]["in-progress"] is True and outcomes[0][1]["operation"] == "savepoint"
        assert outcomes[1][1] == location

        failed = http(f"{base}/jobs/{jid}/savepoints", "POST", {}, token="t")[1]["request-id"]
        result = control._poll_trigger(control.RestClient(_entry(handle, server), "t"), failed, deadline=1e18)
        assert result == {"failure-cause": {"class": "JobError", "stack-trace": "no default savepoint directory configured"}}

        assert http(f"{base}/jobs/{jid}", "PATCH", token="t") == (202, {})
        assert handle.status is JobStatus.CANCELED
        code, body = http(f"{base}/jobs/{jid}/cancel", "POST", token="t")
        assert code == 409 and "CANCELED" in body["errors"][0]
        assert http(f"{base}/jobs/{jid}/stop", "POST", {"targetDirectory": str(tmp_path)}, token="t")[0] == 409
    finally:
        server.close()


def _entry(handle: JobHandle, server: JobRestServer) -> JobEntry:
    return JobEntry(job_id=handle.job_id, name=handle.job_name, pid=os.getpid(), pid_start=None, status="RUNNING",
                    start_time_ms=0, host="127.0.0.1", port=server.port)


# -- client and CLI against a fake job in this process -------------------------------------------


def test_cli_list_savepoint_stop(served: tuple[JobHandle, FakeControl, str], tmp_path: Path) -> None:
    handle, stub, _ = served
    runner = CliRunner()
    listed = runner.invoke(cli, ["--json", "list"])
    assert listed.exit_code == 0, listed.output
    [job] = json.loads(listed.stdout)["jobs"]
    assert job["job_id"] == handle.job_id and job["state"] == "RUNNING" and job["rest_url"].startswith("http://127.0.0.1:")
    text = runner.invoke(cli, ["list"])
    assert handle.job_id in text.stdout and "RUNNING" in text.stdout

    os.chdir(tmp_path)
    taken = runner.invoke(cli, ["savepoint", handle.job_id[:6], "sps"])
    assert taken.exit_code == 0, taken.output
    path = taken.stdout.strip()
    assert Path(path).parent == tmp_path / "sps" and Path(path).is_dir()
    assert stub.calls[-1] == (str(tmp_path / "sps"), False, False)

    stopped = runner.invoke(cli, ["--json", "stop", handle.job_id, "--savepoint-path", str(tmp_path / "final"), "--drain"])
    assert stopped.exit_code == 0, stopped.output
    answer = json.loads(stopped.stdout)
    assert answer["operation"] == "stop" and answer["job_state"] == "FINISHED" and Path(answer["location"]).is_dir()
    assert stub.calls[-1] == (str(tmp_path / "final"), True, True)
    assert json.loads(runner.invoke(cli, ["--json", "list"]).stdout) == {"schema_version": 1, "jobs": []}
    assert json.loads(runner.invoke(cli, ["--json", "list", "--all"]).stdout)["jobs"][0]["state"] == "FINISHED"

    again = runner.invoke(cli, ["savepoint", handle.job_id, str(tmp_path)])
    assert again.exit_code == 2
    assert again.stderr.strip() == f"statekit: error: no running job {handle.job_id} (it is FINISHED)"


def test_cli_cancel_and_savepoint_failure(served: tuple[JobHandle, FakeControl, str]) -> None:
    handle, _, _ = served
    runner = CliRunner()
    failed = runner.invoke(cli, ["savepoint", handle.job_id])
    assert failed.exit_code == 2
    assert failed.stderr.strip() == (f"statekit: error: job {handle.job_id} has no default savepoint directory: "
                                     "give TARGET_DIR, or start the job with `statekit run --savepoint-dir DIR`")
    cancelled = runner.invoke(cli, ["cancel", handle.job_id[:10]])
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stdout.strip() == f"Cancelled job {handle.job_id}."
    assert JobRegistry().get(handle.job_id).status == "CANCELED"
    assert runner.invoke(cli, ["cancel", handle.job_id]).exit_code == 2


def test_cli_unknown_job_and_bad_options(home: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    unknown = runner.invoke(cli, ["cancel", "abc123"])
    assert unknown.exit_code == 2
    assert unknown.stderr.startswith("statekit: error: no job abc123 in the registry")
    assert runner.invoke(cli, ["list"]).stdout.strip() == "No running jobs."
    job = tmp_path / "job.py"
    job.write_text("print('never runs')\n")
    cases = {
        ("run", str(tmp_path / "missing.py")): "job file not found",
        ("run", "--checkpoint-interval", "soon", str(job)): "invalid checkpoint interval 'soon'",
        ("run", "-p", "0", str(job)): "parallelism must be at least 1",
        ("run", "-p", "8", "--max-parallelism", "4", str(job)): "larger than max parallelism",
        ("run", "--bogus", str(job)): "No such option: --bogus",
        ("run", "--state-backend", "memory", str(job)): "'memory' is not one of",
        ("run", "-s", str(tmp_path), str(job)): "not a checkpoint or savepoint directory",
        ("savepoint", "abc", "--timeout", "0s"): "invalid timeout",
    }
    for args, message in cases.items():
        result = runner.invoke(cli, list(args))
        assert result.exit_code == 2, (args, result.output)
        assert message in result.stderr, (args, result.stderr)
    assert not (home / "jobs").exists() or not any((home / "jobs").iterdir())


def test_cancel_with_savepoint(served: tuple[JobHandle, FakeControl, str], tmp_path: Path) -> None:
    handle, stub, _ = served
    result = CliRunner().invoke(cli, ["--json", "cancel", handle.job_id, "--with-savepoint", str(tmp_path)])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["operation"] == "cancel" and answer["job_state"] == "CANCELED" and Path(answer["location"]).is_dir()
    assert stub.calls == [(str(tmp_path), False, False)]


def test_outcome_of_a_stop_survives_the_server(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(submission, "FETCH_GRACE_S", 0.2)
    handle, _ = fake_handle()
    registry = JobRegistry()
    token = registry.register(current_process_entry(handle.job_id, "fake-job"))
    supervisor = submission._Supervisor(registry, handle.job_id, token, None)
    supervisor.job_started(handle)
    entry = registry.get(handle.job_id)
    client = control.RestClient(entry, token)
    trigger = client.request("POST", f"/jobs/{handle.job_id}/stop", {"targetDirectory": str(tmp_path)})["request-id"]
    assert handle.wait(5) is JobStatus.FINISHED
    supervisor.finish("FINISHED", None)  # never fetched: the server waited FETCH_GRACE_S, then closed
    assert registry.get(handle.job_id).status == "FINISHED"
    outcome = control._poll_trigger(client, trigger, deadline=1e18)
    assert Path(outcome["location"]).parent == tmp_path
