"""Deleting exactly the files of a plan: the last step of ``dispose`` (statekit's and Flink's).

Invariants:
    * :func:`remove_files` deletes the files it is given, in order, stopping at the first
      failure; then the directories left empty, deepest first, each with ``rmdir``, so a
      file that appeared after the inventory (:mod:`statekit.readers.inventory`) is never
      deleted: it is reported instead.
    * Object stores have no directories of their own: the directory prefix goes only when
      no file is left under it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from statekit.readers.inventory import SnapshotInventory
from statekit.statefmt.fileio import FileIO

__all__ = ["Removal", "remove_files"]


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


def remove_files(io: FileIO, inventory: SnapshotInventory, files: Sequence[str], *, remove_root: bool) -> Removal:
    """Delete ``files`` in order, then (``remove_root``) the directories left empty and the root.

    Stops at the first failure, so a ``_metadata`` that cannot be deleted keeps every state
    file it names. Never deletes a directory recursively on a local disk.
    """
    deleted: list[str] = []
    for path in files:
        try:
            io.rm_file(path)
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
