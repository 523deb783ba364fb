"""``statekit ui``: a live web dashboard of the jobs in the registry (running and ended), served on
127.0.0.1 by starlette + uvicorn (the ``ui`` extra).

It is a client of each job's REST API (:mod:`statekit.runtime.control.rest`), as Flink's web
frontend is of Flink's REST API, plus the registry and the jobs' checkpoint history files for
what outlives a job. The page is plain HTML, CSS and JavaScript shipped in ``static/`` (no build
step) and polls ``/api/...`` once a second.

Access (Jupyter's way): the server prints its address with a one-time token; the first request
carrying it gets a session cookie and is redirected to the page without the token. Without a
valid session every path answers 401 (403 for a wrong or used token). Every POST must carry the
session's CSRF token (``X-CSRF-Token``) and come from the dashboard's own origin; the Host header
must name 127.0.0.1 or localhost (no DNS rebinding).
"""
