"""A running job's REST API on 127.0.0.1, shaped like Flink's.

Endpoints (every request needs the job's token: ``Authorization: Bearer <token>`` or
``X-Statekit-Token: <token>``; without it the answer is 401)::

    GET   /jobs                                 {"jobs": [{"id", "status"}]}
    GET   /jobs/overview                        {"jobs": [{"jid", "name", "state", "start-time", "end-time", "duration"}]}
    GET   /jobs/<id>                            job details (JobHandle.describe())
    GET   /jobs/<id>/checkpoints                checkpoint statistics (counts, latest, summary, history)
    GET   /jobs/<id>/checkpoints/config         how the job checkpoints
    GET   /jobs/<id>/checkpoints/details/<cid>  one checkpoint with per-subtask details ("subtasks")
    POST  /jobs/<id>/checkpoints                {"checkpointType": "CONFIGURED"|"FULL"} -> 202 {"request-id"}
    GET   /jobs/<id>/checkpoints/<request-id>   {"status": {"id"}, "operation": {"location", "checkpoint-id"}}
    GET   /jobs/<id>/metrics                    per task: records in/out, rates, backpressure, checkpoints (runtime/metrics.py)
    GET   /metrics                              the same in the Prometheus text format (text/plain; version=0.0.4)
    POST  /jobs/<id>/savepoints                 {"target-directory": DIR, "cancel-job": false, "formatType": "CANONICAL"|"NATIVE"} -> 202 {"request-id"}
    GET   /jobs/<id>/savepoints/<request-id>    {"status": {"id": "IN_PROGRESS"|"COMPLETED"}, "operation": {...}}
    POST  /jobs/<id>/stop                       {"targetDirectory": DIR, "drain": false, "formatType": ...} -> 202 {"request-id"}
    PATCH /jobs/<id>   (also POST /jobs/<id>/cancel)   cancel -> 202 {}

Errors are ``{"errors": ["one line"]}`` with the HTTP status (400, 401, 404, 405, 408, 409,
413, 500, 503). A completed operation is ``{"location": path}`` or ``{"failure-cause":
{"class", "stack-trace"}}``.

Connections: every socket read or write times out after ``request_timeout`` seconds (an
idle connection is closed without an answer); at most ``max_connections`` are open at
once. A new connection beyond that closes the oldest one that has not yet sent a complete
request, or, when every open connection is being answered, gets ``503``. So idle or slow
clients, authenticated or not, never keep the API from answering.
"""

from __future__ import annotations

import concurrent.futures
import hmac
import json
import logging
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from statekit.runtime.control.registry import check_job_id
from statekit.runtime.jobmaster.metrics import job_metrics
from statekit.statefmt.errors import BadInputError, StatekitError

if TYPE_CHECKING:
    from statekit.runtime.dataflow.job_handle import JobHandle

__all__ = [
    "JobRestServer",
    "SavepointOutcomeListener",
    "LOCALHOST",
    "TOKEN_HEADER",
    "MAX_CONNECTIONS",
    "REQUEST_TIMEOUT_S",
    "check_savepoint_target",
    "MAX_BODY_BYTES",
    "PROMETHEUS_CONTENT_TYPE",
    "EPHEMERAL_PROTOCOLS",
]

log = logging.getLogger("statekit.runtime")

LOCALHOST = "127.0.0.1"
TOKEN_HEADER = "X-Statekit-Token"
MAX_BODY_BYTES = 64 * 1024
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_CONNECTIONS = 32
REQUEST_TIMEOUT_S = 5.0
EPHEMERAL_PROTOCOLS = frozenset({"memory"})

SavepointOutcomeListener = Callable[[str, dict[str, Any]], None]

_JOB_PATH = re.compile(r"^/jobs/([^/]+)(/.*)?$")
_TRIGGER_PATH = re.compile(r"^/savepoints/([^/]+)$")
_CHECKPOINT_TRIGGER_PATH = re.compile(r"^/checkpoints/([0-9a-f]{32})$")
_DETAILS_PATH = re.compile(r"^/checkpoints/details/([^/]+)$")
_CHECKPOINT_ID = re.compile(r"chk-([0-9]+)/?$")
_CONTENT_LENGTH = re.compile(r"[0-9]{1,18}")  # longer: malformed, 400 (as nginx answers a length past 64 bits)
_PROTOCOL = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")


