"""The one SparkSession of a statekit process: embedded, quiet, on the loopback interface.

Invariants:
    * one session per process: the first :func:`get_spark` call starts it, later calls
      return it (a JVM holds one SparkContext; its master cannot change afterwards);
    * quiet by default: log level ERROR from the first JVM line on (a log4j2 file is
      passed to the driver JVM), no console progress bar, no UI; ``verbose=True`` keeps
      Spark's own log configuration at level WARN;
    * local mode binds the driver to 127.0.0.1 only;
    * a JVM this process launches maps the class archive of its Spark installation, or
      records one as it exits (:mod:`statekit.spark.class_archive`, ``spark.statekit.classArchive``);
    * Python workers run the interpreter of this process (``PYSPARK_PYTHON`` when set);
      on a cluster statekit ships itself to them (:mod:`statekit.spark.shipping`);
    * the ``statekit`` data source is registered and Python filter pushdown is enabled;
    * ``remote`` (``sc://HOST:PORT``) makes it a Spark Connect session instead: no local JVM,
      statekit shipped to the server as a Python artifact, and every classic-only call
      (SparkContext, the status tracker, Hadoop's FileSystem) has a Connect path or a
      one-line refusal (:func:`is_connect`).
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import re
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from statekit.statefmt import errors
from statekit.statefmt.errors import BadInputError, StatekitError
from statekit.statefmt.layout import staging_dir_name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

T = TypeVar("T")

__all__ = [
    "SparkSettings", "get_spark", "stop_spark", "spark_log_path", "spark_errors", "map_in_arrow", "map_slices",
    "SparkJobError", "OutputDir", "DEFAULT_MASTER", "QUIET_LOG4J2", "is_connect", "default_parallelism",
    "CONNECT_SCHEME", "base_conf", "connect_client_missing", "connect_address", "check_reachable", "abort_spark",
]

CONNECT_SCHEME = "sc://"
# the client modules of ``pyspark[connect]`` (statekit's ``connect`` extra)
CONNECT_CLIENT_MODULES = ("pandas", "numpy", "grpc", "grpc_status", "zstandard")
# the runtime SQL settings of _base_conf, set on a Connect session (the rest are static there)
_CONNECT_SQL_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}

DEFAULT_MASTER = "local[*]"
CONNECT_DEFAULT_PORT = 15002
CONNECT_TIMEOUT_S = 3.0  # a --remote where nothing accepts a connection fails within this (exit 2)
CONNECT_FIRST_CALL_S = 6.0  # ... and one that accepts but does not answer Spark Connect's first call
CONNECT_RETRIES = 4  # of a failed Connect call, backing off 50 ms .. 1 s: a few seconds, not 10 minutes
# the tag of this process's Spark Connect operations (a session may be shared: statekit spark start)
OPERATION_TAG = f"statekit-{os.getpid()}-{os.urandom(4).hex()}"
ABORT_GRACE_S = 1.0  # a Ctrl-C waits this long for the killed JVM (and a Connect server's interrupt)

QUIET_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
"""

_LOCK = threading.Lock()
_SESSION: SparkSession | None = None
_JVM: Any = None  # the JVM this process launched (a Popen), ended by abort_spark
_PREVIOUS_HANDLER: Any = None  # the SIGINT handler _on_interrupt replaced
_ABORTED = False  # abort_spark ran: calls that fail now fail because of it
_SHARED_SESSION = False  # the Connect session is the shared one of `statekit spark start`
_KEEP_LOG = False


