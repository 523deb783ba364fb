"""Safely delete a Flink checkpoint or savepoint.

Rules:
    * Only an opened snapshot (a directory whose ``_metadata`` parses) can be disposed.
    * Its exclusive directory goes, ``_metadata`` first, so that an interrupted dispose leaves
      an *incomplete* checkpoint rather than a damaged complete one.
    * A file in the job's ``shared/`` directory is deleted only when no other retained
      checkpoint of the job (any other ``chk-N/_metadata`` beside it) references it. When a
      sibling's ``_metadata`` cannot be read, no shared file is deleted.
    * Files outside the snapshot directory and the job's ``shared/`` (external) are never
      deleted, nor are files inside the snapshot that another checkpoint references.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from statekit.readers.flink.layout import CHECKPOINT_DIR_PATTERN, METADATA_FILE
from statekit.readers.flink.storage import FlinkSnapshot, load_snapshot, referenced_files
from statekit.statefmt.errors import StatekitError
from statekit.statefmt.fileio import FileIO

__all__ = ["FlinkDisposePlan", "FlinkDisposeResult", "plan_dispose", "execute_dispose"]


@dataclass(frozen=True)
class FlinkDisposePlan:
    """What disposing a snapshot would delete and keep.

    Attributes:
        snapshot: The snapshot directory.
        checkpoint_id: Its checkpoint id.
        kind: ``checkpoint``, ``savepoint`` or ``None`` when not recorded.
        delete_files: Exclusive files to delete, ``_metadata`` first.
        delete_shared: Shared files no other retained checkpoint references.
        keep_shared: Shared files kept, with the checkpoints that still reference them.
        keep_exclusive: Files inside the snapshot that another checkpoint references.
        keep_external: Referenced files outside the snapshot and ``shared/``.
        missing: Referenced files that do not exist (nothing to delete).
        bytes_to_free: Bytes of all files to delete.
        remove_directory: True when the directory itself goes too.
        warnings: Why something was kept conservatively.
    """

    snapshot: str
    checkpoint_id: int
    kind: str | None
    delete_files: tuple[str, ...]
    delete_shared: tuple[str, ...]
    keep_shared: tuple[tuple[str, tuple[str, ...]], ...]
    keep_exclusive: tuple[str, ...]
    keep_external: tuple[str, ...]
    missing: tuple[str, ...]
    bytes_to_free: int
    remove_directory: bool
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class FlinkDisposeResult:
    """The outcome of :func:`execute_dispose`.

    Attributes:
        plan: The plan that was followed.
        dry_run: True when nothing was deleted.
        deleted: Files (and the directory) deleted, in order.
        failed: ``(path, reason)`` for deletions that failed.
    """

    plan: FlinkDisposePlan
    dry_run: bool
    deleted: tuple[str, ...]
    failed: tuple[tuple[str, str], ...] = ()


def _sibling_references(
    snapshot: FlinkSnapshot,
) -> tuple[dict[tuple[str, str], list[str]], list[str]]:
    """Files referenced by the other checkpoints of the job, and warnings."""
    job = snapshot.job_dir
    refs: dict[tuple[str, str], list[str]] = {}
    warnings: list[str] = []
    if job is None:
        return refs, warnings
    own = snapshot.directory.path.rstrip("/")
    for info in job.io.list_dir(job.path):
        if not info.is_dir or not CHECKPOINT_DIR_PATTERN.match(info.name):
            continue
        path = info.path.rstrip("/")
        if path == own or not job.io.isfile(posixpath.join(path, METADATA_FILE)):
            continue
        url = job.io.url(path)
        try:
            sibling = load_snapshot(url, storage_options=snapshot.storage_options)
        except StatekitError as exc:
            warnings.append(f"cannot read {url}: {exc}; keeping every shared file")
            continue
        for ref in referenced_files(sibling):
            if ref.key is not None:
                refs.setdefault(ref.key, []).append(url)
    return refs, warnings


def _size(snapshot: FlinkSnapshot, path: str) -> int:
    try:
        return int(snapshot.directory.io.size(path))
    except OSError:
        return 0


def plan_dispose(snapshot: FlinkSnapshot) -> FlinkDisposePlan:
    """Decide what disposing an opened snapshot deletes, without deleting anything."""
    io, directory = snapshot.directory.io, snapshot.directory.path
    others, warnings = _sibling_references(snapshot)
    keep_all_shared = bool(warnings)
    exclusive = sorted(f.path for f in io.walk_files(directory))
    meta = posixpath.join(directory, METADATA_FILE)
    kept_exclusive = [p for p in exclusive if (snapshot.directory.protocol, p) in others]
    delete_files = [meta] + [p for p in exclusive if p != meta and p not in kept_exclusive]
    delete_shared: list[str] = []
    keep_shared: dict[str, tuple[str, ...]] = {}
    keep_external: list[str] = []
    missing: list[str] = []
    for ref in referenced_files(snapshot):
        if ref.scope == "exclusive" or ref.resolved is None:
            if ref.resolved is None:
                keep_external.append(ref.location)
            continue
        location = ref.resolved
        if not location.io.isfile(location.path):
            missing.append(ref.url)
        elif ref.scope != "shared":
            keep_external.append(ref.url)
        elif keep_all_shared or ref.key in others:
            keep_shared[location.path] = tuple(others.get((location.protocol, location.path), []))
        elif location.path not in delete_shared:
            delete_shared.append(location.path)
    freed = sum(_size(snapshot, p) for p in delete_files + delete_shared)
    return FlinkDisposePlan(
        snapshot=snapshot.path,
        checkpoint_id=snapshot.checkpoint_id,
        kind=snapshot.metadata.kind,
        delete_files=tuple(io.url(p) for p in delete_files),
        delete_shared=tuple(io.url(p) for p in delete_shared),
        keep_shared=tuple((io.url(p), refs) for p, refs in sorted(keep_shared.items())),
        keep_exclusive=tuple(io.url(p) for p in kept_exclusive),
        keep_external=tuple(dict.fromkeys(keep_external)),
        missing=tuple(dict.fromkeys(missing)),
        bytes_to_free=freed,
        remove_directory=not kept_exclusive,
        warnings=tuple(warnings),
    )


def execute_dispose(
    snapshot: FlinkSnapshot, plan: FlinkDisposePlan, *, dry_run: bool
) -> FlinkDisposeResult:
    """Carry out ``plan`` (or only report it when ``dry_run``)."""
    if dry_run:
        return FlinkDisposeResult(plan, True, ())
    io, directory = snapshot.directory.io, snapshot.directory.path
    deleted: list[str] = []
    failed: list[tuple[str, str]] = []
    for url in plan.delete_files + plan.delete_shared:
        _, path = FileIO.for_path(url, snapshot.storage_options)
        try:
            io.rm_file(path)
            deleted.append(url)
        except OSError as exc:
            failed.append((url, str(exc)))
    if plan.remove_directory and not failed:
        try:
            if io.exists(directory):
                io.rm(directory, recursive=True)
            deleted.append(snapshot.path)
        except OSError as exc:
            failed.append((snapshot.path, str(exc)))
    return FlinkDisposeResult(plan, False, tuple(deleted), tuple(failed))
