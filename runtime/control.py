"""Job control, flink-like: submit a job (attached or detached) and control running jobs.

Submitting (``statekit run``): :func:`run_job` registers the job in the local registry,
serves its REST API from a job listener, runs the script and records how it ended;
:func:`submit_detached` starts the same command in a background process and returns once
the job runs. Controlling (``statekit list / savepoint / stop / cancel``): find the job in
the registry by id or unique id prefix, then call its REST API on 127.0.0.1 with the
job's token.

Every failure is a :class:`JobError` (exit 2) or :class:`JobFailedError` (exit 1) with a
one-line message, e.g. ``no running job 3f2a... (it crashed: process 1234 is gone)``.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any

from statekit.runtime.registry import (
    CRASHED,
    JobEntry,
    JobRegistry,
    check_job_id,
    current_process_entry,
    new_job_id,
)
from statekit.statefmt.errors import (
    BadInputError,
    JobError,
    JobFailedError,
    PathNotFoundError,
    StatekitError,
)

if TYPE_CHECKING:
    from statekit.runtime.job import JobHandle, JobStatus
    from statekit.runtime.metrics import LiveStatus
    from statekit.runtime.rest import JobRestServer
    from statekit.runtime.run_options import RunOptions

__all__ = [
    "RunResult",
    "JobList",
    "LastCheckpoint",
    "SavepointResult",
    "CancelResult",
    "parse_duration",
    "validate_run",
    "run_job",
    "submit_detached",
    "list_jobs",
    "find_job",
    "running_job",
    "RestClient",
    "trigger_savepoint",
    "stop_job",
    "cancel_job",
]

STARTUP_TIMEOUT_S = 60.0
STATUS_INTERVAL_S = 0.5  # how often an attached run's live status is refreshed
LIST_REST_TIMEOUT_S = 2.0  # `statekit list` asks each running job for its last checkpoint this long
FETCH_GRACE_S = 5.0
LOG_TAIL_LINES = 6

_DURATION_UNITS: dict[str, float] = {
    "ms": 1, "milli": 1, "millis": 1, "millisecond": 1, "milliseconds": 1,
    "s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000,
    "m": 60_000, "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000,
    "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000, "": 1,
}


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([a-z]*)$")
_MAX_DURATION_MS = 365 * 86_400_000


def parse_duration(text: str, *, what: str = "duration") -> int:
    """Milliseconds of ``200ms``, ``1s``, ``1.5 s``, ``2min``, ``1h`` or a bare number of ms.

    Raises:
        BadInputError: Not a positive duration in a known unit.
    """
    match = _DURATION.match(text.strip().lower())
    if match is None or match.group(2) not in _DURATION_UNITS:
        raise BadInputError(f"invalid {what} {text!r}; use e.g. 200ms, 1s, 2min or 1h")
    millis = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if not 1 <= millis <= _MAX_DURATION_MS:
        raise BadInputError(f"invalid {what} {text!r}: must be between 1 ms and 365 days")
    return int(millis)


# -- results -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunResult:
    """How a submitted job ended (attached run) or that it runs (detached run).

    Attributes:
        job_id: The job id.
        name: The job name.
        state: Final state (attached) or the state when submission returned (detached).
        detached: Whether the job keeps running in the background.
        duration_ms: Run time of an attached job.
        failure: Why the job failed.
        log_path: Output of a detached job.
        signal: The signal (SIGINT/SIGTERM) that cancelled an attached job.
    """

    job_id: str
    name: str
    state: str
    detached: bool = False
    duration_ms: int | None = None
    failure: str | None = None
    log_path: str | None = None
    signal: int | None = None

    def to_json(self) -> dict[str, Any]:
        """Flink-like: ``{"jid", "name", "state", "detached", "duration", "log"}``."""
        data: dict[str, Any] = {"jid": self.job_id, "name": self.name, "state": self.state, "detached": self.detached}
        if self.duration_ms is not None:
            data["duration"] = self.duration_ms
        if self.failure is not None:
            data["failure"] = self.failure
        if self.log_path is not None:
            data["log"] = self.log_path
        return data


@dataclass(frozen=True)
class LastCheckpoint:
    """The last completed checkpoint of a job (``statekit list``).

    Attributes:
        checkpoint_id: Its id.
        completed_ms: When it completed (epoch ms), if known.
        size: Its full state size in bytes, if known.
        path: Where it is, if it was written to storage.
    """

    checkpoint_id: int
    completed_ms: int | None
    size: int | None
    path: str | None

    def to_json(self) -> dict[str, Any]:
        """``{"id", "completed-time", "size", "path"}``."""
        return {"id": self.checkpoint_id, "completed-time": self.completed_ms, "size": self.size, "path": self.path}


@dataclass(frozen=True)
class JobList:
    """Jobs of the registry (``statekit list``) and, in the same order, their last checkpoints."""

    jobs: tuple[JobEntry, ...]
    include_all: bool
    registry: str
    last_checkpoints: tuple[LastCheckpoint | None, ...] = ()
    checkpoint_histories: tuple[tuple[dict[str, Any], ...], ...] = ()

    def last_checkpoint(self, index: int) -> LastCheckpoint | None:
        return self.last_checkpoints[index] if index < len(self.last_checkpoints) else None

    def to_json(self) -> dict[str, Any]:
        """``{"jobs": [{"jid", "name", "state", "pid", "start-time", "end-time", "rest", ...,
        "last-checkpoint": {"id", "completed-time", "size", "path"} | null}]}``."""
        jobs = []
        for index, entry in enumerate(self.jobs):
            last = self.last_checkpoint(index)
            history = self.checkpoint_histories[index] if index < len(self.checkpoint_histories) else ()
            jobs.append({**_entry_json(entry), "last-checkpoint": None if last is None else last.to_json(),
                         "checkpoints": [dict(e) for e in history]})
        return {"jobs": jobs}


def _entry_json(entry: JobEntry) -> dict[str, Any]:
    data: dict[str, Any] = {
        "jid": entry.job_id,
        "name": entry.name,
        "state": entry.status,
        "pid": entry.pid,
        "start-time": entry.start_time_ms,
        "end-time": entry.end_time_ms if entry.end_time_ms is not None else -1,
        "rest": entry.rest_url,
        "log": entry.log_path,
        "job-file": entry.job_file,
        "checkpoint-dir": entry.checkpoint_dir,
    }
    if entry.failure is not None:
        data["failure"] = entry.failure
    if entry.crash_reason is not None:
        data["crash-reason"] = entry.crash_reason
    return data


@dataclass(frozen=True)
class SavepointResult:
    """A completed savepoint (``statekit savepoint``, ``stop``, ``cancel --with-savepoint``).

    Attributes:
        job_id: The job.
        location: The savepoint directory.
        trigger_id: The REST request id.
        job_state: The job's state when the command returned (stop/cancel wait for the end).
        operation: ``"savepoint"``, ``"stop"`` or ``"cancel"``.
    """

    job_id: str
    location: str
    trigger_id: str
    job_state: str
    operation: str = "savepoint"

    def to_json(self) -> dict[str, Any]:
        """``{"jid", "operation", "location", "request-id", "state"}``."""
        return {"jid": self.job_id, "operation": self.operation, "location": self.location,
                "request-id": self.trigger_id, "state": self.job_state}


@dataclass(frozen=True)
class CancelResult:
    """A cancelled job (``statekit cancel``)."""

    job_id: str
    job_state: str

    def to_json(self) -> dict[str, Any]:
        """``{"jid", "state"}``."""
        return {"jid": self.job_id, "state": self.job_state}


# -- submitting ----------------------------------------------------------------------------


def validate_run(job_file: str, options: RunOptions) -> None:
    """Check what ``statekit run`` can check before anything starts.

    Raises:
        PathNotFoundError: The job file (or a local restore path) does not exist.
        JobScriptError: The job file does not compile (``file:line``).
        BadInputError: A bad job id, parallelism, state backend, interval, restore path, or
            an in-memory savepoint-on-finish directory.
        JobError: The job id is registered by a job that still runs.
    """
    if options.job_id is not None:
        check_job_id(options.job_id)
        JobRegistry().check_available(options.job_id)
    if options.savepoint_on_finish is not None:
        from statekit.runtime.rest import check_savepoint_target

        check_savepoint_target(options.savepoint_on_finish)
    if not os.path.isfile(job_file):
        raise PathNotFoundError("job file not found; pass the path of a Python job script", path=job_file)
    from statekit.runtime.user_code import compile_job_script

    compile_job_script(job_file)
    options.check_checkpointing()
    from statekit.statefmt.keygroups import UPPER_BOUND_MAX_PARALLELISM, check_parallelism

    if options.parallelism is not None or options.max_parallelism is not None:
        check_parallelism(
            1 if options.parallelism is None else options.parallelism,
            UPPER_BOUND_MAX_PARALLELISM if options.max_parallelism is None else options.max_parallelism,
        )
    if options.state_backend is not None:
        from statekit.runtime.backend import resolve_state_backend

        resolve_state_backend(options.state_backend)
    if options.checkpoint_interval_ms is not None and options.checkpoint_interval_ms < 1:
        raise BadInputError(f"checkpoint interval must be at least 1 ms, got {options.checkpoint_interval_ms}")
    if options.restore_path is not None:
        _check_restore_path(options.restore_path)


def _check_restore_path(path: str) -> None:
    """Open the snapshot ``statekit run -s`` restores, with ``verify``'s messages for a wrong file.

    Raises:
        MetadataError: The ``_metadata`` is neither a statekit nor a Flink one (same words
            as ``statekit verify``), or is damaged.
        BadInputError: An Apache Flink snapshot: the mini runtime restores statekit ones only.
    """
    from statekit.flink.dispatch import flink_snapshot_path
    from statekit.readers.snapshot import open_snapshot

    if flink_snapshot_path(path) is not None:
        raise BadInputError("an Apache Flink snapshot: the mini runtime restores statekit snapshots only "
                            "(inspect, export or rescale it with the offline commands)", path=path)
    open_snapshot(path)


class _Supervisor:
    """Registers each job the script starts, serves its REST API and records its status."""

    def __init__(self, registry: JobRegistry, job_id: str, token: str,
                 on_submitted: Callable[[str, str], None] | None,
                 on_status: Callable[[LiveStatus], None] | None = None) -> None:
        self.registry = registry
        self.job_id = job_id
        self.tokens = {job_id: token}
        self.on_submitted = on_submitted
        self.on_status = on_status
        self.handles: list[JobHandle] = []
        self.servers: list[JobRestServer] = []
        self.watchers: list[threading.Thread] = []
        self.signal: int | None = None
        self._lock = threading.Lock()

    def job_started(self, handle: JobHandle) -> None:
        from statekit.runtime.rest import JobRestServer

        with self._lock:
            self.handles.append(handle)
            token = self.tokens.get(handle.job_id)
        if token is None:
            template = self.registry.get(self.job_id)
            token = self.registry.register(dataclasses.replace(
                current_process_entry(handle.job_id, handle.job_name),
                log_path=template.log_path, job_file=template.job_file))
            with self._lock:
                self.tokens[handle.job_id] = token
        server = JobRestServer(
            handle, token,
            on_savepoint=lambda trigger, outcome: self.registry.record_savepoint(handle.job_id, trigger, outcome),
        ).start()
        with self._lock:
            self.servers.append(server)
        status = handle.status
        self.registry.update(handle.job_id, name=handle.job_name, host="127.0.0.1", port=server.port,
                             checkpoint_dir=handle.checkpoint_dir, status=status.value,
                             start_time_ms=handle.start_time_ms)
        watcher = threading.Thread(target=self._watch, args=(handle, status), name=f"registry-{handle.job_id[:6]}",
                                   daemon=True)
        watcher.start()
        with self._lock:
            self.watchers.append(watcher)
        if self.on_status is not None:
            threading.Thread(target=self._report_status, args=(handle, self.on_status),
                             name=f"status-{handle.job_id[:6]}", daemon=True).start()
        if self.on_submitted is not None:
            self.on_submitted(handle.job_id, handle.job_name)

    def _watch(self, handle: JobHandle, recorded: JobStatus) -> None:
        """Record every status change of ``handle`` in the registry until it is terminal."""
        while True:
            status = handle.wait(0.1)
            if status != recorded or status.is_terminal:
                changes: dict[str, Any] = {"status": status.value}
                if status.is_terminal:
                    changes.update(end_time_ms=handle.end_time_ms or _now_ms(), failure=handle.failure)
                self.registry.update(handle.job_id, **changes)
                recorded = status
            if status.is_terminal:
                return

    @staticmethod
    def _report_status(handle: JobHandle, on_status: Callable[[LiveStatus], None]) -> None:
        """Hand the job's live status to ``on_status`` every STATUS_INTERVAL_S until it ends."""
        from statekit.runtime.metrics import job_metrics

        while not handle.wait(STATUS_INTERVAL_S).is_terminal:
            on_status(job_metrics(handle).live)

    def interrupt(self, signum: int, _frame: FrameType | None) -> None:
        """First SIGINT/SIGTERM cancels the running jobs; a second one interrupts."""
        with self._lock:
            active = [h for h in self.handles if not h.status.is_terminal]
            again = self.signal is not None
            self.signal = signum
        if again or not active:
            raise KeyboardInterrupt
        for handle in active:
            threading.Thread(target=handle.cancel, name="cancel-on-signal", daemon=True).start()

    def finish(self, fallback_status: str, failure: str | None) -> None:
        """Wait for the watchers, let clients fetch savepoint results, close the servers."""
        for watcher in list(self.watchers):
            watcher.join(timeout=FETCH_GRACE_S)
        for server in list(self.servers):
            server.wait_fetched(FETCH_GRACE_S)
            server.close()
        for handle in list(self.handles):
            entry = self.registry.get(handle.job_id)
            if entry.running:
                self.registry.update(handle.job_id, status=fallback_status, end_time_ms=_now_ms(),
                                     failure=handle.failure or failure)
        if not any(h.job_id == self.job_id for h in self.handles):
            entry = self.registry.get(self.job_id)
            if self.handles:
                # the engine assigned other ids: the placeholder entry names no job
                shutil.rmtree(self.registry.job_dir(self.job_id), ignore_errors=True)
            elif entry.running:
                self.registry.update(self.job_id, status=fallback_status, end_time_ms=_now_ms(), failure=failure)


