"""A Spark-backed command ends quickly and cleanly: Ctrl-C (a real SIGINT to a real ``statekit``
process) within 2 s with exit 130, no JVM or Python worker left behind and no staged output;
``--remote`` to an address where nothing answers within 10 s with exit 2 naming the address."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

pytestmark = pytest.mark.spark

ROWS = 1_000_000
INTERRUPT_BUDGET_S = 2.0
REMOTE_BUDGET_S = 10.0


@pytest.fixture(scope="module")
def big_savepoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("interrupt") / "sp"
    count = StateDescriptor("count", StateKind.VALUE, value_type="int")
    SavepointWriter.new_savepoint(128).with_operator(
        "counter", {count: [(f"key-{i:08d}", i) for i in range(ROWS)]}, parallelism=2).write(str(path))
    return str(path)


def statekit(*args: str, **kwargs: object) -> subprocess.Popen[str]:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "STATEKIT_RUNTIME_DIR": str(kwargs.pop("runtime"))}
    return subprocess.Popen([sys.executable, "-m", "statekit.cli.main", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, **kwargs)  # type: ignore[call-overload]


def descendants(pid: int) -> set[int]:
    """Every live process whose parent chain reaches ``pid``."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    parents[int(entry)] = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pids: set[int]) -> set[int]:
    live = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] != b"Z":
                    live.add(pid)
        except OSError:
            continue
    return live


def cmdlines(pids: set[int]) -> list[str]:
    lines = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                lines.append(f.read().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return lines


def is_python_worker(command: str) -> bool:
    """The daemon of the Python workers of Spark tasks (not a data-source planner):
    ``python -m statekit.spark.worker_daemon|pyspark.daemon pyspark.worker``."""
    words = command.split()
    at = words.index("-m") if "-m" in words else -1
    return (0 < at < len(words) - 2 and words[at + 1] in ("statekit.spark.worker_daemon", "pyspark.daemon")
            and words[at + 2] == "pyspark.worker")


def wait_for_spark_tasks(process: subprocess.Popen[str], timeout_s: float = 300) -> set[int]:
    """The CLI's descendants once a Python worker of a Spark task runs (the export is under way)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        if any(is_python_worker(line) for line in cmdlines(descendants(process.pid))):
            time.sleep(1.0)  # the tasks read and write now
            return descendants(process.pid)
        time.sleep(0.2)
    raise AssertionError("no Spark task started")


@pytest.fixture
def no_leftovers() -> Iterator[list[int]]:
    """Processes a test starts; whatever survives it is killed (and fails the test)."""
    started: list[int] = []
    yield started
    for pid in started:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@pytest.mark.parametrize("to_group", [False, True], ids=["sigint-to-statekit", "ctrl-c-to-the-group"])
def test_ctrl_c_ends_a_spark_export_within_2_s_leaving_no_process_and_no_output(
        big_savepoint: str, tmp_path: Path, no_leftovers: list[int], to_group: bool) -> None:
    out = tmp_path / "out"
    process = statekit("export", big_savepoint, "-o", str(out), "--engine", "spark", "--master", "local[2]",
                       runtime=tmp_path / "runtime")
    no_leftovers.append(process.pid)
    family = wait_for_spark_tasks(process)
    assert alive(family), "the JVM and its workers run"
    interrupted = time.monotonic()
    if to_group:  # what a terminal does: the whole foreground process group (the JVM ignores SIGINT)
        os.killpg(process.pid, signal.SIGINT)
    else:
        process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    ended = time.monotonic() - interrupted
    left = set()
    while time.monotonic() - interrupted < INTERRUPT_BUDGET_S and (left := alive(family | descendants(process.pid))):
        time.sleep(0.05)
    assert process.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == "statekit: error: interrupted", stderr
    assert ended <= INTERRUPT_BUDGET_S, f"the command ended {ended:.2f} s after SIGINT"
    assert not left, f"still running {INTERRUPT_BUDGET_S} s after SIGINT: {cmdlines(left)}"
    assert [p.name for p in tmp_path.iterdir() if p.name != "runtime"] == []  # no output, no staging directory


def test_ctrl_c_over_spark_connect_ends_within_2_s(big_savepoint: str, connect_server: Any, tmp_path: Path,
                                                   no_leftovers: list[int]) -> None:
    out = tmp_path / "out"
    server_pid = connect_server._proc.pid
    before = descendants(server_pid)
    process = statekit("export", big_savepoint, "-o", str(out), "--engine", "spark", "--remote", connect_server.url,
                       runtime=tmp_path / "runtime")
    no_leftovers.append(process.pid)
    deadline = time.monotonic() + 300
    while not any(is_python_worker(line) for line in cmdlines(descendants(server_pid) - before)):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.2)
    time.sleep(1.0)  # the server's tasks read and write now
    interrupted = time.monotonic()
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    ended = time.monotonic() - interrupted
    assert process.returncode == 130, stderr
    assert ended <= INTERRUPT_BUDGET_S, f"the command ended {ended:.2f} s after SIGINT"
    assert not alive(descendants(process.pid))
    assert [p.name for p in tmp_path.iterdir() if p.name != "runtime"] == []


def test_a_remote_where_nothing_answers_fails_within_10_s_naming_it(sample: str, tmp_path: Path,
                                                                     no_leftovers: list[int]) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: connection refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for command in (["export", sample, "-o", str(tmp_path / "out")], ["diff", sample, sample]):
        started = time.monotonic()
        process = statekit(*command, "--remote", f"sc://127.0.0.1:{port}", runtime=tmp_path / "runtime")
        no_leftovers.append(process.pid)
        _, stderr = process.communicate(timeout=60)
        took = time.monotonic() - started
        assert process.returncode == 2, stderr
        (line,) = stderr.strip().splitlines()
        assert line.startswith(f"statekit: error: sc://127.0.0.1:{port}: no Spark Connect server answers at "
                               f"127.0.0.1:{port}"), line
        assert took <= REMOTE_BUDGET_S, f"{command[0]} took {took:.1f} s"


def test_a_remote_that_accepts_but_never_speaks_fails_within_10_s(sample: str, tmp_path: Path,
                                                                   no_leftovers: list[int]) -> None:
    with socket.socket() as silent:  # listens, never answers a byte
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        started = time.monotonic()
        process = statekit("export", sample, "-o", str(tmp_path / "out"), "--remote", f"sc://127.0.0.1:{port}",
                           runtime=tmp_path / "runtime")
        no_leftovers.append(process.pid)
        _, stderr = process.communicate(timeout=60)
        took = time.monotonic() - started
    assert process.returncode == 2, stderr
    (line,) = stderr.strip().splitlines()
    assert f"127.0.0.1:{port}" in line, line
    assert took <= REMOTE_BUDGET_S, f"took {took:.1f} s"
