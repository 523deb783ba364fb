"""Deploying an attempt into TaskManager processes (the job master's side).

:class:`ProcessDeployer` starts, for every execution attempt, fresh TaskManager processes
(``python -m statekit.runtime.taskmanager SPEC``; :mod:`statekit.runtime.taskmanager.task_manager`)
in a new session, with a control socket in the job's private run directory that only they can
reach (the job's token). The execution sees each remote subtask as a :class:`RemoteTask`: its
mails go to the TaskManager that runs it, and its events, acknowledgements and metric reports
come back on the same connection, one reader thread per TaskManager.

A TaskManager is lost when its process exits, its control connection breaks, or its heartbeats
stop for :data:`HEARTBEAT_TIMEOUT_S`: the attempt fails (the job restarts per its strategy from
the latest completed checkpoint), every TaskManager of the attempt is cancelled, and after
:data:`CANCEL_TIMEOUT_S` the ones still running are killed — no process of an attempt survives it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import secrets
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
    from statekit.runtime.jobmaster.execution import Deployment, Execution

__all__ = ["ProcessDeployer", "ProcessDeployment", "RemoteTask", "TaskManagerLostError", "HEARTBEAT_TIMEOUT_S"]

log = logging.getLogger("statekit.runtime")

HEARTBEAT_TIMEOUT_S = 1.5
STARTUP_TIMEOUT_S = 60.0
CANCEL_TIMEOUT_S = 10.0
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
        self.last_heartbeat = time.monotonic()
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
        self.managers: list[_ManagerProcess] = []
        try:
            for index in range(self.placement.task_managers):
                self.managers.append(self._spawn(base, index, run_dir))
            self._accept_all()
        except BaseException:
            self._kill_all()
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
        self._closing.set()
        for manager in self.managers:
            manager.send(protocol.Cancel())
        self._wait_exit(CANCEL_TIMEOUT_S)
        self.close()

    def close(self) -> None:
        """Wait for the TaskManagers to end (they end when their tasks did), kill stragglers."""
        self._closing.set()
        self._wait_exit(CANCEL_TIMEOUT_S)
        self._kill_all()
        for manager in self.managers:
            if manager.connection is not None:
                manager.connection.close()
        with contextlib.suppress(OSError):
            self._server.close()

    def _wait_exit(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for manager in self.managers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                manager.process.wait(max(0.0, deadline - time.monotonic()))

    def _kill_all(self) -> None:
        for manager in self.managers:
            if manager.process.poll() is None:
                log.warning("%s did not end; killing it", manager.describe())
                _kill(manager)

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
        while not self._closing.wait(0.1):
            now = time.monotonic()
            for manager in self.managers:
                if now - manager.last_heartbeat > HEARTBEAT_TIMEOUT_S and manager.process.poll() is None \
                        and manager.live:
                    self._lost(manager, f"it sent no heartbeat for {now - manager.last_heartbeat:.1f} s")

    def _lost(self, manager: _ManagerProcess, why: str) -> None:
        if self._closing.is_set():
            return
        self._closing.set()
        _kill(manager)  # lost is lost: a hung one must not hold the restart up
        self.execution.fail(TaskManagerLostError(f"{manager.describe()} was lost: {why}"))


def _kill(manager: _ManagerProcess) -> None:
    """SIGKILL a TaskManager's process group (it runs in a session of its own) and reap it."""
    with contextlib.suppress(OSError):
        os.killpg(manager.process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        manager.process.wait(5)


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

    def deploy(self, execution: Execution, restore: RestorePlan | None) -> Deployment:
        from statekit.runtime.jobmaster.execution import ThreadDeployment

        master = execution.master
        if self.auto and max(v.parallelism for v in master.graph.vertices) <= 1:
            return ThreadDeployment(execution, restore)
        if self._run_dir is None:
            self._run_dir = master._temp_dir("statekit-run-")  # private (0700), removed with the job
        return ProcessDeployment(execution, restore, self.job_file, self._run_dir)
