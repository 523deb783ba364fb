"""JobHandle: describe, checkpoint statistics, savepoints, stop (drain / no drain), cancel,
retention, listeners, timers, the launcher."""

from __future__ import annotations

import glob
import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest

from statekit.readers.savepoint_reader import SavepointReader
from statekit.runtime.api.checkpoint_config import ExternalizedCheckpointCleanup
from statekit.runtime.api.functions import KeyedProcessFunction, RuntimeContext
from statekit.runtime.api.state import ValueStateDescriptor
from statekit.runtime.api.time import parse_duration
from statekit.runtime.connectors.sinks import CollectSink, FileSink
from statekit.runtime.connectors.sources import FileSource
from statekit.runtime.control.launcher import run_job_file
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.dataflow.job_handle import JobHandle, JobStatus
from statekit.runtime.dataflow.run_options import RunOptions, add_job_listener, clear_job_listeners
from statekit.statefmt.errors import BadInputError, JobError


class CountThenReport(KeyedProcessFunction):
    """Counts per key; an event-time timer reports the count at end of input (drain)."""

    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", "int"))

    def process_element(self, value: str, ctx: Any, out: Any) -> None:
        self.count.update((self.count.value() or 0) + 1)
        ctx.timer_service().register_event_time_timer(0)

    def on_timer(self, timestamp: int, ctx: Any, out: Any) -> None:
        out.collect(f"{ctx.get_current_key()}={self.count.value()}")


def watch_job(tmp_path: Path, **checkpointing: Any) -> tuple[StreamEnvironment, Path]:
    inputs = tmp_path / "in"
    inputs.mkdir(exist_ok=True)
    (inputs / "a.txt").write_text("xa\nxb\nz\n", encoding="utf-8")
    env = StreamEnvironment().set_parallelism(2)
    env.enable_checkpointing(40, checkpoint_storage=str(tmp_path / "chk"), **checkpointing)
    (env.from_source(FileSource(str(inputs), watch=True, monitor_interval_s=0.02)).uid("source")
        .key_by(lambda line: line[0])
        .process(CountThenReport()).uid("counter")
        .sink_to(FileSink(str(tmp_path / "out"))).uid("sink"))
    return env, tmp_path / "out"


def committed(out: Path) -> list[str]:
    return sorted(line for name in os.listdir(out) if not name.startswith(".")
                  for line in (out / name).read_text(encoding="utf-8").splitlines())


def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_describe_stats_savepoint_and_stop_with_drain(tmp_path: Path) -> None:
    seen: list[tuple[str, JobStatus]] = []
    add_job_listener(lambda h: seen.append((h.job_id, h.status)))
    try:
        env, out = watch_job(tmp_path, num_retained=2)
        handle = env.execute_async("drained")
    finally:
        clear_job_listeners()
    assert seen == [(handle.job_id, JobStatus.CREATED)]
    wait_for(lambda: handle.checkpoint_stats()["counts"]["completed"] >= 3)
    described = handle.describe()
    assert described["jid"] == handle.job_id and len(handle.job_id) == 32
    assert described["name"] == "drained" and described["state"] == "RUNNING" and described["end-time"] == -1
    assert described["vertices"] == [
        {"id": "source", "name": "Source", "parallelism": 2},
        {"id": "counter", "name": "KeyedProcess", "parallelism": 2},
        {"id": "sink", "name": "Sink", "parallelism": 2},
    ]
    assert described["checkpoint-dir"] == str(tmp_path / "chk" / handle.job_id)

    savepoint = handle.trigger_savepoint(str(tmp_path / "sp")).result(10)
    assert os.path.basename(savepoint).startswith(f"savepoint-{handle.job_id[:6]}-")
    assert len(os.path.basename(savepoint)) == len("savepoint-") + 6 + 1 + 12
    stats = handle.checkpoint_stats()
    assert set(stats) == {"counts", "latest", "summary", "history"}
    assert stats["summary"]["end_to_end_duration"]["min"] <= stats["summary"]["end_to_end_duration"]["max"]
    assert {"completed", "failed", "in_progress"} <= set(stats["counts"])
    latest_savepoint = stats["latest"]["savepoint"]
    assert latest_savepoint["external_path"] == savepoint and latest_savepoint["is_savepoint"] is True
    assert {"id", "external_path", "trigger_timestamp", "latest_ack_timestamp", "state_size"} <= set(latest_savepoint)
    assert stats["latest"]["completed"]["external_path"].startswith(str(tmp_path / "chk" / handle.job_id / "chk-"))
    assert SavepointReader.read(savepoint).metadata.kind.value == "savepoint"

    stopped = handle.trigger_savepoint(str(tmp_path / "sp"), stop=True, drain=True).result(10)
    assert handle.wait(10) is JobStatus.FINISHED
    assert handle.describe()["end-time"] >= handle.describe()["start-time"]
    # drain: end of input fired the event-time timers before the savepoint; the sink committed them
    assert committed(out) == ["x=2", "z=1"]
    assert os.path.isdir(savepoint) and os.path.isdir(stopped)
    retained = glob.glob(str(tmp_path / "chk" / handle.job_id / "chk-*"))
    assert len(retained) == 2, retained
    with pytest.raises(JobError):
        handle.trigger_savepoint(str(tmp_path / "sp")).result(1)


