"""One local Spark Connect server per user: ``statekit spark start|status|stop``.

A command that runs on Spark pays for a session: a JVM start, then its first job (10-60 s on
a busy machine). ``statekit spark start`` starts a Spark Connect server once, from the
installed pyspark (``spark-submit --class SparkConnectServer``), and ``export``, ``diff`` and
``bootstrap`` run on it while it runs (when neither ``--master`` nor ``--remote`` nor the
config names another Spark): each command connects as a client and pays no session start.

Invariants:
    * the server listens on 127.0.0.1 only, on a free port chosen at start (or ``--port``);
    * its state — pid, port, master, the interpreter its Python workers run — is one JSON file
      in the user's runtime directory (:func:`runtime_dir`: ``$STATEKIT_RUNTIME_DIR``, else
      ``$XDG_RUNTIME_DIR/statekit``, else ``<tmp>/statekit-<uid>``), a directory of mode 0700
      owned by the user (anything else is refused: another user must not point our commands at
      their server); the log file sits beside it;
    * a state file counts only while its pid is alive, runs the Connect server class, and the
      port answers; a stale file is removed by the next ``start``/``stop``;
    * the server runs in its own session (a Ctrl-C in the shell that started it does not stop
      it); ``stop`` ends its process group (the JVM, its Python workers) with SIGTERM, then
      SIGKILL after :data:`STOP_TIMEOUT_S`;
    * ``start``/``stop`` hold a lock file, so two at once start one server;
    * its Python workers run the interpreter that started it, statekit importable from the
      same installation: nothing is shipped to it (:attr:`SparkSettings.managed`), and a command
      run by another interpreter does not use it;
    * commands share one Spark Connect session of it (its id is in the state file): Spark
      Connect starts Python workers per session (``SPARK_JOB_ARTIFACT_UUID``), so a session
      per command would pay their start every time; each command tags its operations, and a
      Ctrl-C interrupts its own only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from statekit.statefmt.errors import BadInputError, StatekitError
from statekit.statefmt.json_contract import JsonShape

__all__ = ["RUNTIME_DIR_ENV", "SERVER_CLASS", "ServerInfo", "SparkServerStatus", "runtime_dir", "running_server",
           "server_status", "start_server", "stop_server", "warm_up"]

RUNTIME_DIR_ENV = "STATEKIT_RUNTIME_DIR"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
STATE_FILE = "spark-connect.json"
LOG_FILE = "spark-connect.log"
LOCK_FILE = "spark-connect.lock"
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 20.0
PROBE_TIMEOUT_S = 0.5
WARM_UP_ROWS = 250_000  # the export start runs: Python workers start, the JVM loads and compiles the export path


class SparkServerError(StatekitError):  # type: ignore[misc, unused-ignore]
    """The server did not start (it exited, or did not listen in time): the message names its log."""

    exit_code = 3


@dataclass(frozen=True)
class ServerInfo:
    """A running server, as its state file records it."""

    json_shape: ClassVar[JsonShape] = JsonShape(extra=("url",))

    pid: int
    port: int
    master: str
    python: str
    pyspark: str
    started_ms: int
    log: str
    session_id: str = ""

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def session_url(self) -> str:
        """The URL commands connect with: the server's one session (its Python workers stay
        warm between commands: a Spark Connect session starts workers of its own)."""
        return f"{self.url}/;session_id={self.session_id}" if self.session_id else self.url

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "url": self.url}


@dataclass(frozen=True)
class SparkServerStatus:
    """``statekit spark start|status|stop``: what the command did (``action``: started, running,
    stopped, not_running) and the server it is about."""

    json_shape: ClassVar[JsonShape] = JsonShape(extra=("running",))

    action: str
    server: ServerInfo | None
    runtime_dir: str
    message: str

    @property
    def running(self) -> bool:
        return self.action in ("started", "running")


def runtime_dir(environ: Mapping[str, str] | None = None, *, create: bool = True) -> str:
    """The user's runtime directory for statekit (mode 0700, owned by the user).

    Raises:
        BadInputError: It exists but belongs to another user or others may write or read it.
    """
    env = os.environ if environ is None else environ
    if env.get(RUNTIME_DIR_ENV):
        path = env[RUNTIME_DIR_ENV]
    elif env.get("XDG_RUNTIME_DIR"):
        path = os.path.join(env["XDG_RUNTIME_DIR"], "statekit")
    else:
        path = os.path.join(tempfile.gettempdir(), f"statekit-{os.getuid()}")
    if create:
        os.makedirs(path, mode=0o700, exist_ok=True)
    if os.path.isdir(path):
        info = os.stat(path)
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise BadInputError("the runtime directory must belong to this user with mode 0700 (it holds the "
                                "address of your Spark server); fix it or set $STATEKIT_RUNTIME_DIR", path=path)
    return path


def _state_path(directory: str) -> str:
    return os.path.join(directory, STATE_FILE)


def _read_state(directory: str) -> ServerInfo | None:
    try:
        with open(_state_path(directory), encoding="utf-8") as f:
            data = json.load(f)
        return ServerInfo(**{key: data[key] for key in ServerInfo.__dataclass_fields__ if key in data})
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_state(directory: str, info: ServerInfo) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".spark-connect-", dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(asdict(info), f)
    os.replace(tmp, _state_path(directory))


def _alive(info: ServerInfo) -> bool:
    """The recorded process runs the Connect server (not a reused pid) and its port answers."""
    try:
        with open(f"/proc/{info.pid}/cmdline", "rb") as f:
            if SERVER_CLASS.encode() not in f.read():
                return False
    except OSError:
        return False
    return _answers(info.port, PROBE_TIMEOUT_S)


def _answers(port: int, timeout: float) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def running_server(environ: Mapping[str, str] | None = None) -> ServerInfo | None:
    """The user's server when it runs and serves this interpreter's statekit, else ``None``
    (no runtime directory is created to find out)."""
    try:
        directory = runtime_dir(environ, create=False)
    except BadInputError:
        return None
    info = _read_state(directory)
    if info is None or os.path.realpath(info.python) != os.path.realpath(sys.executable) or not _alive(info):
        return None
    return info


@contextlib.contextmanager
def _locked(directory: str) -> Iterator[None]:
    with open(os.path.join(directory, LOCK_FILE), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def server_status() -> SparkServerStatus:
    """Whether the user's server runs (and where)."""
    directory = runtime_dir()
    info = _read_state(directory)
    if info is not None and _alive(info):
        return SparkServerStatus("running", info, directory, f"Spark Connect server running at {info.url}")
    return SparkServerStatus("not_running", None, directory, "no Spark Connect server runs: statekit spark start")


