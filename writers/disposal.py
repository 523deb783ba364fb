"""``dispose``: delete a statekit checkpoint or savepoint directory, and nothing else.

What may be deleted (anything else there makes ``dispose`` refuse, deleting nothing):
    * a complete snapshot (``_metadata`` present): ``_metadata``, the files it names inside
      the directory, and statekit temp files (``.<name>.<32 hex>.tmp``); of the job's
      ``shared/``, see below;
    * an incomplete ``chk-N`` or ``savepoint-*`` (no ``_metadata``): statekit state files
      (``<uid>/<state>/<i>-of-<p>.sks``) and temp files;
    * a staging folder a killed savepoint or command left, ``.<name>.inprogress-<12 hex>``:
      the same, plus its ``_metadata`` if it got that far; refused while anything in it
      changed within :data:`IN_PROGRESS_IDLE_S` seconds (a savepoint may still be writing
      it) unless ``force``.

Native checkpoints (incremental): the files of the job's ``shared/`` the checkpoint names are
reference-counted over the job directory: after the checkpoint's own files, ``dispose`` deletes
the shared files that no other complete ``chk-N`` of the job names, and keeps the rest (listed
as kept). When another checkpoint's ``_metadata`` cannot be read, or a newer ``chk-N`` has
none yet (being taken, or left by a killed job), its references are unknown, so no shared file
is deleted (the plan says why). The runtime disposes its own checkpoints with
``release_shared=False``: its shared-file registry decides (and it knows the references of
checkpoints still in progress).

Running jobs: a ``chk-N`` (complete or not) of a job that runs is refused unless ``force`` —
the job builds its next incremental checkpoint on the files of its latest. A running job holds
the lock file of its job directory (:mod:`statekit.statefmt.job_lock`, local disks); a caller
may know more (``running``: the CLI asks this user's job registry, which also covers object
stores). With ``force`` the checkpoint's own files go and every shared file stays.

Never deleted: anything reached through a symbolic link. A snapshot path that is itself a
link is refused, a link or special file inside the directory counts as a foreign file, and a
shared file reached through a link below the job directory (``shared/`` itself, or a folder in
it, linked elsewhere) makes ``dispose`` refuse before anything is deleted; deletions then open
each directory without following links (:func:`statekit.writers.removal.unlink_beneath`).
Empty directories inside go with the snapshot (each removed with ``rmdir``, never
recursively). ``_metadata`` goes first, so a crash part-way leaves an incomplete snapshot,
never a complete-looking one with files missing. A dry run lists exactly the files a real
run deletes.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from statekit.readers.inventory import (
    IN_PROGRESS_IDLE_S,
    InventoryEntry,
    SnapshotInventory,
    foreign_files_error,
    is_in_progress_dir,
    refuse_linked_path,
    refuse_links_below,
    take_inventory,
)
from statekit.readers.shared_refs import incomplete_checkpoints, shared_files_of, shared_references
from statekit.readers.snapshot import read_metadata
from statekit.statefmt import layout
from statekit.statefmt.errors import BadInputError, NotACheckpointError, PathNotFoundError, StatekitError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.job_lock import running_holder
from statekit.statefmt.json_contract import JsonShape
from statekit.statefmt.metadata import CheckpointMetadata, SnapshotKind
from statekit.writers.removal import delete_file, remove_files

__all__ = ["DisposalPlan", "RunningJobProbe", "dispose_snapshot", "delete_shared_files"]

# (job id, job directory URL) -> who runs that job ("pid 1234 on host"), or None: what the
# caller knows beyond the job's lock file (the CLI asks the job registry).
RunningJobProbe = Callable[[str, str], "str | None"]

# layout.state_file_path: <encoded uid>/<encoded state>/<subtask>-of-<parallelism>.sks
STATE_FILE_PATTERN = re.compile(r"^[^/]+/[^/]+/\d{5,}-of-\d{5,}\.sks$")
# channel_state_path: <encoded uid>/_channel/<subtask>-of-<parallelism>.skc
CHANNEL_FILE_PATTERN = re.compile(r"^[^/]+/_channel/\d{5,}-of-\d{5,}\.skc$")
# native_private_dir: <encoded uid>/_native/<subtask>-of-<parallelism>/<store file>
NATIVE_FILE_PATTERN = re.compile(r"^[^/]+/_native/\d{5,}-of-\d{5,}/[A-Za-z0-9][A-Za-z0-9._-]*$")
# FileIO.write_atomic / open_output on local disks: .<target name>.<uuid4 hex>.tmp beside the target
TEMP_FILE_PATTERN = re.compile(r"^\..+\.[0-9a-f]{32}\.tmp$")


@dataclass(frozen=True)
class DisposalPlan:
    """What ``dispose`` deleted (or, for a dry run, would delete).

    Attributes:
        path: The snapshot directory.
        files: Every file deleted or to delete, sorted; exactly what a real run removes.
        bytes: Their sizes, summed.
        complete: True when the snapshot had a ``_metadata``.
        dry_run: True when nothing was deleted.
        disposed: True when every file and the directory are gone.
        shared_files: The job's shared files deleted (or to delete) with it: named by no other
            complete checkpoint (also in ``files``).
        kept_shared: Shared files it names that other checkpoints still name (kept).
        notes: Why shared files were kept although unreferenced, if so.
    """

    json_shape: ClassVar[JsonShape] = JsonShape(extra=("engine",))

    path: str
    files: list[str]
    bytes: int
    complete: bool
    dry_run: bool
    disposed: bool
    shared_files: list[str] = field(default_factory=list)
    kept_shared: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def engine(self) -> str:
        """``statekit``: the snapshot's engine (``flink`` in the documents of Flink snapshots)."""
        return "statekit"