def test_stop_without_drain_does_not_flush_and_restores(tmp_path: Path) -> None:
    env, out = watch_job(tmp_path)
    handle = env.execute_async("undrained")
    wait_for(lambda: handle.checkpoint_stats()["counts"]["completed"] >= 1)
    stopped = handle.trigger_savepoint(str(tmp_path / "sp"), stop=True).result(10)
    assert handle.wait(10) is JobStatus.FINISHED
    assert committed(out) == []  # no end of input: timers did not fire
    counts = {e.key: e.value for e in SavepointReader.read(stopped).read_keyed_state("counter", "count")}
    assert counts == {"x": 2, "z": 1}
    timers = list(SavepointReader.read(stopped).read_keyed_state("counter", "_timers"))
    assert sorted((e.key, e.user_key) for e in timers) == [("x", "e:0"), ("z", "e:0")]


def test_cancel_retains_or_deletes_checkpoints(tmp_path: Path) -> None:
    for cleanup in ExternalizedCheckpointCleanup:
        root = tmp_path / cleanup.value
        root.mkdir()
        env, _ = watch_job(root, externalized_cleanup=cleanup)
        handle = env.execute_async("cancelled")
        wait_for(lambda handle=handle: handle.checkpoint_stats()["counts"]["completed"] >= 2)
        handle.cancel()
        assert handle.wait(10) is JobStatus.CANCELED
        left = glob.glob(str(root / "chk" / handle.job_id / "chk-*"))
        if cleanup is ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION:
            assert len(left) == 1 and os.path.exists(os.path.join(left[0], "_metadata"))
        else:
            assert left == []


def test_processing_time_timers_fire(tmp_path: Path) -> None:
    class Later(KeyedProcessFunction):
        # one timer per key: two records of a key in different milliseconds would register two
        def open(self, ctx: RuntimeContext) -> None:
            self.armed = ctx.get_state(ValueStateDescriptor("armed", "bool"))

        def process_element(self, value: str, ctx: Any, out: Any) -> None:
            if self.armed.value():
                return
            self.armed.update(True)
            service = ctx.timer_service()
            service.register_processing_time_timer(service.current_processing_time() + 20)

        def on_timer(self, timestamp: int, ctx: Any, out: Any) -> None:
            out.collect(ctx.get_current_key())

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("a1\nb1\na2\nc1\n", encoding="utf-8")
    sink = CollectSink()
    env = StreamEnvironment().set_parallelism(2)
    env.from_source(FileSource(str(tmp_path / "in"), watch=True)).uid("lines") \
        .key_by(lambda line: line[0]).process(Later()).uid("later").sink_to(sink).uid("sink")
    handle = env.execute_async("timers")
    wait_for(lambda: len(sink.values) == 3)
    handle.cancel()
    assert handle.wait(10) is JobStatus.CANCELED
    assert sorted(sink.values) == ["a", "b", "c"]


def test_generated_uids_are_deterministic_and_warned(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def build() -> StreamEnvironment:
        env = StreamEnvironment()
        env.from_collection([1, 2]).map(lambda v: v + 1).sink_to(CollectSink())
        return env

    with caplog.at_level(logging.WARNING, logger="statekit.runtime"):
        first = build().execute_async("auto")
        first.wait(10)
    uids = [v["id"] for v in first.describe()["vertices"]]
    assert all(u.startswith("auto-") for u in uids) and len(set(uids)) == 3
    assert sum("has no uid" in r.getMessage() for r in caplog.records) == 3
    second = build().execute_async("auto")
    second.wait(10)
    assert [v["id"] for v in second.describe()["vertices"]] == uids


def test_duplicate_uid_is_refused() -> None:
    env = StreamEnvironment()
    env.from_collection([1]).uid("same").map(lambda v: v).uid("same")
    with pytest.raises(BadInputError, match="duplicate operator uid 'same'"):
        env.execute_async("dup")


JOB = '''
import sys
from statekit.runtime.dataflow.environment import get_execution_environment
from statekit.runtime.connectors.sinks import FileSink
env = get_execution_environment()
env.from_sequence(1, int(sys.argv[1])).uid("numbers").sink_to(FileSink(sys.argv[2])).uid("sink")
env.execute("numbers")
'''


def test_launcher_runs_a_job_file_with_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from statekit.cli.main import cli

    monkeypatch.setenv("STATEKIT_HOME", str(tmp_path / "home"))
    job = tmp_path / "job.py"
    job.write_text(JOB, encoding="utf-8")
    out = tmp_path / "out"
    status = run_job_file(str(job), RunOptions(parallelism=3, job_id="ab" * 16, checkpoint_dir=str(tmp_path / "chk"),
                                               job_args=("100", str(out))))
    assert status is JobStatus.FINISHED
    assert sorted(int(line) for name in os.listdir(out) for line in (out / name).read_text().split()) == list(range(1, 101))
    (final,) = glob.glob(str(tmp_path / "chk" / ("ab" * 16) / "chk-*"))
    assert SavepointReader.read(final).operator("numbers").parallelism == 3
    no_snapshot = CliRunner().invoke(cli, ["run", "-s", str(tmp_path / "nowhere"), str(job), "1", str(out)])
    assert no_snapshot.exit_code == 2
    assert "nowhere" in no_snapshot.stderr
    assert CliRunner().invoke(cli, ["run", str(tmp_path / "missing.py")]).exit_code == 2
    assert [parse_duration(t) for t in ("200ms", "1s", "2m", "150")] == [200, 1000, 120_000, 150]
    with pytest.raises(BadInputError):
        parse_duration("soon")


def test_handle_wait_times_out_while_running(tmp_path: Path) -> None:
    env, _ = watch_job(tmp_path)
    handle: JobHandle = env.execute_async("waiting")
    assert handle.wait(0.05) in (JobStatus.CREATED, JobStatus.RUNNING)
    handle.cancel()
    assert handle.wait(10) is JobStatus.CANCELED
