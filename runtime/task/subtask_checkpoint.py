"""One task's part of a checkpoint while it is being taken: snapshots, in-flight records, stats.

A task takes the synchronous snapshot of its operators at the barrier (aligned) or at the first
barrier (unaligned). Its part is complete when (a) its input side is complete — every channel
delivered the barrier, and in-flight records of an unaligned checkpoint were stored — and (b)
its output side is complete — a timeoutable aligned barrier it forwarded left its output
backlog, or was converted to an unaligned one (the records it overtook are stored). Only then
is the part handed to the task's :class:`CheckpointWriter`: the task's own thread for the
asynchronous part, which writes the files where the barrier's target says and acknowledges the
coordinator with handles (:class:`~statekit.runtime.checkpoint.handles.TaskStateSnapshot`) — the
coordinator never touches a task's state.

In-flight records are encoded the moment they are captured: the task processes them right
after, and user functions may change a record in place.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statekit.runtime.checkpoint.barriers import Barrier
from statekit.runtime.checkpoint.channel_state import ChannelSpec, InFlightSnapshot
from statekit.runtime.checkpoint.handles import OperatorStateHandle, SubtaskStats, TaskStateSnapshot
from statekit.runtime.operators.base import SnapshotWriteError
from statekit.statefmt.errors import SerializationError

if TYPE_CHECKING:
    from statekit.runtime.checkpoint.storage import SnapshotOutput
    from statekit.runtime.operators.base import OperatorSnapshot

__all__ = [
    "SubtaskCheckpoint",
    "CheckpointWriter",
]


@dataclass
class SubtaskCheckpoint:
    """A task's part of one checkpoint until it is submitted.

    Attributes:
        barrier: The checkpoint.
        snapshots: The operators' synchronous snapshots, head first.
        inflight: In-flight records captured so far.
        stats: Reported with the acknowledgement.
        input_open: The input side is not complete yet.
        failure: Why the part cannot be completed (an in-flight record could not be stored).
    """

    barrier: Barrier
    snapshots: list[OperatorSnapshot]
    inflight: InFlightSnapshot
    stats: SubtaskStats
    input_open: bool = True
    failure: str | None = None
    converted: set[int] = field(default_factory=set)

    @property
    def checkpoint_id(self) -> int:
        return self.barrier.checkpoint_id

    def capture(self, direction: str, spec: ChannelSpec, records: list[Any]) -> None:
        """Store in-flight ``records``; a record that cannot be stored fails this part (not the task)."""
        if self.failure is not None or not records:
            return
        try:
            self.inflight.add(direction, spec, records)
        except SerializationError as exc:
            self.failure = str(exc)

    def release(self) -> None:
        for snapshot in self.snapshots:
            snapshot.release()

    def handles(self, output: SnapshotOutput | None) -> tuple[OperatorStateHandle, ...]:
        """Write every operator's files (the in-flight records with the head operator's) into
        ``output`` and return the handles (``output`` None: a checkpoint that is not stored).

        Raises:
            SnapshotWriteError: A write failed.
        """
        inflight = self.inflight if self.inflight.records else None
        if output is None:
            return tuple(OperatorStateHandle(s.uid, tuple(s.descriptors), s.key_serializer) for s in self.snapshots)
        handles: list[OperatorStateHandle] = []
        for position, snapshot in enumerate(self.snapshots):
            try:
                handles.append(snapshot.write(output, inflight if position == 0 else None))
            except SnapshotWriteError as exc:
                exc.new_shared = [p for h in handles for p in h.new_shared] + exc.new_shared
                raise
        return tuple(handles)


class CheckpointWriter:
    """The asynchronous part of one task's checkpoints, on the task's own thread, in order.

    Each submitted part is written where its barrier's target says, released, and acknowledged
    (or declined when a write failed). A part of a checkpoint the task learned was aborted is
    released unwritten. :meth:`close` waits for the write in progress and drops the queued ones.

    Args:
        name: The task's name (the thread's).
        storage_options: The job's fsspec options (object stores).
        acknowledge: ``acknowledge(checkpoint_id, snapshot)``.
        decline: ``decline(checkpoint_id, reason, new_shared)``.
    """

    def __init__(self, name: str, storage_options: dict[str, Any] | None,
                 acknowledge: Callable[[int, TaskStateSnapshot], None],
                 decline: Callable[[int, str, list[str]], None]) -> None:
        self.name = name
        self.storage_options = storage_options
        self._acknowledge = acknowledge
        self._decline = decline
        self._aborted: set[int] = set()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._queued: dict[int, SubtaskCheckpoint] = {}
        self._lock = threading.Lock()

    def submit(self, part: SubtaskCheckpoint) -> None:
        """Write ``part`` on the writer thread, then acknowledge it."""
        with self._lock:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"{self.name} async")
            self._queued[part.checkpoint_id] = part
            self._executor.submit(self._write, part)

    def abort(self, checkpoint_id: int) -> None:
        """The coordinator aborted ``checkpoint_id``: a part of it not written yet never will be."""
        self._aborted.add(checkpoint_id)

    def _write(self, part: SubtaskCheckpoint) -> None:
        checkpoint_id = part.checkpoint_id
        with self._lock:
            if self._queued.pop(checkpoint_id, None) is None:
                return  # dropped by close()
        started = time.perf_counter()
        try:
            if checkpoint_id in self._aborted:
                return
            target = part.barrier.options.target
            output = None if target is None else target.open(self.storage_options)
            handles = part.handles(output)
        except SnapshotWriteError as exc:
            self._decline(checkpoint_id, f"could not write its state: {exc}", exc.new_shared)
            return
        except Exception as exc:  # noqa: BLE001 - opening the target failed: this checkpoint fails
            self._decline(checkpoint_id, f"could not write its state: {exc}", [])
            return
        finally:
            part.release()
        stats = dataclasses.replace(part.stats, async_ms=(time.perf_counter() - started) * 1000)
        self._acknowledge(checkpoint_id, TaskStateSnapshot(handles, stats))

    def close(self) -> None:
        """Wait for the write in progress; release the queued parts unwritten."""
        with self._lock:
            executor, self._executor = self._executor, None
            dropped, self._queued = list(self._queued.values()), {}
        for part in dropped:
            part.release()
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
