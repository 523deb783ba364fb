"""Who may use the dashboard: a one-time token, session cookies, CSRF tokens, the Host header.

The rules (checked by :class:`AccessMiddleware` before any route runs):

1. The ``Host`` header names ``127.0.0.1:<port>`` or ``localhost:<port>``; anything else is 403
   (a page of another site that resolves its own name to 127.0.0.1 — DNS rebinding — never
   reaches a route).
2. ``?token=T`` with the server's one-time token opens a session: the answer is a redirect to the
   same path without the token, with the session cookie (HttpOnly, SameSite=Strict). The token
   works once; a wrong or used one is 403.
3. Otherwise the request needs a valid session cookie, else 401.
4. A POST also needs the session's CSRF token in ``X-CSRF-Token`` and, when the browser sends an
   ``Origin``, the dashboard's own origin; else 403.

Tokens are compared in constant time. Sessions live as long as the server (in memory).
"""

from __future__ import annotations

import hmac
import secrets
import threading
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response

__all__ = ["Sessions", "AccessMiddleware", "CSRF_HEADER", "cookie_name", "MAX_SESSIONS"]

CSRF_HEADER = "X-CSRF-Token"
MAX_SESSIONS = 64  # the oldest session ends when more are opened (a token opens only one anyway)


def cookie_name(port: int) -> str:
    """Cookies are per host, not per port: each dashboard names its own."""
    return f"statekit-ui-{port}"


class Sessions:
    """The one-time token and the sessions it opened (thread-safe).

    Args:
        token: The one-time token (default: a new random one).
    """

    def __init__(self, token: str | None = None) -> None:
        self.token = token or secrets.token_urlsafe(32)
        self._redeemed = False
        self._sessions: dict[str, str] = {}  # session id -> its CSRF token, oldest first
        self._lock = threading.Lock()

    def redeem(self, token: str) -> str | None:
        """A new session id for the one-time token (None: wrong, or already used)."""
        with self._lock:
            if self._redeemed or not hmac.compare_digest(token.encode(), self.token.encode()):
                return None
            self._redeemed = True
            session = secrets.token_urlsafe(32)
            self._sessions[session] = secrets.token_urlsafe(24)
            while len(self._sessions) > MAX_SESSIONS:
                del self._sessions[next(iter(self._sessions))]
            return session

    def csrf(self, session: str | None) -> str | None:
        """The CSRF token of a live session (None: no such session)."""
        if not session:
            return None
        with self._lock:
            for known, csrf in self._sessions.items():
                if hmac.compare_digest(known.encode(), session.encode()):
                    return csrf
        return None


_UNAUTHORIZED_PAGE = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>statekit ui</title></head>
<body style="font:15px system-ui,sans-serif;margin:40px">
<h1>401: no session</h1><p>Open the address <code>statekit ui</code> printed (it carries a one-time token).
The token works once; start <code>statekit ui</code> again for a new one.</p></body></html>"""


class AccessMiddleware(BaseHTTPMiddleware):
    """Applies the module's rules to every request (see the module docstring)."""

    def __init__(self, app: Any, sessions: Sessions, port: Callable[[], int]) -> None:
        super().__init__(app)
        self.sessions = sessions
        self.port = port

    async def dispatch(self, request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        port = self.port()
        if request.headers.get("host", "") not in (f"127.0.0.1:{port}", f"localhost:{port}"):
            return PlainTextResponse("403: this dashboard answers only to 127.0.0.1 and localhost", 403)
        token = request.query_params.get("token")
        if token is not None:
            return self._open_session(request, token, port)
        csrf = self.sessions.csrf(request.cookies.get(cookie_name(port)))
        if csrf is None:
            if request.url.path.startswith("/api/"):
                return JSONResponse({"error": "no session: open the address statekit ui printed"}, 401)
            return Response(_UNAUTHORIZED_PAGE, 401, media_type="text/html")
        if request.method not in ("GET", "HEAD"):
            origin = request.headers.get("origin")
            if origin is not None and origin not in (f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
                return JSONResponse({"error": f"cross-origin request from {origin} refused"}, 403)
            if not hmac.compare_digest(request.headers.get(CSRF_HEADER, "").encode(), csrf.encode()):
                return JSONResponse({"error": f"missing or wrong {CSRF_HEADER}"}, 403)
        request.state.csrf = csrf
        return await call_next(request)

    def _open_session(self, request: Request, token: str, port: int) -> Response:
        session = self.sessions.redeem(token)
        if session is None:
            return PlainTextResponse("403: wrong or already used token; start `statekit ui` again for a new one", 403)
        rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
        target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(cookie_name(port), session, httponly=True, samesite="strict", path="/")
        return response
