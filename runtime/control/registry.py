"""The local job registry: which jobs run on this machine, where their REST API listens.

Layout under ``STATEKIT_HOME`` (environment variable; default ``~/.statekit``)::

    jobs/<job_id>/job.json   the entry (replaced atomically on every change)
    jobs/<job_id>/token      the REST API token, mode 0600 (only the owner reads it)
    jobs/<job_id>/job.log    stdout and stderr of a detached job
    jobs/<job_id>/checkpoints.jsonl   every checkpoint's statistics, one JSON object a line
                             (appended by the job's process; :mod:`.checkpoint_history`)

Invariants: an entry is written only by the job's own process; a reader never sees a
partial ``job.json`` (temp file + fsync + rename); an entry whose process is gone (or whose
pid now belongs to another process) is reported as CRASHED, never as running.

Ownership: a job belongs to the user who owns its directory; only that user reads its
token and controls it (a uid check, so that it holds for root too). Registering under a
job id whose owner process is gone takes the stale registration over; a live owner keeps
it. The home, ``jobs/`` and every job directory are private (0700): a directory of the
calling user with group or other permission bits is tightened when a job registers, one
that belongs to another user or is a shared sticky directory (``/tmp``) is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import secrets
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statekit.statefmt.errors import BadInputError, JobError
from statekit.statefmt.job_id import JOB_ID_FORMAT, check_job_id, is_job_id, is_job_id_prefix, new_job_id

__all__ = [
    "check_job_id",
    "new_job_id",
    "CRASHED",
    "ACTIVE_STATES",
    "TERMINAL_STATES",
    "JobEntry",
    "JobRegistry",
    "statekit_home",
    "process_start_ticks",
    "process_alive",
    "current_process_entry",
    "HOME_ENV",
    "JOBS_DIR",
    "ENTRY_FILE",
    "TOKEN_FILE",
    "LOG_FILE",
    "HISTORY_FILE",
    "PRIVATE_MODE",
    "running_job_of",
]

HOME_ENV = "STATEKIT_HOME"
JOBS_DIR = "jobs"
ENTRY_FILE = "job.json"
TOKEN_FILE = "token"
LOG_FILE = "job.log"
HISTORY_FILE = "checkpoints.jsonl"

CRASHED = "CRASHED"
ACTIVE_STATES = frozenset({"CREATED", "RUNNING", "CANCELLING", "RESTARTING"})
TERMINAL_STATES = frozenset({"FINISHED", "FAILED", "CANCELED", CRASHED})

PRIVATE_MODE = 0o700

log = logging.getLogger("statekit.runtime")


def statekit_home() -> Path:
    """``$STATEKIT_HOME``, or ``~/.statekit`` when unset."""
    configured = os.environ.get(HOME_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".statekit"


def process_start_ticks(pid: int) -> int | None:
    """Start time of process ``pid`` in clock ticks since boot, or ``None`` if it is not alive.

    A zombie counts as not alive. Where ``/proc`` is missing the start time is unknown and
    ``0`` is returned for a live pid (pid reuse then goes undetected).
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            raw = stat.read().decode("ascii", "replace")
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            return None
        return 0 if _signal_alive(pid) else None
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _signal_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_alive(pid: int, start_ticks: int | None) -> bool:
    """Whether ``pid`` still runs and is the same process that started at ``start_ticks``."""
    current = process_start_ticks(pid)
    if current is None:
        return False
    return start_ticks is None or current == 0 or current == start_ticks