def check_savepoint_target(target: str, *, absolute: bool = False) -> str:
    """``target`` if a savepoint written there outlives the job; the REST API and CLI refuse others.

    An in-memory filesystem (``memory://``) lives in the job's process: a savepoint there
    vanishes with the job, so it is refused (also inside an fsspec chain ``a::memory://``). A
    control character (NUL, newline, ...) is never part of a directory name anyone means.

    Args:
        target: The savepoint directory.
        absolute: Refuse a relative local path (the REST API: the job's working directory,
            ``/`` for a detached job, is not the caller's; the CLI sends absolute paths).

    Raises:
        BadInputError: The target is on an in-memory filesystem, holds a control character,
            or is relative (with ``absolute``).
    """
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in target):
        raise BadInputError(f"savepoint target {target!r} holds a control character (NUL, newline, ...); "
                            "give a plain directory path")
    if absolute and not _absolute_target(target):
        raise BadInputError(f"savepoint target {target!r} is a relative path: the job would resolve it against its "
                            "own working directory, not yours; give an absolute path or a URL (s3://...)")
    for part in target.split("::"):
        match = _PROTOCOL.match(part.strip())
        if match is not None and match.group(1).lower() in EPHEMERAL_PROTOCOLS:
            raise BadInputError(f"savepoint target {target} is an in-memory filesystem: a savepoint there "
                                f"vanishes with the job's process; use a local directory or a durable URL (s3://...)")
    return target


def _absolute_target(target: str) -> bool:
    """An absolute local path, a ``file:`` URL of one, or a URL of another filesystem."""
    last = target.split("::")[-1].strip()
    match = _PROTOCOL.match(last)
    if match is not None and match.group(1).lower() not in ("file", "local"):
        return True
    path = last[match.end():] if match is not None else last.removeprefix("file:").removeprefix("local:")
    return path.startswith("/")


class _HttpError(Exception):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Trigger:
    """One asynchronous savepoint operation (plain savepoint, cancel-with or stop-with)."""

    def __init__(self, future: concurrent.futures.Future[str], *, checkpoint: bool = False) -> None:
        self.future = future
        self.fetched = False
        self.checkpoint = checkpoint

    def outcome(self) -> dict[str, Any] | None:
        if not self.future.done():
            return None
        error = self.future.exception()
        if error is None:
            location = self.future.result()
            if not self.checkpoint:
                return {"location": location}
            found = _CHECKPOINT_ID.search(location)
            return {"location": location or None, "checkpoint-id": int(found.group(1)) if found else None}
        return {"failure-cause": {"class": type(error).__name__, "stack-trace": " ".join(str(error).split())}}


