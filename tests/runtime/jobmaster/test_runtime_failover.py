"""Task failures: restart from the latest checkpoint (fixed delay, bounded attempts)."""

from __future__ import annotations

import collections
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from statekit.runtime.api.functions import KeyedProcessFunction, MapFunction, RuntimeContext
from statekit.runtime.api.restart_strategy import fixed_delay_restart, no_restart
from statekit.runtime.api.state import ValueStateDescriptor
from statekit.runtime.connectors.sinks import FileSink
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.dataflow.job_handle import JobStatus
from statekit.statefmt.errors import JobFailedError, PathNotFoundError


class FailingMap(MapFunction):
    """Fails subtask 0 after ``after`` records in the first ``failures`` attempts."""

    def __init__(self, after: int, failures: int) -> None:
        self.after = after
        self.failures = failures
        self.seen = 0

    def open(self, ctx: RuntimeContext) -> None:
        self.attempt = ctx.attempt_number
        self.subtask = ctx.index_of_this_subtask

    def map(self, value: int) -> int:
        self.seen += 1
        if self.subtask == 0 and self.attempt < self.failures and self.seen > self.after:
            raise RuntimeError(f"boom in attempt {self.attempt}")
        if self.seen % 500 == 0:
            time.sleep(0.005)
        return value


class Count(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", "int"))

    def process_element(self, value: int, ctx: Any, out: Any) -> None:
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        out.collect(f"{ctx.get_current_key()}\t{count}")


def job(tmp_path: Path, failing: FailingMap, restart: Any) -> StreamEnvironment:
    env = StreamEnvironment().set_parallelism(2)
    env.enable_checkpointing(40, checkpoint_storage=str(tmp_path / "chk"))
    env.set_restart_strategy(restart)
    (env.from_sequence(1, 30_000).uid("numbers")
        .map(failing).uid("failing")
        .key_by(lambda v: v % 11)
        .process(Count()).uid("count")
        .sink_to(FileSink(str(tmp_path / "out"))).uid("sink"))
    return env


def test_task_failure_restarts_from_the_latest_checkpoint_exactly_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = job(tmp_path, FailingMap(after=6000, failures=2), fixed_delay_restart(3, 10))
    with caplog.at_level(logging.WARNING, logger="statekit.runtime"):
        handle = env.execute_async("failover")
        assert handle.wait(60) is JobStatus.FINISHED
    restarts = [r.getMessage() for r in caplog.records if "; restart " in r.getMessage()]
    assert len(restarts) == 2 and "boom in attempt 1" in restarts[1] and "restart 2 of 3" in restarts[1]
    assert handle.checkpoint_stats()["counts"]["completed"] >= 2
    got: dict[str, list[int]] = collections.defaultdict(list)
    out = tmp_path / "out"
    for name in os.listdir(out):
        assert not name.startswith(".")
        for line in (out / name).read_text().splitlines():
            key, count = line.split("\t")
            got[key].append(int(count))
    expected = collections.Counter(v % 11 for v in range(1, 30_001))
    assert {k: sorted(v) for k, v in got.items()} == {str(k): list(range(1, n + 1)) for k, n in expected.items()}


def test_exhausted_restarts_fail_the_job(tmp_path: Path) -> None:
    env = job(tmp_path, FailingMap(after=100, failures=10), fixed_delay_restart(1, 10))
    with pytest.raises(JobFailedError) as failure:
        env.execute("always failing")
    assert "boom in attempt 1" in str(failure.value) and "after 1 restart(s)" in str(failure.value)
    assert failure.value.exit_code == 1


def test_no_restart_fails_at_once(tmp_path: Path) -> None:
    env = job(tmp_path, FailingMap(after=100, failures=10), no_restart())
    handle = env.execute_async("no restart")
    assert handle.wait(30) is JobStatus.FAILED
    # the failure ends with the innermost frame of the user's code
    assert re.fullmatch(rf"RuntimeError: boom in attempt 0 \(at {re.escape(__file__)}:\d+, in map\)",
                        handle.describe()["failure"]), handle.describe()["failure"]


def test_configuration_errors_fail_without_restarts(tmp_path: Path) -> None:
    env = StreamEnvironment()
    env.enable_checkpointing(50)
    env.read_text_files(str(tmp_path / "missing")).uid("files").sink_to(lambda v: None).uid("sink")
    started = time.monotonic()
    with pytest.raises(PathNotFoundError, match="input directory does not exist"):
        env.execute("bad input")
    assert time.monotonic() - started < 1.0  # no 1 s restart delay