@dataclass(frozen=True)
class JobEntry:
    """One job in the registry.

    Attributes:
        job_id: 32 hex chars.
        name: Job name (the script name until the job starts).
        pid: Process that runs the job.
        pid_start: Start time of that process (clock ticks since boot), to detect pid reuse.
        status: Last status the job process recorded (a ``JobStatus`` value).
        start_time_ms: When the entry was created.
        host: REST API host (always 127.0.0.1); ``None`` until the job started.
        port: REST API port; ``None`` until the job started.
        end_time_ms: When the job reached a terminal status.
        log_path: Log file of a detached job.
        job_file: The job script.
        checkpoint_dir: Checkpoint storage of the job.
        metrics_port: The fixed port of its process's Prometheus endpoint (``--metrics-port``).
        plan: The job graph (``JobTopology.plan()``: vertices and edges), kept for the dashboard
            after the job ended.
        savepoint_dir: The job's default savepoint directory (``run --savepoint-dir`` or the job's
            checkpoint config), used by ``statekit savepoint JOB_ID`` without a directory.
        failure: Why the job failed.
        savepoints: Savepoint triggers by trigger id: ``{"in-progress": true, "operation",
            "trigger-time"}`` when triggered, replaced by the outcome (``{"location": path}`` or
            ``{"failure-cause": {...}}``) when done, so a client learns the result of a
            stop-with-savepoint after the process exited, and ``savepoint --status`` finds it.
        crash_reason: Set by readers (never stored): why the entry is reported CRASHED.
    """

    job_id: str
    name: str
    pid: int
    pid_start: int | None
    status: str
    start_time_ms: int
    host: str | None = None
    port: int | None = None
    end_time_ms: int | None = None
    log_path: str | None = None
    job_file: str | None = None
    checkpoint_dir: str | None = None
    savepoint_dir: str | None = None
    metrics_port: int | None = None
    plan: dict[str, Any] | None = None
    failure: str | None = None
    savepoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    crash_reason: str | None = None

    @property
    def running(self) -> bool:
        """Whether the job is (as far as the registry knows) alive and not terminal."""
        return self.status in ACTIVE_STATES

    @property
    def rest_url(self) -> str | None:
        """Base URL of the job's REST API, once it serves one."""
        if self.host is None or self.port is None:
            return None
        return f"http://{self.host}:{self.port}"

    def to_json(self) -> dict[str, Any]:
        """The entry as stored in ``job.json`` (plus ``crash-reason`` when crashed)."""
        data = dataclasses.asdict(self)
        if data.pop("crash_reason") is not None:
            data["crash_reason"] = self.crash_reason
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobEntry:
        """Parse a stored entry (unknown keys ignored, for forward compatibility)."""
        names = {f.name for f in dataclasses.fields(cls)} - {"crash_reason"}
        return cls(**{key: value for key, value in data.items() if key in names})


