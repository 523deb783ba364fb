"""A small file-IO seam over fsspec: every read and write of statekit goes through here.
Plain local paths use :class:`~statekit.statefmt.local_disk.LocalDisk` and never import fsspec.

Reads are bounded and typed: :meth:`FileIO.open_input` and :meth:`FileIO.read_bytes` open
only regular files (a FIFO, device, socket or directory is refused before any byte is read,
so a crafted snapshot cannot block or feed an endless stream), and ``read_bytes`` refuses a
file larger than the caller's limit from its size alone. :meth:`FileIO.check_inside` refuses
a local path whose symlinks resolve outside a given directory.

Atomicity: :meth:`FileIO.write_atomic` publishes a file whole or not at all — on local
disks a temp file beside the target, fsync, ``os.replace`` and a directory fsync; on
object stores a single PUT (objects appear whole). :meth:`FileIO.open_output` streams a
large state file: local files go through a temp name and are renamed on close; object
stores upload on close. A file is never visible under its final name half-written.
"""

from __future__ import annotations

import os
import posixpath
import stat
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

from statekit.statefmt.errors import BadInputError, PathNotFoundError, UnsafePathError
from statekit.statefmt.local_disk import LocalDisk
from statekit.statefmt.storage_options import storage_options_for

__all__ = ["FileIO", "FileInfo", "fsync_dir"]

# A new local file is written through a buffer this large: a state file's blocks (tens of
# KiB each) reach the kernel in a few large writes, not one or two per block.
_OUTPUT_BUFFER = 1 << 20


@dataclass(frozen=True)
class FileInfo:
    path: str
    name: str
    is_dir: bool
    size: int
    mtime: float | None


