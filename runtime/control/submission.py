"""Submitting a job file: attached runs (the job master in this process, with REST and the
registry entry) and detached runs (a child ``statekit run`` process the registry tracks).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any

from statekit.runtime.control.checkpoint_history import CheckpointHistoryWriter
from statekit.runtime.control.registry import JobEntry, JobRegistry, check_job_id, current_process_entry, new_job_id
from statekit.runtime.control.results import RunResult
from statekit.statefmt.errors import (
    BadInputError,
    JobError,
    JobFailedError,
    PathNotFoundError,
    StatekitError,
)

if TYPE_CHECKING:
    from statekit.runtime.control.rest import JobRestServer
    from statekit.runtime.dataflow.job_handle import JobHandle, JobStatus
    from statekit.runtime.dataflow.run_options import RunOptions
    from statekit.runtime.jobmaster.metrics import LiveStatus

__all__ = [
    "STARTUP_TIMEOUT_S",
    "STATUS_INTERVAL_S",
    "FETCH_GRACE_S",
    "LOG_TAIL_LINES",
    "validate_run",
    "run_job",
    "submit_detached",
]


STARTUP_TIMEOUT_S = 60.0


STATUS_INTERVAL_S = 0.5  # how often an attached run's live status is refreshed


FETCH_GRACE_S = 5.0


LOG_TAIL_LINES = 6


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
    for target in (options.savepoint_on_finish, options.savepoint_dir):
        if target is not None:
            from statekit.runtime.control.rest import check_savepoint_target

            check_savepoint_target(target)
    if not os.path.isfile(job_file):
        raise PathNotFoundError("job file not found; pass the path of a Python job script", path=job_file)
    from statekit.runtime.dataflow.user_code import compile_job_script

    compile_job_script(job_file)
    options.check_checkpointing()
    from statekit.statefmt.keygroups import UPPER_BOUND_MAX_PARALLELISM, check_parallelism

    if options.parallelism is not None or options.max_parallelism is not None:
        check_parallelism(
            1 if options.parallelism is None else options.parallelism,
            UPPER_BOUND_MAX_PARALLELISM if options.max_parallelism is None else options.max_parallelism,
        )
    if options.state_backend is not None:
        from statekit.runtime.state.registry import resolve_state_backend

        resolve_state_backend(options.state_backend)
    if options.checkpoint_interval_ms is not None and options.checkpoint_interval_ms < 1:
        raise BadInputError(f"checkpoint interval must be at least 1 ms, got {options.checkpoint_interval_ms}")
    if options.restore_path is not None:
        _check_restore_path(options.restore_path)
    if options.metrics_port is not None and not 1 <= options.metrics_port <= 65535:
        raise BadInputError(f"--metrics-port must be a port number 1..65535, got {options.metrics_port}")


def _serve_metrics(port: int) -> Callable[[], None]:
    """Serve this process's Prometheus metrics on 127.0.0.1:``port``; returns how to stop it.

    Raises:
        BadInputError: The port is taken (or not ours to bind).
    """
    from prometheus_client import start_http_server

    from statekit.runtime.jobmaster.prometheus import process_registry

    try:
        server, thread = start_http_server(port, addr="127.0.0.1", registry=process_registry())
    except OSError as error:
        raise BadInputError(f"--metrics-port {port}: cannot listen on 127.0.0.1:{port} "
                            f"({error.strerror or error}); choose another port") from None

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop


def _check_restore_path(path: str) -> None:
    """Open the snapshot ``statekit run -s`` restores, with ``verify``'s messages for a wrong file.

    Raises:
        MetadataError: The ``_metadata`` is neither a statekit nor a Flink one (same words
            as ``statekit verify``), or is damaged.
        BadInputError: An Apache Flink snapshot: the mini runtime restores statekit ones only.
    """
    from statekit.flink.snapshot_kind import flink_snapshot_path
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
        from statekit.runtime.control.rest import JobRestServer

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
        history = CheckpointHistoryWriter(self.registry.history_path(handle.job_id))
        handle.add_checkpoint_listener(history.append)
        server = JobRestServer(
            handle, token,
            on_savepoint=lambda trigger, outcome: self.registry.record_savepoint(handle.job_id, trigger, outcome),
        ).start()
        with self._lock:
            self.servers.append(server)
        status = handle.status
        self.registry.update(handle.job_id, name=handle.job_name, host="127.0.0.1", port=server.port,
                             checkpoint_dir=handle.checkpoint_dir, status=status.value,
                             start_time_ms=handle.start_time_ms,
                             savepoint_dir=handle.savepoint_dir, plan=handle.topology.plan())
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
        from statekit.runtime.jobmaster.metrics import job_metrics

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
    from statekit.runtime.control.launcher import run_job_file
    from statekit.runtime.dataflow.run_options import add_job_listener, remove_job_listener

    validate_run(job_file, options)
    job_id = options.job_id or new_job_id()
    options = dataclasses.replace(options, job_id=job_id)
    registry = JobRegistry()
    name = os.path.splitext(os.path.basename(job_file))[0]
    stop_metrics = _serve_metrics(options.metrics_port) if options.metrics_port is not None else None
    try:
        token = registry.register(current_process_entry(
            job_id, name, log_path=log_path, job_file=os.path.abspath(job_file), checkpoint_dir=options.checkpoint_dir,
            metrics_port=options.metrics_port))
    except BaseException:
        if stop_metrics is not None:
            stop_metrics()
        raise
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
        from statekit.runtime.dataflow.user_code import with_user_location

        failure = with_user_location(f"{type(error).__name__}: {error}", error)
        raise JobFailedError(f"job script {job_file} failed: {failure}") from error
    finally:
        remove_job_listener(supervisor.job_started)
        supervisor.finish(fallback, failure)
        if stop_metrics is not None:
            stop_metrics()
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
    if options.savepoint_dir is not None:
        argv += ["--savepoint-dir", _absolute(options.savepoint_dir)]
    if options.metrics_port is not None:
        argv += ["--metrics-port", str(options.metrics_port)]
    if options.trust_pickle:
        argv.append("--trust-pickle")
    if options.executor is not None:
        argv += ["--executor", options.executor]
    for flag, value in (("--task-managers", options.task_managers), ("--slots", options.slots),
                        ("--buffer-size", options.buffer_size), ("--restart-attempts", options.restart_attempts)):
        if value is not None:
            argv += [flag, str(value)]
    for flag, ms in (("--buffer-timeout", options.buffer_timeout_ms), ("--restart-delay", options.restart_delay_ms),
                     ("--latency-interval", options.latency_interval_ms)):
        if ms is not None:
            argv += [flag, f"{ms}ms"]
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


