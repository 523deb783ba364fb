"""A bounds-checked big-endian byte cursor: Java ``DataInputStream`` reads without a JVM.

Invariant: every read either returns a value or raises the cursor's error class (by default
:class:`MetadataError`) naming the byte offset and the source path. No read lets an
``IndexError``, ``struct.error`` or ``UnicodeDecodeError`` escape.
"""

from __future__ import annotations

import struct

from statekit.statefmt.errors import MetadataError, StatekitError

__all__ = ["ByteCursor", "decode_modified_utf8", "encode_modified_utf8"]

_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class ByteCursor:
    """Reads Java ``DataOutputStream`` values from ``data``, starting at ``pos``."""

    __slots__ = ("data", "error_class", "pos", "source")

    def __init__(
        self,
        data: bytes,
        *,
        source: str,
        pos: int = 0,
        error: type[StatekitError] = MetadataError,
    ) -> None:
        self.data = data
        self.pos = pos
        self.source = source
        self.error_class = error

    @property
    def remaining(self) -> int:
        """Bytes left after the current position."""
        return len(self.data) - self.pos

    def error(self, message: str, *, at: int | None = None) -> StatekitError:
        """The error to raise for ``message`` at byte offset ``at`` (default: here).

        Callers write ``raise cur.error(...)`` so that type checkers see the branch end.
        """
        offset = self.pos if at is None else at
        return self.error_class(f"{message} at byte offset {offset}", path=self.source)

    def _need(self, size: int, what: str) -> int:
        start = self.pos
        if size < 0 or start + size > len(self.data):
            raise self.error(
                f"truncated: {what} needs {size} bytes, {max(0, len(self.data) - start)} left",
                at=start,
            )
        self.pos = start + size
        return start

    def take(self, size: int, what: str) -> bytes:
        """The next ``size`` raw bytes."""
        start = self._need(size, what)
        return self.data[start : start + size]

    def skip(self, size: int, what: str) -> None:
        """Move past ``size`` bytes."""
        self._need(size, what)

    def u8(self, what: str) -> int:
        """An unsigned byte (Java ``read()`` / ``readUnsignedByte``)."""
        start = self._need(1, what)
        return self.data[start]

    def i8(self, what: str) -> int:
        """A signed byte (Java ``readByte``)."""
        value = self.u8(what)
        return value - 256 if value > 127 else value

    def boolean(self, what: str) -> bool:
        """A Java ``readBoolean``: any non-zero byte is true."""
        return self.u8(what) != 0

    def i16(self, what: str) -> int:
        """A signed 16-bit int (Java ``readShort``)."""
        start = self._need(2, what)
        return int(_I16.unpack_from(self.data, start)[0])

    def u16(self, what: str) -> int:
        """An unsigned 16-bit int (Java ``readUnsignedShort``)."""
        start = self._need(2, what)
        return int(_U16.unpack_from(self.data, start)[0])

    def i32(self, what: str) -> int:
        """A signed 32-bit int (Java ``readInt``)."""
        start = self._need(4, what)
        return int(_I32.unpack_from(self.data, start)[0])

    def i64(self, what: str) -> int:
        """A signed 64-bit int (Java ``readLong``)."""
        start = self._need(8, what)
        return int(_I64.unpack_from(self.data, start)[0])

    def peek_i32(self) -> int | None:
        """The next int without moving, or ``None`` when fewer than 4 bytes are left."""
        if self.pos + 4 > len(self.data):
            return None
        return int(_I32.unpack_from(self.data, self.pos)[0])

    def i64_array(self, count: int, what: str) -> tuple[int, ...]:
        """``count`` consecutive longs."""
        if count < 0:
            raise self.error(f"negative count {count} for {what}")
        start = self._need(8 * count, what)
        return struct.unpack_from(f">{count}q", self.data, start)

    def count(self, what: str, *, min_item_size: int = 1) -> int:
        """A non-negative int count that the remaining bytes can hold."""
        at = self.pos
        value = self.i32(what)
        if value < 0:
            raise self.error(f"invalid {what}: {value}", at=at)
        if value * min_item_size > self.remaining:
            raise self.error(
                f"truncated: {what} is {value} but only {self.remaining} bytes are left", at=at
            )
        return value

    def utf(self, what: str) -> str:
        """A Java ``readUTF`` string: unsigned 16-bit length, then modified UTF-8."""
        at = self.pos
        length = self.u16(what)
        raw = self.take(length, what)
        text = decode_modified_utf8(raw)
        if text is None:
            raise self.error(f"malformed modified UTF-8 in {what}", at=at)
        return text


def decode_modified_utf8(raw: bytes) -> str | None:
    """Decode Java's modified UTF-8, or ``None`` when the bytes are malformed."""
    if raw.isascii():
        return raw.decode("ascii")
    units: list[int] = []
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c < 0x80:
            units.append(c)
            i += 1
        elif c >> 5 == 0b110:
            if i + 1 >= n or raw[i + 1] >> 6 != 0b10:
                return None
            units.append(((c & 0x1F) << 6) | (raw[i + 1] & 0x3F))
            i += 2
        elif c >> 4 == 0b1110:
            if i + 2 >= n or raw[i + 1] >> 6 != 0b10 or raw[i + 2] >> 6 != 0b10:
                return None
            units.append(((c & 0x0F) << 12) | ((raw[i + 1] & 0x3F) << 6) | (raw[i + 2] & 0x3F))
            i += 3
        else:
            return None
    packed = struct.pack(f">{len(units)}H", *units)
    return packed.decode("utf-16-be", errors="surrogatepass")


def encode_modified_utf8(text: str) -> bytes:
    """Encode ``text`` as Java's modified UTF-8 (without the length prefix)."""
    utf16 = text.encode("utf-16-be", errors="surrogatepass")
    out = bytearray()
    for (unit,) in struct.iter_unpack(">H", utf16):
        if 0 < unit < 0x80:
            out.append(unit)
        elif unit < 0x800:
            out += bytes((0xC0 | (unit >> 6), 0x80 | (unit & 0x3F)))
        else:
            out += bytes((0xE0 | (unit >> 12), 0x80 | ((unit >> 6) & 0x3F), 0x80 | (unit & 0x3F)))
    return bytes(out)
