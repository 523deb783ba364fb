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
import sys
import threading
import time
from dataclasses import replace
from typing import Any

from statekit.runtime.api.accumulators import merge_accumulator
from statekit.runtime.api.restart_strategy import RestartStrategy, fixed_delay_restart, no_restart
from statekit.runtime.checkpoint.restore import RestorePlan
from statekit.runtime.checkpoint.restore_mode import RestoreMode, parse_restore_mode
from statekit.runtime.checkpoint.storage import CheckpointStorage
from statekit.runtime.connectors.sinks import CollectSink
from statekit.runtime.dataflow.datastream import user_function
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.dataflow.graph import JobGraph, build_job_graph
from statekit.runtime.dataflow.job_handle import JobExecutionResult, JobHandle, JobStatus
from statekit.runtime.dataflow.run_options import RunOptions, get_run_options, notify_job_listeners
from statekit.runtime.dataflow.user_code import with_user_location
from statekit.runtime.jobmaster.checkpoint_stats import checkpoint_config_json
from statekit.runtime.jobmaster.coordinator import CheckpointCoordinator, OperatorInfo
from statekit.runtime.jobmaster.execution import JOIN_TIMEOUT_S, Deployer, Execution, ThreadDeployer, one_line
from statekit.runtime.jobmaster.metrics import JobMetrics
from statekit.runtime.jobmaster.temp_dirs import TempDirs
from statekit.runtime.state.registry import resolve_state_backend
from statekit.runtime.task.metrics import Latency, TaskFigures
from statekit.runtime.taskmanager.deployment import exchange_edges
from statekit.statefmt.errors import BadInputError, JobError, JobFailedError, StatekitError
from statekit.statefmt.job_id import check_job_id, new_job_id
from statekit.statefmt.pandas_probe import answer_pandas_probe_on_import

__all__ = [
    "JobMaster",
    "execute",
    "execute_async",
    "FAST_SWITCH_INTERVAL_S",
    "exchange_edges",
    "check_event_time_checkpoints",
]

log = logging.getLogger("statekit.runtime")


def execute_async(env: StreamEnvironment, job_name: str, deployer: Deployer | None = None) -> JobHandle:
    """Resolve and start the job; return its handle (listeners are called before it runs).

    Args:
        deployer: How attempts are deployed (default: threads of this process).
    """
    answer_pandas_probe_on_import()  # a job's first snapshot would otherwise import pandas (~0.4 s)
    master = JobMaster(env, job_name, get_run_options(), deployer)
    try:
        notify_job_listeners(master.handle)
    except Exception as exc:  # noqa: BLE001 - a listener never stops the job
        log.warning("a job listener failed: %s", exc)
    master.start()
    return master.handle


def execute(env: StreamEnvironment, job_name: str, deployer: Deployer | None = None) -> JobExecutionResult:
    """Run the job and block until it ends.

    Raises:
        StatekitError: the job could not start or restore (BadInputError, ...).
        JobFailedError: it failed and restarts were exhausted.
    """
    handle = execute_async(env, job_name, deployer)
    master = handle._control
    assert isinstance(master, JobMaster)
    try:
        status = handle.wait()
    except KeyboardInterrupt:
        handle.cancel()
        handle.wait(JOIN_TIMEOUT_S)
        raise
    if status is JobStatus.FAILED:
        error = master.error
        if isinstance(error, StatekitError):
            raise error
        raise JobFailedError(f"job {handle.job_id} ({job_name}) failed: {handle.failure}")
    end = handle.end_time_ms or int(time.time() * 1000)
    return JobExecutionResult(
        handle.job_id, job_name, status, end - handle.start_time_ms, master.final_savepoint,
        master.coordinator.latest_completed, master.accumulator_results(),
    )


