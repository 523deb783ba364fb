"""Failover and cancellation on TaskManager processes under load: a lost TaskManager of a
backpressured job restarts it within two seconds (the surviving TaskManagers of the failed attempt
are killed, not drained) and the output stays exactly once; a user's cancel of a backpressured
job ends within three seconds without killing anything; a TaskManager whose user code holds the
interpreter lock for seconds is busy, not lost; the state backend's working directories of the
TaskManagers never outlive their attempt; a slow task handles its buffers in slices, looking at the
cancel flags between them."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tm_support import JOB, final_sums, task_managers, truth

from statekit.runtime import JobHandle, JobStatus, RunOptions, run_job_file
from statekit.runtime.dataflow.run_options import add_job_listener, remove_job_listener
from statekit.runtime.exchange.batch_path import TimestampedBuffer, with_batch_handler
from statekit.runtime.exchange.input_gate import TaskCancelled
from statekit.runtime.jobmaster.task_managers import HEARTBEAT_TIMEOUT_S
from statekit.runtime.task.task import Task

pytestmark = pytest.mark.slow

GIL_JOB = str(Path(__file__).with_name("jobs") / "gil_hold.py")


class Running:
    """A job running on a thread of this process, with its handle."""

    def __init__(self, job: str, args: tuple[str, ...], **options: object) -> None:
        self.handles: list[JobHandle] = []
        self.result: list[JobStatus] = []
        self.errors: list[BaseException] = []
        add_job_listener(self.handles.append)
        settings = RunOptions(job_args=args, **options)  # type: ignore[arg-type]

        def run() -> None:
            try:
                self.result.append(run_job_file(job, settings))
            except BaseException as exc:  # noqa: BLE001 - the test asserts on it
                self.errors.append(exc)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    @property
    def handle(self) -> JobHandle:
        return self.handles[0]

    def wait_until_running(self, seconds: float, completed_checkpoints: int = 0) -> None:
        """RUNNING for ``seconds`` with at least ``completed_checkpoints`` checkpoints completed."""
        deadline = time.monotonic() + 60
        while not (self.handles and self.handle.status is JobStatus.RUNNING and self.handle.tasks_running_ms):
            assert time.monotonic() < deadline and self.thread.is_alive(), self.errors or "the job never ran"
            time.sleep(0.01)
        running_since = time.monotonic()
        while (time.monotonic() - running_since < seconds
               or self.handle.checkpoint_stats()["counts"]["completed"] < completed_checkpoints):
            assert time.monotonic() < deadline and self.thread.is_alive(), self.errors or "no checkpoint completed"
            time.sleep(0.02)

    def join(self, timeout_s: float) -> None:
        self.thread.join(timeout_s)
        remove_job_listener(self.handles.append)
        assert not self.thread.is_alive(), f"the job did not end within {timeout_s} s"


@pytest.fixture
def jobs() -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for job in started:  # a failed assertion leaves no job running
        if job.thread.is_alive() and job.handles:
            job.handle.cancel()
            job.thread.join(30)
        remove_job_listener(job.handles.append)


@pytest.mark.parametrize("mode", ["aligned", "unaligned"])
def test_a_lost_task_manager_of_a_backpressured_job_restarts_it_within_two_seconds(
        tmp_path: Path, jobs: list[Running], mode: str) -> None:
    # two sinks at 2 ms a record take 1,000 records a second, the sources send 8,000: records
    # wait in gates and backlogs, seconds of input that the surviving TaskManager must not work off
    job = Running(JOB, ("--count", "10000", "--rate", "4000", "--output", str(tmp_path / "out"),
                        "--latency", str(tmp_path / "latency"), "--slow-sink", "0.002"),
                  executor="processes", parallelism=2, checkpoint_dir=str(tmp_path / "chk"),
                  checkpoint_interval_ms=200, unaligned=mode == "unaligned", restart_attempts=1,
                  restart_delay_ms=1000)  # RESTARTING lasts the delay: long enough to see
    jobs.append(job)
    job.wait_until_running(1.0, completed_checkpoints=1)
    before = task_managers(os.getpid())
    assert len(before) == 2
    victim = before[1]
    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    while job.handle.status is not JobStatus.RESTARTING:
        assert time.monotonic() - killed < 30, "the job never restarted"
        time.sleep(0.005)
    restarting = time.monotonic() - killed
    assert not task_managers(os.getpid()), "a TaskManager of the failed attempt survived it"
    job.join(180)
    assert restarting <= 2.0, f"the job restarted {restarting:.2f} s after a TaskManager was killed"
    assert job.errors == [] and job.result == [JobStatus.FINISHED]
    assert final_sums(tmp_path / "out") == truth(10_000)
    assert not task_managers(os.getpid())


@pytest.mark.parametrize("executor", ["processes", "threads"])
def test_a_user_cancel_of_a_backpressured_job_ends_within_three_seconds(
        tmp_path: Path, jobs: list[Running], executor: str, caplog: pytest.LogCaptureFixture) -> None:
    job = Running(JOB, ("--count", "400000", "--latency", str(tmp_path / "latency"), "--slow-sink", "0.002"),
                  executor=executor, parallelism=2, checkpoint_dir=str(tmp_path / "chk"),
                  checkpoint_interval_ms=500)
    jobs.append(job)
    job.wait_until_running(3.0)
    if executor == "processes":
        assert len(task_managers(os.getpid())) == 2
    caplog.set_level(logging.INFO, logger="statekit")
    job.handle.cancel()
    cancelled = time.monotonic()
    job.join(60)
    took = time.monotonic() - cancelled
    assert took <= 3.0, f"the cancel took {took:.2f} s"
    assert job.errors == [] and job.result == [JobStatus.CANCELED]
    assert not task_managers(os.getpid()), "a TaskManager outlived its cancelled job"
    killed = [r.getMessage() for r in caplog.records if "killing it" in r.getMessage()
              or "did not stop" in r.getMessage()]
    assert killed == [], "the tasks did not end by themselves"


def test_a_task_manager_whose_user_code_holds_the_interpreter_lock_is_busy_not_lost(
        tmp_path: Path, jobs: list[Running]) -> None:
    held = tmp_path / "held"
    job = Running(GIL_JOB, ("--output", str(tmp_path / "out"), "--held", str(held), "--hold-s", "3"),
                  executor="processes", parallelism=2, checkpoint_dir=str(tmp_path / "chk"),
                  checkpoint_interval_ms=100, restart_attempts=0)
    jobs.append(job)
    job.join(120)
    assert job.errors == [] and job.result == [JobStatus.FINISHED]
    took = float(held.read_text())
    assert took >= HEARTBEAT_TIMEOUT_S + 0.5, f"the map held the interpreter lock only {took:.2f} s"
    lines = [line for name in os.listdir(tmp_path / "out") for line in (tmp_path / "out" / name).read_text().split()]
    assert sorted(int(line) for line in lines) == [n * 10 for n in range(20)]
    assert not task_managers(os.getpid())


def working_dirs(base: str) -> list[str]:
    """Every state backend working directory of a TaskManager under ``base``."""
    return sorted(os.path.join(root, name) for root, names, _ in os.walk(base) for name in names
                  if name.startswith("statekit-rocksdb-tm"))


def test_working_directories_of_task_managers_never_outlive_their_attempt(
        tmp_path: Path, jobs: list[Running], monkeypatch: pytest.MonkeyPatch) -> None:
    private = tempfile.mkdtemp(prefix="sk-tmp-")  # short: the job's sockets live under it
    try:
        monkeypatch.setenv("TMPDIR", private)  # the TaskManagers' temporary directory
        monkeypatch.setattr(tempfile, "tempdir", private)  # the job master's
        job = Running(JOB, ("--count", "30000", "--rate", "5000", "--output", str(tmp_path / "out")),
                      executor="processes", parallelism=2, checkpoint_dir=str(tmp_path / "chk"),
                      checkpoint_interval_ms=100, state_backend="rocksdb", restart_attempts=1, restart_delay_ms=0)
        jobs.append(job)
        job.wait_until_running(0.5, completed_checkpoints=1)
        first = working_dirs(private)
        assert len(first) == 2, first  # one per TaskManager of the attempt
        before = task_managers(os.getpid())
        os.kill(before[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while len(after := set(task_managers(os.getpid())) - set(before)) < 2 or \
                job.handle.status is not JobStatus.RUNNING:
            assert time.monotonic() < deadline and job.thread.is_alive(), job.errors or "the job never restarted"
            time.sleep(0.01)
        assert not set(first) & set(working_dirs(private)), "the failed attempt's working directories remain"
        job.join(120)
        assert job.errors == [] and job.result == [JobStatus.FINISHED]
        assert final_sums(tmp_path / "out") == truth(30_000)
        assert working_dirs(private) == []
        assert os.listdir(private) == [], "the job left its temporary directories behind"
        assert after and not task_managers(os.getpid())
    finally:
        shutil.rmtree(private, ignore_errors=True)


class _Flags:
    """What :meth:`Task._handle_in_slices` asks of its task: the cancel flags (set after ``after`` looks)."""

    def __init__(self, after: int | None = None) -> None:
        self.after, self.looks, self.flushes = after, 0, 0
        self.priority_looks: list[tuple[int, int]] = []  # (channel, first unhandled record)

    def _cancelled(self) -> bool:
        self.looks += 1
        return self.after is not None and self.looks > self.after

    def _flush_if_due(self) -> None:
        self.flushes += 1

    def _priority_between_slices(self, channel: int, payload: list[object], start: int) -> None:
        assert payload[start - 1] is not None  # the slice before was handled
        self.priority_looks.append((channel, start))


def test_a_buffer_handled_in_slices_gives_every_record_in_order_and_stops_at_a_cancel() -> None:
    records = list(range(1000))
    stamps = [10_000 + n for n in records]
    plain: list[object] = []
    batches: list[int] = []

    def many(values: list[object]) -> None:
        batches.append(len(values))
        plain.extend(values)

    flags = _Flags()
    Task._handle_in_slices(flags, 3, list(records), plain.append, many, 64)  # type: ignore[arg-type]
    assert plain == records and batches == [64] * 15 + [40]
    assert flags.flushes == 15  # due output buffers go between slices, not after the whole buffer
    assert flags.priority_looks == [(3, start) for start in range(64, 1000, 64)]  # and priority items
    plain.clear()
    Task._handle_in_slices(_Flags(), 0, list(records), plain.append, None, 300)  # type: ignore[arg-type]
    assert plain == records
    pairs: list[tuple[object, object]] = []
    buffer = TimestampedBuffer()
    buffer.extend(records)
    buffer.timestamps = list(stamps)
    Task._handle_in_slices(_Flags(), 0, buffer, pairs.append, None, 64)  # type: ignore[arg-type]
    assert pairs == list(zip(records, stamps, strict=True))
    pairs.clear()

    def batch(values: list[object], timestamps: list[object]) -> None:
        pairs.extend(zip(values, timestamps, strict=True))

    Task._handle_in_slices(_Flags(), 0, buffer, with_batch_handler(lambda record: None, batch), None,  # type: ignore[arg-type]
                           64)
    assert pairs == list(zip(records, stamps, strict=True))
    plain.clear()
    with pytest.raises(TaskCancelled):
        Task._handle_in_slices(_Flags(after=2), 0, list(records), plain.append, None, 64)  # type: ignore[arg-type]
    assert plain == records[:128]  # two slices, then the cancel is seen
