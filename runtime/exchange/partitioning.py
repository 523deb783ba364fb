"""How the records of an edge are distributed over the consumer's subtasks.
"""

from __future__ import annotations

from enum import Enum

__all__ = [
    "Partitioning",
]


class Partitioning(str, Enum):
    """How records of an edge are distributed over the consumer's subtasks."""

    FORWARD = "forward"
    REBALANCE = "rebalance"
    HASH = "hash"
    BROADCAST = "broadcast"


