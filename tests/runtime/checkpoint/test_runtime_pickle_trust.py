"""Pickle-serialized state: a job trusts the checkpoints it wrote itself (in-process restarts),
while a snapshot restored from a path (``statekit run -s``) needs ``--trust-pickle``."""

from __future__ import annotations

import collections
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.runtime.api.functions import CheckpointListener, KeyedProcessFunction, RuntimeContext
from statekit.runtime.api.restart_strategy import fixed_delay_restart
from statekit.runtime.api.state import ValueStateDescriptor
from statekit.runtime.connectors.sinks import FileSink
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.dataflow.job_handle import JobStatus

PICKLED_COUNT = ValueStateDescriptor("count", serializer="pickle")


class FailOnceAfterCheckpoint(KeyedProcessFunction, CheckpointListener):
    """Counts per key in pickle state; the first attempt fails once a checkpoint completed."""

    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(PICKLED_COUNT)
        self.attempt = ctx.attempt_number
        self.completed = False

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.completed = True

    def process_element(self, value: int, ctx: Any, out: Any) -> None:
        if self.attempt == 0 and self.completed:
            raise RuntimeError("boom after a completed checkpoint")
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        out.collect(f"{ctx.get_current_key()}\t{count}")


def _slow(value: int) -> int:
    if value % 50 == 0:
        import time

        time.sleep(0.01)  # lets periodic checkpoints complete while records still flow
    return value


def _counts(out: Path) -> dict[str, list[int]]:
    got: dict[str, list[int]] = collections.defaultdict(list)
    for name in os.listdir(out):
        assert not name.startswith("."), name
        for line in (out / name).read_text().splitlines():
            key, count = line.split("\t")
            got[key].append(int(count))
    return {key: sorted(values) for key, values in got.items()}


def test_restart_restores_its_own_pickle_checkpoint(tmp_path: Path) -> None:
    env = StreamEnvironment().set_parallelism(2)
    env.enable_checkpointing(30, checkpoint_storage=str(tmp_path / "chk"))
    env.set_restart_strategy(fixed_delay_restart(2, 10))
    (env.from_sequence(1, 6000).uid("numbers").map(_slow).uid("slow")
        .key_by(lambda v: v % 7)
        .process(FailOnceAfterCheckpoint()).uid("count")
        .sink_to(FileSink(str(tmp_path / "out"))).uid("sink"))
    handle = env.execute_async("pickled failover")
    assert handle.wait(60) is JobStatus.FINISHED, handle.failure
    stats = handle.checkpoint_stats()
    assert stats["counts"]["completed"] >= 2
    expected = collections.Counter(v % 7 for v in range(1, 6001))
    assert _counts(tmp_path / "out") == {str(k): list(range(1, n + 1)) for k, n in expected.items()}


JOB = '''
import sys
from statekit.runtime.dataflow.environment import get_execution_environment
from statekit.runtime.api.functions import KeyedProcessFunction
from statekit.runtime.connectors.sinks import FileSink
from statekit.runtime.api.state import ValueStateDescriptor

class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", serializer="pickle"))

    def process_element(self, value, ctx, out):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        out.collect(f"{ctx.get_current_key()}\\t{count}")

env = get_execution_environment()
(env.from_sequence(1, 30).uid(sys.argv[2]).key_by(lambda v: v % 3).process(Count()).uid("count")
    .sink_to(FileSink(sys.argv[1])).uid("sink"))
env.execute("pickled")
'''


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STATEKIT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_cli_restore_of_pickle_state_needs_trust_pickle(home: Path, tmp_path: Path) -> None:
    job = tmp_path / "pickled.py"
    job.write_text(JOB)
    runner = CliRunner()
    first = runner.invoke(cli, ["run", "--savepoint-on-finish", str(tmp_path / "sp"), str(job), str(tmp_path / "out1"),
                                "numbers"])
    assert first.exit_code == 0, first.output
    [savepoint] = (tmp_path / "sp").iterdir()

    # a new source uid (-n skips the old source's offsets) replays the numbers into the restored counts
    refused = runner.invoke(cli, ["run", "-n", "-s", str(savepoint), str(job), str(tmp_path / "out2"), "again"])
    assert refused.exit_code == 2, refused.output
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith(f"statekit: error: {savepoint}: state count/count uses the 'pickle' serializer")
    assert "--trust-pickle" in line
    assert not (tmp_path / "out2").exists() or not any((tmp_path / "out2").iterdir())

    trusted = runner.invoke(cli, ["run", "--trust-pickle", "-n", "-s", str(savepoint), str(job), str(tmp_path / "out3"),
                                  "again"])
    assert trusted.exit_code == 0, trusted.output
    assert _counts(tmp_path / "out3") == {str(k): list(range(11, 21)) for k in range(3)}
