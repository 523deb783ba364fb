"""Accumulators (Flink's): values a job's subtasks add to, merged by the job master.

A user function registers an accumulator under a name in ``open``
(``runtime_context.add_accumulator(name, ListAccumulator())``) and adds to it. Each subtask's
accumulators travel to the job master with the task's metric reports — as the changes since the
previous report, plain values, so a subtask in another process sends them the same way — and
the job master merges every subtask's changes under the name:
``JobExecutionResult.accumulators[name]`` when the job ends, ``JobHandle.accumulators()`` while
it runs. Changes of a failed attempt that were reported stay merged (accumulators are not
exactly-once).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

__all__ = ["Accumulator", "IntCounter", "ListAccumulator", "merge_accumulator"]


class Accumulator(ABC):
    """A subtask's accumulator: it takes values and gives the changes since it was last asked."""

    @abstractmethod
    def add(self, value: Any) -> None:
        """Add ``value``."""

    @abstractmethod
    def take_changes(self) -> Any:
        """The changes since the previous call, as a plain value (None: none)."""


class IntCounter(Accumulator):
    """A sum of ints; its changes and merged result are ints."""

    def __init__(self) -> None:
        self.local = 0
        self._reported = 0

    def add(self, value: Any) -> None:
        self.local += int(value)

    def take_changes(self) -> Any:
        change, self._reported = self.local - self._reported, self.local
        return change or None


class ListAccumulator(Accumulator):
    """Every value added, in order; its changes are lists, its merged result one list."""

    def __init__(self) -> None:
        self._new: list[Any] = []

    def add(self, value: Any) -> None:
        self._new.append(value)

    def take_changes(self) -> Any:
        if not self._new:
            return None
        changes, self._new = self._new, []
        return changes


def merge_accumulator(merged: Any, changes: Any) -> Any:
    """``merged`` (None: nothing yet) with one subtask's ``changes`` (an int or a list)."""
    if merged is None:
        return list(changes) if isinstance(changes, list) else changes
    if isinstance(merged, list):
        merged.extend(changes)
        return merged
    return merged + changes
