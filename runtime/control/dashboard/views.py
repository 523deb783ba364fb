"""What the dashboard's page asks for, in JSON: gathered from the registry, each running job's
REST API (its token read from the registry, as ``statekit savepoint`` does) and the jobs'
checkpoint history files.

A running job answers for itself (``/jobs/<id>``, ``/metrics``, ``/checkpoints``); an ended
job's figures come from what outlived it: its registry entry (state, times, failure, the job
graph) and its history file (every checkpoint, the summary). A job that does not answer within
:data:`REST_TIMEOUT_S` is shown from the registry with ``"live": false`` and the reason; the
dashboard never fails because one job is stuck.

Every function here blocks (HTTP to the jobs, file reads): the server runs them in its thread pool.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from dataclasses import dataclass
from typing import Any

from statekit.runtime.control.checkpoint_history import history_of
from statekit.runtime.control.client import RestClient
from statekit.runtime.control.registry import JobEntry, JobRegistry
from statekit.statefmt.errors import BadInputError, JobError, StatekitError

__all__ = ["Dashboard", "REST_TIMEOUT_S", "OVERVIEW_WORKERS", "ActionError"]

REST_TIMEOUT_S = 2.0
OVERVIEW_WORKERS = 8


class ActionError(Exception):
    """A request the page made that cannot be carried out (its HTTP status and one line)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class _Live:
    """What a running job said (None where it did not answer)."""

    metrics: dict[str, Any] | None
    error: str | None = None


class Dashboard:
    """The dashboard's view of the registry (one per server; thread-safe).

    Args:
        registry: The job registry (default: ``$STATEKIT_HOME``'s).
        timeout: Seconds per request to a job's REST API.
    """

    def __init__(self, registry: JobRegistry | None = None, timeout: float = REST_TIMEOUT_S) -> None:
        self.registry = registry or JobRegistry()
        self.timeout = timeout
        self._configs: dict[str, dict[str, Any]] = {}  # checkpoint configuration per job (static)
        self._recorded: dict[str, tuple[tuple[int, int], dict[str, Any] | None]] = {}
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(OVERVIEW_WORKERS, thread_name_prefix="ui-rest")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------ reading

    def _client(self, entry: JobEntry) -> RestClient:
        return RestClient(entry, self.registry.token(entry.job_id), timeout=self.timeout)

    def _get(self, entry: JobEntry, path: str) -> dict[str, Any]:
        return self._client(entry).request("GET", f"/jobs/{entry.job_id}{path}")

    def _live(self, entry: JobEntry) -> _Live:
        if not entry.running:
            return _Live(None)
        if entry.rest_url is None:
            return _Live(None, "starting: no REST API yet")
        try:
            return _Live(self._get(entry, "/metrics"))
        except JobError as error:
            return _Live(None, str(error))

    def _entry(self, job_id: str) -> JobEntry:
        try:
            return self.registry.find(job_id)
        except JobError as error:
            raise ActionError(404, str(error)) from None

    def jobs(self) -> dict[str, Any]:
        """The jobs overview: every job of the registry, newest first."""
        entries = sorted(self.registry.entries(), key=lambda e: (-e.start_time_ms, e.job_id))
        lives = list(self._pool.map(self._live, entries))
        return {"jobs": [_overview(e, live, self._last_recorded(e)) for e, live in zip(entries, lives, strict=True)],
                "registry": str(self.registry.jobs_dir), "now": _now_ms()}

    def _last_recorded(self, entry: JobEntry) -> dict[str, Any] | None:
        """The last completed checkpoint in an ended job's history file (cached while the file
        does not change: the overview is polled every second)."""
        if entry.running:
            return None  # a running job says so itself
        path = self.registry.history_path(entry.job_id)
        try:
            info = path.stat()
            key = (info.st_mtime_ns, info.st_size)
        except OSError:
            return None
        with self._lock:
            cached = self._recorded.get(entry.job_id)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            completed = [e for e in history_of(entry, self.registry).entries if e.get("status") == "COMPLETED"]
        except StatekitError:
            return None
        last = completed[0] if completed else None
        with self._lock:
            self._recorded[entry.job_id] = (key, last)
        return last

    def job(self, job_id: str) -> dict[str, Any]:
        """One job: its registry facts, graph, tasks (while it runs) and checkpoints."""
        entry = self._entry(job_id)
        live = self._live(entry)
        checkpoints = self._checkpoints(entry, live)
        tasks = (live.metrics or {}).get("tasks") if live.metrics is not None else None
        return {
            "job": _entry_json(entry), "live": live.metrics is not None, "live_error": live.error,
            "plan": entry.plan, "tasks": tasks or [],
            "metrics": None if live.metrics is None else {k: v for k, v in live.metrics.items() if k != "tasks"},
            "checkpoints": checkpoints, "config": self._config(entry, live), "now": _now_ms(),
        }

    def _checkpoints(self, entry: JobEntry, live: _Live) -> dict[str, Any]:
        if live.metrics is not None:
            try:
                stats = self._get(entry, "/checkpoints")
                return {**stats, "source": "job"}
            except JobError:
                pass
        try:
            history = history_of(entry, self.registry)
        except StatekitError as error:
            return {"source": "none", "error": str(error), "history": [], "counts": {}, "summary": {}}
        completed = [e for e in history.entries if e.get("status") == "COMPLETED"]
        return {
            "source": "history", "history-file": history.path, "history": list(history.entries),
            "counts": {**history.counts, "in_progress": 0, "restored": None},
            "summary": history.summary,
            "latest": {"completed": next((e for e in completed if not e.get("is_savepoint")), None),
                       "savepoint": next((e for e in completed if e.get("is_savepoint")), None),
                       "failed": next((e for e in history.entries if e.get("status") == "FAILED"), None)},
        }

    def _config(self, entry: JobEntry, live: _Live) -> dict[str, Any] | None:
        with self._lock:
            known = self._configs.get(entry.job_id)
        if known is not None or live.metrics is None:
            return known
        try:
            config = self._get(entry, "/checkpoints/config")
        except JobError:
            return None
        with self._lock:
            self._configs[entry.job_id] = config
        return config

    def checkpoint(self, job_id: str, checkpoint_id: int) -> dict[str, Any]:
        """One checkpoint with its per-subtask details: from the job while it keeps them, else
        from the history file."""
        entry = self._entry(job_id)
        if entry.running and entry.rest_url is not None:
            try:
                return self._get(entry, f"/checkpoints/details/{checkpoint_id}")
            except JobError:
                pass  # too old for the job's memory, or the job just ended: the file has it
        try:
            details = history_of(entry, self.registry, checkpoint_id).checkpoint
        except BadInputError as error:
            raise ActionError(404, str(error)) from None
        assert details is not None
        return details

    # ------------------------------------------------------------ actions

    def act(self, job_id: str, action: str, target: str | None, drain: bool) -> dict[str, Any]:
        """Start ``savepoint``, ``stop`` (with a savepoint) or ``cancel``; returns the request id
        to follow with :meth:`operation` (cancel: ``{"state"}`` at once)."""
        entry = self._entry(job_id)
        if not entry.running or entry.rest_url is None:
            raise ActionError(409, f"job {entry.job_id} is {entry.status}, not running")
        from statekit.runtime.control.rest import check_savepoint_target

        try:
            if target is not None:
                check_savepoint_target(target)
            if action != "cancel" and target is None and entry.savepoint_dir is None:
                raise BadInputError(f"job {entry.job_id} has no default savepoint directory: enter a directory, "
                                    f"or start the job with `statekit run --savepoint-dir DIR`")
            client = self._client(entry)
            if action == "cancel":
                client.request("PATCH", f"/jobs/{entry.job_id}")
                return {"action": action, "state": "CANCELLING"}
            if action == "savepoint":
                answer = client.request("POST", f"/jobs/{entry.job_id}/savepoints", {"target-directory": target})
            else:
                answer = client.request("POST", f"/jobs/{entry.job_id}/stop", {"targetDirectory": target, "drain": drain})
        except StatekitError as error:
            raise ActionError(400 if isinstance(error, BadInputError) else 409, str(error)) from None
        return {"action": action, "request-id": answer.get("request-id"), "trigger-time": _now_ms()}

    def operation(self, job_id: str, request_id: str) -> dict[str, Any]:
        """Where a savepoint operation stands: ``{"status": IN_PROGRESS|COMPLETED|FAILED,
        "location"?, "failure"?}`` — from the job, else from its registry entry (a stopped job)."""
        entry = self._entry(job_id)
        if entry.running and entry.rest_url is not None:
            try:
                answer = self._get(entry, f"/savepoints/{request_id}")
                return _operation(answer.get("status", {}).get("id"), answer.get("operation") or {})
            except JobError:
                entry = self._entry(job_id)  # it may have ended in between: the registry knows
        outcome = entry.savepoints.get(request_id)
        if outcome is None:
            raise ActionError(404, f"no savepoint operation {request_id} of job {entry.job_id}")
        if outcome.get("in-progress"):
            if entry.running:
                return {"status": "IN_PROGRESS"}
            return {"status": "FAILED", "failure": f"the job ended ({entry.status}) before the savepoint completed"}
        return _operation("COMPLETED", outcome)