class JobRegistry:
    """Jobs registered under a statekit home directory.

    Args:
        home: The statekit home; ``statekit_home()`` when omitted.
    """

    def __init__(self, home: Path | str | None = None) -> None:
        self.home = Path(home) if home is not None else statekit_home()
        self.jobs_dir = self.home / JOBS_DIR
        self._lock = threading.Lock()

    # -- paths ---------------------------------------------------------------------------

    def job_dir(self, job_id: str) -> Path:
        """Directory of one job's entry, token and log."""
        return self.jobs_dir / check_job_id(job_id)

    def log_path(self, job_id: str) -> Path:
        """Where a detached job writes its output."""
        return self.job_dir(job_id) / LOG_FILE

    def history_path(self, job_id: str) -> Path:
        """Where the job's process appends its checkpoint statistics."""
        return self.job_dir(job_id) / HISTORY_FILE

    def prepare(self, job_id: str) -> Path:
        """Create the job's directory; the home, ``jobs/`` and it are private (0700).

        Raises:
            BadInputError: One of them belongs to another user or is a shared sticky
                directory such as ``/tmp``.
        """
        directory = self.job_dir(job_id)
        for path in (self.home, self.jobs_dir, directory):
            if path.exists() and not path.is_dir():
                raise BadInputError(f"{path}: is not a directory; set {HOME_ENV} to a directory of your own")
            try:
                path.mkdir(mode=PRIVATE_MODE, exist_ok=True)
            except OSError as error:
                raise BadInputError(f"{path}: cannot create the job registry here ({error.strerror or error}); "
                                    f"set {HOME_ENV} to a directory of your own") from None
            if path == directory:
                _require_owner(directory, job_id)
            _make_private(path)
        return directory

    # -- writing (the job's own process) ---------------------------------------------------

    def register(self, entry: JobEntry) -> str:
        """Create the entry and its token file; return the token.

        A registration whose owner process is gone (a crashed job) is stale: it is taken
        over. The check and the claim hold an exclusive lock on the job directory, so two
        processes never both take over one job id.

        Raises:
            JobError: The job id is registered by a live process or by another user.
        """
        directory = self.prepare(entry.job_id)
        token = secrets.token_urlsafe(32)
        with _locked(directory):
            try:
                fd = os.open(directory / TOKEN_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                self._take_over(entry.job_id)
                fd = os.open(directory / TOKEN_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(token)
            self._write(entry)
        return token

    def check_available(self, job_id: str) -> None:
        """Raise unless ``job_id`` is free or stale (as :meth:`register` would decide)."""
        directory = self.job_dir(job_id)
        if not (directory / TOKEN_FILE).exists():
            return
        _require_owner(directory, job_id)
        if self._stale_owner(job_id) is None:
            raise self._live(job_id)

    def _take_over(self, job_id: str) -> None:
        directory = self.job_dir(job_id)
        _require_owner(directory, job_id)
        reason = self._stale_owner(job_id)
        if reason is None:
            raise self._live(job_id)
        log.info("job %s: taking over its stale registration (%s)", job_id, reason)
        (directory / TOKEN_FILE).unlink()

    def _stale_owner(self, job_id: str) -> str | None:
        """Why the registration of ``job_id`` is stale, or ``None`` when its owner process lives."""
        try:
            entry = self._read(job_id)
        except JobError:
            return "its entry is missing or damaged"  # the owner died between token and entry
        if process_alive(entry.pid, entry.pid_start):
            return None
        return f"process {entry.pid} is gone"

    def _live(self, job_id: str) -> JobError:
        try:
            owner = f"process {self._read(job_id).pid}"
        except JobError:
            owner = "a live process"
        return JobError(f"job {job_id} is already registered in {self.jobs_dir} by {owner}, which is still "
                        f"running; stop it first or choose another job id")

    def update(self, job_id: str, **changes: Any) -> JobEntry:
        """Replace fields of an entry (atomically) and return the new entry."""
        with self._lock:
            entry = dataclasses.replace(self._read(job_id), **changes)
            self._write(entry)
        return entry

    def record_savepoint(self, job_id: str, trigger_id: str, outcome: dict[str, Any]) -> None:
        """Remember the outcome of a savepoint trigger in the job's entry."""
        with self._lock:
            entry = self._read(job_id)
            savepoints = dict(entry.savepoints)
            savepoints[trigger_id] = outcome
            self._write(dataclasses.replace(entry, savepoints=savepoints))

    def _write(self, entry: JobEntry) -> None:
        directory = self.job_dir(entry.job_id)
        data = json.dumps(entry.to_json(), indent=2).encode()
        fd, temp = tempfile.mkstemp(dir=directory, prefix=".job.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, directory / ENTRY_FILE)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise

    # -- reading (any process) -------------------------------------------------------------

    def _read(self, job_id: str) -> JobEntry:
        path = self.job_dir(job_id) / ENTRY_FILE
        try:
            return JobEntry.from_json(json.loads(path.read_bytes()))
        except FileNotFoundError:
            raise JobError(f"no job {job_id} in the registry {self.jobs_dir}") from None
        except PermissionError:
            raise _foreign(path.parent, job_id) from None
        except (ValueError, TypeError) as error:
            raise JobError(f"{path}: damaged registry entry ({error}); delete {path.parent}") from None

    def get(self, job_id: str) -> JobEntry:
        """The entry of ``job_id``, with its liveness checked (see :meth:`check`)."""
        return self.check(self._read(job_id))

    def token(self, job_id: str) -> str:
        """The REST token of a job; only the user who owns the job's directory gets it.

        Raises:
            JobError: The job belongs to another user, or its token file is missing.
        """
        directory = self.job_dir(job_id)
        _require_owner(directory, job_id)
        path = directory / TOKEN_FILE
        try:
            return path.read_text().strip()
        except FileNotFoundError:
            raise JobError(f"{path}: token file missing; the job cannot be controlled") from None
        except PermissionError:
            raise _foreign(directory, job_id) from None

    def entries(self) -> list[JobEntry]:
        """Every readable entry (liveness checked), oldest first."""
        return sorted((self.check(e) for e in self._iter_entries()), key=lambda e: (e.start_time_ms, e.job_id))

    def _iter_entries(self, foreign: list[str] | None = None) -> Iterator[JobEntry]:
        """Every readable entry; ids of entries another user keeps from us go to ``foreign``."""
        try:
            children = sorted(self.jobs_dir.iterdir()) if self.jobs_dir.is_dir() else []
        except PermissionError:
            raise JobError(f"{self.jobs_dir}: cannot read the job registry (it belongs to another user); "
                           f"set {HOME_ENV} to a directory of your own") from None
        for child in children:
            if not is_job_id(child.name):
                continue
            try:
                if not (child / ENTRY_FILE).is_file():
                    continue
                entry = self._read(child.name)
            except (_ForeignJobError, PermissionError):
                if foreign is not None:
                    foreign.append(child.name)
                continue
            except JobError:
                continue
            yield entry

    def find(self, reference: str) -> JobEntry:
        """The entry whose job id is ``reference`` or starts with it (unique prefix).

        Raises:
            JobError: No such job, or the prefix is ambiguous.
        """
        wanted = reference.strip().lower()
        if not is_job_id_prefix(wanted):
            raise JobError(f"invalid job id {reference!r}: expected (a prefix of) {JOB_ID_FORMAT}")
        if len(wanted) == 32 and _exists(self.jobs_dir / wanted / ENTRY_FILE):
            return self.get(wanted)
        foreign: list[str] = []
        matches = [e for e in self._iter_entries(foreign) if e.job_id.startswith(wanted)]
        if not matches:
            others = [job_id for job_id in foreign if job_id.startswith(wanted)]
            if len(others) == 1:
                raise _foreign(self.jobs_dir / others[0], others[0])
            raise JobError(f"no job {reference} in the registry {self.jobs_dir} (`statekit list --all` shows known jobs)")
        if len(matches) > 1:
            ids = ", ".join(sorted(e.job_id for e in matches))
            raise JobError(f"job id prefix {reference} is ambiguous: {ids}; give more characters")
        return self.check(matches[0])

    @staticmethod
    def check(entry: JobEntry) -> JobEntry:
        """``entry`` as a reader should see it: CRASHED if its process is gone or was reused."""
        if not entry.running:
            return entry
        if process_alive(entry.pid, entry.pid_start):
            return entry
        reason = f"process {entry.pid} is gone"
        if process_start_ticks(entry.pid) is not None:
            reason = f"process {entry.pid} is gone (the pid now belongs to another process)"
        return dataclasses.replace(entry, status=CRASHED, crash_reason=reason)


def running_job_of(job_id: str, job_dir_url: str) -> str | None:
    """Who runs job ``job_id`` per this user's registry (``pid 1234``), or None: the probe
    ``statekit dispose`` asks before deleting a checkpoint of ``job_dir_url``."""
    if not is_job_id(job_id):
        return None
    registry = JobRegistry()
    try:
        entry = registry.get(job_id)
    except (JobError, OSError):
        return None
    return f"pid {entry.pid}, registered in {registry.jobs_dir}" if entry.running else None


def _exists(path: Path) -> bool:
    """Whether ``path`` exists; a directory we may not search counts (its owner decides)."""
    try:
        return path.exists()
    except PermissionError:
        return True


class _ForeignJobError(JobError):
    """A job of another user (its registry files are not ours to read or use)."""


def _foreign(directory: Path, job_id: str) -> JobError:
    try:
        owner = f" (uid {directory.stat().st_uid})"
    except OSError:
        owner = ""
    return _ForeignJobError(f"job {job_id} belongs to another user{owner}: only the user who started it can control it "
                    f"({directory})")


def _require_owner(directory: Path, job_id: str) -> None:
    """Raise unless the calling user owns the job's directory (root included: uids decide)."""
    try:
        owner = directory.stat().st_uid
    except FileNotFoundError:
        raise JobError(f"no job {job_id} in the registry {directory.parent}") from None
    except PermissionError:
        raise _foreign(directory, job_id) from None
    if owner != os.geteuid():
        raise _foreign(directory, job_id)


def _make_private(path: Path) -> None:
    """Tighten a directory of ours to 0700; refuse one of another user or a shared sticky one."""
    info = path.stat()
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid != os.geteuid():
        raise BadInputError(f"{path}: belongs to another user (uid {info.st_uid}); the job registry keeps "
                            f"tokens and must be private: set {HOME_ENV} to a directory of your own")
    if mode & stat.S_ISVTX:
        raise BadInputError(f"{path}: is a shared directory (mode {mode:04o}); the job registry keeps tokens "
                            f"and must be private: set {HOME_ENV} to a directory of your own")
    if mode & 0o077:
        path.chmod(PRIVATE_MODE)
        log.warning("%s was accessible by other users (mode %04o); tightened to %04o", path, mode, PRIVATE_MODE)


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``directory`` (released when the block ends)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def current_process_entry(job_id: str, name: str, **fields: Any) -> JobEntry:
    """A CREATED entry for ``job_id`` run by the calling process."""
    pid = os.getpid()
    return JobEntry(
        job_id=job_id,
        name=name,
        pid=pid,
        pid_start=process_start_ticks(pid),
        status="CREATED",
        start_time_ms=int(time.time() * 1000),
        **fields,
    )