def base_conf(master: str, verbose: bool, class_archive: str | None = "false") -> dict[str, str]:
    """statekit's Spark settings; ``class_archive`` is the ``spark.statekit.classArchive`` value
    of a session that launches its JVM (:mod:`statekit.spark.class_archive`)."""
    conf = {
        "spark.master": master,
        "spark.app.name": "statekit",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.python.filterPushdown.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executorEnv.PYTHONHASHSEED": "0",
    }
    if master.startswith("local"):
        conf.update({
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.host": "127.0.0.1",
            "spark.sql.shuffle.partitions": str(2 * _local_cores(master)),
        })
    from statekit.spark.shipping import is_local_master

    if is_local_master(master):  # the workers run this interpreter, statekit importable (no shipping)
        conf["spark.python.daemon.module"] = "statekit.spark.worker_daemon"
    from statekit.spark.class_archive import java_options as class_archive_options

    java_options = [] if verbose else [f"-Dlog4j.configurationFile=file:{_quiet_log4j2_file()}"]
    java_options += class_archive_options(class_archive)
    if java_options:
        conf["spark.driver.extraJavaOptions"] = " ".join(java_options)
    return conf


def _local_cores(master: str) -> int:
    inner = master[master.find("[") + 1:master.find("]")] if "[" in master else "1"
    head = inner.split(",")[0]
    if head == "*":
        return os.cpu_count() or 1
    return max(1, int(head)) if head.isdigit() else 1


def _quiet_log4j2_file() -> str:
    path = os.path.join(tempfile.gettempdir(), f"statekit-log4j2-{os.getuid()}.properties")
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == QUIET_LOG4J2:
                return path
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(prefix=".statekit-log4j2-", dir=os.path.dirname(path))
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(QUIET_LOG4J2)
    os.replace(tmp, path)
    return path


@dataclass(frozen=True)
class SparkSettings:
    """Where and how a command's Spark runs (``--master`` or ``--remote``, ``--conf``, ``--verbose``).

    Attributes:
        master: Spark master URL (``local[*]`` runs embedded; ``spark://``, ``yarn``, ...).
        conf: Extra Spark configuration.
        verbose: Keep Spark's logs (level WARN) and show the JVM's output.
        remote: A Spark Connect server (``sc://HOST:PORT``); when set, ``master`` is unused.
        managed: ``remote`` is the server of ``statekit spark start`` (:mod:`statekit.spark.connect_server`),
            chosen because nothing else was asked for: its Python workers run this interpreter
            with statekit importable, so nothing is shipped to it.
    """

    master: str = DEFAULT_MASTER
    conf: Mapping[str, str] = field(default_factory=dict)
    verbose: bool = False
    remote: str | None = None
    managed: bool = False

    def __post_init__(self) -> None:
        if self.remote is not None and not self.remote.startswith(CONNECT_SCHEME):
            raise BadInputError(f"--remote {self.remote!r} is not a Spark Connect URL (sc://HOST:PORT)")

    @property
    def target(self) -> str:
        """What the session reaches: the Connect URL, else the master."""
        return self.remote or self.master

    def master_of(self, session: SparkSession) -> str:
        """The master ``session`` runs on, as results name it (over Connect the server's URL,
        without its parameters: a session id, a token)."""
        if is_connect(session) and self.remote:
            host, port = connect_address(self.remote)
            return f"{CONNECT_SCHEME}{host}:{port}"
        return str(session.sparkContext.master)

    def session(self) -> SparkSession:
        """The process's session (:func:`get_spark`) with these settings."""
        return get_spark(self.master, self.conf, self.verbose, remote=self.remote, ship=not self.managed)


