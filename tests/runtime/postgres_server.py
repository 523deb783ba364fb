"""A throwaway PostgreSQL server for tests and benchmarks.

``initdb`` into a temporary directory, then ``postgres`` on 127.0.0.1 and a free port, TCP
only, with ``max_prepared_transactions`` > 0. The server refuses to run as root, so when
the caller is root both run as the ``postgres`` system user (``subprocess`` switches the
user in the child, so the process started is the postmaster itself and is stopped by its
pid). Binaries are looked up in ``$STATEKIT_PG_BIN``, the Debian layout
``/usr/lib/postgresql/<version>/bin`` (15 first) and ``PATH``.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["PostgresServer", "find_postgres_bin", "MISSING_BINARIES"]

PREFERRED_VERSION = "15"
MISSING_BINARIES = (
    "PostgreSQL server binaries (initdb, postgres) not found in $STATEKIT_PG_BIN, "
    "/usr/lib/postgresql/*/bin or PATH; install the Debian package postgresql"
)
PR_SET_PDEATHSIG = 1
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


def find_postgres_bin() -> Path | None:
    """The directory holding ``initdb`` and ``postgres``, or None."""
    candidates = [os.environ.get("STATEKIT_PG_BIN", "")]
    candidates.append(f"/usr/lib/postgresql/{PREFERRED_VERSION}/bin")
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    which = shutil.which("initdb")
    if which:
        candidates.append(str(Path(which).parent))
    for candidate in candidates:
        if candidate and all(os.access(Path(candidate) / name, os.X_OK) for name in ("initdb", "postgres")):
            return Path(candidate)
    return None


def _stop_with_parent() -> None:
    """In the server's child process: a fast shutdown (SIGINT) when the process that started it
    dies, so a killed test run leaves no server behind (Linux ``PR_SET_PDEATHSIG``; set after
    the user switch, which would clear it)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGINT)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresServer:
    """One server: ``start()``, ``stop()``, ``restart()``, ``close()`` (stop + delete its files).

    Args:
        bin_dir: Where ``initdb`` and ``postgres`` are.
        settings: Extra ``-c name=value`` server settings.
    """

    def __init__(self, bin_dir: Path, settings: dict[str, str] | None = None) -> None:
        self.bin_dir = bin_dir
        self.user = "postgres"
        self.settings = {"max_prepared_transactions": "64", "fsync": "off", "max_connections": "100",
                         **(settings or {})}
        self.base = Path(tempfile.mkdtemp(prefix="statekit-pg-"))
        self.data = self.base / "data"
        self.log_path = self.base / "server.log"
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._run_as = self._system_user() if os.geteuid() == 0 else None
        if self._run_as is not None:
            os.chown(self.base, self._run_as.pw_uid, self._run_as.pw_gid)
        self._initdb()

    def _system_user(self) -> pwd.struct_passwd:
        try:
            return pwd.getpwnam(self.user)
        except KeyError:
            raise RuntimeError(f"running as root, and PostgreSQL refuses root: create the {self.user!r} "
                               "system user (the Debian package postgresql does)") from None

    def _user_kwargs(self) -> dict[str, object]:
        if self._run_as is None:
            return {}
        return {"user": self._run_as.pw_uid, "group": self._run_as.pw_gid, "extra_groups": []}

    def _initdb(self) -> None:
        command = [str(self.bin_dir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", self.user,
                   "-E", "UTF8", "--locale=C", "--no-sync"]
        done = subprocess.run(command, cwd=self.base, capture_output=True, text=True, timeout=120,
                              **self._user_kwargs())  # type: ignore[call-overload]
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed ({done.returncode}): {done.stderr.strip()[-2000:]}")

    @property
    def dsn_base(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={self.user}"

    def dsn(self, dbname: str = "postgres") -> str:
        """A libpq connection string for database ``dbname``."""
        return f"{self.dsn_base} dbname={dbname} connect_timeout=10"

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        if self.process is not None and self.process.poll() is None:
            return
        command = [str(self.bin_dir / "postgres"), "-D", str(self.data), "-h", "127.0.0.1", "-p", str(self.port),
                   "-c", "unix_socket_directories=", "-c", "logging_collector=off"]
        for name, value in self.settings.items():
            command += ["-c", f"{name}={value}"]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(  # type: ignore[call-overload]
                command, cwd=self.base, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=_stop_with_parent, **self._user_kwargs())
        self._wait_ready()

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.process.returncode}: {self.log_tail()}")
            try:
                with psycopg.connect(self.dsn(), connect_timeout=2, autocommit=True) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"postgres did not accept connections in {START_TIMEOUT_S:.0f} s: "
                                       f"{self.log_tail()}") from None
                time.sleep(0.05)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server by its process: ``fast`` (SIGINT: sessions are ended, prepared
        transactions survive), ``immediate`` (SIGQUIT: crash-like) or ``smart`` (SIGTERM)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        sig = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}[mode]
        process.send_signal(sig)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def restart(self, down_s: float = 0.0) -> None:
        """Stop (fast), stay down ``down_s`` seconds, start again on the same port."""
        self.stop()
        time.sleep(down_s)
        self.start()

    def close(self) -> None:
        """Stop the server and delete its directory."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def log_tail(self, chars: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""

    def create_database(self, name: str) -> str:
        """Create database ``name``; return its DSN."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.dsn(name)