def _operation(status: Any, outcome: dict[str, Any]) -> dict[str, Any]:
    if status != "COMPLETED":
        return {"status": "IN_PROGRESS"}
    if "location" in outcome:
        return {"status": "COMPLETED", "location": outcome["location"]}
    cause = outcome.get("failure-cause") or {}
    return {"status": "FAILED", "failure": str(cause.get("stack-trace") or cause.get("class") or outcome)}


def _entry_json(entry: JobEntry) -> dict[str, Any]:
    return {
        "jid": entry.job_id, "name": entry.name, "state": entry.status, "pid": entry.pid,
        "start-time": entry.start_time_ms, "end-time": entry.end_time_ms, "failure": entry.failure,
        "crash-reason": entry.crash_reason, "checkpoint-dir": entry.checkpoint_dir,
        "savepoint-dir": entry.savepoint_dir, "job-file": entry.job_file, "log": entry.log_path,
        "metrics-port": entry.metrics_port, "running": entry.running,
    }


def _overview(entry: JobEntry, live: _Live, recorded: dict[str, Any] | None) -> dict[str, Any]:
    metrics = live.metrics or {}
    last = (metrics.get("checkpoints") or {}).get("last_completed")
    if last is None and recorded is not None:
        last = {"id": recorded.get("id"), "duration_ms": recorded.get("end_to_end_duration"),
                "size": recorded.get("state_size")}
    plan = entry.plan or {}
    return {
        **_entry_json(entry), "live": live.metrics is not None, "live_error": live.error,
        "parallelism": max((int(n.get("parallelism", 1)) for n in plan.get("nodes", [])), default=None),
        "last_checkpoint": last,
        "records_in_per_second": metrics.get("records_in_per_second"),
        "records_out_per_second": metrics.get("records_out_per_second"),
        "backpressured_tasks": metrics.get("backpressured_tasks"),
        "low_watermark": metrics.get("low_watermark"),
        "checkpoints": None if live.metrics is None else {
            k: v for k, v in (metrics.get("checkpoints") or {}).items() if k != "last_completed"},
    }


def _now_ms() -> int:
    return int(time.time() * 1000)
