"""List the checkpoints and savepoints under a Flink checkpoint root or savepoints folder.

Recognised layouts (empty ``shared/`` and ``taskowned/`` folders may be missing):
    * ``<root>/<job-id>/chk-N`` — a checkpoint root;
    * ``<job-dir>/chk-N`` — one job's directory;
    * ``<root>/savepoint-*`` (or any directory holding a Flink ``_metadata``) — savepoints;
    * a snapshot directory itself.

A snapshot is complete when its ``_metadata`` exists and parses; ``chk-N`` directories
without one are listed as incomplete (a checkpoint in progress or abandoned). statekit's own
staging folders (``.<name>.inprogress-<hex>``) are not Flink's: the statekit listing shows them.
"""

from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass
from typing import Any

from statekit.flink.layout import (
    CHECKPOINT_DIR_PATTERN,
    JOB_ID_PATTERN,
    METADATA_FILE,
    SAVEPOINT_DIR_PREFIX,
    SHARED_DIR,
    TASKOWNED_DIR,
)
from statekit.flink.metadata import read_flink_metadata
from statekit.readers.inventory import is_in_progress_dir
from statekit.statefmt.errors import PathNotFoundError, StatekitError
from statekit.statefmt.fileio import FileInfo, FileIO
from statekit.statefmt.layout import MAX_METADATA_BYTES

__all__ = ["FlinkCheckpointEntry", "list_checkpoints"]


@dataclass(frozen=True)
class FlinkCheckpointEntry:
    """One checkpoint or savepoint directory.

    Attributes:
        path: The snapshot directory.
        job_id: The job id from the directory layout, when known.
        checkpoint_id: From ``_metadata``, else from a ``chk-N`` name, else ``None``.
        kind: ``checkpoint``, ``savepoint`` or ``unknown``.
        complete: True when ``_metadata`` exists and parses.
        format: ``canonical`` or ``native`` for complete snapshots.
        size: Bytes of the files inside the directory (exclusive state only).
        modified: Modification time (epoch seconds) of ``_metadata`` or the directory.
        age_seconds: Seconds since ``modified``.
        error: Why a present ``_metadata`` could not be read.
    """

    path: str
    job_id: str | None
    checkpoint_id: int | None
    kind: str
    complete: bool
    format: str | None
    size: int
    modified: float | None
    age_seconds: float | None
    error: str | None = None


def _dir_kind(name: str) -> str:
    if CHECKPOINT_DIR_PATTERN.match(name):
        return "checkpoint"
    if name.startswith(SAVEPOINT_DIR_PREFIX):
        return "savepoint"
    return "unknown"


def _entry(io: FileIO, info: FileInfo, job_id: str | None, now: float) -> FlinkCheckpointEntry:
    path = info.path.rstrip("/")
    files = io.walk_files(path)
    meta = next((f for f in files if f.path.rstrip("/") == posixpath.join(path, METADATA_FILE)), None)
    match = CHECKPOINT_DIR_PATTERN.match(info.name)
    checkpoint_id = int(match.group(1)) if match else None
    kind, fmt, error, complete = _dir_kind(info.name), None, None, False
    if meta is not None:
        try:
            metadata = read_flink_metadata(io.read_bytes(meta.path, limit=MAX_METADATA_BYTES), source=io.url(meta.path))
            checkpoint_id, complete, fmt = metadata.checkpoint_id, True, metadata.format
            kind = metadata.kind or kind
        except StatekitError as exc:
            error = str(exc)
    modified = (meta.mtime if meta is not None else None) or info.mtime
    return FlinkCheckpointEntry(
        path=io.url(path),
        job_id=job_id,
        checkpoint_id=checkpoint_id,
        kind=kind,
        complete=complete,
        format=fmt,
        size=sum(f.size for f in files),
        modified=modified,
        age_seconds=max(0.0, now - modified) if modified is not None else None,
        error=error,
    )


def _is_snapshot_dir(io: FileIO, info: FileInfo) -> bool:
    if CHECKPOINT_DIR_PATTERN.match(info.name) or info.name.startswith(SAVEPOINT_DIR_PREFIX):
        return True
    return bool(io.isfile(posixpath.join(info.path, METADATA_FILE)))


def _scan(io: FileIO, directory: str, job_id: str | None, now: float,
          depth: int) -> list[FlinkCheckpointEntry]:
    entries: list[FlinkCheckpointEntry] = []
    for info in io.list_dir(directory):
        if not info.is_dir or info.name in (SHARED_DIR, TASKOWNED_DIR) or is_in_progress_dir(info.name):
            continue
        if _is_snapshot_dir(io, info):
            entries.append(_entry(io, info, job_id, now))
        elif depth > 0 and JOB_ID_PATTERN.match(info.name):
            entries += _scan(io, info.path.rstrip("/"), info.name, now, depth - 1)
    return entries


def list_checkpoints(
    root: str, *, storage_options: dict[str, Any] | None = None, now: float | None = None
) -> list[FlinkCheckpointEntry]:
    """Every checkpoint and savepoint under ``root``, ordered by job, id and path.

    Raises:
        PathNotFoundError: ``root`` does not exist or is not a directory.
    """
    io, path = FileIO.for_path(root, storage_options)
    if not io.isdir(path):
        raise PathNotFoundError("no such directory", path=root)
    now = time.time() if now is None else now
    base = posixpath.basename(path)
    if io.isfile(posixpath.join(path, METADATA_FILE)):
        parent_name = posixpath.basename(posixpath.dirname(path))
        job = parent_name if JOB_ID_PATTERN.match(parent_name) else None
        entries = [_entry(io, io.info(path), job, now)]
    else:
        entries = _scan(io, path, base if JOB_ID_PATTERN.match(base) else None, now, depth=1)
    return sorted(entries, key=lambda e: (e.job_id or "", e.checkpoint_id or -1, e.path))
