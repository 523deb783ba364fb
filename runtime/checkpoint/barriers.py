"""Checkpoint barriers: what travels in-band (or ahead of the data) to mark a checkpoint.

A barrier carries the checkpoint id, its trigger time and its options — plain values only, so
the same barrier can cross a process boundary. Where a task writes its part is named by the
options' :class:`~statekit.runtime.checkpoint.storage.SnapshotTarget` (URLs), never by a live
object of the coordinator.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from statekit.runtime.api.checkpoint_config import Alignment
from statekit.runtime.checkpoint.storage import SnapshotTarget

__all__ = [
    "CheckpointOptions",
    "Barrier",
    "PriorityBarrier",
]


@dataclass(frozen=True)
class CheckpointOptions:
    """What a barrier asks for.

    Attributes:
        is_savepoint: Savepoint (never disposed) rather than checkpoint.
        target: Where tasks write their files (None: a checkpoint that is not stored).
        stop: After this snapshot sources stop emitting (stop-with-savepoint).
        drain: Sources emitted end-of-input before this barrier.
        final: The final checkpoint of a bounded job.
        alignment: How barriers travel (:class:`Alignment`).
        aligned_timeout_ms: With ``ALIGNED``: once this long has passed since the trigger, a
            barrier still queued behind data is converted to an unaligned one (None: never).
        native: Keyed state in its backend's native format (incremental for checkpoints when
            the backend supports and the job asks for it), else canonical.
        incremental: Native checkpoints upload only the files the base checkpoint lacks.
        base_checkpoint_id: The latest completed checkpoint when this one was triggered: the
            only one whose shared files an incremental snapshot may reuse.
    """

    is_savepoint: bool = False
    target: SnapshotTarget | None = None
    stop: bool = False
    drain: bool = False
    final: bool = False
    alignment: Alignment = Alignment.ALIGNED
    aligned_timeout_ms: int | None = None
    native: bool = False
    incremental: bool = False
    base_checkpoint_id: int | None = None

    @property
    def timeoutable(self) -> bool:
        """An aligned barrier that turns unaligned after ``aligned_timeout_ms``."""
        return self.alignment is Alignment.ALIGNED and self.aligned_timeout_ms is not None


@dataclass(frozen=True)
class Barrier:
    """A checkpoint barrier: every record before it belongs to checkpoint ``checkpoint_id``."""

    checkpoint_id: int
    timestamp_ms: int
    options: CheckpointOptions = field(default_factory=CheckpointOptions)

    @property
    def deadline_ms(self) -> int | None:
        """When a timeoutable aligned barrier turns unaligned (None: never)."""
        timeout = self.options.aligned_timeout_ms
        return None if not self.options.timeoutable or timeout is None else self.timestamp_ms + timeout


@dataclass(frozen=True)
class PriorityBarrier:
    """A barrier that overtook data: it belongs after the first ``sent`` data-lane items its
    producer delivered on the channel (the items after the consumer's ``received`` count, up to
    ``sent``, are in flight)."""

    barrier: Barrier
    sent: int