class JobRestServer:
    """The REST API of one job, served from daemon threads on 127.0.0.1.

    Args:
        handle: The job.
        token: Requests must carry this token.
        on_savepoint: Called with ``(trigger_id, {"in-progress": True, "operation", "trigger-time"})``
            when a savepoint operation starts and with ``(trigger_id, outcome)`` when it completes
            (outcome ``{"location": path}`` or ``{"failure-cause": {...}}``).
        port: 0 picks a free port.
        max_connections: Connections open at once (see the module docstring).
        request_timeout: Seconds a socket read or write may wait.
    """

    def __init__(
        self,
        handle: JobHandle,
        token: str,
        *,
        on_savepoint: SavepointOutcomeListener | None = None,
        port: int = 0,
        max_connections: int = MAX_CONNECTIONS,
        request_timeout: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.handle = handle
        self._token = token.encode()
        self._on_savepoint = on_savepoint
        self._triggers: dict[str, _Trigger] = {}
        self._changed = threading.Condition()
        self._httpd = _Server(self, port, max_connections=max_connections, request_timeout=request_timeout)
        self._thread: threading.Thread | None = None
        from statekit.runtime.jobmaster.prometheus import JobPrometheus

        self.prometheus = JobPrometheus(handle)  # observes checkpoints from now on

    @property
    def port(self) -> int:
        """The port the server listens on."""
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL, ``http://127.0.0.1:<port>``."""
        return f"http://{LOCALHOST}:{self.port}"

    def start(self) -> JobRestServer:
        """Serve in a daemon thread; returns ``self``."""
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2}, name=f"rest-{self.handle.job_id[:6]}", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and release the port."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()
        self.prometheus.close()

    def wait_fetched(self, timeout: float) -> bool:
        """Wait until every savepoint operation is complete and its result was fetched.

        A stop-with-savepoint ends the job; the process keeps serving until the client has
        read the savepoint path (or ``timeout`` seconds passed). Returns whether all were.
        """
        def settled() -> bool:
            return all(t.future.done() and t.fetched for t in self._triggers.values())

        with self._changed:
            return self._changed.wait_for(settled, timeout)

    # -- operations (called from request threads) ---------------------------------------------

    def authorized(self, headers: Any) -> bool:
        supplied = headers.get(TOKEN_HEADER)
        auth = headers.get("Authorization")
        if supplied is None and auth is not None and auth[:7].lower() == "bearer ":
            supplied = auth[7:]
        return supplied is not None and hmac.compare_digest(supplied.strip().encode(), self._token)

    def jobs(self) -> dict[str, Any]:
        return {"jobs": [{"id": self.handle.job_id, "status": self.handle.status.value}]}

    def overview(self) -> dict[str, Any]:
        details = self.handle.describe()
        end = details["end-time"]
        now_or_end = end if end != -1 else _now_ms()
        return {
            "jobs": [
                {
                    "jid": details["jid"],
                    "name": details["name"],
                    "state": details["state"],
                    "start-time": details["start-time"],
                    "end-time": end,
                    "duration": now_or_end - details["start-time"],
                }
            ]
        }

    def trigger(self, target_dir: str | None, *, stop: bool, drain: bool, cancel: bool, native: bool = False) -> str:
        status = self.handle.status
        if status.is_terminal:
            raise _HttpError(HTTPStatus.CONFLICT, f"Job {self.handle.job_id} is {status.value}; savepoints need a running job")
        try:
            if target_dir is not None:
                check_savepoint_target(target_dir, absolute=True)
            future = self.handle.trigger_savepoint(target_dir, stop=stop, drain=drain, native=native)
        except StatekitError as error:
            raise _HttpError(HTTPStatus.BAD_REQUEST, str(error)) from None
        trigger_id = uuid.uuid4().hex
        with self._changed:
            self._triggers[trigger_id] = _Trigger(future)
        if self._on_savepoint is not None:  # before the outcome can be recorded over it
            operation = "stop" if stop else "cancel" if cancel else "savepoint"
            self._on_savepoint(trigger_id, {"in-progress": True, "operation": operation, "trigger-time": _now_ms()})
        # off the thread that completes the future: cancel() may wait for that very thread
        future.add_done_callback(lambda done: threading.Thread(
            target=self._completed, args=(trigger_id, done, cancel), name=f"savepoint-{trigger_id[:6]}").start())
        return trigger_id

    def _completed(self, trigger_id: str, future: concurrent.futures.Future[str], cancel: bool) -> None:
        if cancel and future.exception() is None:
            self.handle.cancel()
        with self._changed:
            outcome = self._triggers[trigger_id].outcome()
            self._changed.notify_all()
        if self._on_savepoint is not None and outcome is not None:
            self._on_savepoint(trigger_id, outcome)

    def trigger_checkpoint(self, full: bool) -> str:
        status = self.handle.status
        if status.is_terminal:
            raise _HttpError(HTTPStatus.CONFLICT, f"Job {self.handle.job_id} is {status.value}; checkpoints need a running job")
        future = self.handle.trigger_checkpoint(full=full)
        if future.done() and isinstance(future.exception(), BadInputError):
            raise _HttpError(HTTPStatus.BAD_REQUEST, str(future.exception()))
        trigger_id = uuid.uuid4().hex
        with self._changed:
            self._triggers[trigger_id] = _Trigger(future, checkpoint=True)
        future.add_done_callback(lambda _done: self._notify())
        return trigger_id

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def trigger_status(self, trigger_id: str, *, checkpoint: bool = False) -> dict[str, Any]:
        with self._changed:
            trigger = self._triggers.get(trigger_id)
            if trigger is None or trigger.checkpoint != checkpoint:
                what = "checkpoint" if checkpoint else "savepoint"
                raise _HttpError(HTTPStatus.NOT_FOUND, f"There is no {what} operation with triggerId={trigger_id}")
            outcome = trigger.outcome()
            if outcome is None:
                return {"status": {"id": "IN_PROGRESS"}}
            trigger.fetched = True
            self._changed.notify_all()
        return {"status": {"id": "COMPLETED"}, "operation": outcome}

    def cancel(self) -> dict[str, Any]:
        status = self.handle.status
        if status.is_terminal:
            raise _HttpError(HTTPStatus.CONFLICT, f"Job {self.handle.job_id} is {status.value}; it cannot be cancelled")
        self.handle.cancel()
        return {}


