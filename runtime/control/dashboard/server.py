"""The dashboard's HTTP server: a starlette app on uvicorn, on 127.0.0.1 only.

Routes (all behind :class:`~statekit.runtime.control.dashboard.access.AccessMiddleware`)::

    GET  /                                    the page (static/index.html, with the CSRF token and poll interval)
    GET  /static/<file>                       its script and style sheet
    GET  /api/jobs                            the jobs overview
    GET  /api/jobs/<jid>                      one job: graph, tasks, checkpoints, configuration
    GET  /api/jobs/<jid>/checkpoints/<cid>    one checkpoint's per-subtask details
    POST /api/jobs/<jid>/actions              {"action": "savepoint"|"stop"|"cancel", "target"?, "drain"?}
    GET  /api/jobs/<jid>/operations/<rid>     where a savepoint (or stop) request stands

Errors are ``{"error": "one line"}`` with 400 (bad request), 404 (unknown job, checkpoint or
request), 409 (the job does not run or refused), 401/403 (access).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from statekit.runtime.control.dashboard.views import ActionError, Dashboard
from statekit.runtime.control.registry import JobRegistry
from statekit.statefmt.errors import BadInputError

__all__ = ["DashboardOptions", "DashboardApp", "DashboardServer", "create_app", "serve", "LOCALHOST", "STATIC_FILES"]

LOCALHOST = "127.0.0.1"
STATIC_FILES = ("index.html", "dashboard.js", "dashboard.css")
_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
_NO_STORE = {"Cache-Control": "no-store"}
_PAGE_HEADERS = {**_NO_STORE, "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
                 "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"}


@dataclass(frozen=True)
class DashboardOptions:
    """How ``statekit ui`` serves.

    Attributes:
        port: Port on 127.0.0.1 (0: a free one).
        poll_ms: How often the page refreshes its figures.
        token: The one-time token (None: a new random one).
    """

    port: int = 0
    poll_ms: int = 1000
    token: str | None = None


def _static(name: str) -> bytes:
    return resources.files("statekit.runtime.control.dashboard").joinpath("static", name).read_bytes()


class DashboardApp:
    """The starlette application with its sessions and data (``port`` is set once bound)."""

    def __init__(self, options: DashboardOptions, registry: JobRegistry | None = None) -> None:
        from starlette.applications import Starlette
        from starlette.middleware import Middleware
        from starlette.routing import Route

        from statekit.runtime.control.dashboard.access import AccessMiddleware, Sessions

        self.options = options
        self.port = options.port
        self.sessions = Sessions(options.token)
        self.data = Dashboard(registry)
        self.app = Starlette(
            routes=[
                Route("/", self.page),
                Route("/static/{name}", self.static),
                Route("/api/jobs", self.jobs),
                Route("/api/jobs/{jid}", self.job),
                Route("/api/jobs/{jid}/checkpoints/{cid}", self.checkpoint),
                Route("/api/jobs/{jid}/actions", self.action, methods=["POST"]),
                Route("/api/jobs/{jid}/operations/{rid}", self.operation),
            ],
            middleware=[Middleware(AccessMiddleware, sessions=self.sessions, port=lambda: self.port)],
        )

    def url(self) -> str:
        """The address to open, with the one-time token."""
        return f"http://{LOCALHOST}:{self.port}/?token={self.sessions.token}"

    # ------------------------------------------------------------ routes (sync: run in the thread pool)

    def page(self, request: Any) -> Any:
        from starlette.responses import HTMLResponse

        html = _static("index.html").decode()
        html = html.replace("{{csrf}}", request.state.csrf).replace("{{poll_ms}}", str(self.options.poll_ms))
        return HTMLResponse(html, headers=_PAGE_HEADERS)

    def static(self, request: Any) -> Any:
        from starlette.responses import PlainTextResponse, Response

        name = request.path_params["name"]
        if name not in STATIC_FILES or name == "index.html":
            return PlainTextResponse("404: no such file", 404)
        return Response(_static(name), media_type=_TYPES[name[name.rindex("."):]], headers=_NO_STORE)

    def jobs(self, request: Any) -> Any:
        return _json(self.data.jobs)

    def job(self, request: Any) -> Any:
        return _json(lambda: self.data.job(request.path_params["jid"]))

    def checkpoint(self, request: Any) -> Any:
        text = request.path_params["cid"]
        if not text.isdigit() or len(text) > 18:
            return _error(400, f"checkpoint id {text!r} is not a number")
        return _json(lambda: self.data.checkpoint(request.path_params["jid"], int(text)))

    async def action(self, request: Any) -> Any:
        from starlette.concurrency import run_in_threadpool

        try:
            body = json.loads(await request.body() or b"{}")
        except ValueError:
            return _error(400, "the request body is not JSON")
        if not isinstance(body, dict) or body.get("action") not in ("savepoint", "stop", "cancel"):
            return _error(400, "'action' must be savepoint, stop or cancel")
        target = body.get("target") or None
        if target is not None and not isinstance(target, str):
            return _error(400, "'target' must be a directory")
        drain = bool(body.get("drain", False))
        return await run_in_threadpool(
            _json, lambda: self.data.act(request.path_params["jid"], body["action"], target, drain), 202)

    def operation(self, request: Any) -> Any:
        return _json(lambda: self.data.operation(request.path_params["jid"], request.path_params["rid"]))


def _json(produce: Callable[[], dict[str, Any]], status: int = 200) -> Any:
    from starlette.responses import JSONResponse

    try:
        return JSONResponse(produce(), status, headers=_NO_STORE)
    except ActionError as error:
        return _error(error.status, str(error))


def _error(status: int, message: str) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse({"error": " ".join(message.split())}, status, headers=_NO_STORE)


def create_app(options: DashboardOptions, registry: JobRegistry | None = None) -> DashboardApp:
    """The dashboard application (not yet serving)."""
    return DashboardApp(options, registry)


def _bind(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((LOCALHOST, port))
    except OSError as error:
        sock.close()
        raise BadInputError(f"--port {port}: cannot listen on {LOCALHOST}:{port} ({error.strerror or error}); "
                            f"choose another port (0: any free one)") from None
    sock.listen(128)
    return sock


class DashboardServer:
    """The dashboard bound to its port: :meth:`run` serves in this thread until SIGINT/SIGTERM,
    :meth:`start` in a daemon thread until :meth:`close` (tests, embedding).

    Raises:
        BadInputError: The ui extra is not installed, or the port cannot be bound.
    """

    def __init__(self, options: DashboardOptions, registry: JobRegistry | None = None) -> None:
        try:
            import starlette  # noqa: F401
            import uvicorn
        except ImportError:
            raise BadInputError("statekit ui needs the ui extra (starlette, uvicorn): "
                                "pip install 'statekit[ui]'") from None
        self._socket = _bind(options.port)
        self.dashboard = create_app(options, registry)
        self.dashboard.port = int(self._socket.getsockname()[1])
        config = uvicorn.Config(self.dashboard.app, log_level="warning", lifespan="off", access_log=False,
                                server_header=False, date_header=False)
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The address with the one-time token."""
        return self.dashboard.url()

    @property
    def base_url(self) -> str:
        return f"http://{LOCALHOST}:{self.dashboard.port}"

    def run(self) -> None:
        try:
            self._server.run(sockets=[self._socket])
        finally:
            self._release()

    def start(self) -> DashboardServer:
        self._thread = threading.Thread(target=self.run, name="statekit-ui", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._release()

    def _release(self) -> None:
        self.dashboard.data.close()
        self._socket.close()


def serve(options: DashboardOptions, *, announce: Callable[[str], None], registry: JobRegistry | None = None) -> None:
    """Serve the dashboard until interrupted (SIGINT, SIGTERM); ``announce(url)`` once listening.

    Raises:
        BadInputError: The ui extra is not installed, or the port cannot be bound.
    """
    server = DashboardServer(options, registry)
    announce(server.url)
    server.run()

