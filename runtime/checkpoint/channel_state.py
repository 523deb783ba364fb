"""In-flight records of an unaligned checkpoint, as a task captures and writes them.

A channel between two subtasks is described by a :class:`ChannelSpec` (the edge of the job graph
and its two ends). :class:`InFlightSnapshot` collects, per channel and direction, the records
a barrier overtook, encodes them when they are captured (the task processes them right after,
and user functions may change a record in place), and writes them as one channel-state file
(:mod:`statekit.statefmt.channel_state`) in the task's asynchronous part.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statekit.statefmt.channel_state import (
    ChannelSection,
    ChannelStateFile,
    RecordCodec,
    channel_state_path,
    encode_channel_state,
)

if TYPE_CHECKING:
    from statekit.runtime.checkpoint.storage import SnapshotOutput

__all__ = [
    "ChannelSpec",
    "InFlightSnapshot",
]


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

    def write(self, location: SnapshotOutput) -> ChannelStateFile | None:
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