class _Server(ThreadingHTTPServer):
    """A thread per connection, at most ``max_connections`` connections open at once.

    Invariant: ``_connections`` holds every open connection that counts against the bound,
    oldest first, mapped to whether its request was received completely (then it is being
    answered and is never closed to make room).
    """

    daemon_threads = True
    request_queue_size = 64

    def __init__(self, app: JobRestServer, port: int, *, max_connections: int, request_timeout: float) -> None:
        self.app = app
        self.max_connections = max(1, max_connections)
        self.request_timeout = request_timeout
        self._connections: dict[socket.socket, bool] = {}
        self._connections_lock = threading.Lock()
        self._connections_changed = threading.Condition(self._connections_lock)
        super().__init__((LOCALHOST, port), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            admitted = self._make_room()
            if admitted:
                self._connections[request] = False
        if not admitted:
            _refuse_busy(request, self.max_connections)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def _make_room(self) -> bool:
        """Close the oldest connection still waiting for its request if the bound is reached."""
        if len(self._connections) < self.max_connections:
            return True
        idle = next((conn for conn, answering in self._connections.items() if not answering), None)
        if idle is None:
            return False
        del self._connections[idle]
        try:
            idle.shutdown(socket.SHUT_RDWR)  # its thread reads end-of-file and ends
        except OSError:
            pass
        return True

    def answering(self, request: socket.socket) -> None:
        """The request on ``request`` was received completely: the connection is now busy."""
        with self._connections_lock:
            if request in self._connections:
                self._connections[request] = True

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.pop(request, None)
            self._connections_changed.notify_all()
        super().shutdown_request(request)

    def server_close(self) -> None:
        """Stop listening; let answers being written finish (at most ``request_timeout``), then end
        every open connection (their threads then exit).

        A stop-with-savepoint closes the server once its result was fetched: the answer carrying
        it is still being written then, and must reach the client whole.
        """
        super().server_close()
        with self._connections_lock:
            self._connections_changed.wait_for(lambda: not any(self._connections.values()), self.request_timeout)
            open_connections, self._connections = list(self._connections), {}
        for conn in open_connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that broke (client gone, timeout) is not the job's business: no traceback."""
        log.debug("REST connection from %s failed", client_address, exc_info=True)


def _refuse_busy(request: socket.socket, limit: int) -> None:
    body = json.dumps({"errors": [f"Service unavailable: {limit} requests are being answered; retry"]}).encode()
    head = (f"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    try:
        request.settimeout(0.5)
        request.sendall(head + body)
    except OSError:
        pass


class _Handler(BaseHTTPRequestHandler):
    server_version = "statekit"
    sys_version = ""
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.request_timeout)  # every read and write of this connection

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not logged (the job's output belongs to the job)."""

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        app = self.server.app
        try:
            if not app.authorized(self.headers):
                self.server.answering(self.request)
                self._reply(
                    HTTPStatus.UNAUTHORIZED,
                    {"errors": ["Unauthorized: send the job's token (Authorization: Bearer <token>); "
                                "statekit reads it from the job registry"]},
                    {"WWW-Authenticate": 'Bearer realm="statekit"'},
                )
                return
            self._raw_body = self._read_body()
            self.server.answering(self.request)
            parts = self.path.split("?", 1)
            if parts[0].rstrip("/") == "/metrics":  # Prometheus scrapes text, not JSON
                self._allow(method, "GET")
                self._reply_text(HTTPStatus.OK, app.prometheus.exposition().decode(), PROMETHEUS_CONTENT_TYPE)
                return
            status, body = self._route(app, method, parts)
            self._reply(status, body)
        except _HttpError as error:
            self._reply(error.status, {"errors": [str(error)]})
        except Exception as error:  # noqa: BLE001 - a request must never kill the server
            self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"errors": [f"Internal server error: {type(error).__name__}: {error}"]})

    def _read_body(self) -> bytes:
        """The request body, exactly ``Content-Length`` bytes (none without the header)."""
        if self.headers.get("Transfer-Encoding") is not None:
            raise _HttpError(HTTPStatus.BAD_REQUEST, "Transfer-Encoding is not supported; send a Content-Length")
        values = self.headers.get_all("Content-Length") or []
        if not values:
            return b""
        text = values[0].strip()
        if len(values) > 1 or _CONTENT_LENGTH.fullmatch(text) is None:
            shown = ", ".join(values)
            raise _HttpError(HTTPStatus.BAD_REQUEST, f"bad Content-Length {shown!r}: expected one number of bytes")
        length = int(text)
        if length > MAX_BODY_BYTES:
            raise _HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"request body over {MAX_BODY_BYTES} bytes")
        try:
            raw = self.rfile.read(length) if length else b""
        except TimeoutError:
            self.close_connection = True
            raise _HttpError(HTTPStatus.REQUEST_TIMEOUT,
                             f"request body not received within {self.server.request_timeout:g} s") from None
        if len(raw) < length:
            raise _HttpError(HTTPStatus.BAD_REQUEST, f"request body shorter than its Content-Length ({len(raw)} < {length})")
        return raw

    def _route(self, app: JobRestServer, method: str, parts: list[str]) -> tuple[HTTPStatus, dict[str, Any]]:
        path = parts[0].rstrip("/") or "/"
        if path == "/jobs":
            self._allow(method, "GET")
            return HTTPStatus.OK, app.jobs()
        if path == "/jobs/overview":
            self._allow(method, "GET")
            return HTTPStatus.OK, app.overview()
        match = _JOB_PATH.match(path)
        if match is None:
            raise _HttpError(HTTPStatus.NOT_FOUND, f"Not found: {path}")
        job_id, rest = match.group(1), match.group(2) or ""
        try:
            check_job_id(job_id)
        except BadInputError as error:
            raise _HttpError(HTTPStatus.BAD_REQUEST, str(error)) from None
        if job_id != app.handle.job_id:
            raise _HttpError(HTTPStatus.NOT_FOUND, f"Job {job_id} not found")
        if rest == "":
            if method == "PATCH":
                return HTTPStatus.ACCEPTED, app.cancel()
            self._allow(method, "GET", "PATCH")
            return HTTPStatus.OK, app.handle.describe()
        if rest == "/checkpoints":
            if method == "POST":
                trigger_id = app.trigger_checkpoint(_checkpoint_type(self._json_body()) == "FULL")
                return HTTPStatus.ACCEPTED, {"request-id": trigger_id}
            self._allow(method, "GET", "POST")
            return HTTPStatus.OK, app.handle.checkpoint_stats()
        if rest == "/checkpoints/config":
            self._allow(method, "GET")
            return HTTPStatus.OK, app.handle.checkpoint_config()
        details = _DETAILS_PATH.match(rest)
        if details is not None:
            self._allow(method, "GET")
            return HTTPStatus.OK, _checkpoint_details(app.handle, details.group(1))
        checkpoint_trigger = _CHECKPOINT_TRIGGER_PATH.match(rest)
        if checkpoint_trigger is not None:
            self._allow(method, "GET")
            return HTTPStatus.OK, app.trigger_status(checkpoint_trigger.group(1), checkpoint=True)
        if rest == "/metrics":
            self._allow(method, "GET")
            return HTTPStatus.OK, job_metrics(app.handle).to_json()
        if rest == "/cancel":
            self._allow(method, "POST")
            return HTTPStatus.ACCEPTED, app.cancel()
        if rest == "/savepoints":
            self._allow(method, "POST")
            body = self._json_body()
            target = _optional_str(body, "target-directory")
            cancel = _optional_bool(body, "cancel-job")
            trigger_id = app.trigger(target, stop=False, drain=False, cancel=cancel, native=_native(body))
            return HTTPStatus.ACCEPTED, {"request-id": trigger_id}
        if rest == "/stop":
            self._allow(method, "POST")
            body = self._json_body()
            target = _optional_str(body, "targetDirectory")
            drain = _optional_bool(body, "drain")
            trigger_id = app.trigger(target, stop=True, drain=drain, cancel=False, native=_native(body))
            return HTTPStatus.ACCEPTED, {"request-id": trigger_id}
        trigger = _TRIGGER_PATH.match(rest)
        if trigger is not None:
            self._allow(method, "GET")
            return HTTPStatus.OK, app.trigger_status(trigger.group(1))
        raise _HttpError(HTTPStatus.NOT_FOUND, f"Not found: {path}")

    def _allow(self, method: str, *allowed: str) -> None:
        if method not in allowed:
            raise _HttpError(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} is not allowed on {self.path}; use {' or '.join(allowed)}")

    def _json_body(self) -> dict[str, Any]:
        raw = self._raw_body
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except ValueError as error:
            raise _HttpError(HTTPStatus.BAD_REQUEST, f"request body is not JSON: {error}") from None
        if not isinstance(body, dict):
            raise _HttpError(HTTPStatus.BAD_REQUEST, "request body must be a JSON object")
        return body

    def _reply(self, status: HTTPStatus, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        self._reply_text(status, json.dumps(body, default=str), "application/json", headers)

    def _reply_text(self, status: HTTPStatus, text: str, content_type: str,
                    headers: dict[str, str] | None = None) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


def _optional_str(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None or (isinstance(value, str) and value):
        return value
    raise _HttpError(HTTPStatus.BAD_REQUEST, f"{key!r} must be a non-empty string")


def _native(body: dict[str, Any]) -> bool:
    """Flink's ``formatType``: ``CANONICAL`` (default) or ``NATIVE`` (the backends' own files)."""
    value = body.get("formatType", "CANONICAL")
    if isinstance(value, str) and value.upper() in ("CANONICAL", "NATIVE"):
        return value.upper() == "NATIVE"
    raise _HttpError(HTTPStatus.BAD_REQUEST, "'formatType' must be CANONICAL or NATIVE")


def _checkpoint_type(body: dict[str, Any]) -> str:
    """Flink's ``checkpointType``: ``CONFIGURED`` (default: as the job checkpoints) or ``FULL``
    (reuses no file of an earlier checkpoint); ``INCREMENTAL`` is what CONFIGURED is for a job
    with incremental checkpoints."""
    value = body.get("checkpointType", "CONFIGURED")
    if isinstance(value, str) and value.upper() in ("CONFIGURED", "FULL", "INCREMENTAL"):
        return value.upper()
    raise _HttpError(HTTPStatus.BAD_REQUEST, "'checkpointType' must be CONFIGURED, FULL or INCREMENTAL")


def _checkpoint_details(handle: JobHandle, text: str) -> dict[str, Any]:
    if not text.isdigit() or len(text) > 18:
        raise _HttpError(HTTPStatus.BAD_REQUEST, f"checkpoint id {text!r} is not a number")
    details = handle.checkpoint_details(int(text))
    if details is None:
        raise _HttpError(HTTPStatus.NOT_FOUND, f"Checkpoint {text} of job {handle.job_id} is unknown or no longer "
                                               f"kept in memory; `statekit checkpoints history` reads every one")
    return details


def _optional_bool(body: dict[str, Any], key: str) -> bool:
    value = body.get(key, False)
    if isinstance(value, bool):
        return value
    raise _HttpError(HTTPStatus.BAD_REQUEST, f"{key!r} must be true or false")


def _now_ms() -> int:
    return int(time.time() * 1000)