def get_spark(
    master: str = DEFAULT_MASTER, conf: Mapping[str, str] | None = None, verbose: bool = False,
    remote: str | None = None, ship: bool = True,
) -> SparkSession:
    """The process's SparkSession, started on first use.

    Args:
        master: Spark master URL (``local[*]`` runs embedded; ``spark://``, ``yarn``, ... reach a cluster).
        conf: extra Spark configuration (``--conf k=v``); applied at start, and as runtime
            SQL configuration when the session exists already.
        verbose: keep Spark's logs (level WARN) instead of errors only.
        remote: a Spark Connect URL (``sc://HOST:PORT``): a Connect session instead of a JVM.
        ship: send statekit to a Connect server (not to the server of ``statekit spark start``,
            whose workers import this installation).

    Returns:
        The session, with the ``statekit`` data source registered.
    """
    global _SESSION
    with _LOCK:
        if _SESSION is not None and _alive(_SESSION):
            if is_connect(_SESSION) != (remote is not None):
                raise BadInputError("this process holds a " + ("Spark Connect" if is_connect(_SESSION) else "classic")
                                    + " Spark session already: one kind of session per process")
            _apply_runtime_conf(_SESSION, conf or {})
            return _SESSION
        global _SHARED_SESSION
        _SHARED_SESSION = remote is not None and not ship
        try:
            session = _new_session(master, conf or {}, verbose, remote, ship)
        except BaseException:  # a Ctrl-C while the JVM starts (pyspark's own handler) leaves none behind
            abort_spark()
            _end_launching_jvms()
            raise
        _SESSION = session
        _interrupt_ends_spark()
        return session


def _new_session(master: str, conf: Mapping[str, str], verbose: bool, remote: str | None, ship: bool) -> SparkSession:
    if remote is not None:
        session = _start_remote(remote, conf, ship)
    else:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is None:
            session = _start(master, conf, verbose)
        else:
            session = active
            _apply_runtime_conf(session, conf)
        _interrupt_ends_spark()  # over the handler pyspark's SparkContext installed
        session.sparkContext.setLogLevel("WARN" if verbose else "ERROR")
    from statekit.spark.source import register_data_source

    register_data_source(session)
    return session


def _start(master: str, conf: Mapping[str, str], verbose: bool) -> SparkSession:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    from statekit.spark.class_archive import CONF as CLASS_ARCHIVE_CONF

    spark_conf = SparkConf()
    launching = SparkContext._gateway is None  # only a JVM started here takes driver JVM options
    # the user's own driver JVM options replace statekit's, the archive's too
    own_options = "spark.driver.extraJavaOptions" in conf
    class_archive = conf.get(CLASS_ARCHIVE_CONF) if launching and not own_options else "false"
    for key, value in {**base_conf(master, verbose, class_archive), **dict(conf)}.items():
        spark_conf.set(key, value)
    if launching:
        # The JVM prints a few lines before log4j starts (module warnings) and copies the
        # Python workers' stderr into its own: quiet mode sends both to a log file. The JVM
        # process is kept: a Ctrl-C ends it (abort_spark).
        from pyspark.java_gateway import launch_gateway

        popen_kwargs: dict[str, Any] = {}
        if not verbose:
            log = open(spark_log_path(), "wb")  # noqa: SIM115 - lives as long as the JVM
            atexit.register(_remove_log)
            popen_kwargs = {"stdout": log, "stderr": log}
        gateway = launch_gateway(spark_conf, popen_kwargs=popen_kwargs)  # type: ignore[no-untyped-call]
        global _JVM
        _JVM = gateway.proc
        _interrupt_ends_spark()
        SparkContext._ensure_initialized(gateway=gateway, conf=spark_conf)
    session = SparkSession.builder.config(conf=spark_conf).getOrCreate()
    from statekit.spark.shipping import ship_package

    ship_package(session, master)  # before the data source is registered: it captures the includes
    return session


