"""Find and open a snapshot: a savepoint or checkpoint directory, its ``_metadata``, or a
job checkpoint directory (meaning its latest complete checkpoint).

Invariant: a directory without a valid ``_metadata`` is never read as state.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from statekit.statefmt import layout
from statekit.statefmt.errors import (
    IncompleteCheckpointError,
    MetadataError,
    NotACheckpointError,
    PathNotFoundError,
    UnsafePathError,
)
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.metadata import CheckpointMetadata, parse_metadata
from statekit.statefmt.paths import SHARED_PREFIX

__all__ = ["Snapshot", "open_snapshot", "locate_snapshot_dir", "is_statekit_metadata", "is_flink_metadata_bytes"]

FLINK_MAGIC = b"\x49\x60\x67\x2d"


@dataclass(frozen=True)
class Snapshot:
    """An opened snapshot: where it is and its parsed metadata."""

    io: FileIO
    directory: str
    metadata: CheckpointMetadata

    @property
    def url(self) -> str:
        return self.io.url(self.directory)

    def file_path_unchecked(self, relative: str) -> str:
        """Where ``relative`` points, for messages only: never open what this returns."""
        return posixpath.normpath(posixpath.join(self.directory, relative))

    def file_path(self, relative: str) -> str:
        """The path of a file ``_metadata`` names, checked to stay where it may be.

        A file lies inside the snapshot directory once symlinks are resolved; only a ``chk-N``
        of a native incremental checkpoint may name ``../shared/...`` (its job's ``shared/``).

        Raises:
            UnsafePathError: the path (or a symlink on it) leads elsewhere.
        """
        path = self.file_path_unchecked(relative)
        root = self.directory
        if relative.startswith(SHARED_PREFIX):
            if layout.parse_checkpoint_dir_name(posixpath.basename(self.directory)) is None:
                raise UnsafePathError(
                    f"{relative!r} names a job's shared/ directory, but this is not a chk-N "
                    "checkpoint directory (savepoints are self-contained)",
                    path=self.url,
                )
            root = posixpath.join(posixpath.dirname(self.directory), layout.SHARED_DIR)
        return self.io.check_inside(path, root)


def is_statekit_metadata(head: bytes) -> bool:
    return head.startswith(layout.METADATA_MAGIC)


def is_flink_metadata_bytes(head: bytes) -> bool:
    return head.startswith(FLINK_MAGIC)


def locate_snapshot_dir(io: FileIO, path: str, *, allow_job_dir: bool = True) -> str:
    """The snapshot directory that ``path`` names, or a typed error saying why there is none."""
    url = io.url(path)
    if not io.exists(path):
        raise PathNotFoundError("no such file or directory", path=url)
    if not io.isdir(path):
        if posixpath.basename(path) == layout.METADATA_FILE:
            return posixpath.dirname(path)
        raise NotACheckpointError(
            "is a file, not a checkpoint or savepoint directory (nor its _metadata)", path=url
        )
    metadata = posixpath.join(path, layout.METADATA_FILE)
    if io.isfile(metadata):
        return path
    if io.exists(metadata):
        raise NotACheckpointError("_metadata is not a regular file (a directory, FIFO or device)", path=io.url(metadata))
    name = posixpath.basename(path)
    if layout.parse_checkpoint_dir_name(name) is not None or name.startswith(layout.SAVEPOINT_DIR_PREFIX):
        raise IncompleteCheckpointError(
            "incomplete checkpoint: no _metadata (it was never completed; it holds no usable state)",
            path=url,
        )
    if allow_job_dir:
        latest = latest_complete_checkpoint(io, path)
        if latest is not None:
            return latest
    raise NotACheckpointError(
        "not a checkpoint or savepoint directory (no _metadata, no complete chk-N inside)", path=url
    )


def latest_complete_checkpoint(io: FileIO, job_dir: str) -> str | None:
    """The complete chk-N with the highest N directly under ``job_dir``, if any."""
    best: tuple[int, str] | None = None
    for entry in io.list_dir(job_dir):
        checkpoint_id = layout.parse_checkpoint_dir_name(entry.name)
        if (entry.is_dir and checkpoint_id is not None and (best is None or checkpoint_id > best[0])
                and io.isfile(posixpath.join(entry.path, layout.METADATA_FILE))):
            best = (checkpoint_id, entry.path)
    return best[1] if best else None


def read_metadata(io: FileIO, directory: str) -> CheckpointMetadata:
    path = io.check_inside(posixpath.join(directory, layout.METADATA_FILE), directory)
    data = io.read_bytes(path, limit=layout.MAX_METADATA_BYTES)
    if is_flink_metadata_bytes(data[:4]):
        raise MetadataError(
            "this is an Apache Flink _metadata file, which this command does not read (statekit reads Apache "
            f"Flink snapshots with {', '.join(layout.FLINK_COMMANDS)}: docs/FLINK.md)",
            path=io.url(path),
        )
    return parse_metadata(data, source=io.url(path))


def open_snapshot(
    url: str, *, storage_options: dict[str, Any] | None = None, allow_job_dir: bool = True
) -> Snapshot:
    """Open the snapshot ``url`` names (savepoint/checkpoint dir, its _metadata, or a job dir)."""
    io, path = FileIO.for_path(url, storage_options)
    directory = locate_snapshot_dir(io, path, allow_job_dir=allow_job_dir)
    return Snapshot(io=io, directory=directory, metadata=read_metadata(io, directory))
