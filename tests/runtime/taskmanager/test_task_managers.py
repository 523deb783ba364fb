"""Subtasks in TaskManager processes: results equal the threads', a lost TaskManager fails only its
attempt (the job restarts from its latest checkpoint, exactly once), nothing outlives the job, the
graph a TaskManager builds must be the job master's, and backpressure crosses processes."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tm_support import JOB, alive, final_sums, task_managers, truth

from statekit.runtime import JobHandle, JobStatus, RunOptions, run_job_file
from statekit.runtime.dataflow.run_options import add_job_listener, remove_job_listener
from statekit.runtime.exchange.record_writer import MAX_BUFFER_RECORDS
from statekit.statefmt.errors import BadInputError

pytestmark = pytest.mark.slow

def run(tmp_path: Path, *args: str, parallelism: int = 2, **options: object) -> JobStatus:
    settings: dict[str, object] = {"executor": "processes", "parallelism": parallelism,
                                   "checkpoint_dir": str(tmp_path / "chk"), "checkpoint_interval_ms": 100}
    settings.update(options)
    return run_job_file(JOB, RunOptions(job_args=args, **settings))  # type: ignore[arg-type]


def test_a_job_on_task_managers_computes_what_it_computes_on_threads(tmp_path: Path) -> None:
    for executor in ("processes", "threads"):
        out = tmp_path / executor
        status = run(tmp_path / f"c-{executor}", "--count", "20000", "--output", str(out), executor=executor)
        assert status is JobStatus.FINISHED
        assert final_sums(out) == truth(20_000)
    assert not task_managers(os.getpid()), "a TaskManager outlived its job"


def stopped_mid_stream(tmp_path: Path, name: str, native: bool = False, **options: object) -> str:
    """Run the paced job until its first checkpoint, then stop it with a savepoint (``native``: in
    the backend's format); the savepoint's path."""
    handles: list[JobHandle] = []
    add_job_listener(handles.append)
    outcome: list[JobStatus] = []
    try:
        runner = threading.Thread(target=lambda: outcome.append(run(
            tmp_path / name, "--count", "30000", "--rate", "2000", "--output", str(tmp_path / f"out-{name}"),
            **options)))
        runner.start()
        deadline = time.monotonic() + 60
        while not (handles and handles[0].checkpoint_stats()["counts"]["completed"] >= 1):
            assert time.monotonic() < deadline and runner.is_alive(), "no checkpoint completed"
            time.sleep(0.02)
        path = handles[0].trigger_savepoint(str(tmp_path / f"sp-{name}"), stop=True, native=native).result(60)
        runner.join(60)
    finally:
        remove_job_listener(handles.append)
    assert outcome == [JobStatus.FINISHED]
    return path


def test_savepoints_move_between_threads_and_processes_at_new_parallelisms(tmp_path: Path) -> None:
    first = stopped_mid_stream(tmp_path, "1", executor="threads", parallelism=2)
    second = stopped_mid_stream(tmp_path, "2", native=True, executor="processes", parallelism=3,
                                restore_path=first, state_backend="rocksdb")
    last = run(tmp_path / "3", "--count", "30000", "--output", str(tmp_path / "out-3"), executor="threads",
               parallelism=1, restore_path=second)
    assert last is JobStatus.FINISHED
    sums: dict[int, int] = {}
    for name in ("1", "2", "3"):  # the sums go on from each savepoint: the largest of a key is its total
        for key, total in final_sums(tmp_path / f"out-{name}").items():
            sums[key] = max(sums.get(key, 0), total)
    assert sums == truth(30_000)


@pytest.mark.parametrize("how", ["exit", "segfault", "raise"])
def test_a_crashing_task_manager_fails_only_its_attempt(tmp_path: Path, how: str) -> None:
    marker = tmp_path / "crashed"
    status = run(tmp_path, "--count", "30000", "--rate", "5000", "--output", str(tmp_path / "out"),
                 "--crash", how, "--crash-at", "12001", "--marker", str(marker), restart_attempts=2,
                 restart_delay_ms=0)
    assert marker.exists(), "the crash was never injected"
    assert status is JobStatus.FINISHED
    assert final_sums(tmp_path / "out") == truth(30_000)
    assert not task_managers(os.getpid())


def test_a_task_manager_that_stops_answering_is_lost_within_two_seconds(tmp_path: Path) -> None:
    handles: list[JobHandle] = []
    add_job_listener(handles.append)
    result: list[JobStatus] = []
    try:
        runner = threading.Thread(target=lambda: result.append(run(
            tmp_path, "--count", "40000", "--rate", "5000", "--output", str(tmp_path / "out"),
            restart_attempts=1, restart_delay_ms=1000)))  # RESTARTING lasts the delay: long enough to see
        runner.start()
        deadline = time.monotonic() + 60
        while not (handles and handles[0].checkpoint_stats()["counts"]["completed"] >= 2):
            assert time.monotonic() < deadline and runner.is_alive(), "no checkpoint completed"
            time.sleep(0.02)
        (victim, *_) = task_managers(os.getpid())
        os.kill(victim, signal.SIGSTOP)
        stopped = time.monotonic()
        while handles[0].status is not JobStatus.RESTARTING:
            assert time.monotonic() - stopped < 10, "the stopped TaskManager was never detected"
            time.sleep(0.01)
        detected = time.monotonic() - stopped
        runner.join(120)
    finally:
        remove_job_listener(handles.append)
    assert detected <= 2.0, f"a silent TaskManager was detected after {detected:.2f} s"
    assert result == [JobStatus.FINISHED]
    assert final_sums(tmp_path / "out") == truth(40_000)
    with pytest.raises(ProcessLookupError):
        os.kill(victim, 0)


def test_a_graph_that_differs_in_a_task_manager_fails_the_deployment_with_one_line(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="builds a different job graph in a TaskManager") as caught:
        run(tmp_path, "--count", "100", "--output", str(tmp_path / "out"), "--uid-from-pid")
    assert "\n" not in str(caught.value) and "crash-" in str(caught.value)
    assert not task_managers(os.getpid())


def test_a_killed_job_master_takes_its_task_managers_with_it(tmp_path: Path) -> None:
    env = dict(os.environ, STATEKIT_HOME=str(tmp_path / "home"))
    master = subprocess.Popen(
        [sys.executable, "-m", "statekit.cli.main", "run", "-p", "2", "--executor", "processes", JOB,
         "--count", "10000000", "--rate", "1000", "--output", str(tmp_path / "out")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while len(managers := task_managers(master.pid)) < 2:
            assert master.poll() is None, master.stderr.read()  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "no TaskManager started"
            time.sleep(0.05)
        master.kill()
        master.wait()
        deadline = time.monotonic() + 5
        while [pid for pid in managers if os.path.exists(f"/proc/{pid}") and alive(pid)]:
            assert time.monotonic() < deadline, f"TaskManagers {managers} outlived their job master"
            time.sleep(0.02)
    finally:
        if master.poll() is None:
            master.kill()
        master.stderr.close()  # type: ignore[union-attr]


def test_backpressure_crosses_processes_and_memory_stays_bounded(tmp_path: Path) -> None:
    handles: list[JobHandle] = []
    add_job_listener(handles.append)
    try:
        runner = threading.Thread(target=run, args=(
            tmp_path, "--count", "200000", "--latency", str(tmp_path / "latency"), "--slow-sink", "0.002"),
            kwargs={"checkpoint_interval_ms": None})
        runner.start()
        deadline = time.monotonic() + 60
        while not handles:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        handle = handles[0]
        time.sleep(3)
        figures = handle.task_metrics()
        handle.cancel()
        runner.join(60)
    finally:
        remove_job_listener(handles.append)
    sources = [t for t in figures if t.report.source]
    sinks = [t for t in figures if t.report.sink]
    assert sources and sinks
    assert all(t.backpressure == "high" for t in sources), [(t.report.name, t.backpressured_ratio) for t in sources]
    in_flight = sum(t.report.records_out for t in sources) - sum(t.report.records_in for t in sinks)
    # credits (8 buffers a remote channel) and gate bounds: a few buffers of 32 KiB per channel, each
    # holding as many of the job's (number, time) records as fit by their bytes on the wire
    now = int(time.time() * 1000)
    wire_bytes = len(pickle.dumps([(n, now) for n in range(100_000, 101_000)], protocol=5)) / 1000
    buffer_records = min(MAX_BUFFER_RECORDS, int(32 * 1024 / wire_bytes))
    assert 0 <= in_flight <= 40 * buffer_records, (in_flight, buffer_records)


@pytest.mark.parametrize("timeout_ms", [0, 300])
def test_the_buffer_timeout_bounds_how_long_a_trickle_of_records_waits(tmp_path: Path, timeout_ms: int) -> None:
    handles: list[JobHandle] = []
    add_job_listener(handles.append)
    try:
        status = run(tmp_path, "--count", "600", "--rate", "100", "--latency", str(tmp_path / "latency"),
                     checkpoint_interval_ms=None, buffer_timeout_ms=timeout_ms, latency_interval_ms=50)
    finally:
        remove_job_listener(handles.append)
    assert status is JobStatus.FINISHED
    latencies = sorted(int(x) for x in (tmp_path / "latency").read_text().split())
    assert len(latencies) == 600
    median = latencies[len(latencies) // 2]
    if timeout_ms == 0:
        assert median < 50, latencies  # every record is sent at once
    else:
        # a record waits for the next flush of its buffer: about half the timeout, never much more
        assert timeout_ms / 5 <= median <= timeout_ms, latencies
        assert latencies[-1] <= timeout_ms + 400, latencies
    measured = handles[0].latency()
    assert measured is not None and measured.samples > 0  # the latency markers travelled the same way
    if timeout_ms:
        assert measured.p99_ms <= timeout_ms + 400