def _start_remote(url: str, conf: Mapping[str, str], ship: bool = True) -> SparkSession:
    """A Spark Connect session on ``url`` with statekit shipped to the server's Python workers.

    Nothing answering at ``url`` fails within :data:`CONNECT_TIMEOUT_S`, before the client is
    imported (its own retries would wait 10 minutes); the client retries a failed call for
    seconds, not minutes (:func:`_bounded_retries`)."""
    missing = connect_client_missing()
    if missing:
        raise BadInputError(f"--remote needs the Spark Connect client packages, missing: {', '.join(missing)} "
                            "(pip install 'statekit[connect]')")
    check_reachable(url)
    from pyspark.sql import SparkSession

    with spark_errors():
        session = SparkSession.builder.remote(url).getOrCreate()
        _bounded_retries(session)
        session.addTag(OPERATION_TAG)  # a Ctrl-C interrupts this process's operations only
        _answers_within(session, url, CONNECT_FIRST_CALL_S)
        # the server of `statekit spark start` has statekit's settings: only the user's are set
        _apply_runtime_conf(session, {**({} if not ship else _CONNECT_SQL_CONF), **dict(conf)})
        if ship:
            from statekit.spark.shipping import ship_package

            ship_package(session, url)  # before the data source is registered, as with a classic session
    return session


def connect_address(url: str) -> tuple[str, int]:
    """(host, port) of a ``sc://HOST[:PORT][/;params]`` URL (Spark Connect's default port 15002).

    Raises:
        BadInputError: No host, or a port that is not a number.
    """
    rest = url[len(CONNECT_SCHEME):] if url.startswith(CONNECT_SCHEME) else url
    hostport = rest.split("/", 1)[0].split(";", 1)[0]
    host, sep, port = hostport.rpartition(":") if not hostport.endswith("]") else (hostport, "", "")
    if not sep:
        host, port = hostport, str(CONNECT_DEFAULT_PORT)
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadInputError(f"--remote {url!r} is not a Spark Connect URL (sc://HOST:PORT)")
    return host, int(port)


