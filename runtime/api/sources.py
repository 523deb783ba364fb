"""Sources as a job declares them: a :class:`Source` creates one :class:`SourceReader` per
subtask (Flink's FLIP-27 split readers, reduced to what the runtime needs). The built-in sources
live in :mod:`statekit.runtime.connectors.sources`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from statekit.runtime.api.functions import FunctionInitializationContext, FunctionSnapshotContext

__all__ = [
    "SourceReaderContext",
    "SourceReader",
    "Source",
]


@dataclass(frozen=True)
class SourceReaderContext:
    """The subtask a reader runs in, and the attempt's plan of the source (:meth:`Source.plan`:
    the same value in every reader of the attempt; None when the source makes none)."""

    subtask: int
    parallelism: int
    plan: Any = None


class SourceReader(ABC):
    """Reads one subtask's share of a source."""

    def initialize_state(self, ctx: FunctionInitializationContext) -> None:
        """Register operator state (offsets) and restore from it."""

    @abstractmethod
    def poll(self, max_records: int) -> tuple[list[Any], bool]:
        """Up to ``max_records`` records, and whether the input has ended.

        An empty list with ``False`` means nothing is available right now (the task waits
        ``idle_wait_s`` before polling again).
        """

    def snapshot_state(self, ctx: FunctionSnapshotContext) -> None:
        """Write the current offsets into operator state (called at each barrier)."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """A checkpoint completed."""

    def close(self) -> None:
        """Release files and connections."""

    idle_wait_s: float = 0.05


class Source(ABC):
    """A source of records; creates one reader per subtask."""

    @property
    def bounded(self) -> bool:
        """Whether the input ends."""
        return True

    def plan(self, parallelism: int) -> Any:
        """Which reader reads what, decided once per execution attempt by the job master (the
        part of Flink's split enumerator this runtime needs): every reader of the attempt gets
        the same value as ``ctx.plan``, so readers that list their input at different moments
        still agree. A picklable value, or None (the default: each reader decides alone)."""
        return None

    @abstractmethod
    def create_reader(self, ctx: SourceReaderContext) -> SourceReader:
        """A reader for subtask ``ctx.subtask``."""


