"""Key groups: the unit of keyed-state redistribution (Flink's ``KeyGroupRangeAssignment``).

Invariants:
    * ``assign_to_key_group(key_bytes, M)`` depends only on the serialized key bytes, so the
      key group of an entry can be recomputed offline from the bytes alone (which is what
      makes a change of max parallelism possible).
    * For every ``M >= p >= 1`` the ranges of the ``p`` subtasks partition ``[0, M - 1]``
      into contiguous, ordered, non-empty ranges, and
      ``compute_operator_index_for_key_group(M, p, kg)`` names the subtask whose range holds
      ``kg``.
"""

from __future__ import annotations

from dataclasses import dataclass

import mmh3

from statekit.statefmt.errors import BadInputError

__all__ = [
    "LOWER_BOUND_MAX_PARALLELISM",
    "UPPER_BOUND_MAX_PARALLELISM",
    "KeyGroupRange",
    "key_hash",
    "assign_to_key_group",
    "assign_key_to_parallel_operator",
    "compute_key_group_range_for_operator_index",
    "compute_operator_index_for_key_group",
    "compute_default_max_parallelism",
    "check_parallelism",
]

LOWER_BOUND_MAX_PARALLELISM = 128
UPPER_BOUND_MAX_PARALLELISM = 32768


@dataclass(frozen=True, order=True)
class KeyGroupRange:
    """An inclusive range of key groups ``[start, end]``; empty when ``end < start``."""

    start: int
    end: int

    def __len__(self) -> int:
        return max(0, self.end - self.start + 1)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(range(self.start, self.end + 1))

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, int) and self.start <= key_group <= self.end

    def intersection(self, other: KeyGroupRange) -> KeyGroupRange:
        return KeyGroupRange(max(self.start, other.start), min(self.end, other.end))

    def to_list(self) -> list[int]:
        return [self.start, self.end]


def key_hash(key_bytes: bytes) -> int:
    """murmur3_32 (seed 0) of the serialized key, as an unsigned 32-bit int."""
    return mmh3.hash(key_bytes, 0, signed=False)


def assign_to_key_group(key_bytes: bytes, max_parallelism: int) -> int:
    """The key group of a serialized key: ``murmur3_32(key_bytes) % max_parallelism``."""
    return mmh3.hash(key_bytes, 0, signed=False) % max_parallelism


def compute_operator_index_for_key_group(
    max_parallelism: int, parallelism: int, key_group: int
) -> int:
    """The subtask index that owns ``key_group``: ``kg * parallelism // max_parallelism``."""
    return key_group * parallelism // max_parallelism


def assign_key_to_parallel_operator(
    key_bytes: bytes, max_parallelism: int, parallelism: int
) -> int:
    """The subtask index that owns a serialized key."""
    return compute_operator_index_for_key_group(
        max_parallelism, parallelism, assign_to_key_group(key_bytes, max_parallelism)
    )


def compute_key_group_range_for_operator_index(
    max_parallelism: int, parallelism: int, operator_index: int
) -> KeyGroupRange:
    """The inclusive key-group range of subtask ``operator_index``."""
    check_parallelism(parallelism, max_parallelism)
    if not 0 <= operator_index < parallelism:
        raise BadInputError(
            f"operator index {operator_index} is outside [0, {parallelism - 1}]"
        )
    start = (operator_index * max_parallelism + parallelism - 1) // parallelism
    end = ((operator_index + 1) * max_parallelism - 1) // parallelism
    return KeyGroupRange(start, end)


def compute_default_max_parallelism(parallelism: int) -> int:
    """``parallelism * 1.5`` rounded up to a power of two, clamped to [128, 32768]."""
    if parallelism < 1:
        raise BadInputError(f"parallelism must be at least 1, got {parallelism}")
    target = parallelism + parallelism // 2
    power = 1 << max(0, (target - 1).bit_length())
    return min(max(power, LOWER_BOUND_MAX_PARALLELISM), UPPER_BOUND_MAX_PARALLELISM)


def check_parallelism(parallelism: int, max_parallelism: int) -> None:
    """Raise :class:`BadInputError` unless ``1 <= parallelism <= max_parallelism <= 32768``."""
    if not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise BadInputError(
            f"max parallelism must be in [1, {UPPER_BOUND_MAX_PARALLELISM}], got {max_parallelism}"
        )
    if parallelism < 1:
        raise BadInputError(f"parallelism must be at least 1, got {parallelism}")
    if parallelism > max_parallelism:
        raise BadInputError(
            f"parallelism {parallelism} is larger than max parallelism {max_parallelism}"
        )
