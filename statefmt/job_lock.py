"""Whether a job is running on a job directory: the lock file the job holds while it runs.

A running job holds an exclusive ``flock`` on ``<checkpoint-dir>/<job-id>/_running.lock``
(:data:`statekit.statefmt.layout.JOB_LOCK_FILE`) from its start to its end, the file naming
the process (``pid``, host, job id). Anyone may ask (:func:`running_holder`) with a shared,
non-blocking ``flock``: it fails exactly while the job holds its lock. The kernel drops the
lock when the process dies (SIGKILL included), so a crashed job never looks running. The
holder unlinks the file when it ends.

Local disks only: object stores have no locks (the lock is then neither taken nor asked).
``flock`` over NFS is as reliable as the NFS client's lock support.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time

from statekit.statefmt.layout import JOB_LOCK_FILE

__all__ = ["JobLock", "running_holder"]

_ATTEMPTS = 100  # a probe holds the shared lock for microseconds; the job waits at most ~1 s


class JobLock:
    """The lock a running job holds on its job directory (see the module docstring)."""

    def __init__(self, job_dir: str, job_id: str) -> None:
        self.path = os.path.join(job_dir, JOB_LOCK_FILE)
        self.job_id = job_id
        self._fd: int | None = None
        self._made_dir = False

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> bool:
        """Take the lock (creating the job directory); False when another live process holds it."""
        directory = os.path.dirname(self.path)
        self._made_dir = not os.path.isdir(directory)
        os.makedirs(directory, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        for _ in range(_ATTEMPTS):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                time.sleep(0.01)
        else:
            os.close(fd)
            return False
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "job_id": self.job_id}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        self._fd = fd
        return True

    def release(self) -> None:
        """Remove the file and drop the lock (a probe that opened it before sees it free); the
        job directory too when :meth:`acquire` made it and nothing else was written there."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.unlink(self.path)
        except OSError:
            pass
        os.close(fd)
        if self._made_dir:
            try:
                os.rmdir(os.path.dirname(self.path))
            except OSError:
                pass  # checkpoints live there


def running_holder(job_dir: str) -> str | None:
    """Who runs the job of the local ``job_dir`` (``pid 1234 on host``), or None when nothing does."""
    path = os.path.join(job_dir, JOB_LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None  # no lock file (or a link, which no job makes): no job holds it
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            return _describe(os.pread(fd, 4096, 0))
        return None
    finally:
        os.close(fd)


def _describe(raw: bytes) -> str:
    try:
        holder = json.loads(raw.decode("utf-8"))
        return f"pid {int(holder['pid'])} on {str(holder['host'])[:64]}"
    except (ValueError, KeyError, TypeError):
        return "a live process"
