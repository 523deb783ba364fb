"""Split key groups into a max parallelism that is a multiple of the old one, without spilling.

With ``M2 = r * M1``, new key group ``k`` holds exactly the entries of old key group
``k % M1`` whose ``key_hash % M2 == k``: each old block is the parent of ``r`` new ones, and a
filter keeps the parent's order, so a sorted, unique parent gives sorted, unique children.

A new subtask writes its key groups ``a..b`` in ascending order, so it needs the parents
``a % M1, (a + 1) % M1, ...``: ascending, wrapping around to 0 after ``M1 - 1``. Every new
subtask advances in that same order, so one **sweep** over the old key groups ``0..M1-1``
serves every subtask at once: at old key group ``g``, each subtask whose next key group ``k``
has ``k % M1 == g`` takes its child ``k`` and moves on to ``k + 1``. Sweeps repeat until every
subtask is done; a parent is read once per sweep that needs it (:func:`split_schedule`).

Invariants: each new subtask receives its key groups in strictly ascending order, each once;
a step lists at most one key group per subtask; memory is one parent block and its children.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from statekit.statefmt.keygroups import KeyGroupRange

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["MAX_READS_PER_PARENT", "MAX_SPLIT_OUTPUTS", "SplitStep", "children", "split_schedule", "split_reads"]

MAX_READS_PER_PARENT = 3
"""A split reads each parent at most this many times (sweeps); more, and the rescale
regroups through :class:`~statekit.writers.key_group_sorter.KeyGroupSorter` instead."""

MAX_SPLIT_OUTPUTS = 64
"""A split writes every new file at once (a file descriptor and a 1 MiB write buffer each);
more new subtasks than this, and the rescale regroups through the sorter instead."""


@dataclass(frozen=True)
class SplitStep:
    """One read of old key group ``parent``: the new ``(subtask, key group)`` pairs it feeds."""

    parent: int
    targets: tuple[tuple[int, int], ...]


def split_schedule(old_max: int, new_max: int, ranges: Sequence[KeyGroupRange]) -> list[SplitStep]:
    """The sweeps of a split from ``old_max`` to ``new_max`` key groups (a multiple) into new
    subtasks of ``ranges``, as steps in reading order. Work: one visit per new key group and
    per old key group of each sweep (subtasks wait in lists by the old key group they need)."""
    if old_max <= 0 or new_max % old_max:
        raise ValueError(f"max parallelism {new_max} is not a multiple of {old_max}")
    waiting: dict[int, list[int]] = {}  # old key group -> subtasks whose next key group it holds
    cursor = [r.start for r in ranges]
    for i, r in enumerate(ranges):
        if r.start <= r.end:
            waiting.setdefault(r.start % old_max, []).append(i)
    steps: list[SplitStep] = []
    while waiting:
        for parent in range(old_max):
            subtasks = waiting.pop(parent, None)
            if subtasks is None:
                continue
            targets = []
            for i in sorted(subtasks):
                targets.append((i, cursor[i]))
                cursor[i] += 1
                if cursor[i] <= ranges[i].end:
                    waiting.setdefault(cursor[i] % old_max, []).append(i)
            steps.append(SplitStep(parent, tuple(targets)))
    return steps


def split_reads(steps: Sequence[SplitStep], old_max: int) -> float:
    """Reads per parent of a schedule (1.0: every old block read once)."""
    return len(steps) / max(1, old_max)


def children(parent: pa.RecordBatch, new_max: int, key_groups: Sequence[int]) -> list[pa.RecordBatch]:
    """The rows of ``parent`` in each new key group of ``key_groups`` (``key_hash % new_max``),
    in the parent's order, each in buffers of its own."""
    import pyarrow as pa
    import pyarrow.compute as pc

    groups = pc.remainder(parent.column("key_hash"), pa.scalar(new_max, pa.uint32()))
    if len(key_groups) == 1 and parent.num_rows and \
            pc.all(pc.equal(groups, pa.scalar(key_groups[0], pa.uint32()))).as_py():
        return [parent]
    return [parent.filter(pc.equal(groups, pa.scalar(k, pa.uint32()))) for k in key_groups]
