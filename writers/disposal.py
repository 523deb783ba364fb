"""``dispose``: delete a statekit checkpoint or savepoint directory, and nothing else.

What may be deleted (anything else there makes ``dispose`` refuse, deleting nothing):
    * a complete snapshot (``_metadata`` present): ``_metadata``, the files it names inside
      the directory, and statekit temp files (``.<name>.<32 hex>.tmp``); files the job's
      ``shared/`` holds for native checkpoints are never deleted here;
    * an incomplete ``chk-N`` or ``savepoint-*`` (no ``_metadata``): statekit state files
      (``<uid>/<state>/<i>-of-<p>.sks``) and temp files;
    * a staging folder a killed savepoint or command left, ``.<name>.inprogress-<12 hex>``:
      the same, plus its ``_metadata`` if it got that far; refused while anything in it
      changed within :data:`IN_PROGRESS_IDLE_S` seconds (a savepoint may still be writing
      it) unless ``force``.

Never deleted: anything reached through a symbolic link. A snapshot path that is itself a
link is refused, and a link or special file inside the directory counts as a foreign file.
Empty directories inside go with the snapshot (each removed with ``rmdir``, never
recursively). ``_metadata`` goes first, so a crash part-way leaves an incomplete snapshot,
never a complete-looking one with files missing. A dry run lists exactly the files a real
run deletes.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import asdict, dataclass, replace
from typing import Any

from statekit.readers.inventory import (
    IN_PROGRESS_IDLE_S,
    InventoryEntry,
    SnapshotInventory,
    foreign_files_error,
    is_in_progress_dir,
    refuse_linked_path,
    remove_files,
    take_inventory,
)
from statekit.readers.snapshot import read_metadata
from statekit.statefmt import layout
from statekit.statefmt.errors import BadInputError, NotACheckpointError, PathNotFoundError, StatekitError
from statekit.statefmt.fileio import FileIO

__all__ = ["DisposalPlan", "dispose_snapshot"]

# layout.state_file_path: <encoded uid>/<encoded state>/<subtask>-of-<parallelism>.sks
STATE_FILE_PATTERN = re.compile(r"^[^/]+/[^/]+/\d{5,}-of-\d{5,}\.sks$")
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
    """

    path: str
    files: list[str]
    bytes: int
    complete: bool
    dry_run: bool
    disposed: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def dispose_snapshot(
    url: str, *, dry_run: bool = False, force: bool = False, storage_options: dict[str, Any] | None = None
) -> DisposalPlan:
    """Delete a statekit snapshot directory (see the module docstring for what qualifies).

    Args:
        url: The snapshot directory or its ``_metadata``.
        dry_run: Only report what would be deleted.
        force: Dispose a staging folder even though it changed recently.
        storage_options: fsspec options.

    Raises:
        PathNotFoundError: Nothing at ``url``.
        NotACheckpointError: Not a checkpoint, savepoint or staging folder.
        BadInputError: A symbolic link on the path, a file the snapshot cannot account for, or a
            staging folder still changing; nothing is deleted.
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
    inventory = take_inventory(io, path)
    files = _accounted_files(io, inventory)
    if is_in_progress_dir(posixpath.basename(path)) and not force:
        _refuse_if_busy(io.url(path), inventory)
    plan = DisposalPlan(
        path=io.url(path),
        files=sorted(io.url(f.path) for f in files),
        bytes=sum(f.size for f in files),
        complete=inventory.file(layout.METADATA_FILE) is not None,
        dry_run=dry_run,
        disposed=False,
    )
    if dry_run:
        return plan
    _remove(io, inventory, files)
    return replace(plan, disposed=True)


def _accounted_files(io: FileIO, inventory: SnapshotInventory) -> list[InventoryEntry]:
    """Every file of the snapshot, or a refusal naming the first one it cannot account for."""
    url = io.url(inventory.root)
    meta = inventory.entry(layout.METADATA_FILE)
    if meta is not None and meta.kind != "file":
        raise BadInputError(f"is a {meta.kind}, not a regular file; refusing to dispose a snapshot whose _metadata "
                            "cannot be read", path=io.url(meta.path))
    if meta is not None:
        md = read_metadata(io, inventory.root)
        named = {f.path for f in md.files() if not f.path.startswith("../")} | {layout.METADATA_FILE}
        foreign = [f for f in inventory.files if f.relative not in named and not _is_temp(f.relative)]
        why = "not named by its _metadata"
    else:
        name = posixpath.basename(inventory.root)
        if not (layout.parse_checkpoint_dir_name(name) is not None or name.startswith(layout.SAVEPOINT_DIR_PREFIX)
                or is_in_progress_dir(name)):
            raise NotACheckpointError("not a checkpoint or savepoint directory (no _metadata)", path=url)
        foreign = [f for f in inventory.files if not (STATE_FILE_PATTERN.match(f.relative) or _is_temp(f.relative))]
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


def _is_temp(relative: str) -> bool:
    return TEMP_FILE_PATTERN.match(posixpath.basename(relative)) is not None