def check_reachable(url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse ``url`` when nothing accepts a connection at its address within ``timeout_s``.

    Raises:
        BadInputError: Connection refused, no route, unknown host, or no answer in time (exit 2).
    """
    import socket

    host, port = connect_address(url)
    tls = "use_ssl=true" in url.lower()
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as connection:
            if tls or _speaks_http2(connection):
                return
            cause = f"it accepted a connection but did not answer gRPC's HTTP/2 greeting within {timeout_s:.0f} s"
    except TimeoutError:
        cause = f"no answer within {timeout_s:.0f} s"
    except OSError as error:
        cause = error.strerror or type(error).__name__
    raise BadInputError(f"no Spark Connect server answers at {host}:{port} ({cause}); start one "
                        "(statekit spark start, for this machine) or check the address", path=url)


_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # + empty SETTINGS


def _speaks_http2(connection: Any) -> bool:
    """Whether the peer answers an HTTP/2 client preface with a frame (gRPC servers send SETTINGS)."""
    try:
        connection.sendall(_HTTP2_PREFACE)
        header = connection.recv(9)
    except OSError:  # TimeoutError included: a silent peer
        return False
    return len(header) >= 4 and header[3] == 4


def _answers_within(session: SparkSession, url: str, timeout_s: float) -> None:
    """The session's first call, given ``timeout_s`` to answer (a port that accepts but never
    speaks Spark Connect would otherwise hold the command until gRPC gives up).

    Raises:
        BadInputError: No answer in time (the client is closed: its exit hook sends nothing).
    """
    done = threading.Event()
    failure: list[BaseException] = []

    def first_call() -> None:
        try:
            session.conf.get("spark.sql.session.timeZone", None)
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
            failure.append(error)
        finally:
            done.set()

    threading.Thread(target=first_call, name="statekit-connect-first-call", daemon=True).start()
    if not done.wait(timeout_s):
        try:
            session.client.close()
        except Exception:  # noqa: BLE001
            pass
        host, port = connect_address(url)
        raise BadInputError(f"no Spark Connect server answers at {host}:{port} (it accepted a connection but did "
                            f"not answer within {timeout_s:.0f} s); check the address", path=url)
    if failure:
        raise failure[0]


def _bounded_retries(session: SparkSession) -> None:
    """The Connect client's retries of a failed call, bounded to seconds (its default waits at
    least 10 minutes, also at exit and after a Ctrl-C)."""
    try:
        from pyspark.sql.connect.client.retries import DefaultPolicy

        session.client.set_retry_policies([DefaultPolicy(max_retries=CONNECT_RETRIES, max_backoff=1000,
                                                         max_server_retry_delay=5000)])
    except Exception:  # noqa: BLE001 - an older client without the policy API keeps its own
        return


def connect_client_missing() -> list[str]:
    """The Spark Connect client modules that are not installed (statekit's ``connect`` extra)."""
    return [name for name in CONNECT_CLIENT_MODULES if importlib.util.find_spec(name) is None]


def is_connect(session: SparkSession) -> bool:
    """True for a Spark Connect session (no SparkContext, no JVM in this process)."""
    return type(session).__module__.startswith("pyspark.sql.connect")


def default_parallelism(session: SparkSession) -> int:
    """The session's default parallelism; over Connect, from ``spark.default.parallelism`` or a local master."""
    if not is_connect(session):
        return int(session.sparkContext.defaultParallelism)
    configured = session.conf.get("spark.default.parallelism", None)
    if configured and configured.isdigit():
        return max(1, int(configured))
    master = session.conf.get("spark.master", None) or ""
    return _local_cores(master) if master.startswith("local") else 2


def _remove_log() -> None:
    """The JVM log is kept only when a Spark job failed (the error message names it)."""
    if not _KEEP_LOG:
        try:
            os.unlink(spark_log_path())
        except OSError:
            pass


def spark_log_path() -> str:
    """Where a quiet session's JVM output goes (``--verbose`` prints it instead)."""
    return os.path.join(tempfile.gettempdir(), f"statekit-spark-{os.getuid()}-{os.getpid()}.log")


def _alive(session: SparkSession) -> bool:
    if is_connect(session):
        return not bool(getattr(session, "is_stopped", False))
    context = session.sparkContext
    return getattr(context, "_jsc", None) is not None


def _apply_runtime_conf(session: SparkSession, conf: Mapping[str, str]) -> None:
    for key, value in conf.items():
        try:
            if session.conf.get(key, None) != value:
                session.conf.set(key, value)
        except Exception:  # noqa: BLE001 - static confs cannot change on a running session
            continue


def _interrupt_ends_spark() -> None:
    """A Ctrl-C (SIGINT) of this process first ends its Spark work (:func:`abort_spark`), then
    raises KeyboardInterrupt as usual: so a command ends within seconds, leaves no JVM or Python
    worker behind, and its staged output is removed only once nothing writes into it any more.
    Installed from the main thread only, over Python's default handler or pyspark's (which
    only asks the JVM to cancel its jobs, and leaves the JVM running after this process exits);
    any other handler (a job runner's) is left alone."""
    global _PREVIOUS_HANDLER
    if threading.current_thread() is not threading.main_thread():
        return
    current = signal.getsignal(signal.SIGINT)
    if current is _on_interrupt:
        return
    pyspark_handler = getattr(current, "__qualname__", "").startswith("SparkContext._do_init")
    if current is signal.default_int_handler or pyspark_handler:
        _PREVIOUS_HANDLER = current
        signal.signal(signal.SIGINT, _on_interrupt)


def _on_interrupt(signum: int, frame: Any) -> None:
    if _JVM is None and _SESSION is None and callable(_PREVIOUS_HANDLER):
        _PREVIOUS_HANDLER(signum, frame)  # nothing of ours runs: pyspark's or Python's own
    abort_spark()
    raise KeyboardInterrupt


def abort_spark(grace_s: float = ABORT_GRACE_S) -> None:
    """End this process's Spark work now: the JVM it launched (SIGKILL: its Python workers end
    with it, their daemon sees the JVM gone), or every operation of its Connect session on the
    server; waits at most ``grace_s`` and never raises. The session is gone afterwards; the
    next :func:`get_spark` starts a new one."""
    global _SESSION, _JVM, _ABORTED
    _ABORTED = True
    import logging

    logging.disable(logging.CRITICAL)  # py4j and the Connect client log every call the ending cut off
    session, _SESSION = _SESSION, None
    if session is not None and is_connect(session):
        _interrupt_connect(session, grace_s)
    process, _JVM = _JVM, None
    if process is None or process.poll() is not None:
        return
    import subprocess

    workers = _descendants(process.pid)  # Python workers, daemons, planners: before they lose their parent
    process.kill()  # at once: a SIGTERM runs Spark's shutdown hooks, which wait for the running tasks
    for pid in workers:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:  # a loaded machine: the kernel reaps it soon; never raise from here
        pass
    from pyspark import SparkContext

    # pyspark's globals would point at the dead JVM: a later call fails at once instead of hanging
    SparkContext._active_spark_context = None
    SparkContext._gateway = None
    SparkContext._jvm = None


def _children() -> dict[int, list[int]]:
    """Every process's children, from ``/proc`` (empty where there is none)."""
    children: dict[int, list[int]] = {}
    if not os.path.isdir("/proc"):
        return children
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    parent = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    return children


def _descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs, at this moment."""
    children = _children()
    found: list[int] = []
    frontier = [pid]
    while frontier:
        frontier = [child for parent in frontier for child in children.get(parent, []) if child not in found]
        found += frontier
    return found


def _end_launching_jvms() -> None:
    """Kill the Spark JVMs this process started whose launch did not finish (an interrupted
    ``launch_gateway`` returns no process to end): its children running ``SparkSubmit``."""
    for child in _children().get(os.getpid(), []):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                command = f.read()
        except OSError:
            continue
        if b"org.apache.spark.deploy.SparkSubmit" in command or b"spark-submit" in command:
            for pid in [child, *_descendants(child)]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    continue
            try:
                os.waitpid(child, 0)
            except ChildProcessError:
                continue


def _interrupt_connect(session: SparkSession, grace_s: float) -> None:
    """Interrupt this process's operations of ``session`` on its server (tagged
    :data:`OPERATION_TAG`) and close the client (so its exit hook sends nothing more), waiting
    at most ``grace_s``."""
    def interrupt() -> None:
        try:
            session.interruptTag(OPERATION_TAG)
        except Exception:  # noqa: BLE001 - the server may be gone: nothing is left to interrupt
            pass
        try:
            session.client.close()
        except Exception:  # noqa: BLE001
            pass

    worker = threading.Thread(target=interrupt, name="statekit-connect-interrupt", daemon=True)
    worker.start()
    worker.join(grace_s)


def stop_spark() -> None:
    """Stop the process's session (tests and long-lived tools; the CLI lets exit stop it). The
    shared session of the server of ``statekit spark start`` stays on the server: only this
    process's connection to it ends."""
    global _SESSION
    with _LOCK:
        if _SESSION is not None:
            if is_connect(_SESSION) and _SHARED_SESSION:
                _SESSION.release_session_on_close = False  # type: ignore[union-attr, attr-defined, unused-ignore]
            _SESSION.stop()
            _SESSION = None


