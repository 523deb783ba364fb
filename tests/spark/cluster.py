"""A Spark standalone cluster on 127.0.0.1, started from the installed pyspark: one master, two workers.

Invariants:
    * every port is a free one chosen at start; every process binds 127.0.0.1;
    * each process's output goes to a log file under the cluster's directory, kept after
      the run (pytest's tmp dir) and named in any start failure;
    * the processes this module started are stopped by their ids (their process groups:
      a worker's executors are its children), also when starting fails half-way;
    * :meth:`SparkCluster.hidden_python` is an interpreter where statekit is NOT importable
      but its dependencies are (the venv's site-packages without its ``.pth`` import hooks).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path

__all__ = ["SparkCluster", "free_port", "free_ports", "python_without_statekit"]

START_TIMEOUT = 120.0


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports: every probe stays bound until all are chosen."""
    probes = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


class SparkCluster:
    """``start()`` a master and ``workers`` workers of 1 core and 1 GiB each; ``stop()`` them."""

    def __init__(self, directory: Path, workers: int = 2) -> None:
        self.directory = directory
        self.workers = workers
        self.port, self.ui_port, *self._worker_ports = free_ports(2 + 2 * workers)
        self._procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        env = dict(os.environ, SPARK_HOME=spark_home(), SPARK_LOCAL_IP="127.0.0.1",
                   SPARK_LOG_DIR=str(self.directory), SPARK_WORKER_DIR=str(self.directory / "work"))
        env.pop("PYTHONPATH", None)
        return env

    def _spawn(self, name: str, *args: str) -> None:
        log = self.directory / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([os.path.join(spark_home(), "bin", "spark-class"), *args], env=self.env(),
                                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        self._procs.append((proc, log))

    def start(self) -> SparkCluster:
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                        "--port", str(self.port), "--webui-port", str(self.ui_port))
            for index in range(self.workers):
                self._spawn(f"worker-{index}", "org.apache.spark.deploy.worker.Worker", self.url,
                            "--host", "127.0.0.1", "--port", str(self._worker_ports[2 * index]),
                            "--webui-port", str(self._worker_ports[2 * index + 1]),
                            "--cores", "1", "--memory", "1g",
                            "--work-dir", str(self.directory / f"work-{index}"))
            self._wait_for_workers()
        except BaseException:
            self.stop()
            raise
        return self

    def _alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as response:
                state = json.load(response)
        except (OSError, ValueError):
            # While the master's UI starts, its root page answers every path, /json/ too, as HTML.
            return 0
        return sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")

    def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            for proc, log in self._procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"a Spark process exited with {proc.returncode} while starting; see {log}")
            if self._alive_workers() == self.workers:
                return
            time.sleep(0.5)
        raise RuntimeError(f"the Spark cluster did not start in {START_TIMEOUT:.0f} s; logs in {self.directory}")

    def stop(self) -> None:
        """Stop every process started here (its process group), workers first, then the master."""
        for proc, _ in reversed(self._procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc, _ in reversed(self._procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self._procs.clear()

    def hidden_python(self) -> str:
        """An interpreter for the executors that has statekit's dependencies but not statekit."""
        return python_without_statekit(self.directory)


def python_without_statekit(directory: Path) -> str:
    """A script in ``directory`` running the venv's python where statekit is NOT importable.

    The venv's python with ``-S`` (no ``site``: the editable install's ``.pth`` hook does not
    run) and the venv's site-packages on ``PYTHONPATH`` (pyarrow, fsspec, pyspark...).
    """
    script = directory / "python-without-statekit"
    site_packages = sysconfig.get_paths()["purelib"]
    script.write_text("#!/bin/sh\n"
                      f'PYTHONPATH="{site_packages}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" -S "$@"\n',
                      encoding="utf-8")
    script.chmod(0o755)
    probe = subprocess.run([str(script), "-c", "import statekit.statefmt"], capture_output=True,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, check=False)
    if probe.returncode == 0:
        raise RuntimeError(f"{script} imports statekit: it cannot prove that statekit ships itself")
    return str(script)
