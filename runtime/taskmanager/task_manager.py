"""A TaskManager process: the slots of one execution attempt, for a job master in another process.

``python -m statekit.runtime.taskmanager SPEC`` (the job master starts it; SPEC is a pickled
:class:`~statekit.runtime.taskmanager.protocol.TaskManagerSpec` in the job's private run
directory). The process:

1. dies with its job master: ``PR_SET_PDEATHSIG`` (Linux) kills it when the job master process
   goes, and a closed control connection ends it at once — no TaskManager outlives its job;
2. listens on its network endpoint, connects to the job master's control socket and proves it
   belongs to the job (the job's token);
3. imports the job file as ``__main__`` and builds the job graph the way the job master did (the
   job file is the "jar"); a graph whose fingerprint differs from the job master's fails the
   deployment with one line naming the difference;
4. deploys the subtasks of its slots (:func:`~statekit.runtime.taskmanager.deployment.deploy_tasks`:
   local channels in memory, channels to other TaskManagers through the network stack), opens the
   snapshot the attempt restores from itself, reports ``Registered`` and starts its tasks;
5. serves the job master: ``Start`` (every task of the attempt is ready), mails for its tasks
   (checkpoint triggers, notifications, terminate, resume), ``Cancel``; reports every task event,
   acknowledgement, decline and metric report, and a heartbeat every 0.3 s;
6. exits when its tasks ended (0), when cancelled (0), or when the job master is gone (1).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import pickle
import signal
import socket
import sys
import threading
import time
from typing import Any

from statekit.runtime.checkpoint.handles import TaskStateSnapshot
from statekit.runtime.checkpoint.restore import RestorePlan
from statekit.runtime.dataflow.graph import JobGraph, build_job_graph
from statekit.runtime.dataflow.job_capture import capture_job_file
from statekit.runtime.exchange.network import Connection, ConnectionClosed, NetworkEndpoint, OutboundLink
from statekit.runtime.exchange.record_writer import ChannelTarget
from statekit.runtime.task.mails import Cancel as CancelMail
from statekit.runtime.task.metrics import TaskReport
from statekit.runtime.task.task import Task
from statekit.runtime.taskmanager import protocol
from statekit.runtime.taskmanager.deployment import DeploymentContext, deploy_tasks, exchange_edges
from statekit.runtime.taskmanager.protocol import TaskManagerSpec
from statekit.statefmt.errors import StatekitError
from statekit.statefmt.pandas_probe import answer_pandas_probe_on_import

__all__ = ["TaskManager", "main", "send_message", "receive_message", "connect_unix"]

log = logging.getLogger("statekit.runtime")

JOIN_TIMEOUT_S = 10.0
# the bytes a record is taken to need in a network buffer until records have crossed to another
# TaskManager: a buffer of --buffer-size bytes starts with buffer-size / RECORD_BYTES records (512
# for the default 32 KiB), then holds as many as fit by the bytes records took on the wire
RECORD_BYTES = 64
CONNECT_TIMEOUT_S = 30.0
_PR_SET_PDEATHSIG = 1


def send_message(connection: Connection, message: Any) -> None:
    """Send one control message (a pickled dataclass of :mod:`protocol`)."""
    connection.send(protocol.MESSAGE, 0, pickle.dumps(message, protocol=5))


def receive_message(connection: Connection) -> Any:
    """The next control message.

    Raises:
        ConnectionClosed: The peer is gone.
    """
    kind, _, payload = connection.receive()
    if kind != protocol.MESSAGE:
        raise ConnectionClosed(f"unexpected frame kind {kind} on a control connection")
    return pickle.loads(payload)


def connect_unix(path: str, timeout_s: float = CONNECT_TIMEOUT_S) -> socket.socket:
    """A connection to the Unix-domain socket ``path``, retried while it does not listen yet."""
    deadline = time.monotonic() + timeout_s
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            return sock
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


class _Links:
    """The network stack's sending side: one link per other TaskManager, opened on first use."""

    def __init__(self, spec: TaskManagerSpec) -> None:
        self.spec = spec
        self._links: dict[int, OutboundLink] = {}

    def target(self, vertex: int, subtask: int, channel: int) -> ChannelTarget:
        other = self.spec.placement.task_manager_of(subtask)
        link = self._links.get(other)
        if link is None:
            connect_unix(self.spec.endpoint_path(other)).close()  # wait until it listens
            link = self._links[other] = OutboundLink(self.spec.endpoint_path(other), self.spec.token.encode(),
                                                     f"TaskManager {other}")
        return link.gate(vertex, subtask).target(channel)

    def close(self) -> None:
        for link in self._links.values():
            link.close()


