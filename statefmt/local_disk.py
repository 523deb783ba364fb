"""The local disk as :class:`~statekit.statefmt.fileio.FileIO` uses a filesystem, without fsspec.

Importing fsspec (and the asyncio it imports) costs about a tenth of a second, paid by every
command on local paths before this module; object stores still go through fsspec. The
operations here are the ones FileIO calls on a local filesystem, with the results of fsspec's
``LocalFileSystem`` for absolute paths: ``info`` follows a symlink for its size and type, a
directory's entries do not (a symlink to a directory is of type ``"other"`` and is not walked
into), ``find`` lists files only, sorted by name.
"""

from __future__ import annotations

import os
import shutil
import stat
from typing import Any

__all__ = ["LocalDisk"]


class LocalDisk:
    """Absolute local paths, with the answers fsspec's ``LocalFileSystem`` gives."""

    protocol = "file"

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def isfile(self, path: str) -> bool:
        return os.path.isfile(path)

    def size(self, path: str) -> int:
        return int(self.info(path)["size"])

    def info(self, path: str) -> dict[str, Any]:
        """A path's name, size, type and times (a symlink: its target's size and type)."""
        out = os.stat(path, follow_symlinks=False)
        link = stat.S_ISLNK(out.st_mode)
        if link:
            out = os.stat(path, follow_symlinks=True)
        return _info(path, out, _kind(out.st_mode), out.st_size, link)

    def ls(self, path: str, detail: bool = True) -> list[dict[str, Any]]:
        """The entries of a directory (a file: the file itself); FileNotFoundError when missing."""
        path_info = self.info(path)
        if path_info["type"] != "directory":
            return [path_info]
        infos = []
        with os.scandir(path) as entries:
            for entry in entries:
                try:
                    infos.append(_entry_info(entry))
                except FileNotFoundError:  # removed while listed
                    pass
        return infos

    def find(self, path: str, detail: bool = True) -> dict[str, dict[str, Any]]:
        """Every file below ``path`` (``path`` itself when it is a file), by name, sorted; a
        missing or unreadable directory has none."""
        found: dict[str, dict[str, Any]] = {}
        pending = [path]
        while pending:
            directory = pending.pop()
            try:
                listing = self.ls(directory)
            except OSError:
                continue
            for info in listing:
                name = info["name"]
                if info["type"] == "directory" and name != directory:
                    pending.append(name)
                elif info["type"] != "directory":
                    found[name] = info
        return {name: found[name] for name in sorted(found)}

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        os.makedirs(path, exist_ok=exist_ok)

    def rm_file(self, path: str) -> None:
        os.remove(path)

    def rm(self, path: str, recursive: bool = False) -> None:
        """Remove a file, or a directory with everything in it (``recursive``)."""
        if os.path.isdir(path) and not os.path.islink(path):
            if not recursive:
                raise ValueError("Cannot delete directory, set recursive=True")
            if os.path.abspath(path) == os.getcwd():
                raise ValueError("Cannot delete current working directory")
            shutil.rmtree(path)
        else:
            os.remove(path)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "directory"
    return "file" if stat.S_ISREG(mode) else "other"


def _entry_info(entry: os.DirEntry[str]) -> dict[str, Any]:
    """A directory entry's info, its type not following a symlink (its size does)."""
    out = entry.stat(follow_symlinks=False)
    link = stat.S_ISLNK(out.st_mode)
    size = out.st_size
    if link:
        try:
            size = entry.stat(follow_symlinks=True).st_size
        except OSError:
            size = 0
    return _info(entry.path, out, _kind(out.st_mode), size, link)


def _info(path: str, out: os.stat_result, kind: str, size: int, link: bool) -> dict[str, Any]:
    return {"name": path, "size": size, "type": kind, "created": out.st_ctime, "islink": link,
            "mode": out.st_mode, "uid": out.st_uid, "gid": out.st_gid, "mtime": out.st_mtime,
            "ino": out.st_ino, "nlink": out.st_nlink}
