"""Every offline writer over a real unaligned checkpoint (taken under backpressure): the output
carries the in-flight records over — verified, and restored against the truth, exactly once — or
the writer refuses with one line (exit 2) and writes nothing."""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from jobs_for_checkpoints import KEYS, SlowSink, completed, retained_checkpoints, run_with, start_with

from statekit.cli.main import cli
from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.verification import verify_snapshot
from statekit.runtime.api.functions import KeyedProcessFunction, RuntimeContext
from statekit.runtime.api.state import ValueStateDescriptor
from statekit.runtime.connectors.sinks import CollectSink
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.dataflow.job_handle import JobStatus
from statekit.runtime.dataflow.run_options import RunOptions
from statekit.statefmt.channel_state import decode_channel_state
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.json_contract import json_data

N = 200_000


class Tally(KeyedProcessFunction):
    """Per key: the sum of its numbers (``total``) and how many there were (``seen``)."""

    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", "int"))
        self.seen = ctx.get_state(ValueStateDescriptor("seen", "int"))

    def process_element(self, value: int, ctx: Any, out: Any) -> None:
        self.total.update((self.total.value() or 0) + value)
        self.seen.update((self.seen.value() or 0) + 1)
        out.collect(value)


def tally_job(parallelism: int, sink: CollectSink, storage: str, *, tally: str = "tally") -> StreamEnvironment:
    """numbers -rebalance-> relay -hash-> tally -> sink: in-flight records on two kinds of exchange."""
    env = StreamEnvironment().set_parallelism(parallelism)
    env.set_checkpoint_storage(storage)
    (env.from_sequence(1, N).uid("numbers")
        .rebalance().map(lambda v: v, "relay").uid("relay")
        .key_by(lambda v: v % KEYS).process(Tally(), "tally").uid(tally)
        .sink_to(sink).uid("sink"))
    return env


def truth() -> tuple[dict[int, int], dict[int, int]]:
    totals: dict[int, int] = collections.defaultdict(int)
    seen: dict[int, int] = collections.defaultdict(int)
    for v in range(1, N + 1):
        totals[v % KEYS] += v
        seen[v % KEYS] += 1
    return dict(totals), dict(seen)


