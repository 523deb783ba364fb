"""The temporary directories of a running job (ephemeral checkpoint storage, a state backend's
working directory): removed by the job at its end, and — when the process died without
removing them (SIGKILL, out-of-memory kill, power loss) — by the next job that makes one in the
same temporary directory (:meth:`TempDirs.create` sweeps before a job's first directory).

Invariants:

* A directory made by :meth:`TempDirs.create` holds the file :data:`LOCK_NAME`, on which the
  process that made it holds an exclusive ``flock`` from before the file has its name until
  the directory is removed. The kernel releases the lock when the process ends, however it
  ends, so a lock that can be taken marks a directory nobody uses.
* :func:`sweep` removes only directories of the temporary directory whose name starts with
  :data:`PREFIX`, that are real directories (not symbolic links) owned by this user, and whose
  lock file it could lock; anything else (a directory of another user, one without a lock
  file — still being made, or made by an older statekit — or one whose lock is held) stays.
* Without ``fcntl`` (not a POSIX system) directories are made without a lock and never swept.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile

try:
    import fcntl
except ImportError:  # pragma: no cover - not a POSIX system
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "PREFIX",
    "LOCK_NAME",
    "TempDirs",
    "sweep",
]

PREFIX = "statekit-"
LOCK_NAME = ".statekit-owner.lock"

_log = logging.getLogger(__name__)


class TempDirs:
    """The temporary directories one job made and holds (see the module doc)."""

    def __init__(self) -> None:
        self._held: list[tuple[str, int | None]] = []
        self._swept = False

    def create(self, prefix: str) -> str:
        """A new directory ``<temp>/<prefix>XXXXXXXX`` (``prefix`` starts with :data:`PREFIX`),
        locked by this process until :meth:`remove_all`; the first one of this job is made after
        a :func:`sweep`."""
        if not prefix.startswith(PREFIX):
            raise ValueError(f"a job's temporary directory starts with {PREFIX!r}, not {prefix!r}")
        if not self._swept:
            sweep()
            self._swept = True
        path = tempfile.mkdtemp(prefix=prefix)
        fd = None
        if fcntl is not None:
            try:
                unnamed = os.path.join(path, LOCK_NAME + ".new")
                fd = os.open(unnamed, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
                fcntl.flock(fd, fcntl.LOCK_EX)  # a file nobody else knows yet: taken at once
                os.rename(unnamed, os.path.join(path, LOCK_NAME))  # named only once locked
            except BaseException:
                if fd is not None:
                    os.close(fd)
                shutil.rmtree(path, ignore_errors=True)
                raise
        self._held.append((path, fd))
        return path

    def remove_all(self) -> None:
        """Remove every directory made here, each before its lock goes."""
        held, self._held = self._held, []
        for path, fd in held:
            shutil.rmtree(path, ignore_errors=True)
            if fd is not None:
                os.close(fd)


def sweep(base: str | None = None) -> list[str]:
    """Remove the job directories under ``base`` (the temporary directory by default) whose
    process is gone; returns their paths. Errors of single entries are skipped: a sweep never
    fails a job."""
    if fcntl is None:
        return []
    base = base or tempfile.gettempdir()
    try:
        names = [name for name in os.listdir(base) if name.startswith(PREFIX)]
    except OSError:
        return []
    removed = []
    uid = os.getuid()
    for name in names:
        path = os.path.join(base, name)
        try:
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
                continue
            fd = os.open(os.path.join(path, LOCK_NAME), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue  # gone meanwhile, not a directory, or no lock file
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # held: a live job's
            shutil.rmtree(path, ignore_errors=True)  # removed while this lock is held
            removed.append(path)
        finally:
            os.close(fd)
    if removed:
        _log.info("removed %d temporary directories of jobs that ended without removing them (%s)",
                  len(removed), ", ".join(removed[:3]) + (", ..." if len(removed) > 3 else ""))
    return removed
