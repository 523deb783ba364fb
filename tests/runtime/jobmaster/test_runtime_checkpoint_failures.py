"""Checkpoint storage that stops working: failed checkpoints count against tolerable_failed (the
job fails or restarts instead of silently not committing), the final checkpoint of a finishing
job is retried, and a job never FINISHES with output its sink did not commit."""

from __future__ import annotations

import collections
import errno
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.implementations.local import LocalFileSystem

from statekit.runtime.api.functions import CheckpointListener, KeyedProcessFunction, RuntimeContext
from statekit.runtime.api.restart_strategy import fixed_delay_restart, no_restart
from statekit.runtime.api.state import ValueStateDescriptor
from statekit.runtime.connectors.sinks import FileSink
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.dataflow.job_handle import JobStatus
from statekit.runtime.jobmaster import execution as job_master


class FlakyFileSystem(LocalFileSystem):  # type: ignore[misc]
    """Local files whose ``chk-N`` directories cannot be created while ``failures`` > 0."""

    protocol = "flaky"
    failures = 0
    attempts = 0
    lock = threading.Lock()

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, str) and path.startswith("flaky://"):
            path = path[len("flaky://"):]
        return super()._strip_protocol(path)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        with FlakyFileSystem.lock:
            if re.search(r"/chk-\d+$", path):
                FlakyFileSystem.attempts += 1
                if FlakyFileSystem.failures > 0:
                    FlakyFileSystem.failures -= 1
                    raise OSError(errno.EIO, "injected: checkpoint storage unavailable", path)
        super().makedirs(path, exist_ok=exist_ok)


@pytest.fixture(autouse=True)
def flaky(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[FlakyFileSystem]]:
    fsspec.register_implementation("flaky", FlakyFileSystem, clobber=True)
    FlakyFileSystem.failures = FlakyFileSystem.attempts = 0
    monkeypatch.setattr(job_master, "FINAL_CHECKPOINT_RETRY_DELAY_S", 0.05)
    yield FlakyFileSystem
    FlakyFileSystem.failures = 0


class Count(KeyedProcessFunction, CheckpointListener):
    """A running count per key; ``on_first_checkpoint`` runs once, in attempt 0."""

    on_first_checkpoint: Any = None

    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", "int"))
        self.attempt = ctx.attempt_number

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        hook, Count.on_first_checkpoint = Count.on_first_checkpoint, None
        if hook is not None and self.attempt == 0:
            hook()

    def process_element(self, value: int, ctx: Any, out: Any) -> None:
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        out.collect(f"{ctx.get_current_key()}\t{count}")


def _slow(value: int) -> int:
    if value % 100 == 0:
        time.sleep(0.01)
    return value


def bounded_job(tmp_path: Path, storage: str, records: int, interval_ms: int | None = None,
                tolerable: int = 0) -> StreamEnvironment:
    env = StreamEnvironment().set_parallelism(2)
    env.set_checkpoint_storage(storage)
    if interval_ms is not None:
        env.enable_checkpointing(interval_ms, tolerable_failed=tolerable)
    (env.from_sequence(1, records).uid("numbers").map(_slow).uid("slow")
        .key_by(lambda v: v % 5)
        .process(Count()).uid("count")
        .sink_to(FileSink(str(tmp_path / "out"))).uid("sink"))
    return env


def visible_counts(out: Path) -> dict[str, list[int]]:
    got: dict[str, list[int]] = collections.defaultdict(list)
    for name in os.listdir(out):
        if name.startswith("."):
            continue
        for line in (out / name).read_text().splitlines():
            key, count = line.split("\t")
            got[key].append(int(count))
    return {key: sorted(values) for key, values in got.items()}


def exactly_once(records: int) -> dict[str, list[int]]:
    expected = collections.Counter(v % 5 for v in range(1, records + 1))
    return {str(k): list(range(1, n + 1)) for k, n in expected.items()}


def test_final_checkpoint_is_retried(tmp_path: Path, flaky: type[FlakyFileSystem],
                                     caplog: pytest.LogCaptureFixture) -> None:
    flaky.failures = 2
    env = bounded_job(tmp_path, f"flaky://{tmp_path}/chk", 300)
    with caplog.at_level(logging.WARNING, logger="statekit.runtime"):
        handle = env.execute_async("final retried")
        assert handle.wait(30) is JobStatus.FINISHED, handle.failure
    assert flaky.attempts == 3
    assert visible_counts(tmp_path / "out") == exactly_once(300)
    retries = [r.getMessage() for r in caplog.records if "final checkpoint failed" in r.getMessage()]
    assert len(retries) == 2 and "(attempt 1 of 3)" in retries[0] and "injected" in retries[0]


