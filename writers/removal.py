"""Deleting exactly the files of a plan: the last step of ``dispose`` (statekit's and Flink's).

Invariants:
    * :func:`remove_files` deletes the files it is given, in order, stopping at the first
      failure; then the directories left empty, deepest first, each with ``rmdir``, so a
      file that appeared after the inventory (:mod:`statekit.readers.inventory`) is never
      deleted: it is reported instead.
    * On a local disk a file is deleted without following a symbolic link on the way
      (:func:`unlink_beneath`: each directory opened with ``O_NOFOLLOW`` below the directory the
      plan stands on, the file unlinked relative to its parent), so a directory swapped for a
      link after the plan fails the deletion instead of deleting through it.
    * Object stores have no directories of their own: the directory prefix goes only when
      no file is left under it.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass

from statekit.readers.inventory import SnapshotInventory
from statekit.statefmt.fileio import FileIO

__all__ = ["Removal", "remove_files", "unlink_beneath", "delete_file"]


@dataclass(frozen=True)
class Removal:
    """What :func:`remove_files` did.

    Attributes:
        deleted: Files deleted, in order (user-facing names).
        failed: ``(name, reason)`` of the deletion that failed (at most one: it stops there),
            or of a directory that was not empty any more.
        removed_root: True when the directory itself is gone.
    """

    deleted: tuple[str, ...]
    failed: tuple[tuple[str, str], ...]
    removed_root: bool


def remove_files(io: FileIO, inventory: SnapshotInventory, files: Sequence[str], *, remove_root: bool,
                 beneath: str | None = None) -> Removal:
    """Delete ``files`` in order, then (``remove_root``) the directories left empty and the root.

    Stops at the first failure, so a ``_metadata`` that cannot be deleted keeps every state
    file it names. Never deletes a directory recursively on a local disk.

    Args:
        beneath: The directory every file lies below, entered without following links
            (default: the inventoried directory; a job directory when files of its
            ``shared/`` go too).
    """
    deleted: list[str] = []
    root = inventory.root if beneath is None else beneath
    for path in files:
        try:
            delete_file(io, root, path)
        except OSError as exc:
            return Removal(tuple(deleted), ((io.url(path), exc.strerror or str(exc)),), False)
        deleted.append(io.url(path))
    if not remove_root:
        return Removal(tuple(deleted), (), False)
    failure = _remove_dirs(io, inventory) if io.is_local else _remove_prefix(io, inventory.root)
    return Removal(tuple(deleted), (failure,) if failure else (), failure is None)


def _remove_dirs(io: FileIO, inventory: SnapshotInventory) -> tuple[str, str] | None:
    deepest_first = sorted(inventory.dirs, key=lambda d: d.relative.count("/"), reverse=True)
    for path in [d.path for d in deepest_first] + [inventory.root]:
        try:
            os.rmdir(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            reason = exc.strerror or str(exc)
            return io.url(path), f"{reason}: kept it and what appeared in it after the plan"
    return None


def _remove_prefix(io: FileIO, root: str) -> tuple[str, str] | None:
    if not io.exists(root):
        return None
    left = io.walk_files(root)
    if left:
        return io.url(left[0].path), "appeared after the plan: kept it and its directory"
    io.rm(root, recursive=True)  # only empty pseudo-directories are left
    return None


def delete_file(io: FileIO, root: str, path: str) -> None:
    """Delete the file ``path`` below ``root``: on a local disk without following a link on the way."""
    if io.is_local:
        unlink_beneath(root, os.path.relpath(path, root))
    else:
        io.rm_file(path)


def unlink_beneath(root: str, relative: str) -> None:
    """Unlink ``root/relative`` without following a symbolic link below ``root``.

    Each directory of ``relative`` is opened with ``O_NOFOLLOW`` relative to its parent; the
    last component is unlinked relative to its directory (a link there is removed itself,
    never its target).

    Raises:
        OSError: ``ELOOP`` naming the directory that is a symbolic link; ``FileNotFoundError``;
            any other failure of the deletion.
    """
    parts = relative.split(os.sep)
    if not relative or os.pardir in parts or os.path.isabs(relative):
        raise OSError(errno.EINVAL, "not a path below the directory", os.path.join(root, relative))
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, part in enumerate(parts[:-1]):
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    where = os.path.join(root, *parts[:i + 1])
                    raise OSError(errno.ELOOP, "a symbolic link (or not a directory) on the way; refusing to "
                                  "delete through it", where) from None
                raise
            os.close(fd)
            fd = inner
        os.unlink(parts[-1], dir_fd=fd)
    finally:
        os.close(fd)
