"""One task's part of a checkpoint while it is being taken: snapshots, in-flight records, stats.

A task takes the synchronous snapshot of its operators at the barrier (aligned) or at the first
barrier (unaligned). Its part is complete when (a) its input side is complete — every channel
delivered the barrier, and in-flight records of an unaligned checkpoint were stored — and (b)
its output side is complete — a timeoutable aligned barrier it forwarded left its output
backlog, or was converted to an unaligned one (the records it overtook are stored). Only then
is the part submitted for the asynchronous writes and the acknowledgement.

In-flight records are encoded the moment they are captured: the task processes them right
after, and user functions may change a record in place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statekit.runtime.checkpoint.barriers import Barrier
from statekit.runtime.checkpoint.channel_state import ChannelSpec, InFlightSnapshot
from statekit.runtime.checkpoint.handles import SubtaskStats
from statekit.statefmt.errors import SerializationError

if TYPE_CHECKING:
    from statekit.runtime.operators.base import OperatorSnapshot

__all__ = [
    "SubtaskCheckpoint",
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
