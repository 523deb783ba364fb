"""What a snapshot directory holds, entry by entry: the ground ``dispose`` stands on.

``dispose`` deletes only files it can account for; this module lists what is there without
following or opening anything (:mod:`statekit.writers.removal` deletes).

Invariants:
    * A snapshot directory or ``_metadata`` that is itself a symbolic link is refused before
      anything is listed (:func:`refuse_linked_path`): deleting through a link removes the
      link and the target's files in an order nobody planned.
    * Local directories are walked with ``lstat`` only: a symbolic link (to a file or a
      directory) and a special file (FIFO, socket, device) are recorded in
      :attr:`SnapshotInventory.odd`, never followed, never opened.
    * Object stores have no links or directories of their own: their listing comes from
      fsspec ``find``.

Also what statekit's staging folders are (``.<name>.inprogress-<12 hex>``, beside the output
they become; the name is :data:`statekit.statefmt.layout.STAGING_DIR_PATTERN`).
"""

from __future__ import annotations

import os
import posixpath
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass

from statekit.statefmt.errors import BadInputError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.layout import STAGING_DIR_PATTERN

__all__ = [
    "IN_PROGRESS_IDLE_S",
    "InventoryEntry",
    "SnapshotInventory",
    "is_in_progress_dir",
    "is_in_progress_savepoint",
    "refuse_linked_path",
    "refuse_links_below",
    "take_inventory",
    "foreign_files_error",
]

# A staging folder changed more recently than this may still be written by a running job or
# command (the runtime aborts a savepoint after its checkpoint timeout, 10 minutes by default).
IN_PROGRESS_IDLE_S = 600.0


def is_in_progress_dir(name: str) -> bool:
    """True for a statekit staging folder name, ``.<name>.inprogress-<12 hex>``."""
    return STAGING_DIR_PATTERN.match(name) is not None


def is_in_progress_savepoint(name: str) -> bool:
    """True for the staging folder of a savepoint, ``.savepoint-*.inprogress-<12 hex>``."""
    match = STAGING_DIR_PATTERN.match(name)
    return match is not None and match.group("name").startswith("savepoint-")


@dataclass(frozen=True)
class InventoryEntry:
    """One entry below the inventoried directory.

    Attributes:
        relative: Its path relative to the directory, ``/``-separated.
        path: Its path inside the filesystem.
        kind: ``file``, ``directory``, ``symbolic link``, ``FIFO``, ``socket``, ``device``.
        size: Bytes (regular files only; 0 otherwise).
        mtime: Modification time (epoch seconds) of the entry itself, when known.
    """

    relative: str
    path: str
    kind: str
    size: int
    mtime: float | None


@dataclass(frozen=True)
class SnapshotInventory:
    """Everything below a directory, by kind.

    Attributes:
        root: The directory (filesystem path).
        root_mtime: Its own modification time, when known.
        files: Regular files, sorted by relative path.
        dirs: Directories below the root (object stores: none), sorted.
        odd: Symbolic links and special files, sorted: never followed, never opened.
    """

    root: str
    root_mtime: float | None
    files: tuple[InventoryEntry, ...]
    dirs: tuple[InventoryEntry, ...]
    odd: tuple[InventoryEntry, ...]

    def file(self, relative: str) -> InventoryEntry | None:
        """The regular file at ``relative``, or ``None`` (absent, or not a regular file)."""
        return next((f for f in self.files if f.relative == relative), None)

    def entry(self, relative: str) -> InventoryEntry | None:
        """Whatever is at ``relative`` (file, directory, link, special file), or ``None``."""
        return next((e for e in (*self.files, *self.dirs, *self.odd) if e.relative == relative), None)

    def idle_seconds(self, now: float | None = None) -> float | None:
        """Seconds since anything here last changed (the root, a directory, a file, a link)."""
        times = [e.mtime for e in (*self.files, *self.dirs, *self.odd) if e.mtime is not None]
        if self.root_mtime is not None:
            times.append(self.root_mtime)
        if not times:
            return None
        return max(0.0, (time.time() if now is None else now) - max(times))


