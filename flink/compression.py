"""Snapshot compression (``execution.checkpointing.snapshot-compression: true``): Snappy framing.

Flink's ``SnappyStreamCompressionDecorator`` wraps a state stream in xerial's
``SnappyFramedOutputStream``, which writes the Snappy *framing format*: a stream identifier
chunk (``ff 06 00 00 "sNaPpY"``), then chunks of a type byte (0 compressed, 1 stored), a
3-byte little-endian length and a masked CRC-32C of the uncompressed bytes. Where a new
compressed stream starts:

* keyed state, full snapshots (canonical savepoints, full RocksDB checkpoints): at each
  key group's offset, one stream holding the key group (state ids, entries, end mark);
* keyed state, heap checkpoints: after each key group's id (an uncompressed int), one
  stream per state of the key group;
* the keyed backend meta information before them is never compressed (it records the flag).

Decoding and encoding go through ``cramjam`` (Rust's ``snap``, which checks every chunk's
CRC); damage is an error naming the stream and key group.
"""

from __future__ import annotations

from statekit.statefmt.errors import CorruptStateError

__all__ = ["decompress_framed", "compress_framed", "STREAM_IDENTIFIER"]

STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"


def decompress_framed(data: bytes, *, source: str, what: str) -> bytes:
    """The bytes of one or more concatenated Snappy framed streams.

    Raises:
        CorruptStateError: Not a framed stream, a bad chunk or a checksum mismatch (names
            ``source`` and ``what``, e.g. the key group).
    """
    import cramjam

    if not data.startswith(STREAM_IDENTIFIER):
        raise CorruptStateError(f"{what}: compressed state does not start with the Snappy stream identifier "
                                f"(found {data[:10].hex() or 'nothing'})", path=source)
    try:
        return bytes(cramjam.snappy.decompress(data))
    except cramjam.DecompressionError as exc:
        raise CorruptStateError(f"{what}: damaged Snappy stream: {exc}", path=source) from None


def compress_framed(data: bytes) -> bytes:
    """``data`` as one Snappy framed stream (what xerial's ``SnappyFramedInputStream`` reads)."""
    import cramjam

    return bytes(cramjam.snappy.compress(data))