class _Host:
    """The tasks' host in a TaskManager: every event goes to the job master over the control connection."""

    def __init__(self, control: Connection) -> None:
        self.control = control
        self.started = threading.Event()
        self.cancelled = threading.Event()
        self.ended: set[tuple[int, int]] = set()
        self.all_ended = threading.Event()
        self.expected = 0
        self._lock = threading.Lock()

    def _send(self, message: Any) -> None:
        with contextlib.suppress(ConnectionClosed):
            send_message(self.control, message)

    def _ended(self, task: Task) -> None:
        with self._lock:
            self.ended.add(task.key)
            if len(self.ended) >= self.expected:
                self.all_ended.set()

    def task_ready(self, task: Task) -> None:
        self._send(protocol.TaskReady(task.key))

    def task_failed(self, task: Task, error: BaseException) -> None:
        try:
            pickle.loads(pickle.dumps(error))
            carried: BaseException | None = error
        except Exception:  # noqa: BLE001 - an exception that cannot cross: its class and message do
            carried = None
        self._send(protocol.TaskFailed(task.key, carried, type(error).__name__, " ".join(str(error).split())))
        self._ended(task)

    def task_finished(self, task: Task) -> None:
        self._send(protocol.TaskFinished(task.key))
        self._ended(task)

    def source_exhausted(self, task: Task) -> None:
        self._send(protocol.SourceExhausted(task.key))

    def acknowledge_checkpoint(self, task: Task, checkpoint_id: int, snapshot: TaskStateSnapshot) -> None:
        self._send(protocol.Acknowledge(task.key, checkpoint_id, snapshot))

    def decline_checkpoint(self, task: Task, checkpoint_id: int, reason: str, *, subsumed: bool,
                           new_shared: list[str] | None = None) -> None:
        self._send(protocol.Decline(task.key, checkpoint_id, reason, subsumed, tuple(new_shared or ())))

    def report_metrics(self, report: TaskReport) -> None:
        self._send(protocol.Metrics(report))


