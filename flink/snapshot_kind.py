"""Which engine wrote a snapshot: statekit or Apache Flink, told by the magic bytes of its
``_metadata`` (the one place the offline commands decide it; :mod:`statekit.flink.dispatch`
routes on the answer)."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import TYPE_CHECKING

from statekit.statefmt import layout
from statekit.statefmt.errors import MetadataError
from statekit.statefmt.fileio import FileIO

if TYPE_CHECKING:
    pass

__all__ = ["read_head", "flink_snapshot_path", "FLINK_MAGIC"]


FLINK_MAGIC = bytes.fromhex("4960672d")


_STATEKIT_MAGIC = layout.METADATA_MAGIC


def read_head(io: FileIO, path: str, size: int = 8) -> bytes:
    with io.open_input(io.check_inside(path, posixpath.dirname(path))) as stream:
        return bytes(stream.read(size))


def _check_magic(io: FileIO, path: str) -> bool:
    """True for a Flink ``_metadata``, False for a statekit one (any version, maybe truncated).

    Raises:
        MetadataError: Neither magic number, or the file ends inside one; the message names
            the path and the byte offset.
    """
    head = read_head(io, path)
    if head.startswith(FLINK_MAGIC):
        return True
    if head.startswith(_STATEKIT_MAGIC[:-1]):
        return False
    if len(head) < len(_STATEKIT_MAGIC) and (FLINK_MAGIC.startswith(head) or _STATEKIT_MAGIC.startswith(head)):
        raise MetadataError(
            f"truncated _metadata: the file ends at byte offset {len(head)}, inside the magic "
            "number; the snapshot is damaged or was never completed",
            path=io.url(path),
        )
    raise MetadataError(
        f"not a statekit or Apache Flink _metadata file: unknown magic number 0x{head[:4].hex()} "
        "at byte offset 0",
        path=io.url(path),
    )


def flink_snapshot_path(
    url: str, *, allow_job_dir: bool = True, storage_options: Mapping[str, object] | None = None
) -> str | None:
    """The Flink snapshot directory or ``_metadata`` file ``url`` names, or ``None``.

    Args:
        url: A snapshot directory, a ``_metadata`` file or (with ``allow_job_dir``) a job
            directory, as a local path or fsspec URL.
        allow_job_dir: Resolve a job directory to its latest complete ``chk-N``.
        storage_options: fsspec options.

    Returns:
        ``None`` when ``url`` is not a Flink snapshot (the statekit readers then explain why).

    Raises:
        MetadataError: The ``_metadata`` has neither magic number, or is cut inside it.
    """
    io, path = FileIO.for_path(url, None if storage_options is None else dict(storage_options))
    try:
        if not io.exists(path):
            return None
        if not io.isdir(path):
            if posixpath.basename(path) != layout.METADATA_FILE:  # any file name, Flink magic only
                return url if read_head(io, path, 4) == FLINK_MAGIC else None
            return url if _check_magic(io, path) else None
        meta = posixpath.join(path, layout.METADATA_FILE)
        if io.isfile(meta):
            return url if _check_magic(io, meta) else None
        if not allow_job_dir:
            return None
        from statekit.readers.snapshot import latest_complete_checkpoint

        latest = latest_complete_checkpoint(io, path)
        if latest is not None and _check_magic(io, posixpath.join(latest, layout.METADATA_FILE)):
            return io.url(latest)
    except OSError:
        return None  # the statekit reader reports the I/O error with its own message
    return None