def start_server(master: str = "local[*]", conf: Mapping[str, str] | None = None, port: int | None = None,
                 timeout_s: float = START_TIMEOUT_S) -> SparkServerStatus:
    """Start the user's server (or find it running) and return once it listens and ran a small
    export (:func:`warm_up`).

    Raises:
        BadInputError: No pyspark or no Spark Connect client packages, a port in use.
        SparkServerError: The server exited or did not listen within ``timeout_s``; its log is named.
    """
    from statekit.spark.session import connect_client_missing

    directory = runtime_dir()
    with _locked(directory):
        info = _read_state(directory)
        if info is not None and _alive(info):
            return SparkServerStatus("running", info, directory, f"Spark Connect server already running at {info.url}")
        _remove_stale(directory)
        spark_home = _spark_home()
        missing = connect_client_missing()
        if missing:
            raise BadInputError(f"statekit spark start needs the Spark Connect client packages, missing: "
                                f"{', '.join(missing)} (pip install 'statekit[connect]')")
        port = port or _free_port()
        if _answers(port, PROBE_TIMEOUT_S):
            raise BadInputError(f"port {port} on 127.0.0.1 is in use; choose another with --port")
        log = os.path.join(directory, LOG_FILE)
        command = _command(spark_home, master, port, conf or {})
        env = {**os.environ, "SPARK_HOME": spark_home, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
               "SPARK_LOG_DIR": directory}
        with open(log, "wb") as out:
            process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True, close_fds=True)
        try:
            _wait_listening(process, port, log, timeout_s)
        except BaseException:
            _end_group(process.pid)
            raise
        import pyspark

        info = ServerInfo(process.pid, port, master, sys.executable, pyspark.__version__, int(time.time() * 1000), log,
                          str(uuid.uuid4()))
        _write_state(directory, info)
    warm = warm_up(info)
    return SparkServerStatus("started", info, directory, f"Spark Connect server started at {info.url}"
                             + ("" if warm is None else f" (not warmed up: {warm})"))


