"""``statekit run``'s checkpointing options: contradictions exit 2 with one line; the options
reach the job (attached, detached and through the launcher)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.readers.snapshot import open_snapshot
from statekit.runtime.control.submission import _run_argv
from statekit.runtime.dataflow.run_options import RunOptions

WORDCOUNT = str(Path(__file__).resolve().parents[3] / "examples" / "wordcount.py")
JOB_ID = "c4ec" * 8


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    directory = tmp_path / "in"
    directory.mkdir()
    (directory / "a.txt").write_text("to be or not to be\n" * 2000, encoding="utf-8")
    return directory


CONTRADICTIONS = {
    "incremental-hashmap": (["--state-backend", "hashmap", "--incremental"], "'hashmap' does not"),
    "unaligned-at-least-once": (["--unaligned", "--checkpointing-mode", "at-least-once"], "--unaligned needs"),
    "timeout-without-unaligned": (["--aligned-checkpoint-timeout", "1s"], "--aligned-checkpoint-timeout needs"),
    "no-retained": (["--retained-checkpoints", "0"], "retained checkpoints must be >= 1"),
    "zero-timeout": (["--checkpoint-timeout", "0ms"], "checkpoint timeout"),
}


@pytest.mark.parametrize("case", sorted(CONTRADICTIONS))
def test_contradictory_checkpointing_options_exit_2_with_one_line(
    tmp_path: Path, inputs: Path, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STATEKIT_HOME", str(tmp_path / "home"))
    args, message = CONTRADICTIONS[case]
    result = CliRunner().invoke(cli, ["run", "--checkpoint-dir", str(tmp_path / "chk"), *args, WORDCOUNT,
                                      "--input", str(inputs), "--output", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.output
    assert not (tmp_path / "chk").exists() and not (tmp_path / "out").exists()


def test_the_launcher_refuses_a_contradiction_of_options_and_job_settings(tmp_path: Path, inputs: Path) -> None:
    job = tmp_path / "job.py"
    job.write_text(
        "from statekit.runtime.dataflow.environment import get_execution_environment\n"
        "env = get_execution_environment()\n"
        "env.enable_checkpointing(100, mode='at-least-once')\n"
        "env.from_sequence(1, 10).uid('n').print()\n"
        "env.execute('contradiction')\n", encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "statekit.cli.main", "run", "--unaligned", "--checkpoint-dir",
                             str(tmp_path / "chk"), str(job)], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "STATEKIT_HOME": str(tmp_path / "home")})
    assert result.returncode == 2, result.stderr
    assert "unaligned checkpoints need the exactly-once checkpointing mode" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args, mode, fmt", [
    (["--unaligned"], "unaligned", "canonical"),
    (["--checkpointing-mode", "at-least-once"], "at-least-once", "canonical"),
    (["--state-backend", "rocksdb", "--incremental", "--retained-checkpoints", "2"], "aligned", "native"),
])
def test_the_options_reach_the_job(tmp_path: Path, inputs: Path, monkeypatch: pytest.MonkeyPatch,
                                   args: list[str], mode: str, fmt: str) -> None:
    monkeypatch.setenv("STATEKIT_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(cli, ["run", "--checkpoint-dir", str(tmp_path / "chk"), "--checkpoint-interval",
                                      "50ms", "--job-id", JOB_ID, *args, WORDCOUNT, "--input", str(inputs),
                                      "--output", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    metadata = open_snapshot(str(tmp_path / "chk" / JOB_ID)).metadata
    assert metadata.format.value == fmt
    if mode != "unaligned":  # the final checkpoint of a finishing job is always aligned
        assert metadata.properties["checkpointing_mode"] == mode


def test_a_detached_run_passes_the_checkpointing_options_on() -> None:
    options = RunOptions(job_id=JOB_ID, checkpointing_mode="exactly-once", unaligned=True,
                         aligned_checkpoint_timeout_ms=30, incremental=True, retained_checkpoints=3,
                         externalized_cleanup="delete_on_cancellation", checkpoint_timeout_ms=60_000)
    argv = _run_argv("job.py", options, "/tmp/log")
    joined = " ".join(argv)
    for expected in ("--checkpointing-mode exactly-once", "--unaligned", "--aligned-checkpoint-timeout 30ms",
                     "--incremental", "--retained-checkpoints 3", "--externalized-cleanup delete",
                     "--checkpoint-timeout 60000ms"):
        assert expected in joined, argv


def test_savepoint_and_stop_write_native_savepoints_on_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from control import test_job_control_e2e as e2e

    home = tmp_path / "home"
    monkeypatch.setenv("STATEKIT_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    env = {**e2e.os.environ, "STATEKIT_HOME": str(home)}
    job = tmp_path / "watching.py"
    job.write_text(e2e.WATCHING_WORDCOUNT)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("to be or not to be\n")
    job_id = e2e.submit(env, "--state-backend", "rocksdb", "--incremental", str(job), "--input", "in", "--output", "out")
    try:
        e2e.wait_for(lambda: e2e.committed_counts(tmp_path / "out") == {"to": 2, "be": 2, "or": 1, "not": 1},
                     "the first counts")
        runner = CliRunner()
        e2e.wait_for(lambda: len(_history(runner)) >= 2, "two checkpoints in the history")
        newest = _history(runner)[0]
        assert newest["status"] in ("IN_PROGRESS", "COMPLETED") and newest["mode"] == "aligned"
        completed = [e for e in _history(runner) if e["status"] == "COMPLETED"]
        assert completed and completed[0]["incremental"] is True
        assert set(completed[0]) >= {"id", "trigger_timestamp", "end_to_end_duration", "alignment_duration",
                                     "state_size", "checkpointed_size", "persisted_data"}
        assert runner.invoke(cli, ["savepoint", job_id, "sp", "--format", "bogus"]).exit_code == 2
        canonical = runner.invoke(cli, ["savepoint", job_id, "sp"])
        native = runner.invoke(cli, ["savepoint", job_id, "sp", "--format", "native"])
        stopped = runner.invoke(cli, ["stop", job_id, "--savepoint-path", "final", "--format", "native"])
    finally:
        for entry in e2e.JobRegistry(home).entries():
            if e2e.process_alive(entry.pid, entry.pid_start) and entry.pid != e2e.os.getpid():
                e2e.os.kill(entry.pid, e2e.signal.SIGKILL)
    for result, fmt in ((canonical, "canonical"), (native, "native"), (stopped, "native")):
        assert result.exit_code == 0, (fmt, result.output, e2e.JobRegistry(home).log_path(job_id).read_text()[-2000:])
        path = result.stdout.strip()
        assert open_snapshot(path).metadata.format.value == fmt
        assert runner.invoke(cli, ["verify", path]).exit_code == 0


def _history(runner: CliRunner) -> list[dict[str, Any]]:
    """The checkpoint history ``statekit --json list`` gives for the one running job."""
    [job] = json.loads(runner.invoke(cli, ["--json", "list"]).stdout)["jobs"]
    return list(job["checkpoints"])