def map_in_arrow(frame: DataFrame, func: Callable[[Iterator[Any]], Iterator[Any]],
                 schema: str | StructType) -> DataFrame:
    """``frame.mapInArrow(func, schema)``, also where pandas is not installed.

    The Arrow map path moves Arrow batches only; pyspark merely checks for pandas on the
    driver before building the UDF. Without pandas the same UDF is built directly.
    """
    if is_connect(frame.sparkSession):
        return frame.mapInArrow(func, schema)  # the Connect client requires pandas itself
    try:
        return frame.mapInArrow(func, schema)
    except ImportError:
        pass
    except Exception as exc:
        if "PACKAGE_NOT_INSTALLED" not in str(exc) and "pandas" not in str(exc).lower():
            raise
    from pyspark.sql import DataFrame as SparkDataFrame
    from pyspark.sql.udf import _create_udf
    from pyspark.util import PythonEvalType

    udf = _create_udf(func, schema, PythonEvalType.SQL_MAP_ARROW_ITER_UDF)
    column = udf(*[frame[c] for c in frame.columns])
    return SparkDataFrame(frame._jdf.mapInArrow(column._jc, False, None), frame.sparkSession)


def map_slices(spark: SparkSession, slices: Sequence[T], read: Callable[[T], Iterator[Any]],
               schema: str | StructType) -> DataFrame:
    """A DataFrame of ``read(slice)`` (Arrow record batches) for every slice, one task per
    slice: :func:`map_in_arrow` over ``spark.range``, whose row ids name the slices. The
    slices are planned in this process, so no Python planner process starts."""
    tasks = spark.range(0, len(slices), 1, max(1, len(slices)))
    return map_in_arrow(tasks, _EachSlice(tuple(slices), read), schema)


