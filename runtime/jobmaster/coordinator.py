"""The checkpoint coordinator: triggers barriers, collects acknowledgements, completes.

Protocol (Flink's asynchronous barrier snapshotting):
    1. *trigger*: allocate the next checkpoint id, create its storage location, and mail
       every source task a barrier (under one lock, so barriers enter all sources in id
       order). The barrier says how it travels (aligned, unaligned, at-least-once), whether
       keyed state is written natively (incremental checkpoints, native savepoints), and the
       base checkpoint: the latest completed one, whose shared files an incremental snapshot
       may reference.
    2. each task snapshots at its barrier, forwards it, writes its files asynchronously
       (in-flight records of an unaligned checkpoint included) and *acknowledges* with its
       operators' descriptors and files.
    3. *complete* when every task acknowledged: build the metadata and publish
       ``_metadata`` last (``commit_metadata``), register its shared files, dispose checkpoints
       beyond ``num_retained`` (their shared files go once no retained checkpoint names them),
       then mail every task *notify complete* (sinks commit).
    A checkpoint that cannot be started (its directory cannot be created: storage gone,
    unwritable, full), times out or is declined is aborted: its directory and the shared files
    it uploaded are removed, and consecutive failed checkpoints beyond ``tolerable_failed``
    fail the job (which then restarts per its strategy). Savepoints and the final checkpoint
    of a finishing job are never counted: their failure reaches whoever asked for them (the
    final checkpoint is retried by the job master, which fails the job when it cannot be
    taken). A checkpoint a task gave up because a newer one subsumed it is not counted either.

A coordinator starting on an existing job directory (a job id reused after a crash) adopts its
complete checkpoints into retention and the shared-file registry, and deletes the shared
files none of them names (uploads of a run killed mid-checkpoint).
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from statekit.runtime.api.checkpoint_config import Alignment, CheckpointConfig, CheckpointingMode
from statekit.runtime.checkpoint.barriers import Barrier, CheckpointOptions
from statekit.runtime.checkpoint.handles import OperatorStateHandle, TaskStateSnapshot
from statekit.runtime.checkpoint.shared_registry import SharedStateRegistry
from statekit.runtime.checkpoint.storage import CheckpointStorage, CheckpointStorageLocation
from statekit.runtime.jobmaster.checkpoint_stats import CheckpointStatsTracker, subtask_details
from statekit.runtime.task.mails import NotifyCheckpointAborted, NotifyCheckpointComplete, TriggerCheckpoint
from statekit.statefmt.errors import BadInputError, JobError, JobFailedError, StatekitError
from statekit.statefmt.metadata import (
    CheckpointMetadata,
    OperatorMetadata,
    SnapshotFormat,
    SnapshotKind,
    StateDescriptor,
)
from statekit.statefmt.paths import SHARED_PREFIX
from statekit.writers.metadata_builder import SnapshotMetadataBuilder, operator_metadata

__all__ = [
    "CheckpointCoordinator",
    "OperatorInfo",
    "TaskKey",
    "ExecutionView",
    "MailTarget",
    "PendingCheckpoint",
]

log = logging.getLogger("statekit.runtime")

TaskKey = tuple[int, int]
ENDED_LOCATIONS_KEPT = 64


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
    acks: dict[TaskKey, TaskStateSnapshot] = field(default_factory=dict)
    future: concurrent.futures.Future[str] = field(default_factory=concurrent.futures.Future)
    last_ack_ms: int = 0
    end_ms: int = 0
    state_size: int = 0
    bytes_written: int = 0
    inflight_bytes: int = 0
    alignment_ms: int = 0
    unaligned: bool = False
    done: bool = False
    barrier_sent: bool = True
    ack_ms: dict[TaskKey, int] = field(default_factory=dict)  # when each task acknowledged (epoch ms)

    @property
    def is_savepoint(self) -> bool:
        return self.options.is_savepoint

    @property
    def mode(self) -> str:
        """``aligned``, ``unaligned`` (some task snapshotted at its first barrier) or ``at-least-once``."""
        if self.options.alignment is Alignment.AT_LEAST_ONCE:
            return Alignment.AT_LEAST_ONCE.value
        return Alignment.UNALIGNED.value if self.unaligned or self.options.alignment is Alignment.UNALIGNED \
            else Alignment.ALIGNED.value

    def new_shared(self) -> list[str]:
        return [p for snapshot in self.acks.values() for p in snapshot.new_shared]


class CheckpointCoordinator:
    """Triggers and completes checkpoints and savepoints of one job (across restarts).

    Args:
        incremental: Checkpoints write keyed state natively and incrementally (the backend
            supports it: the job master checked).
        base_checkpoint_id: The checkpoint a first incremental checkpoint may build on (the
            restored one, when it is a checkpoint of this job directory).
    """

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
        incremental: bool = False,
        base_checkpoint_id: int | None = None,
    ) -> None:
        self.job_id = job_id
        self.job_name = job_name
        self.operators = operators
        self.config = config
        self.storage = storage
        self.properties = dict(properties or {})
        self.incremental = incremental
        self._base_id = base_checkpoint_id
        self._next_id = first_checkpoint_id
        self._lock = threading.RLock()
        self._wakeup = threading.Condition(self._lock)
        self._pending: dict[int, PendingCheckpoint] = {}
        self._completing: set[int] = set()  # acknowledged by every task, _metadata not yet published
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
        self.shared = SharedStateRegistry()
        self.statistics = CheckpointStatsTracker()
        self.restored: dict[str, Any] | None = None
        self._adopt()
        # the locations of recently aborted snapshots: a task's late write into one is removed again
        self._ended_locations: collections.OrderedDict[int, CheckpointStorageLocation] = collections.OrderedDict()
        self._timer = threading.Thread(target=self._timer_loop, name="checkpoint-timer", daemon=True)
        self._timer.start()

    # ------------------------------------------------------------ an existing job directory

    def _adopt(self) -> None:
        """Retain the complete checkpoints already in the job directory, register their shared
        files, and delete shared files none of them names."""
        io, job_dir = self.storage.io, self.storage.job_dir
        if io is None or job_dir is None:
            return
        from statekit.readers.shared_refs import shared_files_of, shared_references, unreferenced_files

        try:
            references = shared_references(io, job_dir)
            for checkpoint_id, directory, metadata in references.checkpoints:
                self.retained.append((checkpoint_id, io.url(directory)))
                self.shared.register(checkpoint_id, shared_files_of(metadata))
            orphans = unreferenced_files(io, job_dir, references)
        except Exception as exc:  # noqa: BLE001 - an unreadable old job directory never stops the job
            log.warning("job %s: could not read the existing checkpoints of %s: %s", self.job_id, job_dir, exc)
            return
        if references.damaged:
            log.warning("job %s: %d checkpoint(s) in %s cannot be read (e.g. %s); their shared files are kept",
                        self.job_id, len(references.damaged), job_dir, references.damaged[0])
        if orphans:
            log.info("job %s: deleting %d shared file(s) no checkpoint names (left by a killed run)",
                     self.job_id, len(orphans))
            self._delete_shared(orphans)

    def take_restored(self, checkpoint_id: int, url: str, *, claim: bool) -> None:
        """Apply the restore mode (``statekit.runtime.checkpoint.restore_mode``) to the snapshot restored from.

        ``claim``: it joins retention as the oldest checkpoint (disposed once subsumed).
        Otherwise (NO_CLAIM) it leaves retention if it was adopted; its shared files stay
        registered under its id, which is never released: nothing of it is ever deleted.
        """
        same = url.rstrip("/")
        with self._lock:
            adopted = [entry for entry in self.retained if entry[1].rstrip("/") == same]
            if claim and not adopted:
                self.retained.appendleft((checkpoint_id, url))
            elif not claim:
                self.retained = collections.deque(e for e in self.retained if e not in adopted)

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
        """Stop the timer (tasks finish their own writes before they end)."""
        with self._wakeup:
            self._closed = True
            self._periodic = False
            self._wakeup.notify_all()

    # ------------------------------------------------------------ trigger

    def _options(self, location: CheckpointStorageLocation | None, *, is_savepoint: bool, stop: bool, drain: bool,
                 final: bool, native: bool, full: bool = False) -> CheckpointOptions:
        target = location.target if location is not None else None
        if is_savepoint:  # always aligned; native only when asked for, never incremental
            return CheckpointOptions(is_savepoint=True, target=target, stop=stop, drain=drain, native=native)
        alignment, timeout = (Alignment.ALIGNED, None) if final else self.config.barrier_alignment()
        if final and self.config.mode is CheckpointingMode.AT_LEAST_ONCE:
            alignment = Alignment.AT_LEAST_ONCE
        return CheckpointOptions(
            target=target, stop=stop, drain=drain, final=final, alignment=alignment,
            aligned_timeout_ms=timeout, native=self.incremental, incremental=self.incremental,
            base_checkpoint_id=None if full else self._base_id,  # full: reuses no file of an earlier one
        )

    def trigger(
        self,
        *,
        is_savepoint: bool = False,
        target_dir: str | None = None,
        stop: bool = False,
        drain: bool = False,
        final: bool = False,
        native: bool = False,
        full: bool = False,
    ) -> concurrent.futures.Future[str]:
        """Trigger a checkpoint or savepoint; the future resolves to its path ('' if not stored).

        Args:
            native: A savepoint in the backends' native format (self-contained).
            full: A checkpoint that reuses no shared file of an earlier one (incremental checkpoints).
        """
        with self._wakeup:
            if final:
                self._wait_for_checkpoints_in_flight()
            execution = self._execution
            if execution is None or self._closed:
                future: concurrent.futures.Future[str] = concurrent.futures.Future()
                why = ("has ended" if self._closed else
                       "is starting or restarting (not all of its tasks run yet); try again in a moment")
                future.set_exception(JobError(f"job {self.job_id} {why}; cannot take a snapshot now"))
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
            options = self._options(location, is_savepoint=is_savepoint, stop=stop, drain=drain, final=final,
                                    native=native, full=full)
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
            log.debug("triggered %s %d (%s)", "savepoint" if is_savepoint else "checkpoint", checkpoint_id,
                      options.alignment.value)
        return pending.future

    def _checkpoints_in_flight(self) -> int:
        """Checkpoints (not savepoints) triggered and neither completed nor failed yet."""
        return sum(1 for p in self._pending.values() if not p.is_savepoint) + len(self._completing)

    def _wait_for_checkpoints_in_flight(self) -> None:
        """Block (lock held, released while waiting) until no checkpoint is in flight, the attempt
        ended or the coordinator closed: the final checkpoint counts against ``max_concurrent``."""
        execution = self._execution
        while self._checkpoints_in_flight() and self._execution is execution and not self._closed:
            self._wakeup.wait(0.5)

    def _not_started(self, pending: PendingCheckpoint, error: Exception) -> None:
        """The snapshot's directory could not be created: a failed checkpoint like any other."""
        what = "savepoint" if pending.is_savepoint else "checkpoint"
        reason = f"cannot create the {what} directory: {' '.join(str(error).split())}"
        if not isinstance(error, StatekitError):
            error = JobError(f"cannot create the {what} directory for {what} {pending.checkpoint_id}: "
                             f"{' '.join(str(error).split())}")
        self._abort(pending, reason, count=True, error=error)

    # ------------------------------------------------------------ acknowledge

    def acknowledge(self, key: TaskKey, checkpoint_id: int, snapshot: TaskStateSnapshot) -> None:
        """Record one task's acknowledgement; complete the checkpoint when every task acknowledged.

        An acknowledgement of a checkpoint that is no longer pending (aborted, expired, or of an
        ended attempt) is discarded: its files and the shared files it uploaded are deleted.
        """
        stats = snapshot.stats
        with self._lock:
            pending = self._pending.get(checkpoint_id)
            if pending is not None and not pending.done:
                pending.acks[key] = snapshot
                pending.last_ack_ms = int(time.time() * 1000)
                pending.ack_ms[key] = pending.last_ack_ms
                pending.state_size += snapshot.full_size
                pending.bytes_written += snapshot.bytes_written
                pending.inflight_bytes += snapshot.inflight_bytes
                pending.alignment_ms = max(pending.alignment_ms, stats.alignment_ms)
                pending.unaligned = pending.unaligned or stats.unaligned
                if len(pending.acks) < pending.expected:
                    return
                pending.done = True
                del self._pending[checkpoint_id]
                if not pending.is_savepoint:
                    self._completing.add(checkpoint_id)
            else:
                pending = None
        if pending is None:
            self._discard_late(checkpoint_id, snapshot)
            return
        try:
            self._complete(pending)
        except Exception as exc:  # noqa: BLE001 - a failed commit fails the checkpoint
            log.warning("checkpoint %d could not be completed: %s", checkpoint_id, exc)
            pending.done = False
            self._abort(pending, f"could not be completed: {exc}", count=True)

    def _discard_late(self, checkpoint_id: int, snapshot: TaskStateSnapshot) -> None:
        """Delete what a task wrote for a checkpoint that ended without it."""
        with self._lock:
            location = self._ended_locations.get(checkpoint_id)
        if location is not None:
            location.discard()  # the directory of an aborted checkpoint, re-created by a late write
        self._delete_shared(snapshot.new_shared)

    def decline(self, checkpoint_id: int, reason: str, *, subsumed: bool = False,
                new_shared: list[str] | None = None) -> None:
        """A task could not take its part of the checkpoint (``subsumed``: a newer one replaced it;
        ``new_shared``: shared files it uploaded before it failed, deleted)."""
        if new_shared:
            self._delete_shared(new_shared)
        with self._lock:
            pending = self._pending.get(checkpoint_id)
        if pending is not None:
            self._abort(pending, reason, count=not subsumed)

    # ------------------------------------------------------------ complete / abort

    def _metadata(self, pending: PendingCheckpoint) -> CheckpointMetadata:
        per_uid: dict[str, dict[int, OperatorStateHandle]] = collections.defaultdict(dict)
        for (_, subtask), snapshot in pending.acks.items():
            for handle in snapshot.operators:
                per_uid[handle.uid][subtask] = handle
        operators: list[OperatorMetadata] = []
        native = False
        for info in self.operators:
            snaps = per_uid.get(info.uid, {})
            descriptors: dict[str, StateDescriptor] = {}
            key_serializer = None
            for handle in snaps.values():
                for descriptor in handle.descriptors:
                    descriptors.setdefault(descriptor.name, descriptor)
                key_serializer = key_serializer or handle.key_serializer
            channel = [snaps[i].channel_file if i in snaps else None for i in range(info.parallelism)]
            stores = [snaps[i].native if i in snaps else None for i in range(info.parallelism)]
            if not descriptors and not any(channel):
                continue
            native = native or any(stores)
            operators.append(operator_metadata(
                info.uid, name=info.name, parallelism=info.parallelism, max_parallelism=info.max_parallelism,
                key_serializer=key_serializer, states=[descriptors[name] for name in sorted(descriptors)],
                files=[snaps[i].files if i in snaps else () for i in range(info.parallelism)],
                channel_state=channel, native=stores,
            ))
        properties = dict(self.properties)
        if not pending.is_savepoint:
            properties["checkpointing_mode"] = pending.mode
        header = SnapshotMetadataBuilder(
            self.job_id, job_name=self.job_name, checkpoint_id=pending.checkpoint_id,
            kind=SnapshotKind.SAVEPOINT if pending.is_savepoint else SnapshotKind.CHECKPOINT,
            format=SnapshotFormat.NATIVE if native else SnapshotFormat.CANONICAL,
            properties=properties,
        )
        return header.build(operators, created_at_ms=pending.trigger_ms)

    def _complete(self, pending: PendingCheckpoint) -> None:
        location = pending.location
        url = ""
        shared: set[str] = set()
        if location is not None:
            metadata = self._metadata(pending)
            location.commit(metadata)
            url = location.url
            shared = {f.path[len(SHARED_PREFIX):] for f in metadata.native_files() if f.path.startswith(SHARED_PREFIX)}
        dispose: list[tuple[int, str]] = []
        with self._wakeup:
            self._completing.discard(pending.checkpoint_id)
            pending.end_ms = int(time.time() * 1000)
            self._consecutive_failures = 0
            self._last_complete = time.monotonic()
            self._record(pending, "COMPLETED", url)
            if location is not None and not pending.is_savepoint:
                self.shared.register(pending.checkpoint_id, shared)  # before any older one is released
                self.retained.append((pending.checkpoint_id, url))
                self.latest_completed, self.latest_completed_id = url, pending.checkpoint_id
                self._base_id = pending.checkpoint_id
                while len(self.retained) > self.config.num_retained:
                    dispose.append(self.retained.popleft())
            in_progress = list(self._pending)
            notify = pending.execution is self._execution
            self._wakeup.notify_all()
        log.info("completed %s %d%s", "savepoint" if pending.is_savepoint else "checkpoint",
                 pending.checkpoint_id, f" at {url}" if url else "")
        for old_id, old in dispose:
            self._dispose(old)
            self._delete_shared(self.shared.release(old_id, in_progress))
        self._delete_shared(self.shared.ended(pending.checkpoint_id))
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
            pending.end_ms = int(time.time() * 1000)
            self._pending.pop(pending.checkpoint_id, None)
            self._completing.discard(pending.checkpoint_id)
            self._record(pending, "FAILED", None, failure=reason)
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
            with self._lock:
                self._ended_locations[pending.checkpoint_id] = pending.location
                while len(self._ended_locations) > ENDED_LOCATIONS_KEPT:
                    self._ended_locations.popitem(last=False)
        self._delete_shared(pending.new_shared())
        self._delete_shared(self.shared.ended(pending.checkpoint_id))
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
            # the job's own retired checkpoint (force: the job runs); its shared registry decides on shared files
            dispose_snapshot(url, storage_options=self.storage.storage_options, release_shared=False, force=True)
        except Exception as exc:  # noqa: BLE001 - a retention failure never fails the job
            log.warning("could not dispose old checkpoint %s: %s", url, exc)

    def _delete_shared(self, paths: list[str]) -> None:
        """Delete files of the job's shared/ that no retained checkpoint names."""
        io, shared_dir = self.storage.io, self.storage.shared_dir
        paths = [p for p in paths if not self.shared.referenced(p)]
        if not paths or io is None or shared_dir is None:
            return
        from statekit.writers.disposal import delete_shared_files

        for where, reason in delete_shared_files(io, shared_dir, paths):
            log.warning("could not delete shared file %s: %s", where, reason)

    def dispose_retained(self) -> None:
        """Delete every retained checkpoint and their shared files (DELETE_ON_CANCELLATION)."""
        with self._lock:
            retained, self.retained = list(self.retained), collections.deque()
            in_progress = list(self._pending)
        for checkpoint_id, url in retained:
            self._dispose(url)
            self._delete_shared(self.shared.release(checkpoint_id, in_progress))
        io, job_dir = self.storage.io, self.storage.job_dir
        if io is not None and job_dir is not None:
            for directory in (self.storage.shared_dir, job_dir):
                try:
                    if directory is not None and io.exists(directory) and not io.walk_files(directory):
                        io.rm(directory, recursive=True)
                except Exception:  # noqa: BLE001
                    pass

    # ------------------------------------------------------------ timer

    def _periodic_blocked(self) -> bool:
        """Unaligned checkpoints wait while a savepoint or final checkpoint is in flight (its
        aligned barrier must not be overtaken)."""
        return self.config.unaligned and any(p.is_savepoint or p.options.final for p in self._pending.values())

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
                    if self._checkpoints_in_flight() < self.config.max_concurrent and not self._periodic_blocked():
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
        end = pending.end_ms or int(time.time() * 1000)
        return {
            "id": pending.checkpoint_id,
            "is_savepoint": pending.is_savepoint,
            "status": status,
            "mode": pending.mode,
            "checkpoint_type": _checkpoint_type(pending),
            "incremental": pending.options.incremental,
            "trigger_timestamp": pending.trigger_ms,
            "latest_ack_timestamp": pending.last_ack_ms or None,
            "end_to_end_duration": end - pending.trigger_ms,
            "alignment_duration": pending.alignment_ms,
            "state_size": pending.state_size,
            "checkpointed_size": pending.bytes_written,
            "persisted_data": pending.inflight_bytes,
            "external_path": url or None,
            "num_subtasks": pending.expected,
            "num_acknowledged_subtasks": len(pending.acks),
        }

    def _record(self, pending: PendingCheckpoint, status: str, url: str | None, *, failure: str | None = None) -> None:
        """Hand an ended checkpoint to the statistics (lock held)."""
        entry = self._entry(pending, status, url)
        if failure is not None:
            entry["failure_message"] = failure
        self.statistics.record(entry, self._subtasks(pending))

    def _subtasks(self, pending: PendingCheckpoint) -> list[dict[str, Any]]:
        keys = [task.key for task in pending.execution.tasks]
        return subtask_details(pending.trigger_ms, keys, dict(pending.acks), dict(pending.ack_ms))

    def stats(self) -> dict[str, Any]:
        """Flink-like checkpoint statistics (JSON-able; :mod:`statekit.runtime.jobmaster.checkpoint_stats`)."""
        with self._lock:
            in_progress = [self._entry(p, "IN_PROGRESS", None) for p in self._pending.values()]
        return self.statistics.snapshot(in_progress, self.restored)

    def details(self, checkpoint_id: int) -> dict[str, Any] | None:
        """One checkpoint with per-subtask details (in progress or among the latest), else None."""
        with self._lock:
            pending = self._pending.get(checkpoint_id)
            live = None if pending is None else {**self._entry(pending, "IN_PROGRESS", None),
                                                 "subtasks": self._subtasks(pending)}
        return self.statistics.details(checkpoint_id, live)


def _checkpoint_type(pending: PendingCheckpoint) -> str:
    """Flink's names: SAVEPOINT, CHECKPOINT, UNALIGNED_CHECKPOINT (and AT_LEAST_ONCE_CHECKPOINT)."""
    if pending.is_savepoint:
        return "SAVEPOINT"
    return {"aligned": "CHECKPOINT", "unaligned": "UNALIGNED_CHECKPOINT"}.get(pending.mode, "AT_LEAST_ONCE_CHECKPOINT")



