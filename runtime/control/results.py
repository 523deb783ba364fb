"""The results of job control commands (run, list, savepoint, cancel), as the CLI renders them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statekit.runtime.control.registry import JobEntry

if TYPE_CHECKING:
    pass

__all__ = [
    "RunResult",
    "LastCheckpoint",
    "JobList",
    "JobListView",
    "JobView",
    "SavepointResult",
    "CancelResult",
    "CheckpointResult",
    "SavepointTrigger",
    "SavepointStatus",
]


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

    def json_view(self) -> JobListView:
        """Each job with its last checkpoint and its checkpoint history, in one list."""
        return JobListView(tuple(
            JobView.of(entry, self.last_checkpoint(index),
                       self.checkpoint_histories[index] if index < len(self.checkpoint_histories) else ())
            for index, entry in enumerate(self.jobs)))


@dataclass(frozen=True)
class JobView:
    """One job of ``statekit list --json``.

    Attributes:
        state: The job's status (``RUNNING``, ``FINISHED``, ``CRASHED``...).
        rest_url: Base URL of its REST API, once it serves one.
        crash_reason: Why it is reported ``CRASHED``.
        last_checkpoint: Its last completed checkpoint, if any.
        checkpoints: Its recorded checkpoints (``checkpoints history``'s entries), newest first.
    """

    job_id: str
    name: str
    state: str
    pid: int
    start_time_ms: int
    end_time_ms: int | None
    rest_url: str | None
    log_path: str | None
    job_file: str | None
    checkpoint_dir: str | None
    failure: str | None
    crash_reason: str | None
    last_checkpoint: LastCheckpoint | None
    checkpoints: tuple[dict[str, Any], ...]

    @classmethod
    def of(cls, entry: JobEntry, last: LastCheckpoint | None, history: tuple[dict[str, Any], ...]) -> JobView:
        return cls(entry.job_id, entry.name, entry.status, entry.pid, entry.start_time_ms, entry.end_time_ms,
                   entry.rest_url, entry.log_path, entry.job_file, entry.checkpoint_dir, entry.failure,
                   entry.crash_reason, last, history)


@dataclass(frozen=True)
class JobListView:
    """``statekit list --json``: the jobs."""

    jobs: tuple[JobView, ...]


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


@dataclass(frozen=True)
class CancelResult:
    """A cancelled job (``statekit cancel``)."""

    job_id: str
    job_state: str




@dataclass(frozen=True)
class CheckpointResult:
    """A checkpoint taken on request (``statekit checkpoint``).

    Attributes:
        job_id: The job.
        checkpoint_id: Its id (None when the job stores no files for it).
        location: Its ``chk-N`` directory.
        trigger_id: The REST request id.
        full: It reuses no file of an earlier incremental checkpoint.
    """

    job_id: str
    checkpoint_id: int | None
    location: str | None
    trigger_id: str
    full: bool = False


@dataclass(frozen=True)
class SavepointTrigger:
    """A savepoint triggered without waiting (``statekit savepoint --detached``)."""

    job_id: str
    trigger_id: str


@dataclass(frozen=True)
class SavepointStatus:
    """Where a savepoint operation stands (``statekit savepoint --status ID``).

    Attributes:
        status: ``IN_PROGRESS``, ``COMPLETED`` or ``FAILED``.
        location: The savepoint, once COMPLETED.
        failure: Why it FAILED (also: the job ended before it completed).
        operation: ``savepoint``, ``stop`` or ``cancel``.
    """

    job_id: str
    trigger_id: str
    status: str
    location: str | None = None
    failure: str | None = None
    operation: str = "savepoint"
