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

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mmh3

from statekit.statefmt.errors import BadInputError
from statekit.statefmt.numpy_support import numpy_or_none, pooled_empty

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "subtask_skew",
    "LOWER_BOUND_MAX_PARALLELISM",
    "UPPER_BOUND_MAX_PARALLELISM",
    "KeyGroupRange",
    "key_hash",
    "key_hash_column",
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

    def json_view(self) -> tuple[int, int]:
        """``[start, end]`` in JSON documents (statekit.statefmt.json_contract)."""
        return (self.start, self.end)


def key_hash(key_bytes: bytes) -> int:
    """murmur3_32 (seed 0) of the serialized key, as an unsigned 32-bit int."""
    return mmh3.hash(key_bytes, 0, signed=False)


def key_hash_column(keys: pa.Array) -> pa.Array:
    """``key_hash`` of every serialized key of a binary column, as a uint32 column.

    Vectorized murmur3_32 (seed 0) in Arrow compute: the 4-byte words of all keys at once,
    one kernel pass per word position (and per tail length), so its cost does not grow
    with a Python loop over the keys. Equal to :func:`key_hash` key by key.
    """
    import pyarrow as pa

    if hasattr(keys, "combine_chunks"):
        keys = keys.combine_chunks()
    if keys.null_count or sys.byteorder != "little":
        return pa.array([None if k is None else mmh3.hash(k, 0, signed=False) for k in keys.to_pylist()], pa.uint32())
    return _Murmur3(keys).hashes()


