"""A running job as job control sees it: status, description, checkpoints, savepoints.

:class:`JobHandle` is what :func:`statekit.runtime.dataflow.run_options.add_job_listener` listeners
receive. Its JSON shapes follow Flink's REST API (``/jobs/<id>``, ``/jobs/<id>/checkpoints``)
so that job control can serve them as they are.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from statekit.runtime.dataflow.graph import JobTopology
    from statekit.runtime.task.metrics import Latency, TaskFigures

__all__ = [
    "JobStatus",
    "JobHandle",
    "JobControl",
    "JobExecutionResult",
]


class JobStatus(str, Enum):
    """Flink's job states (the subset this runtime reaches)."""

    CREATED = "CREATED"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    CANCELLING = "CANCELLING"
    CANCELED = "CANCELED"
    RESTARTING = "RESTARTING"

    @property
    def is_terminal(self) -> bool:
        """Whether the job can no longer change state."""
        return self in (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELED)


class JobControl(Protocol):
    """What the job master behind a handle offers (runtime internal)."""

    def trigger_savepoint(
        self, target_dir: str | None, *, stop: bool, drain: bool, native: bool = False
    ) -> concurrent.futures.Future[str]: ...

    def cancel(self) -> None: ...

    def checkpoint_stats(self) -> dict[str, Any]: ...

    def checkpoint_details(self, checkpoint_id: int) -> dict[str, Any] | None: ...

    def checkpoint_config(self) -> dict[str, Any]: ...

    def trigger_checkpoint(self, *, full: bool) -> concurrent.futures.Future[str]: ...

    def task_metrics(self) -> list[TaskFigures]: ...

    def accumulator_results(self) -> dict[str, Any]: ...

    def latency(self) -> Latency | None: ...


