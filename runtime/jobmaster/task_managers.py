"""Deploying an attempt into TaskManager processes (the job master's side).

:class:`ProcessDeployer` starts, for every execution attempt, fresh TaskManager processes
(``python -m statekit.runtime.taskmanager SPEC``; :mod:`statekit.runtime.taskmanager.task_manager`)
in a new session, with a control socket in the job's private run directory that only they can
reach (the job's token). The execution sees each remote subtask as a :class:`RemoteTask`: its
mails go to the TaskManager that runs it, and its events, acknowledgements and metric reports
come back on the same connection, one reader thread per TaskManager.

A TaskManager is lost when its process exits, its control connection breaks, or it shows no sign
of life for :data:`HEARTBEAT_TIMEOUT_S`. A sign of life is a message (a heartbeat every 0.3 s) or,
where ``/proc`` exists, CPU time the process spent while not stopped: a TaskManager whose user code
holds the interpreter lock starves its heartbeat thread but is busy, not lost; a stopped or hung
one spends none.

An attempt that failed (a TaskManager lost, a task failed, a checkpoint failure beyond the
tolerable ones) keeps nothing: every TaskManager still running is SIGKILLed at once, so the
restart does not wait for tasks to work through their queued input. Exactly-once sinks lose
nothing by it: their open transactions are not in any checkpoint, and the restored attempt
commits what the checkpoint pre-committed and discards the rest
(:mod:`statekit.runtime.connectors.two_phase_commit`). A user's cancel is graceful: the
TaskManagers end their tasks (which look at the cancel flags between input buffers), and the
ones still running after :data:`CANCEL_TIMEOUT_S` in all are killed. No process of an attempt
survives it, nor its state backends' working directories (in the job's run directory, removed
when the attempt's processes are gone).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from statekit.runtime.checkpoint.restore import RestorePlan
from statekit.runtime.dataflow.run_options import RunOptions
from statekit.runtime.exchange.network import Connection, ConnectionClosed
from statekit.runtime.taskmanager import protocol
from statekit.runtime.taskmanager.protocol import Placement, TaskManagerSpec, graph_fingerprint, placement
from statekit.runtime.taskmanager.task_manager import receive_message, send_message
from statekit.statefmt.errors import BadInputError, JobFailedError

if TYPE_CHECKING:
    from statekit.runtime.dataflow.graph import JobGraph
    from statekit.runtime.jobmaster.execution import Deployment, Execution

__all__ = ["ProcessDeployer", "ProcessDeployment", "RemoteTask", "TaskManagerLostError", "HEARTBEAT_TIMEOUT_S"]

log = logging.getLogger("statekit.runtime")

HEARTBEAT_TIMEOUT_S = 1.5
HEARTBEAT_CHECK_S = 0.1
STARTUP_TIMEOUT_S = 60.0
CANCEL_TIMEOUT_S = 3.0  # a graceful end (cancel, or a finished attempt) in all; then SIGKILL
KILL_REAP_S = 5.0
DEFAULT_BUFFER_TIMEOUT_MS = 100
DEFAULT_BUFFER_SIZE = 32 * 1024


class TaskManagerLostError(JobFailedError):
    """A TaskManager of the attempt died or stopped answering (the job restarts per its strategy)."""


class RemoteTask:
    """A subtask a TaskManager runs, as its execution sees it."""

    def __init__(self, key: tuple[int, int], name: str, manager: _ManagerProcess) -> None:
        self.key = key
        self.name = name
        self.manager = manager

    def mail(self, mail: Any) -> None:
        self.manager.send(protocol.MailTask(self.key, mail))


class _ManagerProcess:
    """One TaskManager process of an attempt and its control connection."""

    def __init__(self, index: int, process: subprocess.Popen[bytes]) -> None:
        self.index = index
        self.process = process
        self.connection: Connection | None = None
        self.last_heartbeat = time.monotonic()  # the last sign of life: a message or CPU progress
        self.cpu_ticks: int | None = None  # utime + stime at the last look (/proc), None: unknown
        self.registered = False
        self.live: set[tuple[int, int]] = set()  # its tasks that have not ended yet
        self.lock = threading.Lock()

    def send(self, message: Any) -> None:
        if self.connection is not None:
            with contextlib.suppress(ConnectionClosed):
                send_message(self.connection, message)

    def describe(self) -> str:
        return f"TaskManager {self.index} (pid {self.process.pid})"


class ProcessDeployment:
    """The TaskManager processes of one attempt and the stand-ins of their subtasks."""

    def __init__(self, execution: Execution, restore: RestorePlan | None, job_file: str, run_dir: str) -> None:
        self.execution = execution
        master = execution.master
        graph = master.graph
        options: RunOptions = master.options
        self.placement: Placement = placement(max(v.parallelism for v in graph.vertices), options.task_managers,
                                              options.slots)
        self._closing = threading.Event()
        self._graceful_until: float | None = None  # when the graceful end of the attempt's processes is over
        self._token = secrets.token_hex(32)
        control_path = os.path.join(run_dir, f"a{execution.attempt}-jm.sock")
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(control_path)
        self._server.listen(self.placement.task_managers)
        timeout = DEFAULT_BUFFER_TIMEOUT_MS if options.buffer_timeout_ms is None else options.buffer_timeout_ms
        base = TaskManagerSpec(
            job_file=job_file, options=options, index=0, placement=self.placement, attempt=execution.attempt,
            job_id=master.job_id, fingerprint=graph_fingerprint(graph), state_backend=master.state_backend,
            incremental=master.incremental, channel_state_serializer=master.config.channel_state_serializer,
            restore=restore.spec() if restore is not None else None, run_dir=run_dir, token=self._token,
            control_path=control_path, buffer_timeout_ms=timeout,
            buffer_size=options.buffer_size or DEFAULT_BUFFER_SIZE, source_plans=execution.source_plans,
        )
        self._base = base
        self.managers: list[_ManagerProcess] = []
        try:
            for index in range(self.placement.task_managers):
                self.managers.append(self._spawn(base, index, run_dir))
            self._accept_all()
        except BaseException:
            self._kill_all()
            self._remove_working_dirs()
            self._server.close()
            raise
        by_index = {m.index: m for m in self.managers}
        self._tasks: list[RemoteTask] = []
        self._source_tasks: list[RemoteTask] = []
        self._by_key: dict[tuple[int, int], RemoteTask] = {}
        for vertex in graph.vertices:
            for i in range(vertex.parallelism):
                manager = by_index[self.placement.task_manager_of(i)]
                task = RemoteTask((vertex.id, i), f"{vertex.name} ({i + 1}/{vertex.parallelism})", manager)
                manager.live.add(task.key)
                self._tasks.append(task)
                self._by_key[task.key] = task
                if vertex.is_source:
                    self._source_tasks.append(task)
        for manager in self.managers:
            threading.Thread(target=self._serve, args=(manager,), name=f"tm-{manager.index}", daemon=True).start()
            threading.Thread(target=self._watch_exit, args=(manager,), name=f"tm-{manager.index}-exit",
                             daemon=True).start()
        threading.Thread(target=self._watch_heartbeats, name="heartbeats", daemon=True).start()

    # ------------------------------------------------------------ start-up

    def _spawn(self, base: TaskManagerSpec, index: int, run_dir: str) -> _ManagerProcess:
        from dataclasses import replace

        spec = replace(base, index=index)
        try:
            data = pickle.dumps(spec, protocol=5)
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            raise BadInputError(
                f"state backend {base.state_backend.name!r} cannot be sent to TaskManager processes ({exc}): "
                "register it in a module the job file imports, or run with --executor threads") from None
        path = os.path.join(run_dir, f"a{base.attempt}-tm{index}.spec")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
            out.write(data)
        env = dict(os.environ, STATEKIT_JOB_MASTER_PID=str(os.getpid()))
        if log.isEnabledFor(logging.DEBUG):
            env["STATEKIT_VERBOSE"] = "1"
        process = subprocess.Popen([sys.executable, "-m", "statekit.runtime.taskmanager", path],
                                   stdin=subprocess.DEVNULL, start_new_session=True, env=env, close_fds=True)
        return _ManagerProcess(index, process)

    def _accept_all(self) -> None:
        """Every TaskManager connected, proved the token and deployed (or the attempt cannot start)."""
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        pending = {m.index: m for m in self.managers}
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise JobFailedError(f"{len(pending)} TaskManager(s) did not start within {STARTUP_TIMEOUT_S:.0f} s")
            for manager in list(pending.values()):
                code = manager.process.poll()
                if code is not None and manager.connection is None:
                    raise JobFailedError(f"{manager.describe()} exited with code {code} before it registered")
            self._server.settimeout(min(remaining, 0.2))
            try:
                sock, _ = self._server.accept()
            except TimeoutError:
                continue
            sock.settimeout(None)
            connection = Connection(sock)
            try:
                kind, index, token = connection.receive()
            except ConnectionClosed:
                continue
            found = pending.get(index)
            if kind != protocol.HELLO or found is None or not secrets.compare_digest(token, self._token.encode()):
                connection.close()
                continue
            manager = found
            manager.connection = connection
            message = self._first_message(manager, deadline)
            if isinstance(message, protocol.DeployFailed):
                if message.bad_input:
                    raise BadInputError(message.message)
                raise JobFailedError(f"TaskManager {message.index} could not deploy: {message.message}")
            manager.registered = True
            manager.last_heartbeat = time.monotonic()
            del pending[index]

    def _first_message(self, manager: _ManagerProcess, deadline: float) -> Any:
        assert manager.connection is not None
        manager.connection.sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            return receive_message(manager.connection)
        except (ConnectionClosed, TimeoutError) as exc:
            code = manager.process.poll()
            raise JobFailedError(f"{manager.describe()} failed while deploying"
                                 f"{'' if code is None else f' (exit code {code})'}: {exc}") from exc
        finally:
            manager.connection.sock.settimeout(None)

    # ------------------------------------------------------------ Deployment

    @property
    def tasks(self) -> Sequence[RemoteTask]:
        return self._tasks

    @property
    def source_tasks(self) -> Sequence[RemoteTask]:
        return self._source_tasks

    def start(self) -> None:
        """The TaskManagers started their tasks when they deployed them; they report ready."""

    def release(self) -> None:
        """Every task of the attempt is ready: they may process input."""
        for manager in self.managers:
            manager.send(protocol.Start())

    def cancel(self) -> None:
        """A user's cancel: the TaskManagers end their tasks (bounded, then killed). An attempt
        that failed: its TaskManagers are killed at once (nothing of a failed attempt is kept)."""
        self._closing.set()
        if not self.execution.master.cancel_requested:
            running = [m for m in self.managers if m.process.poll() is None]
            if running:
                log.info("attempt %d failed: killing its %d running TaskManager(s)", self.execution.attempt,
                         len(running))
            _kill(*running)
        else:
            for manager in self.managers:
                manager.send(protocol.Cancel())
        self.close()

    def close(self) -> None:
        """Wait for the TaskManagers to end (they end when their tasks did; :data:`CANCEL_TIMEOUT_S`
        from the first cancel or close in all), kill stragglers, remove their working directories."""
        self._closing.set()
        if self._graceful_until is None:
            self._graceful_until = time.monotonic() + CANCEL_TIMEOUT_S
        for manager in self.managers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                manager.process.wait(max(0.0, self._graceful_until - time.monotonic()))
        self._kill_all()
        for manager in self.managers:
            if manager.connection is not None:
                manager.connection.close()
        with contextlib.suppress(OSError):
            self._server.close()
        self._remove_working_dirs()

    def _kill_all(self) -> None:
        running = [m for m in self.managers if m.process.poll() is None]
        for manager in running:
            log.warning("%s did not end; killing it", manager.describe())
        _kill(*running)

    def _remove_working_dirs(self) -> None:
        """The state backends' working directories of the attempt (its processes are gone)."""
        for manager in self.managers:
            shutil.rmtree(self._base.working_dir_of(manager.index), ignore_errors=True)

    # ------------------------------------------------------------ events from the TaskManagers

    def _serve(self, manager: _ManagerProcess) -> None:
        assert manager.connection is not None
        execution = self.execution
        try:
            while True:
                message = receive_message(manager.connection)
                manager.last_heartbeat = time.monotonic()
                if isinstance(message, protocol.Metrics):
                    execution.report_metrics(message.report)
                elif isinstance(message, protocol.Acknowledge):
                    execution.acknowledge_checkpoint(self._by_key[message.key], message.checkpoint_id,
                                                     message.snapshot)
                elif isinstance(message, protocol.Decline):
                    execution.decline_checkpoint(self._by_key[message.key], message.checkpoint_id, message.reason,
                                                 subsumed=message.subsumed, new_shared=list(message.new_shared))
                elif isinstance(message, protocol.TaskReady):
                    execution.task_ready(self._by_key[message.key])
                elif isinstance(message, protocol.TaskFinished):
                    with manager.lock:
                        manager.live.discard(message.key)
                    execution.task_finished(self._by_key[message.key])
                elif isinstance(message, protocol.SourceExhausted):
                    execution.source_exhausted(self._by_key[message.key])
                elif isinstance(message, protocol.TaskFailed):
                    error = message.error or protocol.TaskManagerFailure(f"{message.error_type}: {message.message}")
                    with manager.lock:
                        manager.live.discard(message.key)
                    execution.task_failed(self._by_key[message.key], error)
        except ConnectionClosed as exc:
            if manager.live:
                self._lost(manager, f"its control connection broke ({exc})")
        except Exception as exc:  # noqa: BLE001 - a message that cannot be read is a lost TaskManager
            self._lost(manager, f"it sent a message that cannot be read: {type(exc).__name__}: {exc}")

    def _watch_exit(self, manager: _ManagerProcess) -> None:
        code = manager.process.wait()
        time.sleep(0.05)  # the events it sent before it exited are read first
        with manager.lock:
            live = len(manager.live)
        if code or live:
            self._lost(manager, f"it exited with {_exit_description(code)}"
                                f"{f' while {live} of its tasks ran' if live else ''}")

    def _watch_heartbeats(self) -> None:
        while not self._closing.wait(HEARTBEAT_CHECK_S):
            for manager in self.managers:
                busy = _cpu_progress(manager)  # looked at every interval: progress is dated to the look
                now = time.monotonic()
                if busy:
                    manager.last_heartbeat = now
                elif now - manager.last_heartbeat > HEARTBEAT_TIMEOUT_S and manager.process.poll() is None \
                        and manager.live:
                    self._lost(manager, f"it sent no heartbeat and spent no CPU time for "
                                        f"{now - manager.last_heartbeat:.1f} s")

    def _lost(self, manager: _ManagerProcess, why: str) -> None:
        if self._closing.is_set():
            return
        self._closing.set()
        _kill(manager)  # lost is lost: a hung one must not hold the restart up
        self.execution.fail(TaskManagerLostError(f"{manager.describe()} was lost: {why}"))


