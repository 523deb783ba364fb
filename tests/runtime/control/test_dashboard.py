"""``statekit ui`` over HTTP: who gets in (one-time token, session cookie, CSRF, Host), and what the
page's API answers for running and ended jobs (the browser test: test_dashboard_browser.py)."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from statekit.runtime.control.checkpoint_history import CheckpointHistoryWriter
from statekit.runtime.control.dashboard.server import DashboardOptions, DashboardServer
from statekit.runtime.control.registry import JobRegistry, current_process_entry, new_job_id

TOKEN = "one-time-token-for-tests"


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobRegistry:
    monkeypatch.setenv("STATEKIT_HOME", str(tmp_path / "home"))
    return JobRegistry()


@pytest.fixture
def server(registry: JobRegistry) -> Iterator[DashboardServer]:
    running = DashboardServer(DashboardOptions(token=TOKEN), registry).start()
    try:
        yield running
    finally:
        running.close()


class Browser:
    """A minimal HTTP client that keeps cookies, sends what a browser sends."""

    def __init__(self, server: DashboardServer) -> None:
        self.port = server.dashboard.port
        self.cookie: str | None = None

    def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
                host: str | None = None) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        sent = {"Host": host or f"127.0.0.1:{self.port}", **(headers or {})}
        if self.cookie is not None:
            sent["Cookie"] = self.cookie
        data = None if body is None else json.dumps(body).encode()
        if data is not None:
            sent["Content-Type"] = "application/json"
        try:
            connection.request(method, path, body=data, headers=sent)
            response = connection.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            connection.close()

    def login(self) -> str:
        status, headers, _ = self.request("GET", f"/?token={TOKEN}")
        assert status == 303 and headers["location"] == "/"
        self.cookie = headers["set-cookie"].split(";", 1)[0]
        status, _, page = self.request("GET", "/")
        assert status == 200
        return page.decode().split('name="csrf-token" content="', 1)[1].split('"', 1)[0]


def test_no_token_no_page(server: DashboardServer) -> None:
    browser = Browser(server)
    for path in ("/", "/api/jobs", "/static/dashboard.js"):
        assert browser.request("GET", path)[0] == 401
    assert browser.request("GET", "/?token=wrong")[0] == 403
    status, headers, _ = browser.request("GET", f"/?token={TOKEN}")
    assert status == 303
    cookie = headers["set-cookie"]
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    assert browser.request("GET", f"/?token={TOKEN}")[0] == 403  # one time only
    browser.cookie = cookie.split(";", 1)[0]
    assert browser.request("GET", "/api/jobs")[0] == 200
    browser.cookie = browser.cookie[:-2] + "xx"
    assert browser.request("GET", "/api/jobs")[0] == 401


def test_only_localhost_hosts_and_same_origin_posts_with_the_csrf_token(server: DashboardServer) -> None:
    browser = Browser(server)
    csrf = browser.login()
    assert browser.request("GET", "/api/jobs", host=f"evil.example:{browser.port}")[0] == 403  # DNS rebinding
    assert browser.request("GET", "/api/jobs", host=f"localhost:{browser.port}")[0] == 200
    action = f"/api/jobs/{'a' * 32}/actions"
    body = {"action": "cancel"}
    assert browser.request("POST", action, body)[0] == 403  # no CSRF token
    assert browser.request("POST", action, body, {"X-CSRF-Token": "nope"})[0] == 403
    assert browser.request("POST", action, body, {"X-CSRF-Token": csrf, "Origin": "http://evil.example"})[0] == 403
    status, _, answer = browser.request("POST", action, body, {"X-CSRF-Token": csrf,
                                                               "Origin": f"http://127.0.0.1:{browser.port}"})
    assert status == 404 and "no job" in json.loads(answer)["error"]  # past the checks: the job is unknown
    assert browser.request("POST", action, {"action": "drop"}, {"X-CSRF-Token": csrf})[0] == 400


def test_page_and_its_files(server: DashboardServer) -> None:
    browser = Browser(server)
    browser.login()
    status, headers, page = browser.request("GET", "/")
    assert "default-src 'self'" in headers["content-security-policy"] and b"/static/dashboard.js" in page
    status, headers, script = browser.request("GET", "/static/dashboard.js")
    assert status == 200 and headers["content-type"].startswith("text/javascript") and b"X-CSRF-Token" in script
    assert browser.request("GET", "/static/dashboard.css")[0] == 200
    assert browser.request("GET", "/static/index.html")[0] == 404
    assert browser.request("GET", "/static/../server.py")[0] == 404


def _ended_job(registry: JobRegistry) -> str:
    job_id = new_job_id()
    registry.register(current_process_entry(job_id, "ended job"))
    plan = {"nodes": [{"id": 0, "name": "source", "parallelism": 2, "operators": [{"uid": "source", "name": "source"}]},
                      {"id": 1, "name": "count", "parallelism": 2, "operators": [{"uid": "count", "name": "count"}]}],
            "edges": [{"source": 0, "target": 1, "partitioning": "hash", "side_output": None}]}
    registry.update(job_id, status="FINISHED", end_time_ms=int(time.time() * 1000), plan=plan)
    writer = CheckpointHistoryWriter(registry.history_path(job_id))
    for checkpoint_id, duration in ((1, 30), (2, 50)):
        writer.append({"id": checkpoint_id, "status": "COMPLETED", "is_savepoint": False, "trigger_timestamp": 1,
                       "end_to_end_duration": duration, "state_size": 100 * checkpoint_id,
                       "external_path": f"/chk/chk-{checkpoint_id}",
                       "subtasks": [{"vertex": 0, "subtask": 0, "status": "completed", "sync_duration": 0.5}]})
    writer.append({"id": 3, "status": "FAILED", "failure_message": "expired", "subtasks": []})
    return job_id


def test_an_ended_job_is_shown_from_the_registry_and_its_history_file(server: DashboardServer,
                                                                       registry: JobRegistry) -> None:
    job_id = _ended_job(registry)
    browser = Browser(server)
    csrf = browser.login()
    jobs = json.loads(browser.request("GET", "/api/jobs")[2])["jobs"]
    assert [(j["jid"], j["state"], j["live"], j["parallelism"]) for j in jobs] == [(job_id, "FINISHED", False, 2)]
    assert jobs[0]["last_checkpoint"] == {"id": 2, "duration_ms": 50, "size": 200}
    job = json.loads(browser.request("GET", f"/api/jobs/{job_id}")[2])
    assert job["plan"]["edges"] == [{"source": 0, "target": 1, "partitioning": "hash", "side_output": None}]
    checkpoints = job["checkpoints"]
    assert checkpoints["source"] == "history" and [e["id"] for e in checkpoints["history"]] == [3, 2, 1]
    assert checkpoints["counts"]["completed"] == 2 and checkpoints["counts"]["failed"] == 1
    assert checkpoints["summary"]["end_to_end_duration"] == {"min": 30, "avg": 40.0, "max": 50}
    status, _, details = browser.request("GET", f"/api/jobs/{job_id[:8]}/checkpoints/2")
    assert status == 200 and json.loads(details)["subtasks"][0]["sync_duration"] == 0.5
    assert browser.request("GET", f"/api/jobs/{job_id}/checkpoints/9")[0] == 404
    assert browser.request("GET", f"/api/jobs/{job_id}/checkpoints/x")[0] == 400
    status, _, answer = browser.request("POST", f"/api/jobs/{job_id}/actions", {"action": "savepoint"},
                                        {"X-CSRF-Token": csrf})
    assert status == 409 and "FINISHED" in json.loads(answer)["error"]


def test_a_taken_port_is_bad_input(registry: JobRegistry) -> None:
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "statekit.cli.main", "ui", "--port", str(port)],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().startswith(f"statekit: error: --port {port}: cannot listen on 127.0.0.1:{port}")