class _Murmur3:
    """murmur3_32 over a binary column (the words of each key are read by reinterpreting
    the data buffer of a ``binary_slice``, which is exactly ``rows * width`` bytes)."""

    C1, C2 = 0xCC9E2D51, 0x1B873593

    def __init__(self, keys: pa.Array) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        self.keys = keys
        self.n = len(keys)
        self.lengths = pc.binary_length(keys).cast(pa.uint32())

    @staticmethod
    def _u32(value: int) -> Any:
        import pyarrow as pa

        return pa.scalar(value, pa.uint32())

    def _rotl(self, x: Any, r: int) -> Any:
        import pyarrow.compute as pc

        return pc.bit_wise_or(pc.shift_left(x, self._u32(r)), pc.shift_right(x, self._u32(32 - r)))

    def _scramble(self, k: Any) -> Any:
        import pyarrow.compute as pc

        return pc.multiply(self._rotl(pc.multiply(k, self._u32(self.C1)), 15), self._u32(self.C2))

    @staticmethod
    def _reinterpret(sliced: Any, rows: int, width: int) -> Any:
        """The bytes of ``sliced`` (each row exactly ``width`` bytes) as one unsigned int per row."""
        import pyarrow as pa

        kind = pa.uint32() if width == 4 else pa.uint8()
        values = pa.Array.from_buffers(kind, rows, [None, sliced.buffers()[2]], offset=0)
        return values if width == 4 else values.cast(pa.uint32())

    def _rows(self, mask: Any, count: int) -> tuple[Any, Any]:
        import pyarrow.compute as pc

        if count == self.n:
            return self.keys, None
        return pc.filter(self.keys, mask), mask

    def hashes(self) -> pa.Array:
        import pyarrow.compute as pc

        bounds = pc.min_max(self.lengths).as_py()
        if self.n and bounds["min"] == bounds["max"] >= 8:
            hashed = _numpy_fixed_width(self.keys, bounds["min"])
            return hashed if hashed is not None else self._fixed_width(bounds["min"])
        h = pc.multiply(self.lengths, self._u32(0))  # seed 0
        blocks = pc.shift_right(self.lengths, self._u32(2))
        most = pc.max(blocks).as_py() or 0
        for j in range(most):
            mask = pc.greater(blocks, self._u32(j))
            keys, picked = self._rows(mask, self.n if j < (pc.min(blocks).as_py() or 0) else pc.sum(mask).as_py())
            words = self._reinterpret(pc.binary_slice(keys, 4 * j, 4 * j + 4), len(keys), 4)
            part = h if picked is None else pc.filter(h, picked)
            part = pc.bit_wise_xor(part, self._scramble(words))
            part = pc.add(pc.multiply(self._rotl(part, 13), self._u32(5)), self._u32(0xE6546B64))
            h = part if picked is None else pc.replace_with_mask(h, picked, part)
        h = self._tail(h)
        h = pc.bit_wise_xor(h, self.lengths)
        return self._fmix(h)

    def _fixed_width(self, width: int) -> Any:
        """Every key ``width`` (>= 8) bytes long: the words and the tail are read from 8-byte
        lanes (one ``binary_slice`` per 8 bytes, the last one overlapping its neighbour),
        not one slice per word."""
        import pyarrow as pa
        import pyarrow.compute as pc

        starts = list(range(0, width - 7, 8)) + ([width - 8] if width % 8 else [])
        lanes = {s: self._lane(s) for s in starts}

        def little_endian(position: int, count: int) -> Any:
            """Bytes ``position .. position + count`` (count <= 4) of every key, as uint32."""
            start = max(s for s in starts if s <= position and position + count <= s + 8)
            value = lanes[start]
            if position > start:
                value = pc.shift_right(value, pa.scalar(8 * (position - start), pa.uint64()))
            if count < 4:
                value = pc.bit_wise_and(value, pa.scalar((1 << 8 * count) - 1, pa.uint64()))
            return value.cast(pa.uint32(), safe=False)  # the low 32 bits

        h = None
        for j in range(width // 4):
            k = self._scramble(little_endian(4 * j, 4))
            h = k if h is None else pc.bit_wise_xor(h, k)  # seed 0: the first word meets h = 0
            h = pc.add(pc.multiply(self._rotl(h, 13), self._u32(5)), self._u32(0xE6546B64))
        tail = width & 3
        if tail:
            h = pc.bit_wise_xor(h, self._scramble(little_endian(width - tail, tail)))
        return self._fmix(pc.bit_wise_xor(h, self._u32(width)))

    def _lane(self, start: int) -> Any:
        """Bytes ``start .. start + 8`` of every key as one little-endian uint64 per row."""
        import pyarrow as pa
        import pyarrow.compute as pc

        sliced = pc.binary_slice(self.keys, start, start + 8)
        return pa.Array.from_buffers(pa.uint64(), self.n, [None, sliced.buffers()[2]], offset=0)

    def _tail(self, h: Any) -> Any:
        import pyarrow.compute as pc

        tails = pc.bit_wise_and(self.lengths, self._u32(3))
        for t in (1, 2, 3):
            mask = pc.equal(tails, self._u32(t))
            count = pc.sum(mask).as_py() or 0
            if not count:
                continue
            keys, picked = self._rows(mask, count)
            k = None
            for i in range(t):
                stop = -t + i + 1
                byte = self._reinterpret(pc.binary_slice(keys, -t + i, stop if stop else None), count, 1)
                byte = pc.shift_left(byte, self._u32(8 * i)) if i else byte
                k = byte if k is None else pc.bit_wise_xor(k, byte)
            part = h if picked is None else pc.filter(h, picked)
            part = pc.bit_wise_xor(part, self._scramble(k))
            h = part if picked is None else pc.replace_with_mask(h, picked, part)
        return h

    def _fmix(self, h: Any) -> Any:
        import pyarrow.compute as pc

        h = pc.bit_wise_xor(h, pc.shift_right(h, self._u32(16)))
        h = pc.multiply(h, self._u32(0x85EBCA6B))
        h = pc.bit_wise_xor(h, pc.shift_right(h, self._u32(13)))
        h = pc.multiply(h, self._u32(0xC2B2AE35))
        return pc.bit_wise_xor(h, pc.shift_right(h, self._u32(16)))


def _numpy_fixed_width(keys: pa.Array, width: int) -> pa.Array | None:
    """murmur3_32 (seed 0) of null-free binary ``keys`` all ``width`` (>= 4) bytes long, with
    NumPy (None without it): each 4-byte word of every key read in place as a strided
    little-endian uint32 view of the data buffer (the tail: the key's last word shifted down
    to its tail bytes, as murmur3 reads them), then every step of murmur3 over all rows at
    once (:func:`_murmur3_words`)."""
    import pyarrow as pa

    np = numpy_or_none()
    if np is None:
        return None
    n = len(keys)
    start = int(np.frombuffer(keys.buffers()[1], np.int32, 1, 4 * keys.offset)[0])
    data = keys.buffers()[2]  # every key is ``width`` long: the keys are contiguous from ``start``

    def word(position: int) -> Any:
        """Bytes ``position .. position + 4`` of every key (a strided, unaligned uint32 view)."""
        return np.ndarray((n,), "<u4", data, start + position, (width,))

    hashes, k, t = (pooled_empty(np, n, np.uint32) for _ in range(3))
    _murmur3_words(np, word, width, hashes, k, t)
    return pa.array(hashes, pa.uint32())


def _murmur3_words(np: Any, word: Any, width: int, h: Any, k: Any, t: Any) -> None:
    """murmur3_32 (seed 0) into ``h`` of keys of ``width`` bytes whose 4-byte words
    ``word(position)`` gives as uint32 arrays: every step over all keys at once, in place,
    in uint32 arithmetic (mod 2**32); ``k`` and ``t`` are scratch arrays of h's length."""
    c1, c2 = np.uint32(_Murmur3.C1), np.uint32(_Murmur3.C2)

    def rotl(x: Any, r: int) -> None:  # x = rotl32(x, r), in place
        np.right_shift(x, np.uint32(32 - r), out=t)
        np.left_shift(x, np.uint32(r), out=x)
        np.bitwise_or(x, t, out=x)

    def scrambled(words: Any, shift: int = 0) -> Any:  # of ``words >> shift``
        if shift:
            np.right_shift(words, np.uint32(shift), out=k)
            np.multiply(k, c1, out=k)
        else:
            np.multiply(words, c1, out=k)
        rotl(k, 15)
        np.multiply(k, c2, out=k)
        return k

    h.fill(0)
    for j in range(width // 4):
        np.bitwise_xor(h, scrambled(word(4 * j)), out=h)
        rotl(h, 13)
        np.multiply(h, np.uint32(5), out=h)
        np.add(h, np.uint32(0xE6546B64), out=h)
    tail = width & 3
    if tail:  # the last word of the key, shifted down to its last ``tail`` bytes (width >= 4)
        np.bitwise_xor(h, scrambled(word(width - 4), 8 * (4 - tail)), out=h)
    np.bitwise_xor(h, np.uint32(width & 0xFFFFFFFF), out=h)
    for shift, factor in ((16, 0x85EBCA6B), (13, 0xC2B2AE35), (16, None)):  # fmix32
        np.right_shift(h, np.uint32(shift), out=t)
        np.bitwise_xor(h, t, out=h)
        if factor is not None:
            np.multiply(h, np.uint32(factor), out=h)


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


def subtask_skew(sizes: Sequence[int]) -> float:
    """The largest subtask's bytes over the mean (1.0: even; no subtasks or no bytes: 1.0)."""
    mean = sum(sizes) / len(sizes) if sizes else 0
    return max(sizes) / mean if mean else 1.0