class TaskManager:
    """One TaskManager process's work (see the module docstring)."""

    def __init__(self, spec: TaskManagerSpec) -> None:
        self.spec = spec
        self.control = Connection(connect_unix(spec.control_path))
        self.control.send(protocol.HELLO, spec.index, spec.token.encode())
        self.endpoint = NetworkEndpoint(spec.endpoint_path(spec.index), spec.token.encode())
        self.host = _Host(self.control)
        self.links = _Links(spec)
        self.tasks: dict[tuple[int, int], Task] = {}
        self.gates: list[Any] = []
        self.working_dir: str | None = None
        self._closing = False

    def run(self) -> int:
        try:
            graph, storage_options = self._graph()
        except StatekitError as exc:
            send_message(self.control, protocol.DeployFailed(self.spec.index, str(exc), bad_input=True))
            return 2
        expected, description = self.spec.fingerprint
        digest, ours = graph_fingerprint_of(graph)
        if digest != expected:
            send_message(self.control, protocol.DeployFailed(
                self.spec.index, _difference(self.spec.job_file, description, ours), bad_input=True))
            return 2
        try:
            deployed = self._deploy(graph, storage_options)
        except StatekitError as exc:
            send_message(self.control, protocol.DeployFailed(self.spec.index, str(exc), bad_input=True))
            return 2
        except Exception as exc:  # noqa: BLE001 - reported to the job master, which fails the attempt
            send_message(self.control, protocol.DeployFailed(self.spec.index, f"{type(exc).__name__}: {exc}",
                                                             bad_input=False))
            return 1
        self.tasks = {task.key: task for task in deployed.tasks}
        self.host.expected = len(self.tasks)
        if not self.tasks:
            self.host.all_ended.set()
        self.endpoint.serve(deployed.gates)
        self.gates = list(deployed.gates.values())
        send_message(self.control, protocol.Registered(self.spec.index, os.getpid()))
        threading.Thread(target=self._heartbeats, name="heartbeat", daemon=True).start()
        threading.Thread(target=self._serve_control, name="control", daemon=True).start()
        for task in deployed.tasks:
            task.thread.start()
        self.host.all_ended.wait()
        for task in deployed.tasks:
            task.thread.join(JOIN_TIMEOUT_S)
        return 0

    def _graph(self) -> tuple[JobGraph, dict[str, Any] | None]:
        """The job graph the job file builds here, resolved as the job master resolved it."""
        options = self.spec.options
        captured = capture_job_file(self.spec.job_file, options, keep_main=True)
        env = captured.env
        initial = (RestorePlan.open(options.restore_path, allow_non_restored_state=options.allow_non_restored_state,
                                    trust_pickle=True, storage_options=env.storage_options)
                   if options.restore_path else None)
        env._check_sources()
        graph = build_job_graph(
            env.transformations, default_parallelism=options.parallelism or env.parallelism or 1,
            default_max_parallelism=options.max_parallelism or env.max_parallelism, restore=initial,
            warn_generated_uids=False,
        )
        return graph, env.storage_options

    def _deploy(self, graph: JobGraph, storage_options: dict[str, Any] | None) -> Any:
        spec = self.spec
        from statekit.runtime.state.registry import register_state_backend, resolve_state_backend, state_backend_names

        if spec.state_backend.name not in state_backend_names():
            register_state_backend(spec.state_backend)  # registered at run time in the job master
        backend = resolve_state_backend(spec.state_backend.name)
        if backend.needs_working_dir:
            self.working_dir = spec.working_dir_of(spec.index)
            os.mkdir(self.working_dir, 0o700)
        restore = RestorePlan.from_spec(spec.restore, storage_options) if spec.restore is not None else None
        context = DeploymentContext(
            job_id=spec.job_id, attempt=spec.attempt, state_backend=backend.name, working_dir=self.working_dir,
            incremental=spec.incremental, channel_state_serializer=spec.channel_state_serializer,
            storage_options=storage_options, restore=restore, exchanges=exchange_edges(graph),
            buffer_records=1 if spec.buffer_timeout_ms == 0 else max(1, spec.buffer_size // RECORD_BYTES),
            buffer_bytes=None if spec.buffer_timeout_ms == 0 else spec.buffer_size,
            buffer_timeout_ms=spec.buffer_timeout_ms, latency_interval_ms=spec.options.latency_interval,
            source_plans=spec.source_plans,
        )
        subtasks = spec.placement.subtasks_of(graph, spec.index)
        return deploy_tasks(graph, subtasks, self.host, context, self.links)

    def _heartbeats(self) -> None:
        while not self.host.all_ended.wait(protocol.HEARTBEAT_INTERVAL_S):
            try:
                send_message(self.control, protocol.Heartbeat())
            except ConnectionClosed:
                return

    def _serve_control(self) -> None:
        try:
            while True:
                message = receive_message(self.control)
                if isinstance(message, protocol.MailTask):
                    task = self.tasks.get(message.key)
                    if task is not None:
                        task.mail(message.mail)
                elif isinstance(message, protocol.Start):
                    self.host.started.set()
                elif isinstance(message, protocol.Cancel):
                    self._cancel()
                    return
        except ConnectionClosed:
            if not self._closing:
                os._exit(1)  # the job master is gone: nothing of the job may outlive it

    def _cancel(self) -> None:
        self.host.cancelled.set()
        for gate in self.gates:
            gate.cancel()
        for task in self.tasks.values():
            task.mail(CancelMail())

    def close(self) -> None:
        self._closing = True
        self.links.close()
        self.endpoint.close()
        self.control.close()
        if self.working_dir is not None:
            import shutil

            shutil.rmtree(self.working_dir, ignore_errors=True)


def graph_fingerprint_of(graph: JobGraph) -> tuple[str, str]:
    return protocol.graph_fingerprint(graph)


def _difference(job_file: str, theirs: str, ours: str) -> str:
    """One line naming the first difference between two graph descriptions."""
    for mine, master in zip(ours.splitlines(), theirs.splitlines()):
        if mine != master:
            return (f"{job_file} builds a different job graph in a TaskManager than in the job master "
                    f"({mine!r} instead of {master!r}); a job file must build the same graph in every process "
                    "(no randomness, time or host-specific input in uids, parallelism or chaining)")
    return (f"{job_file} builds a different job graph in a TaskManager than in the job master "
            f"({len(ours.splitlines())} against {len(theirs.splitlines())} operators and edges)")


def _die_with_parent(parent: int) -> None:
    """Linux: the kernel kills this process when its parent (the job master) dies."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def main(argv: list[str] | None = None) -> int:
    """``python -m statekit.runtime.taskmanager SPEC``: run one TaskManager; the exit code."""
    args = sys.argv[1:] if argv is None else argv
    parent = int(os.environ.get("STATEKIT_JOB_MASTER_PID", str(os.getppid())))
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the job master decides what Ctrl-C does
    logging.basicConfig(format="%(asctime)s %(levelname)s TaskManager %(name)s: %(message)s")
    if os.environ.get("STATEKIT_VERBOSE"):
        logging.getLogger("statekit").setLevel(logging.DEBUG)
    answer_pandas_probe_on_import()
    with open(args[0], "rb") as source:
        spec: TaskManagerSpec = pickle.load(source)
    manager = TaskManager(spec)
    try:
        return manager.run()
    finally:
        manager.close()
