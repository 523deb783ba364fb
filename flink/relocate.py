"""Rewrite the absolute file paths of a Flink ``_metadata`` file (checkpoint relocation).

Only the paths of absolute file handles (type byte 2) change; every other byte — relative
handles, inlined byte-stream handles and their names, the properties trailer — is copied
unchanged. Each rewritten path keeps Java's ``writeUTF`` framing (2-byte length, modified
UTF-8), so the result parses with Flink and with :func:`read_flink_metadata`.
"""

from __future__ import annotations

from statekit.flink.cursor import encode_modified_utf8
from statekit.flink.metadata import iter_file_handles, read_flink_metadata
from statekit.statefmt.errors import BadInputError

__all__ = ["relocate_flink_metadata", "absolute_paths"]

MAX_UTF_BYTES = 0xFFFF


def absolute_paths(data: bytes, *, source: str = "<metadata>") -> list[str]:
    """The distinct absolute file paths in a ``_metadata`` file, in file order."""
    seen: dict[str, None] = {}
    for handle in iter_file_handles(read_flink_metadata(data, source=source)):
        if handle.path is not None:
            seen.setdefault(handle.path, None)
    return list(seen)


def relocate_flink_metadata(
    data: bytes, old_prefix: str, new_prefix: str, *, source: str = "<metadata>"
) -> bytes:
    """Replace ``old_prefix`` by ``new_prefix`` at the start of every absolute file path.

    Args:
        data: The bytes of a ``_metadata`` file.
        old_prefix: A literal prefix as Flink wrote it, e.g. ``file:/tmp/old/checkpoints``.
        new_prefix: Its replacement, e.g. ``s3://bucket/checkpoints``.
        source: Where ``data`` came from, for messages.

    Returns:
        The rewritten file; ``data`` unchanged when no path starts with ``old_prefix``.

    Raises:
        MetadataError: ``data`` is not a readable Flink metadata file.
        BadInputError: An empty ``old_prefix`` or a rewritten path longer than 65535 bytes.
    """
    if not old_prefix:
        raise BadInputError("the old path prefix must not be empty")
    metadata = read_flink_metadata(data, source=source)
    out = bytearray()
    copied = 0
    for handle in iter_file_handles(metadata):
        path, at = handle.path, handle.path_offset
        if path is None or at is None or not path.startswith(old_prefix):
            continue
        encoded = encode_modified_utf8(new_prefix + path[len(old_prefix):])
        if len(encoded) > MAX_UTF_BYTES:
            raise BadInputError(
                f"relocated path is {len(encoded)} bytes, Flink allows {MAX_UTF_BYTES}", path=source
            )
        old_length = int.from_bytes(data[at : at + 2], "big")
        out += data[copied:at]
        out += len(encoded).to_bytes(2, "big") + encoded
        copied = at + 2 + old_length
    out += data[copied:]
    return bytes(out)
