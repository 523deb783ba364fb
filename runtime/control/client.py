"""The job control client, flink-like: find jobs and control running ones (submitting them:
:mod:`statekit.runtime.control.submission`).

Controlling (``statekit list / savepoint / stop / cancel``): find the job in
the registry by id or unique id prefix, then call its REST API on 127.0.0.1 with the
job's token.

Every failure is a :class:`JobError` (exit 2) or :class:`JobFailedError` (exit 1) with a
one-line message, e.g. ``no running job 3f2a... (it crashed: process 1234 is gone)``.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

from statekit.runtime.control.registry import CRASHED, JobEntry, JobRegistry
from statekit.runtime.control.results import (
    CancelResult,
    CheckpointResult,
    JobList,
    LastCheckpoint,
    SavepointResult,
    SavepointStatus,
    SavepointTrigger,
)
from statekit.runtime.control.submission import _absolute, _try_get
from statekit.statefmt.errors import (
    BadInputError,
    JobError,
    StatekitError,
)

if TYPE_CHECKING:
    pass

__all__ = [
    "list_jobs",
    "find_job",
    "running_job",
    "RestClient",
    "trigger_savepoint",
    "stop_job",
    "cancel_job",
    "trigger_checkpoint",
    "trigger_savepoint_detached",
    "savepoint_status",
    "LIST_REST_TIMEOUT_S",
    "checkpoint_history",
    "last_checkpoint",
]

LIST_REST_TIMEOUT_S = 2.0  # `statekit list` asks each running job for its last checkpoint this long


# -- results -------------------------------------------------------------------------------


# -- submitting ----------------------------------------------------------------------------


# -- controlling ---------------------------------------------------------------------------


def list_jobs(*, include_all: bool = False) -> JobList:
    """Running jobs (and, with ``include_all``, crashed, finished, failed and cancelled ones)."""
    registry = JobRegistry()
    entries = [e for e in registry.entries() if include_all or e.running]
    return JobList(jobs=tuple(entries), include_all=include_all, registry=str(registry.jobs_dir),
                   last_checkpoints=tuple(last_checkpoint(e) for e in entries),
                   checkpoint_histories=tuple(checkpoint_history(e) for e in entries))


def checkpoint_history(entry: JobEntry) -> tuple[dict[str, Any], ...]:
    """The recent checkpoints of a running job, newest first, as its REST API gives them (id,
    status, mode, trigger time, duration, alignment, full size, bytes written, in-flight bytes);
    empty for a job that does not run or does not answer (a listing never fails)."""
    if not entry.running or entry.rest_url is None:
        return ()
    try:
        client = RestClient(entry, JobRegistry().token(entry.job_id), timeout=LIST_REST_TIMEOUT_S)
        history = client.request("GET", f"/jobs/{entry.job_id}/checkpoints").get("history")
    except JobError:
        return ()
    return tuple(e for e in history if isinstance(e, dict)) if isinstance(history, list) else ()


def last_checkpoint(entry: JobEntry) -> LastCheckpoint | None:
    """The last completed checkpoint of a job: from its REST API while it runs, else from its
    checkpoint directory; ``None`` when it has none or neither answers (a listing never fails)."""
    if entry.running and entry.rest_url is not None:
        try:
            return _rest_last_checkpoint(entry)
        except JobError:
            pass  # it just ended or does not answer: its directory may still tell
    if entry.checkpoint_dir is None:
        return None
    try:
        return _stored_last_checkpoint(entry.checkpoint_dir)
    except (StatekitError, OSError):
        return None


def _rest_last_checkpoint(entry: JobEntry) -> LastCheckpoint | None:
    client = RestClient(entry, JobRegistry().token(entry.job_id), timeout=LIST_REST_TIMEOUT_S)
    latest = (client.request("GET", f"/jobs/{entry.job_id}/checkpoints").get("latest") or {}).get("completed")
    if not isinstance(latest, dict) or latest.get("id") is None:
        return None
    size = latest.get("state_size", latest.get("checkpointed_size"))
    completed = latest.get("latest_ack_timestamp") or latest.get("trigger_timestamp")
    return LastCheckpoint(int(latest["id"]), None if completed is None else int(completed),
                          None if size is None else int(size), latest.get("external_path"))


def _stored_last_checkpoint(job_dir: str) -> LastCheckpoint | None:
    from statekit.readers.listing import list_checkpoints

    complete = [c for c in list_checkpoints(job_dir).listings
                if c.status == "complete" and c.checkpoint_id is not None and c.kind == "checkpoint"]
    if not complete:
        return None
    last = max(complete, key=lambda c: c.checkpoint_id or 0)
    assert last.checkpoint_id is not None
    return LastCheckpoint(last.checkpoint_id, last.created_at_ms, last.size, last.path)


def find_job(reference: str) -> JobEntry:
    """The registry entry of a job id or unique job id prefix."""
    return JobRegistry().find(reference)


def running_job(reference: str) -> JobEntry:
    """The entry of a running job with a REST API.

    Raises:
        JobError: Unknown or ambiguous id, or the job is not running (says why).
    """
    entry = find_job(reference)
    _require_running(entry)
    return entry


def _require_running(entry: JobEntry) -> None:
    if entry.status == CRASHED:
        raise JobError(f"no running job {entry.job_id} (it crashed: {entry.crash_reason})")
    if not entry.running:
        ended = f" ({entry.failure})" if entry.failure else ""
        raise JobError(f"no running job {entry.job_id} (it is {entry.status}{ended})")
    if entry.rest_url is None:
        raise JobError(f"job {entry.job_id} is still starting (no REST API yet); try again in a moment")


class RestClient:
    """Calls one job's REST API with its token (127.0.0.1 only).

    Args:
        entry: The job's registry entry (must have a REST address).
        token: The job's token.
        timeout: Seconds per request.
    """

    def __init__(self, entry: JobEntry, token: str, *, timeout: float = 10.0) -> None:
        if entry.host != "127.0.0.1" or entry.port is None:
            raise JobError(f"job {entry.job_id}: registry names REST address {entry.host}:{entry.port}; "
                           f"only 127.0.0.1 is used")
        self.entry = entry
        self._token = token
        self.timeout = timeout

    @classmethod
    def for_job(cls, entry: JobEntry) -> RestClient:
        """A client with the token read from the registry."""
        return cls(entry, JobRegistry().token(entry.job_id))

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send a request; return the JSON answer.

        Raises:
            JobError: The API refused the request (its first error message) or is unreachable.
        """
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.entry.rest_url}{path}", data=data, method=method, headers={
            "Authorization": f"Bearer {self._token}", "Content-Type": "application/json", "Accept": "application/json"})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(request, timeout=self.timeout) as response:
                answer = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            raise JobError(f"job {self.entry.job_id}: {method} {path} refused (HTTP {error.code}): {_first_error(error)}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as error:  # incl. an answer cut short
            raise _Unreachable(self.entry, error) from None
        if not isinstance(answer, dict):
            raise JobError(f"job {self.entry.job_id}: {method} {path}: unexpected answer {answer!r}")
        return answer


class _Unreachable(JobError):
    def __init__(self, entry: JobEntry, error: BaseException) -> None:
        reason = getattr(error, "reason", error)
        super().__init__(f"job {entry.job_id} does not answer at {entry.rest_url} ({reason})")


def _first_error(error: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(error.read())
        return str(body["errors"][0])
    except (ValueError, KeyError, IndexError, TypeError):
        return str(error.reason)


def _explain_unreachable(entry: JobEntry, error: _Unreachable) -> JobError:
    """Why a job stopped answering: the registry knows whether it crashed or ended."""
    current = _try_get(JobRegistry(), entry.job_id)
    if current is not None and not current.running:
        try:
            _require_running(current)
        except JobError as explained:
            return explained
    return error


def trigger_savepoint(reference: str, target_dir: str | None, *, cancel_job: bool = False,
                      timeout: float = 300.0, native: bool = False) -> SavepointResult:
    """Take a savepoint of a running job and wait for it (``statekit savepoint``).

    Args:
        reference: Job id or unique prefix.
        target_dir: Directory for ``savepoint-<jobid6>-<random>/``; ``None`` uses the job's
            default. Relative local paths are made absolute here.
        cancel_job: Cancel the job once the savepoint completed.
        timeout: Seconds to wait for the savepoint.

    Returns:
        The savepoint's location.
    """
    _check_target(target_dir)
    entry = running_job(reference)
    _check_default_dir(entry, target_dir, "TARGET_DIR")
    body = {"target-directory": None if target_dir is None else _absolute(target_dir), "cancel-job": cancel_job,
            "formatType": "NATIVE" if native else "CANONICAL"}
    return _savepoint_operation(entry, "savepoints", body, "cancel" if cancel_job else "savepoint", timeout)


def trigger_savepoint_detached(reference: str, target_dir: str | None, *, native: bool = False) -> SavepointTrigger:
    """Trigger a savepoint and return at once with its trigger id (``statekit savepoint --detached``);
    :func:`savepoint_status` resolves the id later, also after the job ended."""
    _check_target(target_dir)
    entry = running_job(reference)
    _check_default_dir(entry, target_dir, "TARGET_DIR")
    body = {"target-directory": None if target_dir is None else _absolute(target_dir),
            "formatType": "NATIVE" if native else "CANONICAL"}
    try:
        answer = RestClient.for_job(entry).request("POST", f"/jobs/{entry.job_id}/savepoints", body)
    except _Unreachable as error:
        raise _explain_unreachable(entry, error) from None
    if not isinstance(answer.get("request-id"), str):
        raise JobError(f"job {entry.job_id}: no request-id in the answer to POST /savepoints")
    return SavepointTrigger(job_id=entry.job_id, trigger_id=answer["request-id"])


def savepoint_status(trigger_id: str) -> SavepointStatus:
    """The state of a savepoint operation by its trigger id, looked up in every job's registry entry.

    Raises:
        JobError: No job of the registry knows the trigger id.
    """
    wanted = trigger_id.strip().lower()
    registry = JobRegistry()
    for entry in registry.entries():
        outcome = entry.savepoints.get(wanted)
        if outcome is not None:
            return _status_of(entry, wanted, outcome)
    raise JobError(f"no savepoint operation {trigger_id} in the registry {registry.jobs_dir} "
                   f"(`statekit savepoint JOB_ID --detached` prints the trigger id)")


def _status_of(entry: JobEntry, trigger_id: str, outcome: dict[str, Any]) -> SavepointStatus:
    operation = str(outcome.get("operation") or "savepoint")
    if outcome.get("in-progress"):
        if entry.running:
            return SavepointStatus(entry.job_id, trigger_id, "IN_PROGRESS", operation=operation)
        why = entry.crash_reason or entry.failure or f"the job is {entry.status}"
        return SavepointStatus(entry.job_id, trigger_id, "FAILED", failure=f"the job ended before it completed ({why})",
                               operation=operation)
    if "location" in outcome:
        return SavepointStatus(entry.job_id, trigger_id, "COMPLETED", location=str(outcome["location"]),
                               operation=operation)
    cause = outcome.get("failure-cause") or {}
    return SavepointStatus(entry.job_id, trigger_id, "FAILED", operation=operation,
                           failure=str(cause.get("stack-trace") or cause.get("class") or outcome))


def trigger_checkpoint(reference: str, *, full: bool = False, timeout: float = 300.0) -> CheckpointResult:
    """Trigger a checkpoint of a running job and wait for it (``statekit checkpoint``, Flink 1.19's
    ``flink checkpoint``); ``full``: one that reuses no file of an earlier incremental checkpoint."""
    entry = running_job(reference)
    client = RestClient.for_job(entry)
    deadline = time.monotonic() + timeout
    body = {"checkpointType": "FULL" if full else "CONFIGURED"}
    try:
        trigger_id = str(client.request("POST", f"/jobs/{entry.job_id}/checkpoints", body)["request-id"])
    except _Unreachable as error:
        raise _explain_unreachable(entry, error) from None
    except KeyError:
        raise JobError(f"job {entry.job_id}: no request-id in the answer to POST /checkpoints") from None
    delay = 0.05
    while True:
        try:
            answer = client.request("GET", f"/jobs/{entry.job_id}/checkpoints/{trigger_id}")
        except _Unreachable as error:
            raise _explain_unreachable(entry, error) from None
        if answer.get("status", {}).get("id") == "COMPLETED":
            break
        if time.monotonic() > deadline:
            raise JobError(f"checkpoint of job {entry.job_id} not complete within the timeout (request {trigger_id})")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)
    operation = answer.get("operation") or {}
    if "failure-cause" in operation:
        cause = operation["failure-cause"] or {}
        raise JobError(f"checkpoint of job {entry.job_id} failed: {cause.get('stack-trace') or cause.get('class')}")
    checkpoint_id = operation.get("checkpoint-id")
    return CheckpointResult(job_id=entry.job_id, checkpoint_id=checkpoint_id if isinstance(checkpoint_id, int) else None,
                            location=operation.get("location"), trigger_id=trigger_id, full=full)


def _check_default_dir(entry: JobEntry, target_dir: str | None, argument: str) -> None:
    """Refuse a savepoint without a directory when the job has no default one, naming both ways."""
    if target_dir is None and entry.savepoint_dir is None:
        raise BadInputError(f"job {entry.job_id} has no default savepoint directory: give {argument}, "
                            f"or start the job with `statekit run --savepoint-dir DIR`")


def stop_job(reference: str, savepoint_path: str | None, *, drain: bool = False, timeout: float = 300.0,
             native: bool = False) -> SavepointResult:
    """Stop a job with a savepoint and wait until it ended (``statekit stop``).

    Args:
        reference: Job id or unique prefix.
        savepoint_path: Target directory (``None``: the job's default).
        drain: Let sources end (end of input: timers fire, windows flush) before the savepoint.
        timeout: Seconds to wait for the savepoint and for the job's end.
    """
    _check_target(savepoint_path)
    entry = running_job(reference)
    _check_default_dir(entry, savepoint_path, "--savepoint-path DIR")
    body = {"targetDirectory": None if savepoint_path is None else _absolute(savepoint_path), "drain": drain,
            "formatType": "NATIVE" if native else "CANONICAL"}
    return _savepoint_operation(entry, "stop", body, "stop", timeout)


def _check_target(target_dir: str | None) -> None:
    """Refuse a savepoint target that would vanish with the job (``memory://``), before any request."""
    if target_dir is not None:
        from statekit.runtime.control.rest import check_savepoint_target

        check_savepoint_target(target_dir)


def _savepoint_operation(entry: JobEntry, endpoint: str, body: dict[str, Any], operation: str,
                         timeout: float) -> SavepointResult:
    client = RestClient.for_job(entry)
    deadline = time.monotonic() + timeout
    try:
        trigger_id = str(client.request("POST", f"/jobs/{entry.job_id}/{endpoint}", body)["request-id"])
    except _Unreachable as error:
        raise _explain_unreachable(entry, error) from None
    except KeyError:
        raise JobError(f"job {entry.job_id}: no request-id in the answer to POST /{endpoint}") from None
    outcome = _poll_trigger(client, trigger_id, deadline)
    if "location" not in outcome:
        cause = outcome.get("failure-cause") or {}
        raise JobError(f"{operation} of job {entry.job_id} failed: {cause.get('stack-trace') or cause.get('class') or outcome}")
    state = "RUNNING"
    if operation in ("stop", "cancel"):
        state = _wait_ended(entry, deadline)
    return SavepointResult(job_id=entry.job_id, location=str(outcome["location"]), trigger_id=trigger_id,
                           job_state=state, operation=operation)


def _poll_trigger(client: RestClient, trigger_id: str, deadline: float) -> dict[str, Any]:
    entry = client.entry
    delay = 0.05
    while True:
        try:
            answer = client.request("GET", f"/jobs/{entry.job_id}/savepoints/{trigger_id}")
        except _Unreachable as error:
            # the job may have ended right after a stop-with-savepoint: its entry has the outcome
            current = _try_get(JobRegistry(), entry.job_id)
            outcome = None if current is None else current.savepoints.get(trigger_id)
            if outcome is not None and not outcome.get("in-progress"):
                return outcome
            raise _explain_unreachable(entry, error) from None
        if answer.get("status", {}).get("id") == "COMPLETED":
            operation = answer.get("operation")
            return operation if isinstance(operation, dict) else {}
        if time.monotonic() > deadline:
            raise JobError(f"savepoint of job {entry.job_id} not complete within the timeout (request {trigger_id}); "
                           f"it may still complete: `statekit checkpoints list DIR` shows it")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def _wait_ended(entry: JobEntry, deadline: float) -> str:
    registry = JobRegistry()
    while True:
        current = _try_get(registry, entry.job_id)
        if current is None or not current.running:
            return current.status if current is not None else "UNKNOWN"
        if time.monotonic() > deadline:
            raise JobError(f"job {entry.job_id} is still {current.status} after the timeout; "
                           f"check `statekit list` (log: {current.log_path or 'the job output'})")
        time.sleep(0.05)


def cancel_job(reference: str, *, timeout: float = 60.0) -> CancelResult:
    """Cancel a running job and wait until it ended (``statekit cancel``)."""
    entry = running_job(reference)
    deadline = time.monotonic() + timeout
    try:
        RestClient.for_job(entry).request("PATCH", f"/jobs/{entry.job_id}?mode=cancel")
    except _Unreachable as error:
        raise _explain_unreachable(entry, error) from None
    return CancelResult(job_id=entry.job_id, job_state=_wait_ended(entry, deadline))
