"""Checksums: CRC-32 (zlib) of bytes, written as ``crc32:xxxxxxxx`` in metadata."""

from __future__ import annotations

import zlib

__all__ = ["crc32", "format_checksum", "parse_checksum", "Crc32"]


def crc32(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    return zlib.crc32(data, value) & 0xFFFFFFFF


def format_checksum(value: int) -> str:
    return f"crc32:{value:08x}"


def parse_checksum(text: str) -> int:
    """Parse ``crc32:xxxxxxxx``; raise ValueError for anything else."""
    algorithm, _, digits = text.partition(":")
    if algorithm != "crc32" or len(digits) != 8:
        raise ValueError(f"unknown checksum {text!r}")
    return int(digits, 16)


class Crc32:
    """A running CRC-32 over a stream of chunks."""

    __slots__ = ("value", "size")

    def __init__(self) -> None:
        self.value = 0
        self.size = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self.value = zlib.crc32(data, self.value)
        self.size += len(data)

    @property
    def checksum(self) -> str:
        return format_checksum(self.value & 0xFFFFFFFF)
