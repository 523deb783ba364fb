"""The REST API under hostile or broken clients: malformed Content-Length, idle and slow
connections, a bound on open connections; and savepoint targets that would vanish with the job
(``memory://``), refused by the REST API and by the CLI."""

from __future__ import annotations

import concurrent.futures
import json
import os
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.runtime.control import submission
from statekit.runtime.control.registry import JobRegistry, current_process_entry, new_job_id
from statekit.runtime.control.rest import JobRestServer
from statekit.runtime.dataflow.graph import JobTopology, OperatorDescription
from statekit.runtime.dataflow.job_handle import JobHandle, JobStatus

TOKEN = "t0ken"


class Stub:
    """A job master whose savepoints block until ``release`` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.release.set()
        self.calls: list[tuple[str | None, bool, bool]] = []

    def trigger_savepoint(self, target_dir: str | None, *, stop: bool, drain: bool) -> concurrent.futures.Future[str]:
        self.calls.append((target_dir, stop, drain))
        self.release.wait(20)
        future: concurrent.futures.Future[str] = concurrent.futures.Future()
        future.set_result(str(target_dir))
        return future

    def cancel(self) -> None:
        pass

    def checkpoint_stats(self) -> dict[str, Any]:
        return {"counts": {}}


def job() -> tuple[JobHandle, Stub]:
    stub = Stub()
    handle = JobHandle(new_job_id(), "j", JobTopology.of(OperatorDescription("op", "op", 1)), None, stub)
    handle.set_status(JobStatus.RUNNING)
    return handle, stub


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[tuple[JobRestServer, JobHandle, Stub]]:
    options = getattr(request, "param", {})
    handle, stub = job()
    rest = JobRestServer(handle, TOKEN, **options).start()
    yield rest, handle, stub
    stub.release.set()
    rest.close()


def raw(port: int, data: bytes, timeout: float = 5.0) -> tuple[int, dict[str, Any]]:
    """Send ``data`` on a fresh connection; the status and JSON body of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(data)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def post(handle: JobHandle, *headers: str, body: bytes = b"") -> bytes:
    lines = [f"POST /jobs/{handle.job_id}/savepoints HTTP/1.1", "Host: x", f"Authorization: Bearer {TOKEN}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


# -- Content-Length ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["-5", "abc", "1_0", "+3", " 0x10", "5, 5", "1e3", "99999999999999999999999"])
def test_malformed_content_length_is_400_with_a_json_error(server: tuple[JobRestServer, JobHandle, Stub],
                                                           value: str) -> None:
    rest, handle, stub = server
    status, body = raw(rest.port, post(handle, f"Content-Length: {value}"))
    assert status == 400
    [message] = body["errors"]
    assert message.startswith("bad Content-Length") and "expected one number of bytes" in message
    assert stub.calls == []


def test_content_length_edge_cases(server: tuple[JobRestServer, JobHandle, Stub], tmp_path: Path) -> None:
    rest, handle, stub = server
    status, body = raw(rest.port, post(handle, "Content-Length: 100000"))
    assert (status, body) == (413, {"errors": ["request body over 65536 bytes"]})
    status, body = raw(rest.port, post(handle, "Content-Length: 2", "Content-Length: 2", body=b"{}"))
    assert status == 400 and body["errors"][0].startswith("bad Content-Length")
    status, body = raw(rest.port, post(handle, "Transfer-Encoding: chunked", body=b"2\r\n{}\r\n0\r\n\r\n"))
    assert status == 400 and "Transfer-Encoding is not supported" in body["errors"][0]
    target = json.dumps({"target-directory": str(tmp_path)}).encode()
    status, body = raw(rest.port, post(handle, f"Content-Length: {len(target)}", body=target))
    assert status == 202 and stub.calls == [(str(tmp_path), False, False)]


@pytest.mark.parametrize("server", [{"request_timeout": 0.5}], indirect=True)
def test_a_body_shorter_than_announced_times_out_with_408(server: tuple[JobRestServer, JobHandle, Stub]) -> None:
    rest, handle, stub = server
    started = time.monotonic()
    status, body = raw(rest.port, post(handle, "Content-Length: 50", body=b'{"target-'))
    assert status == 408 and body["errors"] == ["request body not received within 0.5 s"]
    assert time.monotonic() - started < 3 and stub.calls == []


# -- connections ---------------------------------------------------------------------------------


def _closed_by_server(conn: socket.socket, within: float) -> bool:
    conn.settimeout(within)
    try:
        return conn.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


@pytest.mark.parametrize("server", [{"request_timeout": 0.5}], indirect=True)
def test_idle_and_half_sent_connections_are_closed(server: tuple[JobRestServer, JobHandle, Stub]) -> None:
    rest, _, _ = server
    idle = socket.create_connection(("127.0.0.1", rest.port))
    partial = socket.create_connection(("127.0.0.1", rest.port))
    partial.sendall(b"GET /jobs HTTP/1.1\r\nHost: x\r\n")  # never finishes its headers
    started = time.monotonic()
    try:
        assert _closed_by_server(idle, within=5) and _closed_by_server(partial, within=5)
        assert 0.3 < time.monotonic() - started < 4
    finally:
        idle.close()
        partial.close()


@pytest.mark.parametrize("server", [{"max_connections": 4, "request_timeout": 60}], indirect=True)
def test_many_idle_connections_do_not_stop_the_api(server: tuple[JobRestServer, JobHandle, Stub]) -> None:
    rest, handle, _ = server
    idle = [socket.create_connection(("127.0.0.1", rest.port)) for _ in range(40)]
    try:
        request = urllib.request.Request(f"{rest.url}/jobs/{handle.job_id}", headers={"Authorization": f"Bearer {TOKEN}"})
        for _ in range(3):
            with urllib.request.urlopen(request, timeout=5) as response:
                assert response.status == 200 and json.loads(response.read())["jid"] == handle.job_id
        closed = sum(_closed_by_server(conn, within=0.2) for conn in idle)
        assert closed >= len(idle) - 4  # the server keeps at most 4 open, oldest idle ones go first
    finally:
        for conn in idle:
            conn.close()


@pytest.mark.parametrize("server", [{"max_connections": 2, "request_timeout": 60}], indirect=True)
def test_connections_being_answered_are_never_dropped_new_ones_get_503(
    server: tuple[JobRestServer, JobHandle, Stub], tmp_path: Path
) -> None:
    rest, handle, stub = server
    stub.release.clear()
    target = json.dumps({"target-directory": str(tmp_path)}).encode()
    busy = [threading.Thread(target=lambda: results.append(raw(rest.port, post(
        handle, f"Content-Length: {len(target)}", body=target), timeout=30))) for _ in range(2)]
    results: list[tuple[int, dict[str, Any]]] = []
    for thread in busy:
        thread.start()
    deadline = time.monotonic() + 10
    while len(stub.calls) < 2:
        assert time.monotonic() < deadline, "the two requests never reached the job"
        time.sleep(0.01)
    status, body = raw(rest.port, b"GET /jobs HTTP/1.1\r\n\r\n")
    assert status == 503 and body["errors"][0].startswith("Service unavailable")
    stub.release.set()
    for thread in busy:
        thread.join(10)
    assert [code for code, _ in results] == [202, 202]


def test_closing_the_server_lets_answers_being_written_finish(
    server: tuple[JobRestServer, JobHandle, Stub], tmp_path: Path
) -> None:
    # a stop-with-savepoint closes the server right after its result was fetched: the answer
    # carrying it must still reach the client whole
    rest, handle, stub = server
    stub.release.clear()
    target = json.dumps({"target-directory": str(tmp_path)}).encode()
    results: list[tuple[int, dict[str, Any]]] = []
    client = threading.Thread(target=lambda: results.append(raw(rest.port, post(
        handle, f"Content-Length: {len(target)}", body=target), timeout=30)))
    client.start()
    deadline = time.monotonic() + 10
    while not stub.calls:
        assert time.monotonic() < deadline, "the request never reached the job"
        time.sleep(0.01)
    closing = threading.Thread(target=rest.close)
    closing.start()
    time.sleep(0.3)
    assert closing.is_alive()  # waiting for the answer being written
    stub.release.set()
    closing.join(10)
    client.join(10)
    assert not closing.is_alive() and [code for code, _ in results] == [202]


# -- savepoint targets that vanish with the job ----------------------------------------------------


@pytest.mark.parametrize("target", ["memory://sp", "MEMORY://sp", "memory:///sp", "simplecache::memory://sp"])
@pytest.mark.parametrize(("endpoint", "key"), [("savepoints", "target-directory"), ("stop", "targetDirectory")])
def test_rest_refuses_memory_savepoint_targets(server: tuple[JobRestServer, JobHandle, Stub], target: str,
                                               endpoint: str, key: str) -> None:
    rest, handle, stub = server
    data = json.dumps({key: target}).encode()
    request = [f"POST /jobs/{handle.job_id}/{endpoint} HTTP/1.1", f"Authorization: Bearer {TOKEN}",
               f"Content-Length: {len(data)}"]
    status, body = raw(rest.port, ("\r\n".join(request) + "\r\n\r\n").encode() + data)
    assert status == 400
    assert body["errors"] == [f"savepoint target {target} is an in-memory filesystem: a savepoint there vanishes "
                              "with the job's process; use a local directory or a durable URL (s3://...)"]
    assert stub.calls == [] and handle.status is JobStatus.RUNNING


def post_target(rest: JobRestServer, handle: JobHandle, endpoint: str, key: str, target: str) -> tuple[int, Any]:
    data = json.dumps({key: target}).encode()
    request = [f"POST /jobs/{handle.job_id}/{endpoint} HTTP/1.1", f"Authorization: Bearer {TOKEN}",
               f"Content-Length: {len(data)}"]
    return raw(rest.port, ("\r\n".join(request) + "\r\n\r\n").encode() + data)


@pytest.mark.parametrize("target", ["/tmp/sp\x00/../etc", "\x00", "/tmp/sp\n", "s3://bucket/sp\x00"])
@pytest.mark.parametrize(("endpoint", "key"), [("savepoints", "target-directory"), ("stop", "targetDirectory")])
def test_rest_refuses_a_savepoint_target_with_a_control_character(server: tuple[JobRestServer, JobHandle, Stub],
                                                                  target: str, endpoint: str, key: str) -> None:
    rest, handle, stub = server
    status, body = post_target(rest, handle, endpoint, key, target)
    assert status == 400, body
    assert body["errors"] == [f"savepoint target {target!r} holds a control character (NUL, newline, ...); give a "
                              "plain directory path"]
    assert stub.calls == [] and handle.status is JobStatus.RUNNING


@pytest.mark.parametrize("target", ["sp", "./sp", "../sp", "file:sp", "file://sp", "local://sp", "simplecache::sp"])
@pytest.mark.parametrize(("endpoint", "key"), [("savepoints", "target-directory"), ("stop", "targetDirectory")])
def test_rest_refuses_a_relative_savepoint_target(server: tuple[JobRestServer, JobHandle, Stub], target: str,
                                                  endpoint: str, key: str) -> None:
    """A detached job's working directory is ``/``: a relative target would land there, not where
    the caller meant; the CLI sends absolute paths."""
    rest, handle, stub = server
    status, body = post_target(rest, handle, endpoint, key, target)
    assert status == 400, body
    assert body["errors"] == [f"savepoint target {target!r} is a relative path: the job would resolve it against its "
                              "own working directory, not yours; give an absolute path or a URL (s3://...)"]
    assert stub.calls == [] and handle.status is JobStatus.RUNNING


@pytest.mark.parametrize("target", ["/tmp/sp", "file:///tmp/sp", "file:/tmp/sp", "s3://bucket/sp"])
def test_rest_accepts_absolute_savepoint_targets(server: tuple[JobRestServer, JobHandle, Stub], target: str) -> None:
    rest, handle, stub = server
    status, body = post_target(rest, handle, "savepoints", "target-directory", target)
    assert status == 202, body
    assert stub.calls == [(target, False, False)]


def test_the_cli_sends_a_relative_target_as_an_absolute_path(served: tuple[JobHandle, Stub], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    handle, stub = served
    monkeypatch.chdir(tmp_path)
    stub.release.set()
    result = CliRunner().invoke(cli, ["savepoint", handle.job_id, "relative-dir"])
    assert stub.calls and stub.calls[0][0] == str(tmp_path / "relative-dir"), (stub.calls, result.output)


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[JobHandle, Stub]]:
    monkeypatch.setenv("STATEKIT_HOME", str(tmp_path / "home"))
    handle, stub = job()
    registry = JobRegistry()
    token = registry.register(current_process_entry(handle.job_id, "j"))
    supervisor = submission._Supervisor(registry, handle.job_id, token, None)
    supervisor.job_started(handle)
    yield handle, stub
    handle.set_status(JobStatus.FINISHED)
    supervisor.finish("FINISHED", None)


@pytest.mark.parametrize("command", [["savepoint", "{id}", "memory://sp"], ["stop", "{id}", "-p", "memory://sp"],
                                     ["stop", "{id}", "--drain", "--savepoint-path", "memory://sp"],
                                     ["cancel", "{id}", "--with-savepoint", "memory://sp"]])
def test_cli_refuses_memory_savepoint_targets(served: tuple[JobHandle, Stub], command: list[str]) -> None:
    handle, stub = served
    result = CliRunner().invoke(cli, [a.format(id=handle.job_id) for a in command])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == ("statekit: error: savepoint target memory://sp is an in-memory filesystem: a "
                                     "savepoint there vanishes with the job's process; use a local directory or a "
                                     "durable URL (s3://...)")
    assert stub.calls == [] and handle.status is JobStatus.RUNNING


def test_run_refuses_a_memory_savepoint_on_finish(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATEKIT_HOME", str(tmp_path / "home"))
    job_file = tmp_path / "job.py"
    job_file.write_text("raise SystemExit('never runs')\n")
    result = CliRunner().invoke(cli, ["run", "--savepoint-on-finish", "memory://final", str(job_file)])
    assert result.exit_code == 2
    assert result.stderr.strip().startswith("statekit: error: savepoint target memory://final is an in-memory filesystem")
    assert not (tmp_path / "home" / "jobs").exists() or not os.listdir(tmp_path / "home" / "jobs")