def warm_up(info: ServerInfo) -> str | None:
    """Run a small export on the server's shared session, so that the first real command does
    not pay for its Python workers' start and the JVM's first loading of the export's classes;
    returns why it failed (the server serves anyway), or ``None``."""
    import shutil

    from statekit.spark.engine import export
    from statekit.spark.export import ExportSpec
    from statekit.spark.session import SparkSettings, stop_spark
    from statekit.statefmt.metadata import StateDescriptor, StateKind
    from statekit.writers.savepoint_writer import SavepointWriter

    work = tempfile.mkdtemp(prefix="statekit-warm-up-")
    try:
        count = StateDescriptor("count", StateKind.VALUE, value_type="int")
        SavepointWriter.new_savepoint(128).with_operator(
            "warm-up", {count: [(f"key-{i}", i) for i in range(WARM_UP_ROWS)]}, parallelism=2,
        ).write(os.path.join(work, "savepoint"))
        settings = SparkSettings(remote=info.session_url, managed=True)
        export(ExportSpec(os.path.join(work, "savepoint"), os.path.join(work, "export"), spark=settings), "spark")
        stop_spark()
        return None
    except StatekitError as error:
        return str(error)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def stop_server() -> SparkServerStatus:
    """Stop the user's server (its process group); nothing to do when none runs."""
    directory = runtime_dir()
    with _locked(directory):
        info = _read_state(directory)
        if info is None or not _alive(info):
            _remove_stale(directory)
            return SparkServerStatus("not_running", None, directory, "no Spark Connect server was running")
        _end_group(info.pid)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_state_path(directory))
    return SparkServerStatus("stopped", info, directory, f"Spark Connect server at {info.url} stopped")


def _remove_stale(directory: str) -> None:
    """Forget a state file whose server is gone (its process group ended first, if it lingers)."""
    info = _read_state(directory)
    if info is None:
        return
    if _process_runs_server(info.pid):
        _end_group(info.pid)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_state_path(directory))


def _process_runs_server(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return SERVER_CLASS.encode() in f.read()
    except OSError:
        return False


def _end_group(pid: int) -> None:
    """SIGTERM to the server's process group, SIGKILL after STOP_TIMEOUT_S; returns once the
    server process is gone."""
    for sig, wait_s in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # reap it when this process started it
            if not os.path.exists(f"/proc/{pid}") or _zombie(pid):
                return
            time.sleep(0.1)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def _spark_home() -> str:
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise BadInputError("statekit spark start needs PySpark: pip install 'statekit[spark,connect]'")
    return os.path.dirname(spec.origin)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _command(spark_home: str, master: str, port: int, conf: Mapping[str, str]) -> list[str]:
    """``spark-submit`` of the Connect server with statekit's session settings (quiet, loopback, UTC, ...)."""
    from statekit.spark.session import base_conf

    settings = {**base_conf(master, verbose=False), "spark.app.name": "statekit-connect",
                "spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(port),
                **dict(conf)}
    command = [os.path.join(spark_home, "bin", "spark-submit"), "--master", master, "--class", SERVER_CLASS,
               "--name", "statekit-connect"]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, "spark-internal"]


def _wait_listening(process: subprocess.Popen[bytes], port: int, log: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SparkServerError(f"the Spark Connect server exited with code {process.returncode} while starting; "
                                   f"see {log}: {_log_tail(log)}")
        if _answers(port, PROBE_TIMEOUT_S):
            return
        time.sleep(0.25)
    raise SparkServerError(f"the Spark Connect server did not listen on 127.0.0.1:{port} within {timeout_s:.0f} s "
                           f"and was stopped; see {log}")


def _log_tail(log: str) -> str:
    try:
        with open(log, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 2000))
            lines = [line.strip() for line in f.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return "(no log)"
    return " | ".join(lines[-3:]) or "(empty)"