class JobMaster:
    """Runs one job: attempts, restarts, checkpoints, savepoints, cancellation."""

    def __init__(self, env: StreamEnvironment, job_name: str, options: RunOptions | None,
                 deployer: Deployer | None = None) -> None:
        options = options or RunOptions()
        self.deployer: Deployer = deployer or ThreadDeployer()
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
        if options.restart_attempts is not None or options.restart_delay_ms is not None:  # the command line's
            self.restart = fixed_delay_restart(
                self.restart.attempts if options.restart_attempts is None else options.restart_attempts,
                self.restart.delay_ms if options.restart_delay_ms is None else options.restart_delay_ms)
        self.initial_restore = (
            RestorePlan.open(options.restore_path, allow_non_restored_state=options.allow_non_restored_state,
                             trust_pickle=env.trust_pickle or options.trust_pickle, storage_options=env.storage_options)
            if options.restore_path else None
        )
        if self.initial_restore is not None:  # statekit check's verdict: refused before any task starts
            from statekit.runtime.jobmaster.compatibility import check_before_restore

            self.initial_restore.migrations = check_before_restore(env, options, self.initial_restore).migration_map()
        self.graph: JobGraph = build_job_graph(
            env.transformations,
            default_parallelism=options.parallelism or env.parallelism or 1,
            default_max_parallelism=options.max_parallelism or env.max_parallelism,
            restore=self.initial_restore,
        )
        self.deployer.check(self.graph, options)  # e.g. too few slots: refused before the job is announced
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
            self.graph.topology(),
            None if self.ephemeral_storage else self.storage.job_dir_url,
            self,
            savepoint_dir=self.config.default_savepoint_dir,
        )
        self.coordinator.statistics.add_listener(self.handle.publish_checkpoint)
        self.error: BaseException | None = None
        self.final_savepoint: str | None = None
        self.metrics = JobMetrics()  # what the tasks report (statekit.runtime.jobmaster.metrics)
        self.accumulators: dict[str, Any] = {}  # merged from every task's reports
        self._accumulator_lock = threading.Lock()
        self._collect_sinks = {
            CollectSink.accumulator_name(node.uid): function for node in self.graph.operators
            if isinstance(function := user_function(node.transformation.factory), CollectSink)
        }
        self._lock = threading.Lock()
        self._execution: Execution | None = None
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"job-master-{self.job_id[:6]}", daemon=True)

    def _temp_dir(self, prefix: str) -> str:
        return self._temp_dirs.create(prefix)

    @property
    def cancel_requested(self) -> bool:
        """The job is being cancelled (an attempt ending now ends by the user's cancel, not a failure)."""
        return self._cancel.is_set()

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

    def checkpoint_details(self, checkpoint_id: int) -> dict[str, Any] | None:
        return self.coordinator.details(checkpoint_id)

    def checkpoint_config(self) -> dict[str, Any]:
        return checkpoint_config_json(self.config, incremental=self.incremental, state_backend=self.state_backend.name,
                                      storage=None if self.ephemeral_storage else self.storage.job_dir_url)

    def trigger_checkpoint(self, *, full: bool = False) -> concurrent.futures.Future[str]:
        """A checkpoint now, on request (``statekit checkpoint``); ``full`` when incremental."""
        if self.handle.status is not JobStatus.RUNNING:
            failed: concurrent.futures.Future[str] = concurrent.futures.Future()
            failed.set_exception(JobError(
                f"job {self.job_id} is {self.handle.status.value}, not RUNNING; cannot take a checkpoint now"))
            return failed
        if self.storage.io is None:
            failed = concurrent.futures.Future()
            failed.set_exception(BadInputError(
                f"job {self.job_id} stores no checkpoints: start it with --checkpoint-dir or --checkpoint-interval"))
            return failed
        return self.coordinator.trigger(full=full)

    def task_metrics(self) -> list[TaskFigures]:
        return self.metrics.tasks()

    def latency(self) -> Latency | None:
        return self.metrics.latency()

    def task_manager_pids(self) -> list[tuple[int, int]]:
        """``(index, pid)`` of the running attempt's TaskManager processes (none on threads)."""
        with self._lock:
            execution = self._execution
        deployment = getattr(execution, "deployment", None)
        return [(int(m.index), int(m.process.pid)) for m in getattr(deployment, "managers", ())]

    def accumulate(self, changes: tuple[tuple[str, Any], ...]) -> None:
        """Merge one task's accumulator changes (and hand a collect sink's records to the
        user's :class:`CollectSink` object in this process)."""
        with self._accumulator_lock:
            for name, change in changes:
                self.accumulators[name] = merge_accumulator(self.accumulators.get(name), change)
                sink = self._collect_sinks.get(name)
                if sink is not None:
                    sink.receive(change)

    def accumulator_results(self) -> dict[str, Any]:
        """The merged accumulators now (copies)."""
        with self._accumulator_lock:
            return {name: list(value) if isinstance(value, list) else value
                    for name, value in self.accumulators.items()}

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
            self.storage.hold_job_lock()  # dispose refuses this job's checkpoints while it runs
            status, failure = self._attempts()
        except BaseException as exc:  # noqa: BLE001 - the master never dies silently
            self.error = exc
            status, failure = JobStatus.FAILED, _describe(exc)
        finally:
            _fast_switching(False)
            self.coordinator.close()  # its timer stops: tasks finished their own writes before they ended
            self.storage.release_job_lock()
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
            outcome, error = self._run_attempt(attempt, restore)
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

    def _run_attempt(self, attempt: int, restore: RestorePlan | None) -> tuple[str, BaseException | None]:
        """Deploy and run one attempt; a deployment that fails for a reason a restart may cure (a
        TaskManager killed while it started) is a failed attempt like any other."""
        try:
            execution = Execution(self, attempt, restore)
        except Exception as error:  # judged below like a task failure
            if _unrecoverable(error):
                raise
            return "failed", error
        with self._lock:
            self._execution = execution
            cancelled = self._cancel.is_set()  # a cancel while the attempt deployed found no execution
        if cancelled:
            execution.post("cancel")
        try:
            return execution.run()
        finally:
            with self._lock:
                self._execution = None

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
        from statekit.runtime.api.checkpoint_config import ExternalizedCheckpointCleanup

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


def _unrecoverable(error: BaseException) -> bool:
    """Configuration and restore errors fail the job at once; task exceptions restart it."""
    return isinstance(error, StatekitError) and not isinstance(error, JobFailedError)


def _describe(error: BaseException) -> str:
    """One line: the message of a StatekitError, else ``Type: message`` ending with the user's
    code where it failed (``(at job.py:7, in explode)``, :mod:`statekit.runtime.dataflow.user_code`)."""
    if isinstance(error, StatekitError):
        return one_line(str(error))
    return with_user_location(f"{type(error).__name__}: {one_line(str(error))}", error)


def check_event_time_checkpoints(transformations: list[Any], unaligned: bool) -> None:
    """Refuse unaligned checkpoints in a job with event time (its in-flight records carry
    timestamps and watermarks, which channel state does not store)."""
    if unaligned and any(t.timestamped for t in transformations):
        raise BadInputError(
            "unaligned checkpoints do not support event time (timestamped records and watermarks "
            "in flight); use aligned checkpoints for a job with a WatermarkStrategy"
        )


