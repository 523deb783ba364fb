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

import posixpath
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statekit.runtime.channels import Barrier
from statekit.statefmt.channel_state import (
    ChannelSection,
    ChannelStateFile,
    RecordCodec,
    channel_state_path,
    encode_channel_state,
)
from statekit.statefmt.errors import SerializationError

if TYPE_CHECKING:
    from statekit.runtime.checkpoint_storage import CheckpointStorageLocation
    from statekit.runtime.operators import OperatorSnapshot

__all__ = ["ChannelSpec", "InFlightSnapshot", "SubtaskCheckpoint", "SubtaskStats"]


@dataclass(frozen=True)
class ChannelSpec:
    """One channel between two subtasks: the edge of the job graph and its two ends."""

    producer: str
    consumer: str
    input_index: int
    partitioning: str
    producer_subtask: int
    producer_parallelism: int
    consumer_subtask: int
    consumer_parallelism: int


@dataclass(frozen=True)
class SubtaskStats:
    """What a task reports with its acknowledgement.

    Attributes:
        unaligned: The task snapshotted unaligned (at the first barrier).
        alignment_ms: From the first barrier to the snapshot (aligned: the alignment).
    """

    unaligned: bool = False
    alignment_ms: int = 0


class InFlightSnapshot:
    """The in-flight records of one task's checkpoint, by channel and direction, encoded.

    The file is written (asynchronous part) under the head operator's uid.
    """

    def __init__(self, uid: str, subtask: int, parallelism: int, serializer: str) -> None:
        self.uid = uid
        self.subtask = subtask
        self.parallelism = parallelism
        self.codec = RecordCodec(serializer)
        self._sections: dict[tuple[str, ChannelSpec], list[bytes]] = {}
        self.file: ChannelStateFile | None = None

    @property
    def records(self) -> int:
        return sum(len(r) for r in self._sections.values())

    def add(self, direction: str, spec: ChannelSpec, records: list[Any]) -> None:
        """Encode and keep ``records`` (in channel order).

        Raises:
            SerializationError: A record cannot be stored.
        """
        encode = self.codec.encode
        self._sections.setdefault((direction, spec), []).extend(encode(r) for r in records)

    def sections(self) -> list[ChannelSection]:
        return [
            ChannelSection(direction, spec.producer, spec.consumer, spec.input_index, spec.partitioning,
                           spec.producer_subtask, spec.producer_parallelism, spec.consumer_subtask,
                           spec.consumer_parallelism, self.codec.name, tuple(records))
            for (direction, spec), records in sorted(self._sections.items(), key=_section_order)
            if records
        ]

    def write(self, location: CheckpointStorageLocation) -> ChannelStateFile | None:
        """Write the channel-state file (nothing when no record was in flight)."""
        sections = self.sections()
        if not sections:
            return None
        data, summary = encode_channel_state(sections)
        relative = channel_state_path(self.uid, self.subtask, self.parallelism)
        location.io.write_atomic(posixpath.join(location.directory, relative), data)
        self.file = ChannelStateFile(relative, summary.size, summary.checksum, summary.records)
        return self.file


def _section_order(item: tuple[tuple[str, ChannelSpec], list[bytes]]) -> tuple[Any, ...]:
    (direction, spec), _ = item
    return (spec.producer, spec.consumer, spec.input_index, spec.producer_subtask, spec.consumer_subtask, direction)


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