@pytest.fixture(scope="module")
def unaligned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(the newest retained unaligned checkpoint with in-flight records on both exchanges, a scratch dir)."""
    root = tmp_path_factory.mktemp("unaligned")
    env = tally_job(2, SlowSink(0.0002), str(root / "chk"))
    env.enable_checkpointing(50, num_retained=5)
    env.enable_unaligned_checkpoints()
    handle = start_with(env, RunOptions(), "backpressured")
    deadline = time.monotonic() + 120
    try:
        while len(completed(handle)) < 4:
            assert not handle.status.is_terminal and time.monotonic() < deadline, handle.describe()
            time.sleep(0.02)
    finally:
        handle.cancel()
        handle.wait(60)
    io, job_dir = FileIO.for_path(str(root / "chk" / handle.job_id))
    best = None
    for checkpoint_id, metadata in sorted(retained_checkpoints(io, job_dir).items()):
        edges = {s.partitioning for f in metadata.channel_files()
                 for s in decode_channel_state(io.read_bytes(f"{job_dir}/chk-{checkpoint_id}/{f.path}"), path=f.path)}
        if {"hash", "rebalance"} <= edges:
            best = f"{job_dir}/chk-{checkpoint_id}"
    assert best is not None, "no retained checkpoint holds in-flight records on both exchanges"
    yield best, root


def in_flight(path: str) -> int:
    return sum(f.records for f in SavepointReader.read(path).metadata.channel_files())


def restored_state(source: str, scratch: Path, parallelism: int, *, tally: str = "tally",
                   allow_non_restored_state: bool = False) -> tuple[dict[int, int], dict[int, int]]:
    """Restore ``source`` into the job at ``parallelism``, run it to its end: its final state."""
    savepoints = scratch / f"final-{time.monotonic_ns()}"
    env = tally_job(parallelism, CollectSink(), str(scratch / "restored"), tally=tally)
    env.enable_checkpointing(1000)
    result = run_with(env, RunOptions(restore_path=source, savepoint_on_finish=str(savepoints),
                                      allow_non_restored_state=allow_non_restored_state), "restored")
    assert result.status is JobStatus.FINISHED and result.savepoint_path is not None
    reader = SavepointReader.read(result.savepoint_path)
    return ({e.key: e.value for e in reader.read_keyed_state(tally, "total")},
            {e.key: e.value for e in reader.read_keyed_state(tally, "seen")})


def statekit(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def written(scratch: Path, name: str, *args: str) -> str:
    """Run a writer command into a fresh output; it must exit 0 and its output verify."""
    out = str(scratch / f"{name}-{time.monotonic_ns()}")
    done = statekit(*[a.replace("{out}", out) for a in args])
    assert done.exit_code == 0, done.output
    report = verify_snapshot(out)
    assert report.ok, json_data(report)
    return out


def test_the_checkpoint_itself_restores_exactly_once(unaligned: tuple[str, Path]) -> None:
    checkpoint, scratch = unaligned
    assert in_flight(checkpoint) > 0
    assert restored_state(checkpoint, scratch, 2) == truth()


@pytest.mark.parametrize(("args", "restore_at"), [
    (["-p", "3"], (3, 2)),
    (["-p", "1"], (1,)),
    (["--operator", "relay=3", "--operator", "tally=4"], (2,)),
])
def test_rescale_carries_the_in_flight_records(unaligned: tuple[str, Path], args: list[str],
                                               restore_at: tuple[int, ...]) -> None:
    checkpoint, scratch = unaligned
    out = written(scratch, "rescaled", "rescale", checkpoint, *args, "-o", "{out}")
    assert in_flight(out) == in_flight(checkpoint)
    for parallelism in restore_at:
        assert restored_state(out, scratch, parallelism) == truth(), (args, parallelism)


def test_rescale_to_a_new_max_parallelism_is_refused_with_in_flight_keyed_records(
    unaligned: tuple[str, Path]
) -> None:
    checkpoint, scratch = unaligned
    out = scratch / "regrouped"
    done = statekit("rescale", checkpoint, "--max-parallelism", "256", "-o", str(out))
    assert done.exit_code == 2, done.output
    line = done.stderr.strip()
    assert line.count("\n") == 0 and "in-flight record(s) on the hash exchange relay -> tally" in line, line
    assert "take a savepoint" in line and not out.exists()


def test_migrate_carries_the_in_flight_records(unaligned: tuple[str, Path]) -> None:
    checkpoint, scratch = unaligned
    out = written(scratch, "migrated", "migrate", checkpoint, "--state", "tally/total", "--value-type", "long",
                  "-o", "{out}")
    assert in_flight(out) == in_flight(checkpoint)
    assert restored_state(out, scratch, 2) == truth()


def test_modify_rename_renames_the_in_flight_records_too(unaligned: tuple[str, Path]) -> None:
    checkpoint, scratch = unaligned
    out = written(scratch, "renamed", "modify", checkpoint, "--rename-uid", "tally=tally-v2", "-o", "{out}")
    assert in_flight(out) == in_flight(checkpoint)
    assert restored_state(out, scratch, 2, tally="tally-v2") == truth()
    assert restored_state(out, scratch, 3, tally="tally-v2") == truth()


def test_modify_remove_state_keeps_the_in_flight_records(unaligned: tuple[str, Path]) -> None:
    checkpoint, scratch = unaligned
    out = written(scratch, "trimmed", "modify", checkpoint, "--remove-state", "tally/seen", "-o", "{out}")
    assert in_flight(out) == in_flight(checkpoint)
    totals, seen = restored_state(out, scratch, 2)
    assert totals == truth()[0] and seen != truth()[1]  # "seen" started again from nothing, as asked


@pytest.mark.parametrize("uid", ["tally", "numbers"])
def test_modify_remove_operator_that_in_flight_records_belong_to_is_refused(unaligned: tuple[str, Path],
                                                                           uid: str) -> None:
    checkpoint, scratch = unaligned
    out = scratch / f"removed-{uid}"
    done = statekit("modify", checkpoint, "--remove-operator", uid, "-o", str(out))
    assert done.exit_code == 2, done.output
    line = done.stderr.strip()
    assert line.count("\n") == 0 and f"cannot remove operator {uid}" in line and "in-flight record(s)" in line, line
    assert not out.exists()


def test_bootstrap_from_carries_the_in_flight_records(unaligned: tuple[str, Path]) -> None:
    checkpoint, scratch = unaligned
    rows = scratch / "rows.csv"
    rows.write_text("user,count\nx,1\ny,2\n", encoding="utf-8")
    out = written(scratch, "bootstrapped", "bootstrap", "--input", str(rows), "--uid", "extra", "--state", "count",
                  "--key-column", "user", "--value-column", "count", "--value-type", "int", "--from", checkpoint,
                  "-o", "{out}")
    assert in_flight(out) == in_flight(checkpoint)
    assert restored_state(out, scratch, 2, allow_non_restored_state=True) == truth()


def test_the_writer_api_carries_the_in_flight_records(unaligned: tuple[str, Path]) -> None:
    from statekit.writers.savepoint_writer import SavepointWriter

    checkpoint, scratch = unaligned
    out = str(scratch / "copied")
    SavepointWriter.from_existing_savepoint(checkpoint).write(out)
    assert verify_snapshot(out).ok and in_flight(out) == in_flight(checkpoint)
    assert restored_state(out, scratch, 2) == truth()


def test_a_rescaled_output_is_rescaled_again(unaligned: tuple[str, Path]) -> None:
    checkpoint, scratch = unaligned
    once = written(scratch, "once", "rescale", checkpoint, "-p", "3", "-o", "{out}")
    twice = written(scratch, "twice", "rescale", once, "-p", "2", "-o", "{out}")
    assert in_flight(twice) == in_flight(checkpoint)
    assert restored_state(twice, scratch, 2) == truth()