@dataclass(frozen=True)
class _EachSlice(Generic[T]):
    """The ``mapInArrow`` function of :func:`map_slices`: reads the slices its task's ids name."""

    slices: tuple[T, ...]
    read: Callable[[T], Iterator[Any]]

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                yield from self.read(self.slices[index])


class SparkJobError(StatekitError):  # type: ignore[misc, unused-ignore]
    """A Spark job failed for a reason that is not a statekit error (cluster, resources)."""

    exit_code = 3


_ERROR_LINE = re.compile(r"statekit\.statefmt\.errors\.(\w+): (.+)")


@contextmanager
def spark_errors(verbose: bool = False) -> Iterator[None]:
    """Turn a failed Spark job into the statekit error raised inside it (by name), or SparkJobError.

    Executors raise statekit errors (a damaged block, an untrusted serializer); Spark wraps
    them in a JVM exception whose text carries the Python traceback. The last statekit
    error line of that text is re-raised as its own class, so the CLI exit code and message
    are the same as with the local engine. After a Ctrl-C (:func:`abort_spark`), whatever the
    dead JVM or the interrupted server makes a call raise is the KeyboardInterrupt it follows.
    """
    try:
        yield
    except StatekitError:
        raise
    except Exception as exc:
        if _ABORTED:
            raise KeyboardInterrupt from exc
        if not _is_spark_exception(exc):
            raise
        text = str(exc)
        found = _ERROR_LINE.findall(text)
        if found:
            name, message = found[-1]
            cls = getattr(errors, name, None)
            if isinstance(cls, type) and issubclass(cls, StatekitError):
                raise _rebuild(cls, message.strip()) from exc
        global _KEEP_LOG
        _KEEP_LOG = True
        first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
        hint = f"; Spark's log: {spark_log_path()}" if not verbose else ""
        raise SparkJobError(f"Spark job failed: {first[:300]}{hint}") from exc


def _is_spark_exception(exc: BaseException) -> bool:
    module = type(exc).__module__ or ""
    return module.startswith(("pyspark", "py4j"))


def _rebuild(cls: type[StatekitError], message: str) -> StatekitError:
    return cls(message)


# ---------------------------------------------------------------- the output directory