def run_job(
    job_file: str,
    options: RunOptions,
    *,
    log_path: str | None = None,
    on_submitted: Callable[[str, str], None] | None = None,
    handle_signals: bool = True,
    on_status: Callable[[LiveStatus], None] | None = None,
) -> RunResult:
    """Run a job script attached: register it, serve its REST API, wait for its end.

    Args:
        job_file: The job script.
        options: Command-line overrides; ``options.job_id`` is generated when ``None``.
        log_path: Recorded in the registry (set for a detached job's background process).
        on_submitted: Called with ``(job_id, job_name)`` as each job starts.
        handle_signals: The first SIGINT/SIGTERM cancels the job (main thread only).
        on_status: Called (from another thread) with each running job's live status every
            STATUS_INTERVAL_S: records in/out per second, checkpoints, backpressure.

    Returns:
        The final state (FINISHED, or CANCELED after ``statekit cancel`` or a signal).

    Raises:
        JobFailedError: The job or its script failed.
        StatekitError: Bad options, a failed restore, ...
    """
    from statekit.runtime.launcher import run_job_file
    from statekit.runtime.run_options import add_job_listener, remove_job_listener

    validate_run(job_file, options)
    job_id = options.job_id or new_job_id()
    options = dataclasses.replace(options, job_id=job_id)
    registry = JobRegistry()
    name = os.path.splitext(os.path.basename(job_file))[0]
    token = registry.register(current_process_entry(
        job_id, name, log_path=log_path, job_file=os.path.abspath(job_file), checkpoint_dir=options.checkpoint_dir))
    supervisor = _Supervisor(registry, job_id, token, on_submitted, on_status)
    started = time.monotonic()
    add_job_listener(supervisor.job_started)
    fallback = "FAILED"
    failure: str | None = "the job script ended abnormally"
    try:
        with _signals_to(supervisor.interrupt if handle_signals else None):
            status = run_job_file(job_file, options)
        fallback, failure = status.value, None
    except StatekitError as error:
        failure = str(error)
        raise
    except KeyboardInterrupt:
        failure = "interrupted"
        raise
    except SystemExit as exit_:
        failure = f"the job script exited with code {exit_.code}"
        if exit_.code in (None, 0):
            fallback, failure = "FINISHED", None
        raise
    except Exception as error:
        from statekit.runtime.user_code import with_user_location

        failure = with_user_location(f"{type(error).__name__}: {error}", error)
        raise JobFailedError(f"job script {job_file} failed: {failure}") from error
    finally:
        remove_job_listener(supervisor.job_started)
        supervisor.finish(fallback, failure)
    last = supervisor.handles[-1] if supervisor.handles else None
    entry = registry.get(last.job_id if last is not None else job_id)
    if entry.status == "FAILED":
        raise JobFailedError(f"job {entry.job_id} ({entry.name}) failed: {entry.failure or 'see the job output'}")
    return RunResult(job_id=entry.job_id, name=entry.name, state=entry.status,
                     duration_ms=int((time.monotonic() - started) * 1000), failure=entry.failure,
                     log_path=log_path, signal=supervisor.signal)


