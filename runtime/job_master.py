"""The job master: resolves a job, runs execution attempts, restarts, finishes, cancels.

One :class:`JobMaster` per ``execute()``. Each :class:`Execution` attempt deploys one
task per subtask (threads), wires them with bounded gates, restores state, and runs until
the job finishes, fails or is cancelled. A failed attempt is followed, per the restart
strategy, by a new attempt restored from the latest completed checkpoint.

Bounded jobs end like Flink's: when every source is exhausted it sends end-of-input
(timers and buffers flush), the master takes a *final checkpoint* so the exactly-once
sinks commit everything, optionally a savepoint (``savepoint_on_finish``), and then tells
the sources to finish (end-of-partition flows through the graph and tasks exit).
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import sys
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from statekit.runtime.backend import resolve_state_backend
from statekit.runtime.channels import ChannelTarget, InputGate, Partitioning, RecordWriter
from statekit.runtime.checkpoint_storage import CheckpointStorage
from statekit.runtime.coordinator import CheckpointCoordinator, OperatorInfo
from statekit.runtime.environment import StreamEnvironment
from statekit.runtime.graph import Edge, JobGraph, build_job_graph
from statekit.runtime.job import JobHandle, JobStatus, JobVertex
from statekit.runtime.mails import Resume, Terminate
from statekit.runtime.metrics import JobMetrics, TaskFigures, TaskReport
from statekit.runtime.operators import OperatorContext, Output, StreamOperator
from statekit.runtime.registry import check_job_id
from statekit.runtime.restart_strategy import RestartStrategy, fixed_delay_restart, no_restart
from statekit.runtime.restore import ExchangeEdge, RestorePlan
from statekit.runtime.restore_mode import RestoreMode, parse_restore_mode
from statekit.runtime.run_options import RunOptions, get_run_options, notify_job_listeners
from statekit.runtime.subtask_checkpoint import ChannelSpec, SubtaskStats
from statekit.runtime.task import Task
from statekit.runtime.temp_dirs import TempDirs
from statekit.runtime.user_code import with_user_location
from statekit.runtime.watermarks import check_event_time_checkpoints, configure_task_time, edge_key_selector
from statekit.statefmt.errors import JobError, JobFailedError, StatekitError
from statekit.statefmt.job_id import new_job_id
from statekit.statefmt.pandas_probe import answer_pandas_probe_on_import

__all__ = ["JobMaster", "Execution", "JobExecutionResult", "execute", "execute_async"]

log = logging.getLogger("statekit.runtime")

_JOIN_TIMEOUT_S = 10.0
FINAL_CHECKPOINT_ATTEMPTS = 3
FINAL_CHECKPOINT_RETRY_DELAY_S = 0.5


@dataclass(frozen=True)
class JobExecutionResult:
    """What ``execute()`` returns when the job ended without failing."""

    job_id: str
    job_name: str
    status: JobStatus
    net_runtime_ms: int
    savepoint_path: str | None = None
    latest_checkpoint: str | None = None


def execute_async(env: StreamEnvironment, job_name: str) -> JobHandle:
    """Resolve and start the job; return its handle (listeners are called before it runs)."""
    answer_pandas_probe_on_import()  # a job's first snapshot would otherwise import pandas (~0.4 s)
    master = JobMaster(env, job_name, get_run_options())
    try:
        notify_job_listeners(master.handle)
    except Exception as exc:  # noqa: BLE001 - a listener never stops the job
        log.warning("a job listener failed: %s", exc)
    master.start()
    return master.handle


def execute(env: StreamEnvironment, job_name: str) -> JobExecutionResult:
    """Run the job and block until it ends.

    Raises:
        StatekitError: the job could not start or restore (BadInputError, ...).
        JobFailedError: it failed and restarts were exhausted.
    """
    handle = execute_async(env, job_name)
    master = handle._control
    assert isinstance(master, JobMaster)
    try:
        status = handle.wait()
    except KeyboardInterrupt:
        handle.cancel()
        handle.wait(_JOIN_TIMEOUT_S)
        raise
    if status is JobStatus.FAILED:
        error = master.error
        if isinstance(error, StatekitError):
            raise error
        raise JobFailedError(f"job {handle.job_id} ({job_name}) failed: {handle.failure}")
    end = handle.end_time_ms or int(time.time() * 1000)
    return JobExecutionResult(
        handle.job_id, job_name, status, end - handle.start_time_ms, master.final_savepoint,
        master.coordinator.latest_completed,
    )


class JobMaster:
    """Runs one job: attempts, restarts, checkpoints, savepoints, cancellation."""

    def __init__(self, env: StreamEnvironment, job_name: str, options: RunOptions | None) -> None:
        options = options or RunOptions()
        env._check_sources()
        self.env = env
        self.options = options
        self.job_name = job_name
        self.job_id = check_job_id(options.job_id or new_job_id())
        self.state_backend = resolve_state_backend(options.state_backend or env.state_backend)
        self.config = options.apply_to(replace(env.checkpoint_config))
        self.config.validate()
        check_event_time_checkpoints(env.transformations, self.config.unaligned)
        self.incremental = options.incremental if options.incremental is not None else env.incremental_checkpoints
        if self.incremental:
            self.state_backend.check_incremental()
        self._temp_dirs = TempDirs()
        storage_url = self.config.checkpoint_storage
        if storage_url is None and self.config.enabled:
            storage_url = self._temp_dir("statekit-checkpoints-")  # in-process failover only
        self.ephemeral_storage = self.config.checkpoint_storage is None and storage_url is not None
        self.restart: RestartStrategy = env.restart_strategy or (
            fixed_delay_restart(3, 1000) if self.config.enabled else no_restart()
        )
        self.initial_restore = (
            RestorePlan.open(options.restore_path, allow_non_restored_state=options.allow_non_restored_state,
                             trust_pickle=env.trust_pickle or options.trust_pickle, storage_options=env.storage_options)
            if options.restore_path else None
        )
        if self.initial_restore is not None:  # statekit check's verdict: refused before any task starts
            from statekit.runtime.compatibility import check_before_restore

            self.initial_restore.migrations = check_before_restore(env, options, self.initial_restore).migration_map()
        self.graph: JobGraph = build_job_graph(
            env.transformations,
            default_parallelism=options.parallelism or env.parallelism or 1,
            default_max_parallelism=options.max_parallelism or env.max_parallelism,
            restore=self.initial_restore,
        )
        self.storage = CheckpointStorage(storage_url, self.job_id, env.storage_options)
        self.exchanges = exchange_edges(self.graph)
        if self.initial_restore is not None:
            self.initial_restore.check_operators({op.uid for op in self.graph.operators})
            self.initial_restore.own_job_dir = self.storage.job_dir_url
            self.initial_restore.inflight(self.exchanges)  # refuses in-flight records it cannot place, now
        properties = {"producer": "statekit-runtime", "state_backend": self.state_backend.name}
        if self.incremental:
            properties["incremental"] = "true"
        if self.initial_restore is not None:
            properties["restored_from"] = self.initial_restore.path
        self.coordinator = CheckpointCoordinator(
            job_id=self.job_id,
            job_name=job_name,
            operators=[OperatorInfo(op.uid, op.name, op.parallelism, op.max_parallelism) for op in self.graph.operators],
            config=self.config,
            storage=self.storage,
            first_checkpoint_id=(self.initial_restore.checkpoint_id + 1) if self.initial_restore else 1,
            properties=properties,
            on_tolerable_exceeded=self._checkpoint_failures_exceeded,
            incremental=self.incremental,
            base_checkpoint_id=(self.initial_restore.checkpoint_id
                                if self.initial_restore is not None and self.initial_restore.shared_reusable()
                                and parse_restore_mode(options.restore_mode) is RestoreMode.CLAIM else None),
        )
        if self.initial_restore is not None:
            self.coordinator.take_restored(self.initial_restore.checkpoint_id, self.initial_restore.path,
                                           claim=parse_restore_mode(options.restore_mode) is RestoreMode.CLAIM)
            self.coordinator.restored = {
                "id": self.initial_restore.checkpoint_id,
                "external_path": self.initial_restore.path,
                "is_savepoint": self.initial_restore.metadata.kind.value == "savepoint",
            }
        self.handle = JobHandle(
            self.job_id, job_name,
            [JobVertex(op.uid, op.name, op.parallelism) for op in self.graph.operators],
            None if self.ephemeral_storage else self.storage.job_dir_url,
            self,
        )
        self.error: BaseException | None = None
        self.final_savepoint: str | None = None
        self.metrics = JobMetrics()  # what the tasks report (runtime/metrics.py)
        self._lock = threading.Lock()
        self._execution: Execution | None = None
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"job-master-{self.job_id[:6]}", daemon=True)

    def _temp_dir(self, prefix: str) -> str:
        return self._temp_dirs.create(prefix)

    def start(self) -> None:
        self._thread.start()

    # ------------------------------------------------------------ JobControl

    def trigger_savepoint(self, target_dir: str | None, *, stop: bool, drain: bool,
                          native: bool = False) -> concurrent.futures.Future[str]:
        with self._lock:
            execution = self._execution
        if execution is None or self.handle.status is not JobStatus.RUNNING:
            failed: concurrent.futures.Future[str] = concurrent.futures.Future()
            failed.set_exception(JobError(
                f"job {self.job_id} is {self.handle.status.value}, not RUNNING; cannot take a savepoint now"
            ))
            return failed
        if not stop:
            return self.coordinator.trigger(is_savepoint=True, target_dir=target_dir, native=native)
        return execution.stop_with_savepoint(target_dir, drain, native)

    def cancel(self) -> None:
        if self.handle.status.is_terminal:
            return
        self.handle.set_status(JobStatus.CANCELLING)
        self._cancel.set()
        with self._lock:
            execution = self._execution
        if execution is not None:
            execution.post("cancel")

    def checkpoint_stats(self) -> dict[str, Any]:
        return self.coordinator.stats()

    def task_metrics(self) -> list[TaskFigures]:
        return self.metrics.tasks()

    def _checkpoint_failures_exceeded(self, error: BaseException) -> None:
        with self._lock:
            execution = self._execution
        if execution is not None:
            execution.fail(error)

    # ------------------------------------------------------------ attempts

    def _run(self) -> None:
        _fast_switching(True)
        status: JobStatus = JobStatus.FAILED
        failure: str | None = "the job master stopped unexpectedly"
        try:
            status, failure = self._attempts()
        except BaseException as exc:  # noqa: BLE001 - the master never dies silently
            self.error = exc
            status, failure = JobStatus.FAILED, _describe(exc)
        finally:
            _fast_switching(False)
            self.coordinator.close()  # waits for snapshot threads: nothing changes after the end
            if status is JobStatus.CANCELED:
                self._cleanup_cancelled()
            self._temp_dirs.remove_all()
            self.handle.set_status(status, failure=failure if status is JobStatus.FAILED else None)

    def _attempts(self) -> tuple[JobStatus, str | None]:
        if self.storage.io is not None:
            import pyarrow.compute  # noqa: F401 - imported once here, not inside the first snapshot

        handle = self.handle
        restore = self.initial_restore
        attempt = 0
        while True:
            if self._cancel.is_set():
                return JobStatus.CANCELED, None
            handle.set_status(JobStatus.RUNNING)
            execution = Execution(self, attempt, restore)
            with self._lock:
                self._execution = execution
            outcome, error = execution.run()
            with self._lock:
                self._execution = None
            if outcome == "finished":
                return JobStatus.FINISHED, None
            if outcome == "cancelled":
                return JobStatus.CANCELED, None
            assert error is not None
            if _unrecoverable(error) or attempt >= self.restart.attempts:
                self.error = error
                suffix = f" after {attempt} restart(s)" if attempt else ""
                return JobStatus.FAILED, f"{_describe(error)}{suffix}"
            attempt += 1
            log.warning("job %s: task failure (%s); restart %d of %d in %d ms", self.job_id,
                        _describe(error), attempt, self.restart.attempts, self.restart.delay_ms)
            handle.set_status(JobStatus.RESTARTING)
            if self._cancel.wait(self.restart.delay_ms / 1000.0):
                return JobStatus.CANCELED, None
            restore = self._restore_for_restart()

    def _restore_for_restart(self) -> RestorePlan | None:
        """The latest checkpoint this job completed, else what it started from.

        The job wrote that checkpoint itself, in this process, so its pickle-serialized
        state is trusted; a snapshot from a path keeps the trust the user gave.
        """
        latest = self.coordinator.latest_completed
        if latest is None:
            return self.initial_restore
        plan = RestorePlan.open(latest, trust_pickle=True, storage_options=self.env.storage_options)
        plan.own_job_dir = self.storage.job_dir_url
        return plan

    def _cleanup_cancelled(self) -> None:
        from statekit.runtime.checkpoint_config import ExternalizedCheckpointCleanup

        if self.config.externalized_cleanup is ExternalizedCheckpointCleanup.DELETE_ON_CANCELLATION:
            self.coordinator.dispose_retained()


_switching_lock = threading.Lock()
_switching_jobs = 0
_switching_saved = 0.005
FAST_SWITCH_INTERVAL_S = 0.001


def _fast_switching(on: bool) -> None:
    """While jobs run, hand the GIL over every 1 ms instead of 5 ms.

    Snapshot threads release and re-acquire the GIL at every I/O call and pyarrow kernel;
    with busy task threads each re-acquisition waits a whole switch interval, which would
    stretch a checkpoint's asynchronous part to seconds.
    """
    global _switching_jobs, _switching_saved
    with _switching_lock:
        if on:
            if _switching_jobs == 0:
                _switching_saved = sys.getswitchinterval()
                sys.setswitchinterval(min(_switching_saved, FAST_SWITCH_INTERVAL_S))
            _switching_jobs += 1
        else:
            _switching_jobs -= 1
            if _switching_jobs == 0:
                sys.setswitchinterval(_switching_saved)


def exchange_edges(graph: JobGraph) -> list[ExchangeEdge]:
    """Every edge between two operators, as in-flight records of a restore see it."""
    return [
        ExchangeEdge(edge.source.uid, edge.target.uid, edge.input_index, edge.partitioning.value,
                     edge.source.parallelism, edge.target.parallelism, edge.target.max_parallelism,
                     edge.key_selector, edge.key_serializer)
        for node in graph.operators for edge in node.outputs
    ]


def _spec(edge: Edge, producer: int, consumer: int) -> ChannelSpec:
    return ChannelSpec(edge.source.uid, edge.target.uid, edge.input_index, edge.partitioning.value,
                       producer, edge.source.parallelism, consumer, edge.target.parallelism)


def _unrecoverable(error: BaseException) -> bool:
    """Configuration and restore errors fail the job at once; task exceptions restart it."""
    return isinstance(error, StatekitError) and not isinstance(error, JobFailedError)


def _describe(error: BaseException, *, always_type: bool = False) -> str:
    """One line: the message of a StatekitError, else ``Type: message`` ending with the user's
    code where it failed (``(at job.py:7, in explode)``, :mod:`statekit.runtime.user_code`)."""
    if isinstance(error, StatekitError) and not always_type:
        return _one_line(str(error))
    text = f"{type(error).__name__}: {_one_line(str(error))}"
    return text if isinstance(error, StatekitError) else with_user_location(text, error)


def _one_line(text: str) -> str:
    return " ".join(text.split())


class Execution:
    """One attempt: tasks, gates and channels of the whole job graph."""

    def __init__(self, master: JobMaster, attempt: int, restore: RestorePlan | None) -> None:
        self.master = master
        self.attempt = attempt
        self.started = threading.Event()
        self.cancelled = threading.Event()
        self._events: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self._stopping = False
        self._finishing = False
        self.tasks: list[Task] = []
        self.source_tasks: list[Task] = []
        self._build(restore)

    # ------------------------------------------------------------ deployment

    def _build(self, restore: RestorePlan | None) -> None:
        master = self.master
        graph = master.graph
        gates: dict[tuple[int, int], InputGate] = {}
        offsets: dict[int, int] = {}  # id(edge) -> first channel of the edge in the consumer's gate
        input_specs: dict[tuple[int, int], list[ChannelSpec]] = {}
        for vertex in graph.vertices:
            width = 0
            for edge in vertex.inputs:
                offsets[id(edge)] = width
                width += 1 if edge.partitioning is Partitioning.FORWARD else edge.source.parallelism
            capacity = max(4, 2 * width + 2)
            for i in range(vertex.parallelism):
                gates[(vertex.id, i)] = InputGate(capacity, width)
                input_specs[(vertex.id, i)] = [
                    _spec(edge, producer, i) for edge in vertex.inputs
                    for producer in ([i] if edge.partitioning is Partitioning.FORWARD else range(edge.source.parallelism))
                ]
        inflight = restore.inflight(master.exchanges) if restore is not None else {}
        backend = master.state_backend
        working_dir = master._temp_dir(f"statekit-{backend.name}-") if backend.needs_working_dir else None
        for vertex in graph.vertices:
            for i in range(vertex.parallelism):
                operators: list[StreamOperator] = []
                chained_next: list[list[int]] = []
                writers: list[list[RecordWriter]] = []
                output_specs: list[list[ChannelSpec]] = []
                replay: list[tuple[int, int, list[Any]]] = []
                for position, node in enumerate(vertex.operators):
                    replay.extend((position, index, records) for index, records in inflight.get((node.uid, i), ()))
                    op = node.transformation.factory()
                    op.setup(OperatorContext(
                        uid=node.uid, name=node.name, subtask=i, parallelism=node.parallelism,
                        max_parallelism=node.max_parallelism, attempt=self.attempt, state_backend=backend.name,
                        key_selector=node.key_selector, key_serializer=node.key_serializer,
                        restore=restore.subtask(node.uid, i, node.parallelism, node.max_parallelism) if restore else None,
                        working_dir=working_dir, job_id=master.job_id, incremental=master.incremental,
                    ), Output(lambda value: None))
                    operators.append(op)
                    chained_next.append([vertex.operators.index(e.target) for e in node.outputs if e.chained])
                    node_writers = []
                    for edge in node.outputs:
                        if edge.chained:
                            continue
                        consumer = edge.target.vertex
                        assert consumer is not None
                        base = offsets[id(edge)]
                        if edge.partitioning is Partitioning.FORWARD:
                            targets = [ChannelTarget(gates[(consumer.id, i)], base)]
                            output_specs.append([_spec(edge, i, i)])
                        else:
                            targets = [ChannelTarget(gates[(consumer.id, k)], base + i) for k in range(consumer.parallelism)]
                            output_specs.append([_spec(edge, i, k) for k in range(consumer.parallelism)])
                        writer = RecordWriter(
                            targets, edge.partitioning, key_selector=edge_key_selector(edge),
                            key_serializer=edge.key_serializer, max_parallelism=edge.target.max_parallelism,
                            start_channel=i,
                        )
                        writer.side_output = edge.side_output
                        writer.timestamped = edge.source.transformation.timestamped
                        node_writers.append(writer)
                    writers.append(node_writers)
                task = Task(self, vertex.id, vertex.name, i, vertex.parallelism, operators, chained_next, writers,
                            gates[(vertex.id, i)], input_specs[(vertex.id, i)], output_specs=output_specs,
                            replay=replay, channel_state_serializer=master.config.channel_state_serializer)
                configure_task_time(task, graph, vertex)
                self.tasks.append(task)
                if vertex.is_source:
                    self.source_tasks.append(task)
        self.gates = list(gates.values())

    # ------------------------------------------------------------ TaskHost

    def post(self, *event: Any) -> None:
        self._events.put(event)

    def task_ready(self, task: Task) -> None:
        self.post("ready", task)

    def task_failed(self, task: Task, error: BaseException) -> None:
        if not self.cancelled.is_set():
            # one line; the traceback only when DEBUG is on for the logger (statekit run --verbose)
            log.warning("task %s failed: %s", task.name, _describe(error, always_type=True),
                        exc_info=error if log.isEnabledFor(logging.DEBUG) else None)
        self.post("failed", task, error)

    def task_finished(self, task: Task) -> None:
        self.post("finished", task)

    def source_exhausted(self, task: Task) -> None:
        self.post("exhausted", task)

    def submit_snapshot(self, task: Task, barrier: Any, snapshots: list[Any], stats: SubtaskStats) -> None:
        self.master.coordinator.submit_snapshot(task.key, barrier, snapshots, stats)

    def report_metrics(self, report: TaskReport) -> None:
        self.master.metrics.update(report)

    def decline_checkpoint(self, task: Task, checkpoint_id: int, reason: str, *, subsumed: bool) -> None:
        self.master.coordinator.decline(checkpoint_id, f"task {task.name}: {reason}", subsumed=subsumed)

    def fail(self, error: BaseException) -> None:
        self.post("failed", None, error)

    # ------------------------------------------------------------ run

    def run(self) -> tuple[str, BaseException | None]:
        """Deploy, run to the end; return ("finished" | "cancelled" | "failed", error)."""
        coordinator = self.master.coordinator
        for task in self.tasks:
            task.thread.start()
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
        if attached:
            coordinator.stop_periodic()
            coordinator.detach("job attempt ended" if outcome[0] == "finished" else f"job {outcome[0]}")
        return outcome

    def _teardown(self) -> None:
        self.cancelled.set()
        for gate in self.gates:
            gate.cancel()
        from statekit.runtime.mails import Cancel

        for task in self.tasks:
            task.mail(Cancel())
        deadline = time.monotonic() + _JOIN_TIMEOUT_S
        for task in self.tasks:
            task.thread.join(max(0.0, deadline - time.monotonic()))
            if task.thread.is_alive():
                log.warning("task %s did not stop within %.0f s", task.name, _JOIN_TIMEOUT_S)

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
                        f"final checkpoint failed {attempt} times, last: {_one_line(str(error))}; "
                        "output since the last completed checkpoint is not committed") from error
                log.warning("job %s: final checkpoint failed (attempt %d of %d): %s; retrying in %g s",
                            self.master.job_id, attempt, FINAL_CHECKPOINT_ATTEMPTS, _one_line(str(error)),
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
                self.fail(JobFailedError(f"stop-with-savepoint (drain) failed: {_one_line(str(error))}"))
            else:
                for task in self.source_tasks:
                    task.mail(Resume())
                coordinator.start_periodic()
            result.set_exception(error)

        savepoint.add_done_callback(done)
        return result
