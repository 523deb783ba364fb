"""What a task acknowledges a checkpoint with: handles to the files it wrote, never its state.

Every value here is plain data (paths, sizes, checksums, descriptors), so an acknowledgement can
cross a process boundary as it is; the coordinator builds ``_metadata`` from the handles alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

__all__ = [
    "SubtaskStats",
]


@dataclass(frozen=True)
class SubtaskStats:
    """What a task reports with its acknowledgement.

    Attributes:
        unaligned: The task snapshotted unaligned (at the first barrier).
        alignment_ms: From the first barrier to the snapshot (aligned: the alignment).
    """

    unaligned: bool = False
    alignment_ms: int = 0


