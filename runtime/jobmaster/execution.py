"""One execution attempt of a job: its tasks, gates and channels, deployed, run and torn down.

The job master starts one :class:`Execution` per attempt; the execution is the tasks' host
(:class:`statekit.runtime.task.task.TaskHost`): it forwards their snapshots and metrics to the
job master's coordinator and metrics, and ends when every task finished, one failed, or the
attempt was cancelled.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from statekit.runtime.checkpoint.handles import TaskStateSnapshot
from statekit.runtime.checkpoint.restore import RestorePlan
from statekit.runtime.dataflow.user_code import with_user_location
from statekit.runtime.task.mails import Cancel, Resume, Terminate
from statekit.runtime.task.metrics import TaskReport
from statekit.runtime.task.task import Task
from statekit.runtime.taskmanager.deployment import DeploymentContext, deploy_tasks, source_plans
from statekit.statefmt.errors import JobError, JobFailedError, StatekitError

if TYPE_CHECKING:
    from statekit.runtime.dataflow.graph import JobGraph
    from statekit.runtime.dataflow.run_options import RunOptions
    from statekit.runtime.jobmaster.job_master import JobMaster

__all__ = [
    "Execution",
    "DeployedTask",
    "Deployment",
    "Deployer",
    "ThreadDeployer",
    "ThreadDeployment",
    "JOIN_TIMEOUT_S",
    "FINAL_CHECKPOINT_ATTEMPTS",
    "FINAL_CHECKPOINT_RETRY_DELAY_S",
    "one_line",
]

log = logging.getLogger("statekit.runtime")

JOIN_TIMEOUT_S = 10.0
FINAL_CHECKPOINT_ATTEMPTS = 3
FINAL_CHECKPOINT_RETRY_DELAY_S = 0.5


def one_line(text: str) -> str:
    return " ".join(text.split())


class DeployedTask(Protocol):
    """A deployed subtask as its execution sees it (a task here, or a stand-in for one in a
    TaskManager): who it is and how to mail it."""

    key: tuple[int, int]
    name: str

    def mail(self, mail: Any) -> None: ...


class Deployment(Protocol):
    """The tasks of one attempt, deployed: started once every one is deployed, cancelled at the end."""

    @property
    def tasks(self) -> Sequence[DeployedTask]: ...

    @property
    def source_tasks(self) -> Sequence[DeployedTask]: ...

    def start(self) -> None:
        """Start every task (each reports ``task_ready`` to the execution)."""
        ...

    def release(self) -> None:
        """Every task is ready: they may process input (``host.started``)."""
        ...

    def cancel(self) -> None:
        """End every task that still runs; returns when they ended (bounded wait)."""
        ...

    def close(self) -> None:
        """The attempt ended: release what the deployment holds (processes, sockets)."""
        ...


class Deployer(Protocol):
    """How the job master deploys an attempt's tasks (threads here, or TaskManager processes)."""

    def check(self, graph: JobGraph, options: RunOptions) -> None:
        """Refuse, before the job is announced or anything starts, a job this deployer cannot deploy.

        Raises:
            BadInputError: It cannot (e.g. too few slots for the job's largest parallelism).
        """
        ...

    def deploy(self, execution: Execution, restore: RestorePlan | None) -> Deployment: ...


class ThreadDeployment:
    """Every subtask as a thread of this process (the thread executor)."""

    def __init__(self, execution: Execution, restore: RestorePlan | None) -> None:
        master = execution.master
        backend = master.state_backend
        context = DeploymentContext(
            job_id=master.job_id, attempt=execution.attempt, state_backend=backend.name,
            working_dir=master._temp_dir(f"statekit-{backend.name}-") if backend.needs_working_dir else None,
            incremental=master.incremental, channel_state_serializer=master.config.channel_state_serializer,
            storage_options=master.env.storage_options, restore=restore, exchanges=master.exchanges,
            latency_interval_ms=master.options.latency_interval, source_plans=execution.source_plans,
        )
        subtasks = [(v.id, i) for v in master.graph.vertices for i in range(v.parallelism)]
        deployed = deploy_tasks(master.graph, subtasks, execution, context)
        self._tasks = deployed.tasks
        self._source_tasks = deployed.source_tasks
        self.gates = list(deployed.gates.values())

    @property
    def tasks(self) -> Sequence[Task]:
        return self._tasks

    @property
    def source_tasks(self) -> Sequence[Task]:
        return self._source_tasks

    def start(self) -> None:
        for task in self._tasks:
            task.thread.start()

    def release(self) -> None:
        """The tasks wait on the execution's ``started`` event, which is set now."""

    def close(self) -> None:
        """Threads end with their tasks."""

    def cancel(self) -> None:
        for gate in self.gates:
            gate.cancel()
        for task in self._tasks:
            task.mail(Cancel())
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        for task in self._tasks:
            task.thread.join(max(0.0, deadline - time.monotonic()))
            if task.thread.is_alive():
                log.warning("task %s did not stop within %.0f s", task.name, JOIN_TIMEOUT_S)