def _kill(*managers: _ManagerProcess) -> None:
    """SIGKILL TaskManagers' process groups (each runs in a session of its own), then reap them."""
    for manager in managers:
        with contextlib.suppress(OSError):
            os.killpg(manager.process.pid, signal.SIGKILL)
    deadline = time.monotonic() + KILL_REAP_S
    for manager in managers:
        with contextlib.suppress(subprocess.TimeoutExpired):
            manager.process.wait(max(0.0, deadline - time.monotonic()))


def _cpu_progress(manager: _ManagerProcess) -> bool:
    """Whether the TaskManager's process spent CPU time since the last look and is not stopped
    (``/proc/<pid>/stat``: state, utime + stime); False where ``/proc`` cannot tell."""
    try:
        with open(f"/proc/{manager.process.pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        state, ticks = fields[0], int(fields[11]) + int(fields[12])  # fields 3, 14 and 15 of proc(5)
    except (OSError, IndexError, ValueError):
        return False
    previous, manager.cpu_ticks = manager.cpu_ticks, ticks
    return previous is not None and ticks > previous and state not in (b"T", b"t", b"Z", b"X")


def _exit_description(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-code).name}"
        return f"signal {-code}"
    return f"exit code {code}"


class ProcessDeployer:
    """Deploys every attempt of a job into fresh TaskManager processes.

    Args:
        job_file: The job script the TaskManagers import.
        auto: A job whose vertices all have one subtask runs in threads of this process instead.
    """

    def __init__(self, job_file: str, *, auto: bool = False) -> None:
        self.job_file = os.path.abspath(job_file)
        self.auto = auto
        self._run_dir: str | None = None

    def check(self, graph: JobGraph, options: RunOptions) -> None:
        """Refuse too few slots for the job's largest parallelism before the job is announced."""
        parallelism = max(v.parallelism for v in graph.vertices)
        if not (self.auto and parallelism <= 1):
            placement(parallelism, options.task_managers, options.slots)

    def deploy(self, execution: Execution, restore: RestorePlan | None) -> Deployment:
        from statekit.runtime.jobmaster.execution import ThreadDeployment

        master = execution.master
        if self.auto and max(v.parallelism for v in master.graph.vertices) <= 1:
            return ThreadDeployment(execution, restore)
        if self._run_dir is None:
            self._run_dir = master._temp_dir("statekit-run-")  # private (0700), removed with the job
        return ProcessDeployment(execution, restore, self.job_file, self._run_dir)