class FileIO:
    """One filesystem and the URL prefix that turns its internal paths back into URLs."""

    def __init__(self, fs: Any, protocol: str) -> None:
        self.fs = fs
        self.protocol = protocol
        self._local = isinstance(fs, LocalDisk) or _is_fsspec_local(fs)

    @classmethod
    def for_path(cls, url: str, storage_options: dict[str, Any] | None = None) -> tuple[FileIO, str]:
        """The FileIO for ``url`` and the path inside its filesystem.

        Object stores get ``storage_options`` on top of ``STATEKIT_STORAGE_OPTIONS``
        (:mod:`statekit.statefmt.storage_options`); local paths get ``storage_options`` only.
        """
        if not url:
            raise BadInputError("empty path")
        options = storage_options_for(url, storage_options)
        if not options and _plain_local(url):
            return cls(LocalDisk(), LocalDisk.protocol), os.path.abspath(os.path.expanduser(url)).rstrip("/") or "/"
        import fsspec

        try:
            fs, path = fsspec.core.url_to_fs(url, **options)
        except (ImportError, ValueError, TypeError) as exc:  # TypeError: an option the filesystem does not take
            raise BadInputError(f"cannot open filesystem: {exc}", path=url) from exc
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        if _is_fsspec_local(fs):
            path = os.path.abspath(path)
        return cls(fs, protocol), path.rstrip("/") or "/"

    @property
    def is_local(self) -> bool:
        return self._local

    def url(self, path: str) -> str:
        """A user-facing name of an internal path (plain for local files)."""
        if self.is_local:
            return path
        return f"{self.protocol}://{path.lstrip('/')}" if self.protocol != "memory" else f"memory://{path}"

    @staticmethod
    def join(*parts: str) -> str:
        return posixpath.join(*parts)

    # ------------------------------------------------------------ queries

    def exists(self, path: str) -> bool:
        return bool(self.fs.exists(path))

    def isdir(self, path: str) -> bool:
        return bool(self.fs.isdir(path))

    def isfile(self, path: str) -> bool:
        return bool(self.fs.isfile(path))

    def size(self, path: str) -> int:
        return int(self.fs.size(path))

    def info(self, path: str) -> FileInfo:
        raw = self.fs.info(path)
        return self._info(raw)

    def _info(self, raw: dict[str, Any]) -> FileInfo:
        name = raw["name"].rstrip("/")
        mtime: Any = raw.get("mtime") or raw.get("LastModified") or raw.get("created")
        if mtime is not None and hasattr(mtime, "timestamp"):
            mtime = mtime.timestamp()
        return FileInfo(
            path=name,
            name=posixpath.basename(name),
            is_dir=raw.get("type") == "directory",
            size=int(raw.get("size") or 0),
            mtime=float(mtime) if isinstance(mtime, (int, float)) else None,
        )

    def list_dir(self, path: str) -> list[FileInfo]:
        try:
            entries = self.fs.ls(path, detail=True)
        except FileNotFoundError as exc:
            raise PathNotFoundError("no such directory", path=self.url(path)) from exc
        infos = [self._info(e) for e in entries]
        return sorted((i for i in infos if i.path.rstrip("/") != path.rstrip("/")), key=lambda i: i.name)

    def walk_files(self, path: str) -> list[FileInfo]:
        """Every file below ``path`` (recursively), with sizes."""
        found = self.fs.find(path, detail=True)
        return [self._info(raw) for raw in found.values() if raw.get("type") != "directory"]

    def du(self, path: str) -> int:
        return sum(f.size for f in self.walk_files(path))

    # ------------------------------------------------------------ reads

    def read_bytes(self, path: str, *, limit: int | None = None) -> bytes:
        """The whole content of a regular file of at most ``limit`` bytes (checked before reading)."""
        if self.is_local:
            with self._open_local(path) as f:
                size = os.fstat(f.fileno()).st_size
                _check_limit(size, limit, self.url(path))
                data = f.read(size + 1)
            _check_limit(len(data), limit, self.url(path))  # a file that grew meanwhile
            return data
        if limit is not None:
            _check_limit(self._remote_size(path), limit, self.url(path))
        try:
            return bytes(self.fs.cat_file(path))
        except FileNotFoundError as exc:
            raise PathNotFoundError("no such file", path=self.url(path)) from exc
        except IsADirectoryError as exc:
            raise BadInputError("is a directory, expected a file", path=self.url(path)) from exc

    def open_input(self, path: str) -> IO[bytes]:
        """A binary stream of a regular file (never a FIFO, device, socket or directory)."""
        if self.is_local:
            return self._open_local(path)
        try:
            return self.fs.open(path, "rb")  # type: ignore[no-any-return]
        except FileNotFoundError as exc:
            raise PathNotFoundError("no such file", path=self.url(path)) from exc
        except IsADirectoryError as exc:
            raise BadInputError("is a directory, expected a file", path=self.url(path)) from exc

    def _remote_size(self, path: str) -> int:
        try:
            return int(self.fs.size(path))
        except FileNotFoundError as exc:
            raise PathNotFoundError("no such file", path=self.url(path)) from exc

    def _open_local(self, path: str) -> IO[bytes]:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; the type check below refuses it.
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError as exc:
            raise PathNotFoundError("no such file", path=self.url(path)) from exc
        except OSError as exc:
            raise BadInputError(f"cannot open: {exc.strerror or exc}", path=self.url(path)) from exc
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                raise BadInputError("is a directory, expected a file", path=self.url(path))
            if not stat.S_ISREG(mode):
                raise BadInputError(f"not a regular file ({_file_type(mode)}); refusing to read it",
                                    path=self.url(path))
            os.set_blocking(fd, True)
            return os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise

    def check_inside(self, path: str, root: str) -> str:
        """``path`` if it stays inside ``root`` once symlinks are resolved, else UnsafePathError.

        Object stores have no symlinks: their paths are checked lexically by the metadata
        parser, so only local paths are resolved here.
        """
        if not self.is_local:
            return path
        real, real_root = os.path.realpath(path), os.path.realpath(root)
        if real != real_root and not real.startswith(real_root.rstrip(os.sep) + os.sep):
            raise UnsafePathError(
                f"leads outside the snapshot directory (resolves to {real}); refusing to follow it",
                path=self.url(path),
            )
        return path

    # ------------------------------------------------------------ writes

    def makedirs(self, path: str) -> None:
        self.fs.makedirs(path, exist_ok=True)

    def write_atomic(self, path: str, data: bytes) -> None:
        """Publish ``data`` at ``path`` whole or not at all (temp + fsync + rename, or one PUT)."""
        if not self.is_local:
            self.fs.pipe_file(path, data)
            return
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        fsync_dir(directory)

    @contextmanager
    def _remote_output(self, path: str, *, remove_on_failure: bool) -> Iterator[IO[bytes]]:
        """A new object on a remote store: complete when the block exits cleanly, abandoned (not
        completed) when it fails."""
        f = self.fs.open(path, "wb")
        try:
            yield f
        except BaseException:
            _abandon(f)
            if remove_on_failure and self.fs.exists(path):  # stores that create the object on open (memory://)
                self.fs.rm_file(path)
            raise
        f.close()

    @contextmanager
    def open_output(self, path: str) -> Iterator[IO[bytes]]:
        """Stream a new file; it appears under ``path`` only when the block exits cleanly."""
        if not self.is_local:
            with self._remote_output(path, remove_on_failure=True) as f:
                yield f
            return
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "wb", buffering=_OUTPUT_BUFFER) as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    @contextmanager
    def open_scratch(self, path: str) -> Iterator[IO[bytes]]:
        """Stream an intermediate file that is read back soon and removed after: no ``fsync``
        and no temporary name (a failed write may leave it partial; its owner removes it)."""
        if not self.is_local:
            with self._remote_output(path, remove_on_failure=False) as f:
                yield f
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb", buffering=_OUTPUT_BUFFER) as f:
            yield f

    def sync_dir(self, path: str) -> None:
        if self.is_local:
            fsync_dir(path)

    def copy_file(self, src: FileIO, src_path: str, dst_path: str, chunk_size: int = 8 << 20) -> None:
        """Copy bytes from another FileIO (possibly another filesystem) to ``dst_path``."""
        with src.open_input(src_path) as source, self.open_output(dst_path) as target:
            while True:
                chunk = source.read(chunk_size)
                if not chunk:
                    break
                target.write(chunk)

    def rm(self, path: str, recursive: bool = False) -> None:
        self.fs.rm(path, recursive=recursive)

    def rm_file(self, path: str) -> None:
        self.fs.rm_file(path)

    def rename(self, src: str, dst: str) -> None:
        """Rename a directory or file (atomic on local disks)."""
        if self.is_local:
            os.replace(src, dst)
        else:
            self.fs.mv(src, dst, recursive=True)