def dispose_snapshot(
    url: str, *, dry_run: bool = False, force: bool = False, storage_options: dict[str, Any] | None = None,
    release_shared: bool = True, running: RunningJobProbe | None = None,
) -> DisposalPlan:
    """Delete a statekit snapshot directory (see the module docstring for what qualifies).

    Args:
        url: The snapshot directory or its ``_metadata``.
        dry_run: Only report what would be deleted.
        force: Dispose a staging folder even though it changed recently, or a checkpoint of a
            running job (its shared files are then kept: the job owns them).
        storage_options: fsspec options.
        release_shared: A native checkpoint: also delete the job's shared files no other
            complete checkpoint names (False: leave ``shared/`` alone).
        running: Asked whether the job of a ``chk-N`` runs, besides its lock file.

    Raises:
        PathNotFoundError: Nothing at ``url``.
        NotACheckpointError: Not a checkpoint, savepoint or staging folder.
        BadInputError: A symbolic link on the path, a file the snapshot cannot account for, a
            staging folder still changing, or a checkpoint of a running job (without
            ``force``); nothing is deleted.
        MetadataError: A damaged ``_metadata``; nothing is deleted.
        StatekitError: A deletion failed part-way (the message says what is left).
    """
    io, path = FileIO.for_path(url, storage_options)
    if not io.exists(path):
        raise PathNotFoundError("no such file or directory", path=url)
    refuse_linked_path(io, path)
    if not io.isdir(path):
        if posixpath.basename(path) != layout.METADATA_FILE:
            raise NotACheckpointError("is a file, not a checkpoint or savepoint directory", path=url)
        path = posixpath.dirname(path)
        refuse_linked_path(io, path)
    runner = _running_job(io, path, running)
    if runner is not None and not force:
        raise BadInputError(
            f"is a checkpoint of job {posixpath.basename(posixpath.dirname(path))}, which is running ({runner}): "
            "the job builds its next checkpoints on this one's files; stop or cancel the job first, or pass "
            "--force to delete the checkpoint and keep its shared files", path=io.url(path))
    inventory = take_inventory(io, path)
    files = _accounted_files(io, inventory)
    if is_in_progress_dir(posixpath.basename(path)) and not force:
        _refuse_if_busy(io.url(path), inventory)
    release = release_shared and runner is None
    shared = _SharedRelease(io, path) if release and inventory.file(layout.METADATA_FILE) else None
    plan = DisposalPlan(
        path=io.url(path),
        files=sorted(io.url(f.path) for f in files) + (shared.urls() if shared else []),
        bytes=sum(f.size for f in files) + (shared.bytes if shared else 0),
        complete=inventory.file(layout.METADATA_FILE) is not None,
        dry_run=dry_run,
        disposed=False,
        shared_files=shared.urls() if shared else [],
        kept_shared=shared.kept if shared else 0,
        notes=shared.notes if shared else [f"kept its shared files: job {posixpath.basename(posixpath.dirname(path))} "
                                          f"is running ({runner}) and owns them"] if runner else [],
    )
    if dry_run:
        return plan
    _remove(io, inventory, files)
    if shared is not None:
        shared.delete()
    return replace(plan, disposed=True)