class ThreadDeployer:
    """Deploys every attempt as threads of this process."""

    def check(self, graph: JobGraph, options: RunOptions) -> None:
        """Threads deploy any graph."""

    def deploy(self, execution: Execution, restore: RestorePlan | None) -> Deployment:
        return ThreadDeployment(execution, restore)


class Execution:
    """One attempt: its deployed tasks, the events they report, and how the attempt ends."""

    def __init__(self, master: JobMaster, attempt: int, restore: RestorePlan | None) -> None:
        self.master = master
        self.attempt = attempt
        self.started = threading.Event()
        self.cancelled = threading.Event()
        self._events: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self._stopping = False
        self._finishing = False
        self.tasks: list[DeployedTask] = []
        self.source_tasks: list[DeployedTask] = []
        self.source_plans = source_plans(master.graph)  # one per attempt, the same on every host
        self._build(restore)

    # ------------------------------------------------------------ deployment

    def _build(self, restore: RestorePlan | None) -> None:
        self.deployment = self.master.deployer.deploy(self, restore)
        self.tasks = list(self.deployment.tasks)
        self.source_tasks = list(self.deployment.source_tasks)

    # ------------------------------------------------------------ TaskHost

    def post(self, *event: Any) -> None:
        self._events.put(event)

    def task_ready(self, task: DeployedTask) -> None:
        self.post("ready", task)

    def task_failed(self, task: DeployedTask, error: BaseException) -> None:
        if not self.cancelled.is_set():
            # one line; the traceback only when DEBUG is on for the logger (statekit run --verbose)
            text = f"{type(error).__name__}: {one_line(str(error))}"
            log.warning("task %s failed: %s", task.name,
                        text if isinstance(error, StatekitError) else with_user_location(text, error),
                        exc_info=error if log.isEnabledFor(logging.DEBUG) else None)
        self.post("failed", task, error)

    def task_finished(self, task: DeployedTask) -> None:
        self.post("finished", task)

    def source_exhausted(self, task: DeployedTask) -> None:
        self.post("exhausted", task)

    def acknowledge_checkpoint(self, task: DeployedTask, checkpoint_id: int, snapshot: TaskStateSnapshot) -> None:
        self.master.coordinator.acknowledge(task.key, checkpoint_id, snapshot)

    def report_metrics(self, report: TaskReport) -> None:
        if report.accumulators:
            self.master.accumulate(report.accumulators)
        self.master.metrics.update(report)

    def decline_checkpoint(self, task: DeployedTask, checkpoint_id: int, reason: str, *, subsumed: bool,
                           new_shared: list[str] | None = None) -> None:
        self.master.coordinator.decline(checkpoint_id, f"task {task.name}: {reason}", subsumed=subsumed,
                                        new_shared=new_shared)

    def fail(self, error: BaseException) -> None:
        self.post("failed", None, error)

    # ------------------------------------------------------------ run

    def run(self) -> tuple[str, BaseException | None]:
        """Deploy, run to the end; return ("finished" | "cancelled" | "failed", error)."""
        coordinator = self.master.coordinator
        self.deployment.start()
        ready = finished = exhausted = 0
        outcome: tuple[str, BaseException | None] | None = None
        attached = False
        while outcome is None:
            event = self._events.get()
            kind = event[0]
            if kind == "ready":
                ready += 1
                if ready == len(self.tasks):
                    coordinator.attach(self)
                    attached = True
                    self.started.set()
                    self.deployment.release()
                    handle = self.master.handle
                    if handle.tasks_running_ms is None:
                        handle.tasks_running_ms = int(time.time() * 1000)
                    coordinator.start_periodic()
            elif kind == "failed":
                outcome = ("failed", event[2])
            elif kind == "cancel":
                outcome = ("cancelled", None)
            elif kind == "exhausted":
                exhausted += 1
                if exhausted == len(self.source_tasks) and not self._stopping:
                    self._finish_bounded()
            elif kind == "stopped":
                self._terminate_sources()
            elif kind == "finished":
                finished += 1
                if finished == len(self.tasks):
                    if self.cancelled.is_set():
                        outcome = ("cancelled", None)
                    elif not (self._finishing or self._stopping):
                        outcome = ("failed", JobFailedError("tasks ended before the job finished"))
                    else:
                        outcome = ("finished", None)
        if outcome[0] != "finished":
            self._teardown()
        self.deployment.close()
        if attached:
            coordinator.stop_periodic()
            coordinator.detach("job attempt ended" if outcome[0] == "finished" else f"job {outcome[0]}")
        return outcome

    def _teardown(self) -> None:
        self.cancelled.set()
        self.deployment.cancel()

    # ------------------------------------------------------------ finishing

    def _finish_bounded(self) -> None:
        """All sources exhausted: final checkpoint, optional savepoint, then end the tasks."""
        self._finishing = True
        coordinator = self.master.coordinator
        coordinator.stop_periodic()
        savepoint_dir = self.master.options.savepoint_on_finish

        def finish() -> None:
            try:
                if not self._final_checkpoint():
                    return
                if savepoint_dir:
                    path = coordinator.trigger(is_savepoint=True, target_dir=savepoint_dir).result()
                    self.master.final_savepoint = path
                    self.master.handle.final_savepoint_path = path
                    log.info("savepoint on finish stored at %s", path)
                self.post("stopped")
            except BaseException as exc:  # noqa: BLE001
                self.fail(exc if isinstance(exc, StatekitError) else JobFailedError(f"final checkpoint failed: {exc}"))

        threading.Thread(target=finish, name="final-checkpoint", daemon=True).start()

    def _final_checkpoint(self) -> bool:
        """Take the final checkpoint (sinks commit on it), retried a bounded number of times.

        Returns False when the attempt ended meanwhile (failed or cancelled: nothing to do).

        Raises:
            JobFailedError: Every attempt failed; the output since the last completed
                checkpoint is not committed, so the job must not finish.
        """
        coordinator = self.master.coordinator
        for attempt in range(1, FINAL_CHECKPOINT_ATTEMPTS + 1):
            try:
                coordinator.trigger(final=True).result()
                return True
            except StatekitError as error:
                if self.cancelled.is_set():
                    return False
                if attempt == FINAL_CHECKPOINT_ATTEMPTS:
                    raise JobFailedError(
                        f"final checkpoint failed {attempt} times, last: {one_line(str(error))}; "
                        "output since the last completed checkpoint is not committed") from error
                log.warning("job %s: final checkpoint failed (attempt %d of %d): %s; retrying in %g s",
                            self.master.job_id, attempt, FINAL_CHECKPOINT_ATTEMPTS, one_line(str(error)),
                            FINAL_CHECKPOINT_RETRY_DELAY_S)
                if self.cancelled.wait(FINAL_CHECKPOINT_RETRY_DELAY_S):
                    return False
        return False

    def _terminate_sources(self) -> None:
        for task in self.source_tasks:
            task.mail(Terminate())

    def stop_with_savepoint(self, target_dir: str | None, drain: bool, native: bool = False) -> concurrent.futures.Future[str]:
        """Savepoint with the sources stopping at its barrier; then the job finishes."""
        coordinator = self.master.coordinator
        result: concurrent.futures.Future[str] = concurrent.futures.Future()
        if self._stopping or self._finishing:
            result.set_exception(JobError(f"job {self.master.job_id} is already finishing"))
            return result
        self._stopping = True
        coordinator.stop_periodic()
        try:
            savepoint = coordinator.trigger(is_savepoint=True, target_dir=target_dir, stop=True, drain=drain,
                                            native=native)
        except BaseException as exc:  # noqa: BLE001 - the caller's future carries it
            self._stopping = False
            coordinator.start_periodic()
            result.set_exception(exc)
            return result

        def done(future: concurrent.futures.Future[str]) -> None:
            error = future.exception()
            if error is None:
                self.post("stopped")
                result.set_result(future.result())
                return
            self._stopping = False
            if drain:
                # the sources already ended their input: this attempt cannot resume, it fails
                # over (restart per the strategy, from the latest completed checkpoint), as Flink's
                self.fail(JobFailedError(f"stop-with-savepoint (drain) failed: {one_line(str(error))}"))
            else:
                for task in self.source_tasks:
                    task.mail(Resume())
                coordinator.start_periodic()
            result.set_exception(error)

        savepoint.add_done_callback(done)
        return result


