"""Safely delete a Flink checkpoint or savepoint.

Rules:
    * Only an opened snapshot (a directory whose ``_metadata`` parses) can be disposed, and
      only when every file inside it is accounted for: ``_metadata``, the files it
      references inside the directory, and what Flink itself writes there (its
      ``FsCheckpointMetadataOutputStream`` stages ``_metadata`` through a recoverable writer
      as ``._metadata.inprogress.<uuid>``). Any other file, a symbolic link or a special file
      inside, or a snapshot directory that is itself a symbolic link, makes
      :func:`plan_dispose` refuse (``BadInputError``): nothing is deleted.
    * Its files go ``_metadata`` first, so that an interrupted dispose leaves an
      *incomplete* checkpoint rather than a damaged complete one; then the directories left
      empty, each with ``rmdir`` (never a recursive delete).
    * A file in the job's ``shared/`` directory is deleted only when no other retained
      checkpoint of the job (any other ``chk-N/_metadata`` beside it) references it. When a
      sibling's ``_metadata`` cannot be read, no shared file is deleted.
    * Files outside the snapshot directory and the job's ``shared/`` (external) are never
      deleted, nor are files inside the snapshot that another checkpoint references.
    * A shared file to delete that is reached through a symbolic link below the job directory
      (``shared/`` linked to a user's folder) makes :func:`plan_dispose` refuse; deletions open
      every directory below the job directory without following links.
    * A dry run reports exactly the files a real run deletes.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from statekit.flink.layout import CHECKPOINT_DIR_PATTERN, METADATA_FILE
from statekit.flink.storage import FlinkFileRef, FlinkSnapshot, load_snapshot, referenced_files
from statekit.readers.inventory import (
    InventoryEntry,
    SnapshotInventory,
    foreign_files_error,
    refuse_linked_path,
    refuse_links_below,
    take_inventory,
)
from statekit.statefmt.errors import StatekitError
from statekit.statefmt.fileio import FileIO
from statekit.writers.removal import remove_files

__all__ = ["FlinkDisposePlan", "FlinkDisposeResult", "plan_dispose", "execute_dispose", "FLINK_TEMP_FILE_PATTERN"]

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# What Flink leaves of an unfinished _metadata beside it: LocalRecoverableWriter and
# HadoopRecoverableWriter stage "._metadata.inprogress.<uuid>"; the S3/OSS recoverable
# multipart upload keeps parts as "__metadata_tmp_<uuid>". State files are written under
# their final UUID names (FsCheckpointStreamFactory), so they need no pattern.
FLINK_TEMP_FILE_PATTERN = re.compile(rf"^(\._metadata\.inprogress\.|__metadata_tmp_){_UUID}$")


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


def _exclusive_files(
    snapshot: FlinkSnapshot, inventory: SnapshotInventory, refs: list[FlinkFileRef], others: set[tuple[str, str]]
) -> list[InventoryEntry]:
    """Every file inside the snapshot directory, or a refusal naming one it cannot account for.

    Accounted for: ``_metadata``, the files it references, Flink's temp files, and files
    another checkpoint of the job references (those are kept, never deleted).
    """
    referenced = {ref.resolved.path for ref in refs if ref.scope == "exclusive" and ref.resolved is not None}
    referenced.add(posixpath.join(inventory.root, METADATA_FILE))
    protocol = snapshot.directory.protocol
    foreign = [f for f in inventory.files
               if f.path not in referenced and (protocol, f.path) not in others
               and not FLINK_TEMP_FILE_PATTERN.match(f.relative)]
    foreign = sorted([*foreign, *inventory.odd], key=lambda e: e.relative)
    if foreign:
        raise foreign_files_error(snapshot.path, foreign, "not referenced by its _metadata")
    return list(inventory.files)


def plan_dispose(snapshot: FlinkSnapshot) -> FlinkDisposePlan:
    """Decide what disposing an opened snapshot deletes, without deleting anything.

    Raises:
        BadInputError: The snapshot directory is a symbolic link, or the
            directory holds a file (or link, or special file) it cannot account for.
    """
    io, directory = snapshot.directory.io, snapshot.directory.path
    refuse_linked_path(io, directory)
    refs = referenced_files(snapshot)
    others, warnings = _sibling_references(snapshot)
    exclusive = _exclusive_files(snapshot, take_inventory(io, directory), refs, set(others))
    keep_all_shared = bool(warnings)
    meta = posixpath.join(directory, METADATA_FILE)
    kept = [f for f in exclusive if (snapshot.directory.protocol, f.path) in others]
    # _metadata first: an interrupted dispose leaves an incomplete checkpoint.
    deleted = sorted((f for f in exclusive if f not in kept), key=lambda f: (f.path != meta, f.path))
    delete_shared: list[str] = []
    keep_shared: dict[str, tuple[str, ...]] = {}
    keep_external: list[str] = []
    missing: list[str] = []
    for ref in refs:
        if ref.scope == "exclusive" or ref.resolved is None:
            if ref.resolved is None:
                keep_external.append(ref.location)
            elif not io.isfile(ref.resolved.path):
                missing.append(ref.url)
            continue
        location = ref.resolved
        if not location.io.isfile(location.path):
            missing.append(ref.url)
        elif ref.scope != "shared":
            keep_external.append(ref.url)
        elif keep_all_shared or ref.key in others:
            keep_shared[location.path] = tuple(others.get((location.protocol, location.path), []))
        elif location.path not in delete_shared:
            assert snapshot.job_dir is not None  # a shared file belongs to a chk-N of a job directory
            refuse_links_below(location.io, snapshot.job_dir.path, location.path, "the shared file")
            delete_shared.append(location.path)
    freed = sum(f.size for f in deleted) + sum(_size(snapshot, p) for p in delete_shared)
    return FlinkDisposePlan(
        snapshot=snapshot.path,
        checkpoint_id=snapshot.checkpoint_id,
        kind=snapshot.metadata.kind,
        delete_files=tuple(io.url(f.path) for f in deleted),
        delete_shared=tuple(io.url(p) for p in delete_shared),
        keep_shared=tuple((io.url(p), refs) for p, refs in sorted(keep_shared.items())),
        keep_exclusive=tuple(io.url(f.path) for f in kept),
        keep_external=tuple(dict.fromkeys(keep_external)),
        missing=tuple(dict.fromkeys(missing)),
        bytes_to_free=freed,
        remove_directory=not kept,
        warnings=tuple(warnings),
    )


def _size(snapshot: FlinkSnapshot, path: str) -> int:
    try:
        return int(snapshot.directory.io.size(path))
    except OSError:
        return 0


def execute_dispose(
    snapshot: FlinkSnapshot, plan: FlinkDisposePlan, *, dry_run: bool
) -> FlinkDisposeResult:
    """Carry out ``plan`` (or only report it when ``dry_run``).

    Deletes exactly ``plan.delete_files`` then ``plan.delete_shared``, stopping at the first
    failure; then, when the plan says so, the directories left empty (with ``rmdir``: a file
    that appeared since the plan is kept and reported in ``failed``).
    """
    if dry_run:
        return FlinkDisposeResult(plan, True, ())
    io, directory = snapshot.directory.io, snapshot.directory.path
    files = [FileIO.for_path(url, snapshot.storage_options)[1] for url in plan.delete_files + plan.delete_shared]
    # shared files are deleted from the job directory down, never through a link on the way
    beneath = snapshot.job_dir.path if plan.delete_shared and snapshot.job_dir is not None else directory
    removal = remove_files(io, take_inventory(io, directory), files, remove_root=plan.remove_directory,
                           beneath=beneath)
    deleted = removal.deleted + ((snapshot.path,) if removal.removed_root else ())
    return FlinkDisposeResult(plan, False, deleted, removal.failed)