def _plain_local(url: str) -> bool:
    """Whether fsspec would take ``url`` as a local path as it is: no protocol, no chain, none of
    the prefixes its local filesystem strips (``file:``, ``local:``) and not a ``data:`` URL."""
    return "://" not in url and "::" not in url and not url.startswith(("file:", "local:", "data:"))


def _is_fsspec_local(fs: Any) -> bool:
    """Whether ``fs`` is fsspec's local filesystem (fsspec is imported only if something did)."""
    local = sys.modules.get("fsspec.implementations.local")
    return local is not None and isinstance(fs, local.LocalFileSystem)


def _check_limit(size: int, limit: int | None, url: str) -> None:
    if limit is not None and size > limit:
        raise BadInputError(f"{size} bytes is more than the {limit} bytes such a file may have", path=url)


def _file_type(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "a special file"


def _abandon(f: Any) -> None:
    """Drop an unfinished object-store upload without publishing it (close() would publish it)."""
    discard = getattr(f, "discard", None)
    if callable(discard):
        try:
            discard()  # s3fs: aborts the multipart upload
        except Exception:  # noqa: BLE001 - best effort; the caller's exception matters
            pass
    from fsspec.spec import AbstractBufferedFile

    if isinstance(f, AbstractBufferedFile):
        f.closed = True  # so neither close() nor __del__ uploads the buffered bytes


def fsync_dir(directory: str) -> None:
    """fsync a local directory so a rename inside it is durable (best effort)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
