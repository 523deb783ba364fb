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

    def to_json(self) -> dict[str, Any]:
        """``{"jid", "checkpoint-id", "location", "request-id", "full"}``."""
        return {"jid": self.job_id, "checkpoint-id": self.checkpoint_id, "location": self.location,
                "request-id": self.trigger_id, "full": self.full}


@dataclass(frozen=True)
class SavepointTrigger:
    """A savepoint triggered without waiting (``statekit savepoint --detached``)."""

    job_id: str
    trigger_id: str

    def to_json(self) -> dict[str, Any]:
        """``{"jid", "request-id"}``."""
        return {"jid": self.job_id, "request-id": self.trigger_id}


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

    def to_json(self) -> dict[str, Any]:
        """``{"jid", "request-id", "operation", "status", "location"?, "failure"?}``."""
        data: dict[str, Any] = {"jid": self.job_id, "request-id": self.trigger_id, "operation": self.operation,
                                "status": self.status}
        if self.location is not None:
            data["location"] = self.location
        if self.failure is not None:
            data["failure"] = self.failure
        return data
