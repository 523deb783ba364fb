"""A Spark Connect server on 127.0.0.1, started from the installed pyspark (master ``local[2]``).

Invariants:
    * the gRPC port is a free one chosen at start, bound to 127.0.0.1 only;
    * the server's output goes to ``connect-server.log`` under the server's directory, kept
      after the run (pytest's tmp dir) and named in any start failure;
    * the server runs in the foreground of its own process group (``spark-submit``, not the
      daemon script) and is stopped by that id, also when starting fails;
    * its Python workers run ``python`` (``spark.pyspark.python``; by default this interpreter).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["ConnectServer", "CONNECT_CLIENT_MODULES", "missing_client_modules"]

START_TIMEOUT = 120.0
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# What ``pyspark[connect]`` adds on the client side (statekit's ``connect`` extra).
CONNECT_CLIENT_MODULES = ("pandas", "numpy", "grpc", "grpc_status", "google.rpc", "zstandard")


def missing_client_modules() -> list[str]:
    """The Spark Connect client modules that cannot be imported here."""
    import importlib.util

    missing = []
    for name in CONNECT_CLIENT_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(name)
    return missing


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


class ConnectServer:
    """``start()`` a Spark Connect server; ``url`` is its ``sc://`` address; ``stop()`` ends it."""

    def __init__(self, directory: Path, master: str = "local[2]", python: str = sys.executable) -> None:
        self.directory = directory
        self.master = master
        self.python = python
        self.port = _free_port()
        self.log = directory / "connect-server.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        confs = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.host": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "4",
            "spark.pyspark.python": self.python,
            "spark.pyspark.driver.python": self.python,
        }
        command = [os.path.join(_spark_home(), "bin", "spark-submit"), "--master", self.master,
                   "--class", SERVER_CLASS, "--name", "statekit-connect-test"]
        for key, value in confs.items():
            command += ["--conf", f"{key}={value}"]
        return [*command, "spark-internal"]

    def start(self) -> ConnectServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, SPARK_HOME=_spark_home(), SPARK_LOCAL_IP="127.0.0.1",
                   PYSPARK_PYTHON=self.python, SPARK_LOG_DIR=str(self.directory))
        with open(self.log, "wb") as out:
            self._proc = subprocess.Popen(self._command(), env=env, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            self._wait_for_port()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_for_port(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"the Spark Connect server exited with {self._proc.returncode}; see {self.log}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"the Spark Connect server did not listen in {START_TIMEOUT:.0f} s; see {self.log}")

    def stop(self) -> None:
        """Stop the server's process group (the JVM and its Python workers)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