class OutputDir:
    """The output of a Spark job and its hidden staging sibling, on the local disk or a Hadoop filesystem.

    :meth:`staged` yields the staging directory (``statefmt.layout.staging_dir_name``) and
    publishes it as the output on a clean exit; a failure removes it and leaves nothing.
    """

    def __init__(self, url: str, spark: SparkSession | None = None, inputs: Sequence[str] = ()) -> None:
        self.url = url
        self._spark = spark
        self.inputs = tuple(inputs)

    @classmethod
    def for_url(cls, spark: SparkSession, url: str, inputs: Sequence[str] = ()) -> OutputDir:
        """The output at ``url``; it must lie outside every one of ``inputs`` (what the job reads)."""
        if not url:
            raise BadInputError("empty output path")
        if "://" not in url or url.startswith("file://"):
            return _LocalOutputDir(os.path.abspath(url.removeprefix("file://")), spark, inputs)
        if is_connect(spark):
            raise BadInputError("over Spark Connect the output must be a local path shared with the server "
                                "(Hadoop's FileSystem is not reachable from a Connect client)", path=url)
        return _HadoopOutputDir(url.rstrip("/"), spark, inputs)

    def join(self, directory: str, relative: str) -> str:
        return f"{directory.rstrip('/')}/{relative}"

    def staged(self) -> AbstractContextManager[str]:
        raise NotImplementedError

    def count(self, staging: str, relative: str, fmt: str) -> tuple[int | None, int | None]:
        """(rows, files) of the table written at ``relative``; unknown on a Hadoop filesystem."""
        return None, None


class _LocalOutputDir(OutputDir):
    """Staged like every local output of statekit (:func:`statekit.writers.staging.staged_output_dir`)."""

    @contextmanager
    def staged(self) -> Iterator[str]:
        from statekit.writers.staging import staged_output_dir

        with staged_output_dir(self.url, parent_must_exist=True, inputs=self.inputs) as (_, staging):
            yield staging

    def count(self, staging: str, relative: str, fmt: str) -> tuple[int | None, int | None]:
        from statekit.spark.formats import count_rows

        return count_rows(os.path.join(staging, relative), fmt)


def _appeared(url: str) -> BadInputError:
    return BadInputError("something appeared at the output while this job ran; it was left as it is and this "
                         "result was discarded: choose a new path", path=url)


class _HadoopOutputDir(OutputDir):
    """Publishing through Hadoop's FileSystem (atomic on HDFS; a copy on object stores)."""

    @contextmanager
    def staged(self) -> Iterator[str]:
        self.check()
        parent, name = self.url.rsplit("/", 1)
        staging = f"{parent}/{staging_dir_name(name)}"
        try:
            yield staging
            self.publish(staging)
        except BaseException:
            self.remove(staging)
            raise

    def _fs_path(self, url: str) -> tuple[Any, Any]:
        assert self._spark is not None
        jvm = self._spark.sparkContext._jvm
        assert jvm is not None
        path = jvm.org.apache.hadoop.fs.Path(url)
        return path.getFileSystem(self._spark.sparkContext._jsc.hadoopConfiguration()), path

    def check(self) -> None:
        for source in self.inputs:
            inside = source.rstrip("/")
            if self.url == inside or self.url.startswith(inside + "/"):
                raise BadInputError(f"the output lies inside the input {source}; write it elsewhere", path=self.url)
        with spark_errors():
            fs, path = self._fs_path(self.url)
            if fs.exists(path):
                raise BadInputError("output exists; choose a new path", path=self.url)

    def publish(self, staging: str) -> None:
        """Rename ``staging`` to the output, never over something that appeared there meanwhile.

        Hadoop's ``rename`` moves a directory *into* an existing one: the output is checked
        absent first, and a staging directory that landed inside one that appeared in between
        is moved back out and the publication refused (HDFS renames atomically; on object
        stores Hadoop copies, so two jobs writing one output at once are not detected).
        """
        fs, path = self._fs_path(self.url)
        source = self._fs_path(staging)[1]
        if fs.exists(path):
            raise _appeared(self.url)
        if not fs.rename(source, path):
            raise BadInputError("cannot publish the export (rename failed)", path=self.url)
        landed = self._fs_path(f"{self.url}/{staging.rsplit('/', 1)[1]}")[1]
        if fs.exists(landed):
            fs.rename(landed, source)
            raise _appeared(self.url)

    def remove(self, path: str) -> None:
        try:
            fs, hadoop_path = self._fs_path(path)
            fs.delete(hadoop_path, True)
        except Exception:  # noqa: BLE001 - best effort cleanup after a failure
            pass