@contextmanager
def _signals_to(handler: Callable[[int, FrameType | None], None] | None) -> Iterator[None]:
    if handler is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {signum: signal.signal(signum, handler) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, previous in saved.items():
            signal.signal(signum, previous)


def _run_argv(job_file: str, options: RunOptions, log_path: str, verbose: bool = False) -> list[str]:
    """The attached ``statekit run`` command a detached submission starts in the background."""
    argv = [sys.executable, "-m", "statekit.cli.main", "run", "--job-id", str(options.job_id), "--log-file", log_path]
    if options.parallelism is not None:
        argv += ["-p", str(options.parallelism)]
    if options.max_parallelism is not None:
        argv += ["--max-parallelism", str(options.max_parallelism)]
    if options.restore_path is not None:
        argv += ["-s", _absolute(options.restore_path)]
    if options.allow_non_restored_state:
        argv.append("--allow-non-restored-state")
    if options.restore_path is not None:
        argv += ["--restore-mode", options.restore_mode]
    if options.checkpoint_dir is not None:
        argv += ["--checkpoint-dir", _absolute(options.checkpoint_dir)]
    if options.checkpoint_interval_ms is not None:
        argv += ["--checkpoint-interval", f"{options.checkpoint_interval_ms}ms"]
    if options.state_backend is not None:
        argv += ["--state-backend", options.state_backend]
    argv += options.checkpointing_argv()
    if options.savepoint_on_finish is not None:
        argv += ["--savepoint-on-finish", _absolute(options.savepoint_on_finish)]
    if options.trust_pickle:
        argv.append("--trust-pickle")
    if verbose:
        argv.append("--verbose")
    return [*argv, os.path.abspath(job_file), *options.job_args]


def submit_detached(job_file: str, options: RunOptions, *, startup_timeout: float = STARTUP_TIMEOUT_S,
                    verbose: bool = False) -> RunResult:
    """Start ``statekit run`` for the job in a background process; return once the job runs.

    The background process logs to ``STATEKIT_HOME/jobs/<job_id>/job.log`` and survives
    the caller (its own session). A bounded job that already finished also counts as submitted.
    Only the entry the background process registered counts: a stale entry of an earlier
    run under the same job id (a crashed job being restarted) is not mistaken for it.
    ``verbose`` passes ``--verbose`` on (tracebacks of failing tasks go to the log).

    Raises:
        JobFailedError: The process died (or the job failed) before the job ran; the
            message ends with the log tail.
        BadInputError: The same, when the background ``statekit run`` exited 2 (bad input,
            e.g. a restore that does not fit the job).
        StatekitError: Bad options (checked before anything starts).
    """
    validate_run(job_file, options)
    job_id = options.job_id or new_job_id()
    options = dataclasses.replace(options, job_id=job_id)
    registry = JobRegistry()
    registry.prepare(job_id)
    log_path = str(registry.log_path(job_id))
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            _run_argv(job_file, options, log_path, verbose), stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
        )
    deadline = time.monotonic() + startup_timeout
    while True:
        entry = _own_entry(registry, job_id, process.pid)
        if entry is not None and entry.status in ("RUNNING", "FINISHED", "CANCELED") and (
            entry.port is not None or entry.status != "RUNNING"
        ):
            return RunResult(job_id=job_id, name=entry.name, state=entry.status, detached=True, log_path=log_path)
        if entry is not None and entry.status == "FAILED":
            try:
                code = process.wait(FETCH_GRACE_S)
            except subprocess.TimeoutExpired:
                code = None
            if code == 2 and (line := _error_line(log_path)) is not None:
                raise BadInputError(line)  # the background run's own one-line error (bad input)
            error = BadInputError if code == 2 else JobFailedError
            raise error(f"job {job_id} failed: {entry.failure or 'see the log'}; {_log_tail(log_path)}")
        code = process.poll()
        if code is not None:
            entry = _own_entry(registry, job_id, process.pid)
            if entry is not None and entry.status in ("FINISHED", "CANCELED"):
                return RunResult(job_id=job_id, name=entry.name, state=entry.status, detached=True, log_path=log_path)
            if code == 2 and (line := _error_line(log_path)) is not None:
                raise BadInputError(line)  # the background run's own one-line error (a job file that does not import)
            error = BadInputError if code == 2 else JobFailedError
            raise error(f"job {job_id} exited with code {code} before it ran; {_log_tail(log_path)}")
        if time.monotonic() > deadline:
            process.terminate()
            raise JobFailedError(f"job {job_id} did not start within {startup_timeout:.0f} s and was terminated; "
                                 f"{_log_tail(log_path)}")
        time.sleep(0.05)