class JobHandle:
    """A job started by ``StreamEnvironment.execute``.

    Attributes:
        job_id: 32 hex chars.
        job_name: The name given to ``execute``.
        start_time_ms: When the job was created (epoch ms).
        end_time_ms: When it reached a terminal state, else None.
        failure: Why it failed (one line), else None.
        final_savepoint_path: The savepoint taken because of ``savepoint_on_finish``.
        savepoint_dir: The job's default savepoint directory (None: a savepoint needs one).
    """

    def __init__(
        self,
        job_id: str,
        job_name: str,
        topology: JobTopology,
        checkpoint_dir: str | None,
        control: JobControl,
        savepoint_dir: str | None = None,
    ) -> None:
        self.job_id = job_id
        self.job_name = job_name
        self.topology = topology
        self.checkpoint_dir = checkpoint_dir
        self.start_time_ms = int(time.time() * 1000)
        self.end_time_ms: int | None = None
        self.failure: str | None = None
        self.final_savepoint_path: str | None = None
        self.savepoint_dir = savepoint_dir
        self.tasks_running_ms: int | None = None  # when every task of the first attempt was deployed and ready
        self._control = control
        self._checkpoint_listeners: list[Callable[[dict[str, Any]], None]] = []
        self._status = JobStatus.CREATED
        self._changed = threading.Condition()

    @property
    def status(self) -> JobStatus:
        """The current job status."""
        with self._changed:
            return self._status

    def set_status(self, status: JobStatus, failure: str | None = None) -> None:
        """Move the job to ``status`` (runtime internal); terminal states are final."""
        with self._changed:
            if self._status.is_terminal:
                return
            self._status = status
            if failure is not None:
                self.failure = failure
            if status.is_terminal:
                self.end_time_ms = int(time.time() * 1000)
            self._changed.notify_all()

    def describe(self) -> dict[str, Any]:
        """Flink-like job details (JSON-able).

        Returns:
            ``{"jid", "name", "state", "start-time", "end-time", "vertices":
            [{"id", "name", "parallelism"}], "plan": {"nodes", "edges"}, "checkpoint-dir"}``; end-time is -1 while the
            job runs (as in Flink); ``"failure"`` is added when the job failed.
        """
        with self._changed:
            described: dict[str, Any] = {
                "jid": self.job_id,
                "name": self.job_name,
                "state": self._status.value,
                "start-time": self.start_time_ms,
                "end-time": self.end_time_ms if self.end_time_ms is not None else -1,
                "vertices": [op.to_json() for op in self.topology.operators],
                "plan": self.topology.plan(),
                "checkpoint-dir": self.checkpoint_dir,
            }
            if self.failure is not None:
                described["failure"] = self.failure
        return described

    def checkpoint_stats(self) -> dict[str, Any]:
        """Flink-like checkpoint statistics (JSON-able).

        Returns:
            ``{"counts": {"completed", "failed", "in_progress"}, "latest": {"completed":
            {...} | None, "savepoint": {...} | None}, "history": [...]}`` where each
            checkpoint is ``{"id", "is_savepoint", "status", "mode", "checkpoint_type",
            "incremental", "external_path", "trigger_timestamp", "latest_ack_timestamp",
            "end_to_end_duration", "alignment_duration", "state_size", "checkpointed_size",
            "persisted_data", ...}`` (docs/RUNTIME.md, checkpoint history).
        """
        return self._control.checkpoint_stats()

    def checkpoint_details(self, checkpoint_id: int) -> dict[str, Any] | None:
        """One checkpoint's entry with ``"subtasks"``: per subtask its ack time, sizes, synchronous
        and asynchronous durations, alignment and start delay (None: unknown or too old)."""
        return self._control.checkpoint_details(checkpoint_id)

    def checkpoint_config(self) -> dict[str, Any]:
        """How the job checkpoints (Flink's ``/jobs/<id>/checkpoints/config``)."""
        return self._control.checkpoint_config()

    def add_checkpoint_listener(self, listener: Callable[[dict[str, Any]], None]) -> None:
        """Call ``listener(details)`` for every checkpoint or savepoint that completes or fails:
        its statistics with ``"subtasks"`` (from the coordinator's thread; keep it quick)."""
        with self._changed:
            self._checkpoint_listeners.append(listener)

    def publish_checkpoint(self, details: dict[str, Any]) -> None:
        """Hand an ended checkpoint's statistics to the listeners (runtime internal)."""
        with self._changed:
            listeners = list(self._checkpoint_listeners)
        for listener in listeners:
            listener(dict(details))

    def trigger_checkpoint(self, *, full: bool = False) -> concurrent.futures.Future[str]:
        """Trigger a checkpoint now (Flink 1.19's ``flink checkpoint``); the future resolves to its
        path. ``full``: a complete checkpoint even when checkpoints are incremental."""
        return self._control.trigger_checkpoint(full=full)

    def trigger_savepoint(
        self, target_dir: str | None, *, stop: bool = False, drain: bool = False, native: bool = False
    ) -> concurrent.futures.Future[str]:
        """Take a savepoint by the checkpoint barrier mechanism (always aligned).

        Args:
            target_dir: Directory under which ``savepoint-<jobid6>-<random>/`` is written;
                ``None`` uses the job's default savepoint directory, if any.
            stop: After the savepoint, finish the job (stop-with-savepoint).
            drain: With ``stop``: sources end and timers/windows flush as at end of input
                before the savepoint; without it, the job stops without end-of-input.
            native: Keyed state in the backend's native format (self-contained) instead of the
                canonical format; a backend without a native format writes canonical files.

        Returns:
            A future resolving to the savepoint path (or raising the failure).
        """
        if native:
            return self._control.trigger_savepoint(target_dir, stop=stop, drain=drain, native=True)
        return self._control.trigger_savepoint(target_dir, stop=stop, drain=drain)

    def cancel(self) -> None:
        """Cancel the job; checkpoints are kept or deleted per the externalized cleanup."""
        self._control.cancel()

    def task_metrics(self) -> list[TaskFigures]:
        """What every task reported, with rates (``statekit.runtime.jobmaster.metrics``)."""
        return self._control.task_metrics()

    def task_manager_pids(self) -> list[tuple[int, int]]:
        """``(index, pid)`` of the TaskManager processes running the job's subtasks now (none: every
        subtask is a thread of this process)."""
        pids = getattr(self._control, "task_manager_pids", None)  # stand-in controls of tests may lack it
        return list(pids()) if pids is not None else []

    def latency(self) -> Latency | None:
        """End-to-end latency of the job's latency markers (last 10 s; None: none measured)."""
        latency = getattr(self._control, "latency", None)  # stand-in controls of tests may lack it
        return latency() if latency is not None else None

    def accumulators(self) -> dict[str, Any]:
        """The job's accumulators merged so far (:mod:`statekit.runtime.api.accumulators`)."""
        return self._control.accumulator_results()

    def wait(self, timeout: float | None = None) -> JobStatus:
        """Block until the job is terminal (or ``timeout`` seconds passed); return its status."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while not self._status.is_terminal:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._changed.wait(remaining)
            return self._status


@dataclass(frozen=True)
class JobExecutionResult:
    """What ``execute()`` returns when the job ended without failing."""

    job_id: str
    job_name: str
    status: JobStatus
    net_runtime_ms: int
    savepoint_path: str | None = None
    latest_checkpoint: str | None = None
    accumulators: dict[str, Any] = field(default_factory=dict)

    def get_accumulator_result(self, name: str) -> Any:
        """The merged accumulator ``name`` (Flink's ``getAccumulatorResult``; None: never added to)."""
        return self.accumulators.get(name)


