"""`statekit run --task-managers N --slots S`: the job's subtasks run in exactly N TaskManager
processes; too few slots for the job's largest parallelism is refused with one line (exit 2)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tm_support import JOB, assert_running_sums_exactly_once, task_managers

pytestmark = pytest.mark.slow

COUNT = 8_000


def statekit(*args: str) -> list[str]:
    return [sys.executable, "-m", "statekit.cli.main", "run", *args]


def env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, STATEKIT_HOME=str(tmp_path / "home"))


def test_four_subtasks_run_in_two_task_managers_of_two_slots(tmp_path: Path) -> None:
    command = statekit("-p", "4", "--task-managers", "2", "--slots", "2", "--executor", "processes",
                       "--checkpoint-dir", str(tmp_path / "chk"), "--checkpoint-interval", "200ms",
                       JOB, "--count", str(COUNT), "--rate", "1000", "--output", str(tmp_path / "out"))
    master = subprocess.Popen(command, env=env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while master.poll() is None:  # every TaskManager the run ever had (the job runs about 2 s)
            seen.update(task_managers(master.pid))
            assert time.monotonic() < deadline, "the job did not end"
            time.sleep(0.01)
        stderr = master.stderr.read().decode()  # type: ignore[union-attr]
    finally:
        if master.poll() is None:
            master.kill()
        master.stderr.close()  # type: ignore[union-attr]
    assert master.returncode == 0, stderr
    assert len(seen) == 2, f"TaskManagers {sorted(seen)}"
    assert_running_sums_exactly_once(tmp_path / "out", COUNT, parallelism=4)


def refused(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        statekit("-p", "2", "--task-managers", "1", "--slots", "1", "--executor", "processes",
                 JOB, "--count", "100", "--output", str(tmp_path / "out")),
        env=env(tmp_path), capture_output=True, text=True, timeout=60)


def test_too_few_slots_are_refused_with_one_line(tmp_path: Path) -> None:
    run = refused(tmp_path)
    assert run.returncode == 2, run.stderr  # bad input (docs/CLI.md, exit codes)
    errors = [line for line in run.stderr.splitlines() if line.startswith("statekit: error:")]
    assert errors == ["statekit: error: the job needs 2 slots (its largest parallelism) but 1 TaskManager(s) with "
                      "1 slot(s) each have 1; raise --task-managers or --slots"], run.stderr
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


def test_too_few_slots_are_refused_before_the_job_is_submitted(tmp_path: Path) -> None:
    run = refused(tmp_path)
    assert run.returncode == 2
    assert "Job has been submitted" not in run.stderr, run.stderr