def _try_get(registry: JobRegistry, job_id: str) -> JobEntry | None:
    try:
        return registry.get(job_id)
    except JobError:
        return None


def _own_entry(registry: JobRegistry, job_id: str, pid: int) -> JobEntry | None:
    """The entry of ``job_id`` once process ``pid`` registered it (an older one is ignored)."""
    entry = _try_get(registry, job_id)
    return entry if entry is not None and entry.pid == pid else None


def _log_tail(log_path: str) -> str:
    try:
        with open(log_path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 8192))
            lines = [line.strip() for line in log.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    tail = " | ".join(lines[-LOG_TAIL_LINES:]) or "(empty)"
    return f"log {log_path}: {tail}"


def _error_line(log_path: str) -> str | None:
    """The last ``statekit: error: ...`` line of a background run's log, without its prefix."""
    prefix = "statekit: error: "
    try:
        with open(log_path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 8192))
            lines = log.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    found = [line[len(prefix):].strip() for line in lines if line.startswith(prefix)]
    return found[-1] if found else None


def _absolute(path: str) -> str:
    return path if "://" in path else os.path.abspath(path)


def _now_ms() -> int:
    return int(time.time() * 1000)


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
    body = {"target-directory": None if target_dir is None else _absolute(target_dir), "cancel-job": cancel_job,
            "formatType": "NATIVE" if native else "CANONICAL"}
    return _savepoint_operation(entry, "savepoints", body, "cancel" if cancel_job else "savepoint", timeout)


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
    body = {"targetDirectory": None if savepoint_path is None else _absolute(savepoint_path), "drain": drain,
            "formatType": "NATIVE" if native else "CANONICAL"}
    return _savepoint_operation(entry, "stop", body, "stop", timeout)


def _check_target(target_dir: str | None) -> None:
    """Refuse a savepoint target that would vanish with the job (``memory://``), before any request."""
    if target_dir is not None:
        from statekit.runtime.rest import check_savepoint_target

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
            if current is not None and trigger_id in current.savepoints:
                return current.savepoints[trigger_id]
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
