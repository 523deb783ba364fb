"""examples/windowed_counts.py: correct windows, late lines, and exactly-once output under
SIGKILL (restores alternating between parallelism 2 and 3) and after a savepoint taken
mid-window and restored at another parallelism — always the output of one uninterrupted run."""

from __future__ import annotations

import collections
import importlib.util
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest
from chaos import (
    EXAMPLES,
    KillPlan,
    finish,
    kill_repeatedly,
    no_attempt,
    read_lines,
    restore_from,
    statekit_run,
)
from chaos import windowed_input as make_input
from chaos import windowed_truth as truth

from statekit.runtime.control.launcher import run_job_file
from statekit.runtime.dataflow.job_handle import JobHandle, JobStatus
from statekit.runtime.dataflow.run_options import RunOptions, add_job_listener, remove_job_listener

EXAMPLE = str(EXAMPLES / "windowed_counts.py")
JOB_ID = "a11ce" * 6 + "00"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("windowed_counts_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def output(directory: Path) -> collections.Counter[str]:
    return read_lines(directory)


def args(inputs: Path, out: Path, *extra: str) -> tuple[str, ...]:
    return ("--input", str(inputs), "--output", str(out), "--window", "10s", "--out-of-orderness", "2s", *extra)


def test_an_uninterrupted_run_counts_every_window(tmp_path: Path) -> None:
    lines = make_input(tmp_path / "in", 3, 400)
    status = run_job_file(EXAMPLE, RunOptions(parallelism=2, job_args=args(tmp_path / "in", tmp_path / "out")))
    assert status is JobStatus.FINISHED
    assert output(tmp_path / "out") == truth(lines)


def test_late_lines_go_to_the_late_output_after_a_restore(tmp_path: Path) -> None:
    """The source's watermark is restored: lines far behind it are late, as in an uninterrupted run."""
    first = make_input(tmp_path / "in", 1, 1_000)  # event time up to 37 s
    status = run_job_file(EXAMPLE, RunOptions(
        parallelism=2, savepoint_on_finish=str(tmp_path / "sp"),
        job_args=args(tmp_path / "in", tmp_path / "out", "--late-output", str(tmp_path / "late")),
    ))
    assert status is JobStatus.FINISHED
    late_lines = ["100\tlate alpha alpha beta", "200\t", "2500\tlate too"]
    (tmp_path / "in" / "part-99.txt").write_text("\n".join(late_lines) + "\n", encoding="utf-8")
    (savepoint,) = (tmp_path / "sp").iterdir()
    status = run_job_file(EXAMPLE, RunOptions(
        parallelism=3, restore_path=str(savepoint),
        job_args=args(tmp_path / "in", tmp_path / "out", "--late-output", str(tmp_path / "late")),
    ))
    assert status is JobStatus.FINISHED
    assert output(tmp_path / "out") == truth(first)
    # a line without words has no records, so it cannot be late
    assert output(tmp_path / "late") == collections.Counter([late_lines[0], late_lines[2]])


def test_bad_lines_fail_with_a_one_line_error() -> None:
    example = _example()
    with pytest.raises(Exception, match=r"expected EPOCH_MS<TAB>TEXT"):
        example.records_of("no tab here")
    assert example.records_of("5\tHello, World hello") == [
        ("hello", 5, "5\tHello, World hello", True), ("world", 5, "5\tHello, World hello", False),
        ("hello", 5, "5\tHello, World hello", False)]


# ---------------------------------------------------------------- chaos


def command(checkpoints: Path, inputs: Path, out: Path, parallelism: int, *extra: str) -> list[str]:
    options = ["-p", str(parallelism), "--checkpoint-dir", str(checkpoints), "--checkpoint-interval", "100ms",
               "--job-id", JOB_ID, *restore_from(checkpoints / JOB_ID)]
    return statekit_run(EXAMPLE, options, args(inputs, out, *extra))


def test_windowed_counts_are_exactly_once_under_sigkill(tmp_path: Path) -> None:
    lines = make_input(tmp_path / "in", 16, 6_000)  # about 6 s of input: five attempts never reach its end
    expected = truth(lines)
    checkpoints, out = tmp_path / "chk", tmp_path / "out"
    kills = 5
    # an attempt to be killed watches its input: it cannot end on its own first, however fast
    run = kill_repeatedly(
        checkpoints / JOB_ID, lambda attempt: command(checkpoints, tmp_path / "in", out, 2 + attempt % 2, "--watch"),
        KillPlan(attempts=kills, seed=7, checkpoint_timeout_s=30, random_delay_s=0.2, mid_checkpoint=no_attempt),
        home=tmp_path / "home")
    finish(command(checkpoints, tmp_path / "in", out, 3), home=tmp_path / "home", timeout=300)
    run.assert_progress()
    got = output(out)
    assert got == expected, f"{sum((got - expected).values())} extra, {sum((expected - got).values())} missing lines"


class _Handles:
    def __init__(self) -> None:
        self.handles: list[JobHandle] = []
        self.started = threading.Event()

    def __call__(self, handle: JobHandle) -> None:
        self.handles.append(handle)
        self.started.set()


def stop_with_savepoint(tmp_path: Path, out: Path) -> str:
    """Run windowed_counts at parallelism 2 watching its input, and stop it with a savepoint after
    two completed checkpoints: its last windows are then still open (the watermark trails the
    latest timestamp), whatever the machine's speed."""
    listener = _Handles()
    add_job_listener(listener)
    try:
        runner = threading.Thread(target=lambda: run_job_file(EXAMPLE, RunOptions(
            parallelism=2, checkpoint_dir=str(tmp_path / "chk"), checkpoint_interval_ms=200,
            job_args=args(tmp_path / "in", out, "--watch"))))
        runner.start()
        assert listener.started.wait(30)
        handle, deadline = listener.handles[0], time.monotonic() + 60
        while int(handle.checkpoint_stats()["counts"]["completed"]) < 2:
            assert time.monotonic() < deadline and not handle.status.is_terminal, handle.describe()
            time.sleep(0.01)
        savepoint = handle.trigger_savepoint(str(tmp_path / "sp"), stop=True).result(60)
        runner.join(60)
    finally:
        remove_job_listener(listener)
    return savepoint


def test_a_savepoint_mid_window_restores_at_another_parallelism(tmp_path: Path) -> None:
    lines = make_input(tmp_path / "in", 3, 4_000)
    out = tmp_path / "out"
    savepoint = stop_with_savepoint(tmp_path, out)
    from statekit.readers.savepoint_reader import SavepointReader

    reader = SavepointReader.read(savepoint)
    contents = list(reader.read_keyed_state("windows", "window-contents"))
    timers = list(reader.read_keyed_state("windows", "_window_timers"))
    assert contents and timers, "the savepoint was not taken mid-window"
    consumed = sum(e["offset"] for e in reader.read_union_state("source", "offsets"))
    assert 0 < consumed <= sum(p.stat().st_size for p in (tmp_path / "in").iterdir())
    lines += make_input(tmp_path / "in", 3, 4_000, first=3)  # later files: read only after the restore
    status = run_job_file(EXAMPLE, RunOptions(parallelism=3, restore_path=savepoint, job_args=args(tmp_path / "in", out)))
    assert status is JobStatus.FINISHED
    assert output(out) == truth(lines)


def test_a_mid_window_savepoint_fires_the_same_after_a_max_parallelism_change(tmp_path: Path) -> None:
    """Window contents and timers are keyed by their key group: `statekit rescale --max-parallelism`
    regroups them; the restored job (on the other backend, at another parallelism) fires exactly
    what an uninterrupted run fires."""
    from click.testing import CliRunner

    from statekit.cli.main import cli
    from statekit.readers.savepoint_reader import SavepointReader

    lines = make_input(tmp_path / "in", 3, 4_000)
    out = tmp_path / "out"
    savepoint = stop_with_savepoint(tmp_path, out)
    lines += make_input(tmp_path / "in", 3, 4_000, first=3)
    before = SavepointReader.read(savepoint)
    pending = {(e.key, tuple(e.namespace)): e.value for e in before.read_keyed_state("windows", "window-contents")}
    assert pending, "the savepoint was not taken mid-window"
    assert before.operator("windows").max_parallelism == 128
    rescaled = tmp_path / "sp-256"
    result = CliRunner().invoke(cli, ["rescale", savepoint, "--max-parallelism", "256", "-p", "3", "-o", str(rescaled)])
    assert result.exit_code == 0, result.output
    after = SavepointReader.read(str(rescaled))
    assert after.operator("windows").max_parallelism == 256
    assert {(e.key, tuple(e.namespace)): e.value for e in after.read_keyed_state("windows", "window-contents")} == pending
    status = run_job_file(EXAMPLE, RunOptions(parallelism=3, restore_path=str(rescaled), state_backend="rocksdb",
                                              job_args=args(tmp_path / "in", out)))
    assert status is JobStatus.FINISHED
    assert output(out) == truth(lines)
