"""Checksums: CRC-32 (zlib) of bytes, written as ``crc32:xxxxxxxx`` in metadata.

:func:`crc32_combine` gives the CRC-32 of ``A + B`` from the CRC-32s of ``A`` and ``B`` and
the length of ``B`` (zlib's ``crc32_combine``; ISA-L's when installed, else the same arithmetic
in Python), so the checksum of a file assembled from blocks of known checksums needs no pass
over the blocks' bytes.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

__all__ = ["crc32", "crc32_combine", "format_checksum", "parse_checksum", "Crc32"]


def _fastest_crc32() -> Callable[[bytes | bytearray | memoryview, int], int]:
    """ISA-L's CRC-32 (the ``isal`` package: the zlib polynomial with carry-less multiplication,
    ~30 GB/s here against zlib's ~6), else zlib's own: the same values either way."""
    try:
        from isal.isal_zlib import crc32 as isal_crc32
    except ImportError:  # a platform without its wheel: zlib, slower only
        return zlib.crc32
    return isal_crc32


_crc32 = _fastest_crc32()


def _native_crc32_combine() -> Callable[[int, int, int], int] | None:
    """ISA-L's ``crc32_combine`` (~1 us; the arithmetic below takes ~35 us in Python), if installed."""
    try:
        from isal.isal_zlib import crc32_combine as isal_combine
    except ImportError:
        return None
    return isal_combine


_combine = _native_crc32_combine()


def crc32(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    return _crc32(data, value) & 0xFFFFFFFF


def format_checksum(value: int) -> str:
    return f"crc32:{value:08x}"


def parse_checksum(text: str) -> int:
    """Parse ``crc32:xxxxxxxx``; raise ValueError for anything else."""
    algorithm, _, digits = text.partition(":")
    if algorithm != "crc32" or len(digits) != 8:
        raise ValueError(f"unknown checksum {text!r}")
    return int(digits, 16)


# CRC-32 arithmetic in GF(2) modulo the (reflected) zlib polynomial, as zlib 1.2.12 does it.
_POLY = 0xEDB88320
_ONE = 1 << 31  # the polynomial 1 (x^0), reflected


def _multmodp(a: int, b: int) -> int:
    """``a * b`` modulo the CRC polynomial."""
    m, product = _ONE, 0
    while True:
        if a & m:
            product ^= b
            if not a & (m - 1):
                return product
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1


def _byte_shifts() -> list[int]:
    """``shifts[k]`` = x^(8 * 2^k) mod p: the shift by ``2^k`` bytes, k < 64."""
    x = 1 << 30  # the polynomial x, reflected
    x2 = _multmodp(x, x)
    x4 = _multmodp(x2, x2)
    shifts = [_multmodp(x4, x4)]
    for _ in range(1, 64):
        shifts.append(_multmodp(shifts[-1], shifts[-1]))
    return shifts


_SHIFTS: list[int] = []
# (j, b) -> x^(8 * b * 256^j) mod p, the shift by ``b * 256^j`` bytes, computed when first needed
# (a process combines blocks of few distinct lengths: all 2,048 would cost more than they save)
_BYTE_POWERS: dict[tuple[int, int], int] = {}


def _byte_power(j: int, byte: int) -> int:
    power = _BYTE_POWERS.get((j, byte))
    if power is None:
        if not _SHIFTS:
            _SHIFTS.extend(_byte_shifts())
        power, k = _ONE, 0
        while byte >> k:
            if byte >> k & 1:
                power = _multmodp(_SHIFTS[8 * j + k], power)
            k += 1
        _BYTE_POWERS[(j, byte)] = power
    return power


def _shift(length: int) -> int:
    """x^(8 * length) mod p: what appending ``length`` bytes does to a CRC register."""
    power, j = _ONE, 0
    while length:
        byte = length & 0xFF
        if byte:
            power = _multmodp(_byte_power(j, byte), power)
        length >>= 8
        j += 1
    return power


def crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    """The CRC-32 of ``A + B`` given ``crc32(A)``, ``crc32(B)`` and ``len(B)``."""
    if length2 < 0:
        raise ValueError("negative length")
    if _combine is not None and length2 < 1 << 63:
        return _combine(crc1 & 0xFFFFFFFF, crc2 & 0xFFFFFFFF, length2) & 0xFFFFFFFF
    return (_multmodp(_shift(length2), crc1 & 0xFFFFFFFF) ^ crc2) & 0xFFFFFFFF


class Crc32:
    """A running CRC-32 over a stream of chunks."""

    __slots__ = ("size", "value")

    def __init__(self) -> None:
        self.value = 0
        self.size = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self.value = _crc32(data, self.value)
        self.size += len(data)

    def combine(self, checksum: int, length: int) -> None:
        """Continue over ``length`` bytes whose CRC-32 is ``checksum`` without reading them."""
        self.value = crc32_combine(self.value, checksum, length)
        self.size += length

    @property
    def checksum(self) -> str:
        return format_checksum(self.value & 0xFFFFFFFF)