def _running_job(io: FileIO, path: str, probe: RunningJobProbe | None) -> str | None:
    """Who runs the job a ``chk-N`` directory belongs to (its lock file, then ``probe``), if anyone."""
    if layout.parse_checkpoint_dir_name(posixpath.basename(path)) is None:
        return None
    job_dir = posixpath.dirname(path)
    holder = running_holder(job_dir) if io.is_local else None
    if holder is None and probe is not None:
        holder = probe(posixpath.basename(job_dir), io.url(job_dir))
    return holder


class _SharedRelease:
    """The shared files a native checkpoint takes with it: those no other complete checkpoint names."""

    def __init__(self, io: FileIO, directory: str) -> None:
        self.io = io
        self.shared_dir = posixpath.join(posixpath.dirname(directory), layout.SHARED_DIR)
        self.delete_paths: list[str] = []
        self.kept = 0
        self.bytes = 0
        self.notes: list[str] = []
        metadata = read_metadata(io, directory)
        named = shared_files_of(metadata) if _shares_files(metadata, directory) else set()
        if not named:
            return
        others = shared_references(io, posixpath.dirname(directory), skip=directory)
        own_id = layout.parse_checkpoint_dir_name(posixpath.basename(directory)) or 0
        newer = [c for c, _ in incomplete_checkpoints(io, posixpath.dirname(directory)) if c > own_id]
        if newer:
            self.kept = len(named)
            self.notes.append(f"kept its {len(named)} shared file(s): the newer chk-{newer[0]} has no _metadata yet "
                              "(being taken, or left by a killed job), so what it references is unknown; dispose "
                              "it first if no job is writing it")
            return
        if others.damaged:
            self.kept = len(named)
            self.notes.append(f"kept its {len(named)} shared file(s): the _metadata of {others.damaged[0]} cannot be "
                              "read, so what it references is unknown")
            return
        for relative in sorted(named):
            if relative in others.refs:
                self.kept += 1
            else:
                full = posixpath.join(self.shared_dir, relative)
                refuse_links_below(io, posixpath.dirname(self.shared_dir), full, "the shared file")
                if io.exists(full):
                    self.delete_paths.append(full)
                    self.bytes += io.size(full)

    def urls(self) -> list[str]:
        return [self.io.url(p) for p in self.delete_paths]

    def delete(self) -> None:
        failed = delete_shared_files(self.io, self.shared_dir, [posixpath.relpath(p, self.shared_dir)
                                                                for p in self.delete_paths])
        if failed:
            where, reason = failed[0]
            raise StatekitError(f"dispose incomplete: the checkpoint is gone, but its shared file {where} could not "
                                f"be deleted: {reason}; delete it by hand (no checkpoint names it)",
                                path=self.io.url(self.shared_dir))


def _shares_files(metadata: CheckpointMetadata, directory: str) -> bool:
    return (metadata.kind is SnapshotKind.CHECKPOINT
            and layout.parse_checkpoint_dir_name(posixpath.basename(directory)) is not None)