def test_final_checkpoint_that_cannot_be_taken_fails_the_job(tmp_path: Path, flaky: type[FlakyFileSystem]) -> None:
    flaky.failures = 1000
    env = bounded_job(tmp_path, f"flaky://{tmp_path}/chk", 300)
    handle = env.execute_async("final impossible")
    assert handle.wait(30) is JobStatus.FAILED
    assert flaky.attempts == job_master.FINAL_CHECKPOINT_ATTEMPTS
    assert re.fullmatch(r"final checkpoint failed 3 times, last: cannot create the checkpoint directory for "
                        r"checkpoint \d+: .*injected: checkpoint storage unavailable.*; output since the last "
                        r"completed checkpoint is not committed", handle.failure or ""), handle.failure
    assert visible_counts(tmp_path / "out") == {}  # nothing uncommitted became visible
    assert handle.checkpoint_stats()["counts"]["failed"] == 3


def test_checkpoint_failures_count_and_the_job_restarts(tmp_path: Path, flaky: type[FlakyFileSystem],
                                                         caplog: pytest.LogCaptureFixture) -> None:
    def storage_breaks() -> None:
        flaky.failures = 3

    Count.on_first_checkpoint = storage_breaks
    env = bounded_job(tmp_path, f"flaky://{tmp_path}/chk", 4000, interval_ms=20, tolerable=1)
    env.set_restart_strategy(fixed_delay_restart(2, 10))
    with caplog.at_level(logging.WARNING, logger="statekit.runtime"):
        handle = env.execute_async("flaky storage")
        assert handle.wait(60) is JobStatus.FINISHED, handle.failure
    restarts = [r.getMessage() for r in caplog.records if "; restart " in r.getMessage()]
    assert restarts and "exceeded the tolerable number of failed checkpoints (1)" in restarts[0]
    assert handle.checkpoint_stats()["counts"]["failed"] >= 3
    assert visible_counts(tmp_path / "out") == exactly_once(4000)


def test_checkpoint_dir_replaced_by_a_file_fails_the_running_job(tmp_path: Path) -> None:
    chk = tmp_path / "chk"
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("".join(f"{i}\n" for i in range(100)))

    def replace_dir_with_file() -> None:
        # the next checkpoint's writers may re-create chk/ between the move and the write: again
        for attempt in range(100):
            shutil.move(str(chk), str(tmp_path / f"chk-moved-{attempt}"))
            try:
                chk.write_text("not a directory")
                return
            except IsADirectoryError:
                continue

    Count.on_first_checkpoint = replace_dir_with_file
    env = StreamEnvironment().set_parallelism(2)
    env.enable_checkpointing(20, checkpoint_storage=str(chk), tolerable_failed=2)
    env.set_restart_strategy(no_restart())
    (env.read_text_files(str(tmp_path / "in"), watch=True).uid("lines")
        .key_by(lambda line: int(line) % 5)
        .process(Count()).uid("count")
        .sink_to(FileSink(str(tmp_path / "out"))).uid("sink"))
    handle = env.execute_async("unwritable storage")
    try:
        assert handle.wait(30) is JobStatus.FAILED, "the job kept running without committing"
    finally:
        handle.cancel()
    assert handle.failure is not None
    assert handle.failure.startswith("exceeded the tolerable number of failed checkpoints (2); last: checkpoint ")
    assert "cannot create the checkpoint directory" in handle.failure
    stats = handle.checkpoint_stats()
    assert stats["counts"]["failed"] >= 3 and stats["latest"]["failed"]["failure_message"].startswith(
        "cannot create the checkpoint directory")


def test_failed_drained_stop_fails_over_instead_of_hanging(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("1\n2\n3\n")
    env = StreamEnvironment()
    env.enable_checkpointing(50, checkpoint_storage=str(tmp_path / "chk"))
    env.set_restart_strategy(no_restart())
    (env.read_text_files(str(tmp_path / "in"), watch=True).uid("lines")
        .key_by(lambda line: line)
        .process(Count()).uid("count")
        .sink_to(FileSink(str(tmp_path / "out"))).uid("sink"))
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("a savepoint cannot go below a file")
    handle = env.execute_async("drained")
    try:
        deadline = time.monotonic() + 20
        while handle.checkpoint_stats()["counts"]["completed"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        undrained = handle.trigger_savepoint(str(not_a_dir), stop=True)
        with pytest.raises(Exception):  # noqa: B017 - whatever the filesystem raises
            undrained.result(10)
        time.sleep(0.2)
        assert handle.status is JobStatus.RUNNING  # without drain the sources resume
        drained = handle.trigger_savepoint(str(not_a_dir), stop=True, drain=True)
        with pytest.raises(Exception):  # noqa: B017
            drained.result(10)
        assert handle.wait(20) is JobStatus.FAILED
        assert (handle.failure or "").startswith("stop-with-savepoint (drain) failed: ")
    finally:
        handle.cancel()
