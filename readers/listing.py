"""``checkpoints list``: every snapshot below a directory, complete or not.

Recognises a checkpoint root (``<root>/<job-id>/chk-N``), a job directory (``chk-N``
inside), a savepoint directory (``savepoint-*`` inside) or a single snapshot. Reads only
``_metadata`` files and directory listings (no state, no pyarrow).

A savepoint's hidden staging folder (``.savepoint-*.inprogress-<hex>``, left behind when the
process writing it was killed) is listed as ``incomplete`` whatever it holds: it never
became a savepoint. Its age is the time since anything in it last changed.
"""

from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from statekit.readers.inventory import IN_PROGRESS_IDLE_S, is_in_progress_savepoint, take_inventory
from statekit.readers.snapshot import is_flink_metadata_bytes
from statekit.statefmt import layout
from statekit.statefmt.errors import NotACheckpointError, PathNotFoundError, StatekitError
from statekit.statefmt.fileio import FileInfo, FileIO
from statekit.statefmt.json_contract import JsonShape
from statekit.statefmt.metadata import parse_metadata

__all__ = ["CheckpointListing", "CheckpointList", "list_checkpoints"]


@dataclass(frozen=True)
class CheckpointListing:
    json_shape: ClassVar[JsonShape] = JsonShape(extra=("engine", "modified"))

    path: str
    job_id: str
    checkpoint_id: int | None
    status: str  # complete | incomplete | damaged | flink
    kind: str  # checkpoint | savepoint | unknown
    format: str
    size: int
    created_at_ms: int | None
    age_s: float | None
    problem: str = ""

    @property
    def engine(self) -> str:
        """``statekit``: the snapshot's engine (``flink`` in the documents of Flink snapshots)."""
        return "statekit"

    @property
    def modified(self) -> float | None:
        """``None``: statekit records ``created_at_ms`` (a Flink snapshot's row has its mtime here)."""
        return None


@dataclass(frozen=True)
class CheckpointList:
    json_shape: ClassVar[JsonShape] = JsonShape(rename={"listings": "snapshots"})

    path: str
    listings: list[CheckpointListing]


def list_checkpoints(url: str, storage_options: dict[str, Any] | None = None) -> CheckpointList:
    io, root = FileIO.for_path(url, storage_options)
    if not io.exists(root):
        raise PathNotFoundError("no such directory", path=url)
    if not io.isdir(root):
        raise NotACheckpointError("is a file; give a checkpoint or savepoint directory", path=url)
    now = time.time()
    candidates = _snapshot_dirs(io, root)
    if not candidates:
        raise NotACheckpointError(
            "no checkpoints or savepoints here (expected chk-N, savepoint-* or a _metadata file)", path=url
        )
    listings = [_describe(io, info, job_id, now) for info, job_id in candidates]
    listings.sort(key=lambda c: (c.job_id, c.kind, c.checkpoint_id or -1, c.path))
    return CheckpointList(io.url(root), listings)


def _snapshot_dirs(io: FileIO, root: str) -> list[tuple[FileInfo, str]]:
    if io.isfile(posixpath.join(root, layout.METADATA_FILE)) or is_in_progress_savepoint(posixpath.basename(root)):
        return [(io.info(root), "")]
    found: list[tuple[FileInfo, str]] = []
    children = [c for c in io.list_dir(root) if c.is_dir]
    for child in children:  # a folder holding a _metadata is a snapshot whatever its name
        if _is_snapshot_name(child.name) or io.isfile(posixpath.join(child.path, layout.METADATA_FILE)):
            found.append((child, posixpath.basename(root) if layout.parse_checkpoint_dir_name(child.name) is not None else ""))
    if found:
        return found
    for job in children:
        for child in io.list_dir(job.path):
            if child.is_dir and _is_snapshot_name(child.name):
                found.append((child, job.name if layout.parse_checkpoint_dir_name(child.name) is not None else ""))
    return found


def _is_snapshot_name(name: str) -> bool:
    return (layout.parse_checkpoint_dir_name(name) is not None or name.startswith(layout.SAVEPOINT_DIR_PREFIX)
            or is_in_progress_savepoint(name))


def _describe(io: FileIO, info: FileInfo, job_id: str, now: float) -> CheckpointListing:
    if is_in_progress_savepoint(info.name):
        return _describe_in_progress(io, info, now)
    checkpoint_id = layout.parse_checkpoint_dir_name(info.name)
    kind = "checkpoint" if checkpoint_id is not None else "savepoint" if info.name.startswith(layout.SAVEPOINT_DIR_PREFIX) else "unknown"
    size = io.du(info.path)
    metadata_path = posixpath.join(info.path, layout.METADATA_FILE)
    def unread(status: str, problem: str, fmt: str = "", age: float | None = None) -> CheckpointListing:
        return CheckpointListing(path=io.url(info.path), job_id=job_id, checkpoint_id=checkpoint_id, status=status,
                                 kind=kind, format=fmt, size=size, created_at_ms=None, age_s=age, problem=problem)

    if not io.isfile(metadata_path):
        return unread("incomplete", "no _metadata", age=now - info.mtime if info.mtime else None)
    try:
        data = io.read_bytes(io.check_inside(metadata_path, info.path), limit=layout.MAX_METADATA_BYTES)
        if is_flink_metadata_bytes(data[:4]):
            return unread("flink", "Apache Flink snapshot", fmt="flink")
        md = parse_metadata(data, source=io.url(metadata_path))
    except StatekitError as exc:
        return unread("damaged", str(exc))
    return CheckpointListing(
        path=io.url(info.path),
        job_id=md.job_id,
        checkpoint_id=md.checkpoint_id,
        status="complete",
        kind=md.kind.value,
        format=md.format.value,
        size=size,
        created_at_ms=md.created_at_ms,
        age_s=max(0.0, now - md.created_at_ms / 1000),
    )


def _describe_in_progress(io: FileIO, info: FileInfo, now: float) -> CheckpointListing:
    inventory = take_inventory(io, info.path)
    idle = inventory.idle_seconds(now)
    # the short texts fit the table's status column; `statekit dispose` explains the rest
    if idle is not None and idle < IN_PROGRESS_IDLE_S:
        problem = "in-progress savepoint (may still be written)"
    else:
        problem = "abandoned in-progress savepoint"
    return CheckpointListing(path=io.url(info.path), job_id="", checkpoint_id=None, status="incomplete",
                             kind="savepoint", format="", size=sum(f.size for f in inventory.files),
                             created_at_ms=None, age_s=idle, problem=problem)
