"""Output directories that appear whole or not at all: snapshots, diff outputs, local exports.

On local disks an output is built in a hidden sibling directory
(:func:`statekit.statefmt.layout.staging_dir_name`) and renamed into place when complete (a
snapshot after its ``_metadata`` is written); on object stores it is built in place (a
snapshot's ``_metadata`` written last) and removed again if anything fails.

Invariants:
    * An output never lies inside one of the command's inputs, nor is it one
      (:func:`check_output_dir`): ``rescale SP -o SP/inner`` is refused before anything is read.
    * Publishing never replaces or deletes anything that appeared at the output while the
      command ran: the staging directory is renamed with ``renameat2(RENAME_NOREPLACE)`` on
      Linux (atomic: the rename fails when the output exists), elsewhere — or on a filesystem
      without that flag — under an exclusive ``flock`` of the parent directory after a re-check
      (every statekit command publishing there takes the same lock; another program creating a
      non-empty directory or a file at the output in the same instant makes ``rename`` fail; an
      empty directory it created could be replaced). Of two commands writing one output, the
      second to finish fails with exit 2 and its result is discarded.
    * An existing empty output directory is accepted when the command starts; it is removed
      (``rmdir``, never recursively) at publication only if it is still that same directory
      (device, inode and change time) and still empty.
    * Object stores have no atomic no-replace rename: the output is refused when it exists
      when the command starts, and a snapshot's ``_metadata`` is its last object; two commands
      writing one object-store output at the same time are not detected.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import posixpath
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from statekit.statefmt.errors import BadInputError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.layout import staging_dir_name

__all__ = ["staged_output_dir", "check_output_dir", "check_outside_inputs", "publish_dir", "OutputClaim"]

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP), errno.EOPNOTSUPP}


@dataclass(frozen=True)
class OutputClaim:
    """What was at a local output when the command checked it: nothing, or an empty directory.

    Attributes:
        path: The output path.
        empty_dir: ``(st_dev, st_ino, st_ctime_ns)`` of the empty directory that was there, else
            ``None`` (the change time tells a directory made anew under a reused inode apart).
    """

    path: str
    empty_dir: tuple[int, int, int] | None = None


def check_output_dir(io: FileIO, path: str, inputs: Sequence[str] = (),
                     storage_options: dict[str, Any] | None = None) -> OutputClaim:
    """Refuse an output path that exists and is not an empty directory, or that lies in an input.

    Args:
        io, path: The output.
        inputs: URLs of what the command reads (snapshot directories, input files): the output
            must not be one of them nor lie inside one.
        storage_options: fsspec options of the inputs.

    Returns:
        What was there (a local empty directory is remembered by identity).
    """
    check_outside_inputs(io, path, inputs, storage_options)
    if not io.exists(path):
        return OutputClaim(path)
    if not io.isdir(path):
        raise BadInputError("output exists and is a file", path=io.url(path))
    if io.list_dir(path):
        raise BadInputError("output directory exists and is not empty; choose a new path", path=io.url(path))
    if io.is_local:
        st = os.stat(path)
        return OutputClaim(path, (st.st_dev, st.st_ino, st.st_ctime_ns))
    return OutputClaim(path)


def check_outside_inputs(io: FileIO, path: str, inputs: Sequence[str],
                         storage_options: dict[str, Any] | None = None) -> None:
    """Refuse an output that is one of ``inputs`` or lies inside one (links resolved on local disks)."""
    out = _comparable(io, path)
    for url in inputs:
        try:
            in_io, in_path = FileIO.for_path(url, storage_options)
        except BadInputError:
            continue  # the input's own check names it
        if in_io.is_local != io.is_local or (not io.is_local and in_io.protocol != io.protocol):
            continue
        source = _comparable(in_io, in_path)
        if out == source or out.startswith(source.rstrip("/") + "/"):
            raise BadInputError(f"the output lies inside the input {in_io.url(in_path)}; write it elsewhere "
                                "(a command never writes into what it reads)", path=io.url(path))


def _comparable(io: FileIO, path: str) -> str:
    """``path`` with links resolved (local: through its nearest existing ancestor), ``/``-separated."""
    if not io.is_local:
        return "/" + path.strip("/")
    return os.path.realpath(path)


@contextmanager
def staged_output_dir(url: str, storage_options: dict[str, Any] | None = None, *,
                      parent_must_exist: bool = False, inputs: Sequence[str] = (),
                      input_storage_options: dict[str, Any] | None = None) -> Iterator[tuple[FileIO, str]]:
    """Yield (io, staging dir); on clean exit the staging dir becomes ``url``.

    Args:
        url: The output directory: new, or an empty directory.
        storage_options: fsspec options.
        parent_must_exist: Refuse a local output whose parent directory does not exist
            (exports and diff outputs: a typo is not created); snapshots create it.
        inputs: URLs the command reads: the output must lie outside them.
        input_storage_options: fsspec options of ``inputs`` (default: ``storage_options``).

    Raises:
        BadInputError: The output exists (not an empty directory), lies in an input, or
            appeared while the command ran (nothing published).
    """
    io, final = FileIO.for_path(url, storage_options)
    claim = check_output_dir(io, final, inputs, storage_options if input_storage_options is None
                             else input_storage_options)
    if parent_must_exist and io.is_local and not io.isdir(posixpath.dirname(final)):
        raise BadInputError("the output's parent directory does not exist", path=io.url(final))
    if not io.is_local:
        try:
            yield io, final
        except BaseException:
            if io.exists(final):
                io.rm(final, recursive=True)
            raise
        return
    parent, name = posixpath.split(final)
    staging = posixpath.join(parent, staging_dir_name(name))
    io.makedirs(staging)
    try:
        yield io, staging
        publish_dir(staging, claim)
        io.sync_dir(parent)
    except BaseException:
        if io.exists(staging):
            io.rm(staging, recursive=True)
        raise


def publish_dir(staging: str, claim: OutputClaim) -> None:
    """Rename the local directory ``staging`` to ``claim.path``, never replacing what is there.

    Raises:
        BadInputError: Something other than the claimed empty directory is at the output.
    """
    final = claim.path
    parent = os.path.dirname(final)
    lock = os.open(parent, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # statekit publishers in one directory go one at a time
        _release_claimed_empty_dir(claim)
        if _rename_noreplace(staging, final):
            return
        if os.path.lexists(final):
            raise _appeared(final)
        os.rename(staging, final)  # fails on a non-empty directory or a file that appeared
    except FileExistsError:
        raise _appeared(final) from None
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise _appeared(final) from None
        raise
    finally:
        os.close(lock)


def _release_claimed_empty_dir(claim: OutputClaim) -> None:
    """Remove the empty output directory the command accepted when it started, if it is still that one."""
    if claim.empty_dir is None:
        return
    try:
        st = os.lstat(claim.path)
    except FileNotFoundError:
        return
    if (st.st_dev, st.st_ino, st.st_ctime_ns) != claim.empty_dir:
        raise _appeared(claim.path)
    try:
        os.rmdir(claim.path)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise _appeared(claim.path) from None
        raise


def _appeared(final: str) -> BadInputError:
    return BadInputError("something appeared at the output while this command ran (another command, or "
                         "someone else, wrote it); it was left as it is and this result was discarded: choose "
                         "a new path", path=final)


def _rename_noreplace(src: str, dst: str) -> bool:
    """``renameat2(src, dst, RENAME_NOREPLACE)``: True when renamed; False when the system or the
    filesystem lacks it; FileExistsError when ``dst`` exists."""
    rename = _renameat2()
    if rename is None:
        return False
    sys.audit("os.rename", src, dst, None, None)  # what os.rename reports: audit hooks see this rename too
    if rename(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    if code == errno.EEXIST:
        raise FileExistsError(code, os.strerror(code), dst)
    raise OSError(code, os.strerror(code), dst)


_RENAMEAT2: list[Any] = []


def _renameat2() -> Any:
    """glibc's ``renameat2`` (2.28+), or None (another system, or an older C library)."""
    if not _RENAMEAT2:
        function = None
        if sys.platform.startswith("linux"):
            try:
                function = ctypes.CDLL(None, use_errno=True).renameat2
                function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
                function.restype = ctypes.c_int
            except (OSError, AttributeError):
                function = None
        _RENAMEAT2.append(function)
    return _RENAMEAT2[0]