def refuse_linked_path(io: FileIO, path: str) -> None:
    """Refuse a local ``path`` that is itself a symbolic link.

    Links among the ancestors (a home directory on another volume) are resolved like any
    path; only the named snapshot directory or ``_metadata`` must not be a link, since
    deleting through it removes the link and the target's files in an order nobody planned.

    Raises:
        BadInputError: The path is a link; the message names where it leads.
    """
    if not io.is_local:
        return
    parent, name = os.path.split(os.path.abspath(path))
    if os.path.islink(os.path.join(os.path.realpath(parent), name)):
        raise BadInputError(
            f"is a symbolic link (to {os.path.realpath(path)}); refusing to dispose "
            "through links: give the real path if that is what you mean to delete",
            path=io.url(path),
        )


def refuse_links_below(io: FileIO, root: str, path: str, what: str) -> None:
    """Refuse a local ``path`` below ``root`` reached through a symbolic link, or leading outside.

    Every directory from ``root`` (exclusive) down to ``path`` is looked at with ``lstat``: a
    link among them (a ``shared/`` that is a link to a user's folder) would make a deletion
    remove files outside the job directory. ``root`` itself is resolved like any path.

    Args:
        io: The filesystem (object stores have no links: nothing to check).
        root: The directory that must contain ``path`` (a job directory).
        path: A file to delete, below ``root``.
        what: How the message names the file's role, e.g. ``the shared file``.

    Raises:
        BadInputError: A link on the way, or ``path`` outside ``root``; names the link and its target.
    """
    if not io.is_local:
        return
    relative = os.path.relpath(path, root)
    if relative == os.curdir or relative.startswith(os.pardir + os.sep) or relative == os.pardir:
        raise BadInputError(f"{what} {path} lies outside {root}; refusing to delete it", path=io.url(root))
    current = root
    for part in relative.split(os.sep)[:-1]:
        current = os.path.join(current, part)
        if os.path.islink(current):
            raise BadInputError(
                f"{what} {path} is reached through the symbolic link {current} (to {os.path.realpath(current)}); "
                "refusing to delete through links: nothing was deleted", path=io.url(root))


def take_inventory(io: FileIO, root: str) -> SnapshotInventory:
    """Every entry below the directory ``root``, never following a link.

    Raises:
        BadInputError: A local directory cannot be listed (permissions, vanished).
    """
    if not io.is_local:
        files = sorted((_remote_entry(root, f.path, f.size, f.mtime) for f in io.walk_files(root)),
                       key=lambda e: e.relative)
        return SnapshotInventory(root, io.info(root).mtime, tuple(files), (), ())
    try:
        root_mtime = os.lstat(root).st_mtime
        entries = _walk_local(root)
    except OSError as exc:
        raise BadInputError(f"cannot list the directory: {exc.strerror or exc}", path=io.url(root)) from exc
    entries.sort(key=lambda e: e.relative)
    return SnapshotInventory(
        root,
        root_mtime,
        tuple(e for e in entries if e.kind == "file"),
        tuple(e for e in entries if e.kind == "directory"),
        tuple(e for e in entries if e.kind not in ("file", "directory")),
    )


def _remote_entry(root: str, path: str, size: int, mtime: float | None) -> InventoryEntry:
    return InventoryEntry(posixpath.relpath(path, root), path, "file", size, mtime)


def _walk_local(root: str) -> list[InventoryEntry]:
    found: list[InventoryEntry] = []
    pending = [root]
    while pending:
        directory = pending.pop()
        with os.scandir(directory) as listing:
            for item in listing:
                st = item.stat(follow_symlinks=False)
                kind = _kind(st.st_mode)
                relative = os.path.relpath(item.path, root).replace(os.sep, "/")
                size = st.st_size if kind == "file" else 0
                found.append(InventoryEntry(relative, item.path, kind, size, st.st_mtime))
                if kind == "directory":
                    pending.append(item.path)
    return found


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "file"), (stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symbolic link"),
                       (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "device"


def foreign_files_error(url: str, foreign: Sequence[InventoryEntry], why: str) -> BadInputError:
    """The one-line refusal: how many entries ``dispose`` cannot account for, and the first.

    Args:
        url: The snapshot directory (named first in the message).
        foreign: The entries, sorted; links and special files count as foreign files.
        why: What makes them foreign, e.g. ``not named by its _metadata``.
    """
    first = foreign[0]
    kind = "" if first.kind == "file" else f" (a {first.kind})"
    return BadInputError(
        f"refusing to dispose: {len(foreign)} file(s) {why}, e.g. {first.relative!r}{kind}; "
        "remove them first if they are yours",
        path=url,
    )