def delete_shared_files(io: FileIO, shared_dir: str, relative: list[str]) -> list[tuple[str, str]]:
    """Delete files of a job's ``shared/`` (paths relative to it); then the emptied uid directories.

    Only names of statekit's shared-file layout are deleted. Returns ``(file, reason)`` of
    every deletion that failed (a missing file is not a failure).
    """
    from statekit.statefmt.native_state import SHARED_FILE_PATTERN

    failed: list[tuple[str, str]] = []
    parents: set[str] = set()
    job_dir = posixpath.dirname(shared_dir)
    for path in relative:
        if not SHARED_FILE_PATTERN.match(path):
            failed.append((path, "not a shared file of statekit's layout"))
            continue
        full = posixpath.join(shared_dir, path)
        try:
            delete_file(io, job_dir, full)  # never through a link below the job directory
        except FileNotFoundError:
            pass
        except OSError as exc:
            failed.append((io.url(full), exc.strerror or str(exc)))
            continue
        parents.add(posixpath.dirname(full))
    if io.is_local:
        for parent in sorted(parents, reverse=True):
            try:
                os.rmdir(parent)
            except OSError:
                pass  # not empty: other files of the uid are still referenced
    return failed


def _accounted_files(io: FileIO, inventory: SnapshotInventory) -> list[InventoryEntry]:
    """Every file of the snapshot, or a refusal naming the first one it cannot account for."""
    url = io.url(inventory.root)
    meta = inventory.entry(layout.METADATA_FILE)
    if meta is not None and meta.kind != "file":
        raise BadInputError(f"is a {meta.kind}, not a regular file; refusing to dispose a snapshot whose _metadata "
                            "cannot be read", path=io.url(meta.path))
    if meta is not None:
        md = read_metadata(io, inventory.root)
        paths = [f.path for f in md.files()] + [c.path for c in md.channel_files()] + [f.path for f in md.native_files()]
        named = {p for p in paths if not p.startswith("../")} | {layout.METADATA_FILE}
        foreign = [f for f in inventory.files if f.relative not in named and not _is_temp(f.relative)]
        why = "not named by its _metadata"
    else:
        name = posixpath.basename(inventory.root)
        if not (layout.parse_checkpoint_dir_name(name) is not None or name.startswith(layout.SAVEPOINT_DIR_PREFIX)
                or is_in_progress_dir(name)):
            raise NotACheckpointError("not a checkpoint or savepoint directory (no _metadata)", path=url)
        foreign = [f for f in inventory.files if not (_is_snapshot_file(f.relative) or _is_temp(f.relative))]
        why = "that are not statekit state or temp files, in a snapshot without _metadata"
    foreign = sorted([*foreign, *inventory.odd], key=lambda e: e.relative)
    if foreign:
        raise foreign_files_error(url, foreign, why)
    return list(inventory.files)


def _refuse_if_busy(url: str, inventory: SnapshotInventory) -> None:
    idle = inventory.idle_seconds()
    if idle is not None and idle < IN_PROGRESS_IDLE_S:
        raise BadInputError(
            f"in-progress folder changed {idle:.0f} s ago: a savepoint or command may still be writing it; "
            f"dispose it once it has been idle for {IN_PROGRESS_IDLE_S / 60:.0f} minutes, or pass --force "
            "if nothing is writing it",
            path=url,
        )


def _remove(io: FileIO, inventory: SnapshotInventory, files: list[InventoryEntry]) -> None:
    # _metadata first: a crash part-way leaves an incomplete snapshot, never a complete-looking one.
    ordered = sorted(files, key=lambda f: (f.relative != layout.METADATA_FILE, f.relative))
    removal = remove_files(io, inventory, [f.path for f in ordered], remove_root=True)
    if not removal.failed:
        return
    where, reason = removal.failed[0]
    done = len(removal.deleted)
    if done == 0:
        raise StatekitError(f"dispose failed, nothing deleted: {where}: {reason}", path=io.url(inventory.root))
    raise StatekitError(
        f"dispose incomplete: deleted {done} of {len(files)} file(s), then {where}: {reason}; "
        "what is left has no _metadata and is never restored from: rerun dispose to finish",
        path=io.url(inventory.root),
    )


def _is_snapshot_file(relative: str) -> bool:
    return any(p.match(relative) for p in (STATE_FILE_PATTERN, CHANNEL_FILE_PATTERN, NATIVE_FILE_PATTERN))


def _is_temp(relative: str) -> bool:
    return TEMP_FILE_PATTERN.match(posixpath.basename(relative)) is not None
