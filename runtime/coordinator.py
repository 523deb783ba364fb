"""The checkpoint coordinator: triggers barriers, collects acknowledgements, completes.

Protocol (Flink's asynchronous barrier snapshotting):
    1. *trigger*: allocate the next checkpoint id, create its storage location, and mail
       every source task a barrier (under one lock, so barriers enter all sources in id
       order).
    2. each task snapshots at the aligned barrier, forwards it, writes its files
       asynchronously and *acknowledges* with its operators' descriptors and files.
    3. *complete* when every task acknowledged: build the metadata and publish
       ``_metadata`` last (``commit_metadata``), dispose checkpoints beyond
       ``num_retained``, then mail every task *notify complete* (sinks commit).
    A checkpoint that cannot be started (its directory cannot be created: storage gone,
    unwritable, full), times out or is declined is aborted: its directory is removed, and
    consecutive failed checkpoints beyond ``tolerable_failed`` fail the job (which then
    restarts per its strategy). Savepoints and the final checkpoint of a finishing job are
    never counted: their failure reaches whoever asked for them (the final checkpoint is
    retried by the job master, which fails the job when it cannot be taken).
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from statekit.runtime.channels import Barrier, CheckpointOptions
from statekit.runtime.checkpoint_config import CheckpointConfig
from statekit.runtime.checkpoint_storage import CheckpointStorage, CheckpointStorageLocation
from statekit.runtime.mails import NotifyCheckpointAborted, NotifyCheckpointComplete, TriggerCheckpoint
from statekit.statefmt.errors import BadInputError, JobError, JobFailedError, StatekitError
from statekit.statefmt.keygroups import compute_key_group_range_for_operator_index
from statekit.statefmt.metadata import (
    CheckpointMetadata,
    OperatorMetadata,
    SnapshotFormat,
    SnapshotKind,
    StateDescriptor,
    SubtaskState,
)

if TYPE_CHECKING:
    from statekit.runtime.operators import OperatorSnapshot

__all__ = ["CheckpointCoordinator", "OperatorInfo", "TaskKey", "ExecutionView"]

log = logging.getLogger("statekit.runtime")

TaskKey = tuple[int, int]
HISTORY_SIZE = 20


@dataclass(frozen=True)
class OperatorInfo:
    """Static facts of one operator, for the metadata."""

    uid: str
    name: str
    parallelism: int
    max_parallelism: int


class MailTarget(Protocol):
    key: TaskKey

    def mail(self, mail: Any) -> None: ...


class ExecutionView(Protocol):
    """What the coordinator needs of a running execution attempt."""

    @property
    def source_tasks(self) -> Sequence[MailTarget]: ...

    @property
    def tasks(self) -> Sequence[MailTarget]: ...

    def fail(self, error: BaseException) -> None: ...


@dataclass(eq=False)
class PendingCheckpoint:
    checkpoint_id: int
    options: CheckpointOptions
    location: CheckpointStorageLocation | None
    trigger_ms: int
    deadline: float
    expected: int
    execution: ExecutionView
    acks: dict[TaskKey, list[OperatorSnapshot]] = field(default_factory=dict)
    future: concurrent.futures.Future[str] = field(default_factory=concurrent.futures.Future)
    last_ack_ms: int = 0
    state_size: int = 0
    done: bool = False
    barrier_sent: bool = True

    @property
    def is_savepoint(self) -> bool:
        return self.options.is_savepoint


class CheckpointCoordinator:
    """Triggers and completes checkpoints and savepoints of one job (across restarts)."""

    def __init__(
        self,
        *,
        job_id: str,
        job_name: str,
        operators: list[OperatorInfo],
        config: CheckpointConfig,
        storage: CheckpointStorage,
        first_checkpoint_id: int = 1,
        properties: dict[str, str] | None = None,
        on_tolerable_exceeded: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.job_id = job_id
        self.job_name = job_name
        self.operators = operators
        self.config = config
        self.storage = storage
        self.properties = dict(properties or {})
        self._next_id = first_checkpoint_id
        self._lock = threading.RLock()
        self._wakeup = threading.Condition(self._lock)
        self._pending: dict[int, PendingCheckpoint] = {}
        self._execution: ExecutionView | None = None
        self._periodic = False
        self._closed = False
        self._last_trigger = time.monotonic()
        self._last_complete = 0.0
        self._consecutive_failures = 0
        self._on_tolerable_exceeded = on_tolerable_exceeded
        self.retained: collections.deque[tuple[int, str]] = collections.deque()
        self.latest_completed: str | None = None
        self.latest_completed_id: int | None = None
        self._history: collections.deque[dict[str, Any]] = collections.deque(maxlen=HISTORY_SIZE)
        self._counts = {"completed": 0, "failed": 0}
        self._latest: dict[str, dict[str, Any] | None] = {"completed": None, "savepoint": None, "failed": None}
        self.restored: dict[str, Any] | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="snapshot")
        self._timer = threading.Thread(target=self._timer_loop, name="checkpoint-timer", daemon=True)
        self._timer.start()

    # ------------------------------------------------------------ attempts

    def attach(self, execution: ExecutionView) -> None:
        """A new execution attempt is running: barriers go to its sources.

        Consecutive checkpoint failures start again from zero: those of an earlier attempt
        already failed it.
        """
        with self._wakeup:
            self._execution = execution
            self._last_trigger = time.monotonic()
            self._consecutive_failures = 0
            self._wakeup.notify_all()

    def detach(self, reason: str) -> None:
        """The attempt ended: abort what is pending (not counted as checkpoint failures)."""
        with self._wakeup:
            self._execution = None
            pending = list(self._pending.values())
        for p in pending:
            self._abort(p, reason, count=False)

    def start_periodic(self) -> None:
        with self._wakeup:
            self._periodic = self.config.enabled
            self._wakeup.notify_all()

    def stop_periodic(self) -> None:
        with self._wakeup:
            self._periodic = False

    def close(self) -> None:
        """Stop the timer and the snapshot threads (waits for running writes)."""
        with self._wakeup:
            self._closed = True
            self._periodic = False
            self._wakeup.notify_all()
        self._executor.shutdown(wait=True)

    # ------------------------------------------------------------ trigger

    def trigger(
        self,
        *,
        is_savepoint: bool = False,
        target_dir: str | None = None,
        stop: bool = False,
        drain: bool = False,
        final: bool = False,
    ) -> concurrent.futures.Future[str]:
        """Trigger a checkpoint or savepoint; the future resolves to its path ('' if not stored)."""
        with self._wakeup:
            execution = self._execution
            if execution is None or self._closed:
                future: concurrent.futures.Future[str] = concurrent.futures.Future()
                future.set_exception(JobError(f"job {self.job_id} is not running; cannot take a snapshot now"))
                return future
            if is_savepoint:
                target_dir = target_dir or self.config.default_savepoint_dir
                if not target_dir:
                    refused: concurrent.futures.Future[str] = concurrent.futures.Future()
                    refused.set_exception(BadInputError(
                        "no savepoint directory given and no default savepoint directory configured; "
                        "pass a target directory"
                    ))
                    return refused
            checkpoint_id = self._next_id
            location: CheckpointStorageLocation | None = None
            error: Exception | None = None
            try:
                while self.storage.is_complete(checkpoint_id):
                    checkpoint_id += 1
                if is_savepoint:
                    assert target_dir is not None
                    location = self.storage.savepoint_location(target_dir, checkpoint_id)
                else:
                    location = self.storage.checkpoint_location(checkpoint_id)
            except Exception as exc:  # noqa: BLE001 - a failed checkpoint, reported through the future
                error = exc
            self._next_id = checkpoint_id + 1
            self._last_trigger = time.monotonic()
            options = CheckpointOptions(is_savepoint=is_savepoint, location=location, stop=stop, drain=drain, final=final)
            now_ms = int(time.time() * 1000)
            pending = PendingCheckpoint(
                checkpoint_id, options, location, now_ms,
                time.monotonic() + self.config.timeout_ms / 1000.0, len(execution.tasks), execution,
                barrier_sent=error is None,
            )
            if error is None:
                self._pending[checkpoint_id] = pending
                barrier = Barrier(checkpoint_id, now_ms, options)
                for task in execution.source_tasks:
                    task.mail(TriggerCheckpoint(barrier))
                self._wakeup.notify_all()
        if error is not None:
            self._not_started(pending, error)
        else:
            log.debug("triggered %s %d", "savepoint" if is_savepoint else "checkpoint", checkpoint_id)
        return pending.future

    def _not_started(self, pending: PendingCheckpoint, error: Exception) -> None:
        """The snapshot's directory could not be created: a failed checkpoint like any other."""
        what = "savepoint" if pending.is_savepoint else "checkpoint"
        reason = f"cannot create the {what} directory: {' '.join(str(error).split())}"
        if not isinstance(error, StatekitError):
            error = JobError(f"cannot create the {what} directory for {what} {pending.checkpoint_id}: "
                             f"{' '.join(str(error).split())}")
        self._abort(pending, reason, count=True, error=error)

    # ------------------------------------------------------------ acknowledge

    def submit_snapshot(self, key: TaskKey, barrier: Barrier, snapshots: list[OperatorSnapshot]) -> None:
        """A task's synchronous part is done: write its files asynchronously, then acknowledge."""
        try:
            self._executor.submit(self._write_and_ack, key, barrier, snapshots)
        except RuntimeError:  # shut down
            for snapshot in snapshots:
                snapshot.release()

    def _alive(self, checkpoint_id: int) -> bool:
        with self._lock:
            pending = self._pending.get(checkpoint_id)
            return pending is not None and not pending.done

    def _write_and_ack(self, key: TaskKey, barrier: Barrier, snapshots: list[OperatorSnapshot]) -> None:
        checkpoint_id = barrier.checkpoint_id
        location = barrier.options.location
        try:
            if location is not None and self._alive(checkpoint_id):
                for snapshot in snapshots:
                    snapshot.write(location)
        except Exception as exc:  # noqa: BLE001 - any write failure declines the checkpoint
            if self._alive(checkpoint_id):
                log.warning("task %s failed to write checkpoint %d: %s", key, checkpoint_id, exc)
                self.decline(checkpoint_id, f"task {key} could not write its state: {exc}")
            elif location is not None:
                location.discard()
            return
        finally:
            for snapshot in snapshots:
                snapshot.release()
        if location is not None and not self._alive(checkpoint_id):
            location.discard()  # aborted while this task wrote: remove what it re-created
            return
        self.acknowledge(key, checkpoint_id, snapshots)

    def acknowledge(self, key: TaskKey, checkpoint_id: int, snapshots: list[OperatorSnapshot]) -> None:
        """Record one task's snapshot; complete the checkpoint when every task acknowledged."""
        with self._lock:
            pending = self._pending.get(checkpoint_id)
            if pending is None or pending.done:
                return
            pending.acks[key] = snapshots
            pending.last_ack_ms = int(time.time() * 1000)
            pending.state_size += sum(f.size for s in snapshots for f in s.files)
            if len(pending.acks) < pending.expected:
                return
            pending.done = True
            del self._pending[checkpoint_id]
        try:
            self._complete(pending)
        except Exception as exc:  # noqa: BLE001 - a failed commit fails the checkpoint
            log.warning("checkpoint %d could not be completed: %s", checkpoint_id, exc)
            pending.done = False
            self._abort(pending, f"could not be completed: {exc}", count=True)

    def decline(self, checkpoint_id: int, reason: str) -> None:
        """A task could not take its part of the checkpoint."""
        with self._lock:
            pending = self._pending.get(checkpoint_id)
        if pending is not None:
            self._abort(pending, reason, count=True)

    # ------------------------------------------------------------ complete / abort

    def _metadata(self, pending: PendingCheckpoint) -> CheckpointMetadata:
        per_uid: dict[str, dict[int, OperatorSnapshot]] = collections.defaultdict(dict)
        for (_, subtask), snapshots in pending.acks.items():
            for snapshot in snapshots:
                per_uid[snapshot.uid][subtask] = snapshot
        operators = []
        for info in self.operators:
            snaps = per_uid.get(info.uid, {})
            descriptors: dict[str, StateDescriptor] = {}
            key_serializer = None
            for snapshot in snaps.values():
                for descriptor in snapshot.descriptors:
                    descriptors.setdefault(descriptor.name, descriptor)
                key_serializer = key_serializer or snapshot.key_serializer
            if not descriptors:
                continue
            subtasks = tuple(
                SubtaskState(
                    i,
                    compute_key_group_range_for_operator_index(info.max_parallelism, info.parallelism, i),
                    tuple(snaps[i].files) if i in snaps else (),
                )
                for i in range(info.parallelism)
            )
            operators.append(OperatorMetadata(
                uid=info.uid, name=info.name, parallelism=info.parallelism, max_parallelism=info.max_parallelism,
                key_serializer=key_serializer if any(d.keyed for d in descriptors.values()) else None,
                states=tuple(descriptors[name] for name in sorted(descriptors)), subtasks=subtasks,
            ))
        return CheckpointMetadata(
            job_id=self.job_id,
            checkpoint_id=pending.checkpoint_id,
            kind=SnapshotKind.SAVEPOINT if pending.is_savepoint else SnapshotKind.CHECKPOINT,
            format=SnapshotFormat.CANONICAL,
            created_at_ms=pending.trigger_ms,
            operators=tuple(operators),
            job_name=self.job_name,
            properties=dict(self.properties),
        )

    def _complete(self, pending: PendingCheckpoint) -> None:
        location = pending.location
        url = ""
        if location is not None:
            location.commit(self._metadata(pending))
            url = location.url
        dispose: list[str] = []
        with self._wakeup:
            self._consecutive_failures = 0
            self._last_complete = time.monotonic()
            self._counts["completed"] += 1
            entry = self._entry(pending, "COMPLETED", url)
            self._history.appendleft(entry)
            self._latest["savepoint" if pending.is_savepoint else "completed"] = entry
            if location is not None and not pending.is_savepoint:
                self.retained.append((pending.checkpoint_id, url))
                self.latest_completed, self.latest_completed_id = url, pending.checkpoint_id
                while len(self.retained) > self.config.num_retained:
                    dispose.append(self.retained.popleft()[1])
            notify = pending.execution is self._execution
            self._wakeup.notify_all()
        log.info("completed %s %d%s", "savepoint" if pending.is_savepoint else "checkpoint",
                 pending.checkpoint_id, f" at {url}" if url else "")
        for old in dispose:
            self._dispose(old)
        if notify:
            for task in pending.execution.tasks:
                task.mail(NotifyCheckpointComplete(pending.checkpoint_id))
        pending.future.set_result(url)

    def _abort(self, pending: PendingCheckpoint, reason: str, *, count: bool, error: Exception | None = None) -> None:
        """Fail ``pending``; ``count``: it counts against ``tolerable_failed`` (periodic checkpoints only)."""
        with self._wakeup:
            if pending.done:
                return
            pending.done = True
            self._pending.pop(pending.checkpoint_id, None)
            self._counts["failed"] += 1
            entry = self._entry(pending, "FAILED", None)
            entry["failure_message"] = reason
            self._history.appendleft(entry)
            self._latest["failed"] = entry
            exceeded = False
            if count and not pending.is_savepoint and not pending.options.final:
                self._consecutive_failures += 1
                exceeded = self._consecutive_failures > self.config.tolerable_failed
            execution = self._execution if pending.execution is self._execution else None
            self._wakeup.notify_all()
        what = "savepoint" if pending.is_savepoint else "checkpoint"
        log.warning("%s %d aborted: %s", what, pending.checkpoint_id, reason)
        if pending.location is not None:
            pending.location.discard()
        if execution is not None and pending.barrier_sent:
            for task in execution.tasks:
                task.mail(NotifyCheckpointAborted(pending.checkpoint_id))
        if exceeded and self._on_tolerable_exceeded is not None:
            self._on_tolerable_exceeded(JobFailedError(
                f"exceeded the tolerable number of failed checkpoints ({self.config.tolerable_failed}); "
                f"last: {what} {pending.checkpoint_id} {reason}"
            ))
        pending.future.set_exception(error or JobError(f"{what} {pending.checkpoint_id} failed: {reason}"))

    def _dispose(self, url: str) -> None:
        from statekit.writers.disposal import dispose_snapshot

        try:
            dispose_snapshot(url, storage_options=self.storage.storage_options)
        except Exception as exc:  # noqa: BLE001 - a retention failure never fails the job
            log.warning("could not dispose old checkpoint %s: %s", url, exc)

    def dispose_retained(self) -> None:
        """Delete every retained checkpoint (cancellation with DELETE_ON_CANCELLATION)."""
        with self._lock:
            retained, self.retained = list(self.retained), collections.deque()
        for _, url in retained:
            self._dispose(url)
        io, job_dir = self.storage.io, self.storage.job_dir
        if io is not None and job_dir is not None:
            try:
                if io.exists(job_dir) and not io.list_dir(job_dir):
                    io.rm(job_dir, recursive=True)
            except Exception:  # noqa: BLE001
                pass

    # ------------------------------------------------------------ timer

    def _timer_loop(self) -> None:
        while True:
            trigger = False
            expired: list[PendingCheckpoint] = []
            with self._wakeup:
                if self._closed:
                    return
                now = time.monotonic()
                waits = [p.deadline - now for p in self._pending.values()]
                expired = [p for p in self._pending.values() if p.deadline <= now]
                if self._periodic and self._execution is not None and self.config.interval_ms:
                    due = max(self._last_trigger + self.config.interval_ms / 1000.0,
                              self._last_complete + self.config.min_pause_ms / 1000.0)
                    in_flight = sum(1 for p in self._pending.values() if not p.is_savepoint)
                    if in_flight < self.config.max_concurrent:
                        if due <= now:
                            trigger = True
                        else:
                            waits.append(due - now)
                if not trigger and not expired:
                    self._wakeup.wait(max(0.001, min(waits)) if waits else None)
                    continue
            for p in expired:
                self._abort(p, f"expired after {self.config.timeout_ms} ms", count=True)
            if trigger:
                self.trigger()  # a failure is counted and logged by trigger itself

    # ------------------------------------------------------------ statistics

    def _entry(self, pending: PendingCheckpoint, status: str, url: str | None) -> dict[str, Any]:
        return {
            "id": pending.checkpoint_id,
            "is_savepoint": pending.is_savepoint,
            "status": status,
            "trigger_timestamp": pending.trigger_ms,
            "latest_ack_timestamp": pending.last_ack_ms or None,
            "state_size": pending.state_size,
            "external_path": url or None,
            "num_subtasks": pending.expected,
            "num_acknowledged_subtasks": len(pending.acks),
        }

    def stats(self) -> dict[str, Any]:
        """Flink-like checkpoint statistics (JSON-able)."""
        with self._lock:
            in_progress = [self._entry(p, "IN_PROGRESS", None) for p in self._pending.values()]
            history = sorted(in_progress, key=lambda e: -e["id"]) + list(self._history)
            return {
                "counts": {
                    "completed": self._counts["completed"],
                    "failed": self._counts["failed"],
                    "in_progress": len(in_progress),
                    "restored": 1 if self.restored else 0,
                    "total": self._counts["completed"] + self._counts["failed"] + len(in_progress),
                },
                "latest": {
                    "completed": _public(self._latest["completed"]),
                    "savepoint": _public(self._latest["savepoint"]),
                    "failed": _public(self._latest["failed"]),
                    "restored": self.restored,
                },
                "history": [dict(e) for e in history],
            }


def _public(entry: dict[str, Any] | None) -> dict[str, Any] | None:
    return dict(entry) if entry is not None else None
