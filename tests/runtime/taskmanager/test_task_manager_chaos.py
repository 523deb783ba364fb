"""Chaos on TaskManager processes: SIGKILL single TaskManagers of a running `statekit run` (not the
whole job), at random moments and in the middle of checkpoints, in every checkpointing mode; the job
restarts from its latest completed checkpoint in fresh TaskManagers and its exactly-once output is
the one of an uninterrupted run."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tm_support import JOB, final_sums, task_managers, truth

pytestmark = pytest.mark.slow

KILLS = 3
COUNT = 40_000
MODES = {
    "aligned": [],
    "unaligned": ["--unaligned"],
    "aligned-timeout": ["--unaligned", "--aligned-checkpoint-timeout", "20ms"],
    "incremental-rocksdb": ["--state-backend", "rocksdb", "--incremental"],
}


def checkpoints(job_dir: Path) -> tuple[int, bool]:
    """(latest complete checkpoint id or 0, whether a chk-N is being written now)."""
    latest, in_progress = 0, False
    if job_dir.is_dir():
        for entry in os.listdir(job_dir):
            if entry.startswith("chk-"):
                if (job_dir / entry / "_metadata").exists():
                    latest = max(latest, int(entry[4:]))
                else:
                    in_progress = True
    return latest, in_progress


@pytest.mark.parametrize("mode", sorted(MODES))
def test_sigkilled_task_managers_keep_the_output_exactly_once(tmp_path: Path, mode: str) -> None:
    rng = random.Random(mode)
    job_id = f"{rng.getrandbits(128):032x}"
    job_dir = tmp_path / "chk" / job_id
    command = [sys.executable, "-m", "statekit.cli.main", "run", "-p", "2", "--executor", "processes",
               "--checkpoint-dir", str(tmp_path / "chk"), "--checkpoint-interval", "100ms", "--job-id", job_id,
               "--restart-attempts", str(KILLS + 2), "--restart-delay", "0", *MODES[mode],
               JOB, "--count", str(COUNT), "--rate", "3000", "--output", str(tmp_path / "out")]
    env = dict(os.environ, STATEKIT_HOME=str(tmp_path / "home"))
    master = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    killed: list[int] = []
    try:
        for attempt in range(KILLS):
            seen = checkpoints(job_dir)[0]
            deadline = time.monotonic() + 60
            while checkpoints(job_dir)[0] <= seen or len(managers := task_managers(master.pid)) < 2:
                assert master.poll() is None, f"the job ended early: {master.stderr.read()!r}"  # type: ignore[union-attr]
                assert time.monotonic() < deadline, f"attempt {attempt} completed no checkpoint"
                time.sleep(0.005)
            if attempt % 2:  # in the middle of a checkpoint
                deadline = time.monotonic() + 2
                while not checkpoints(job_dir)[1] and time.monotonic() < deadline:
                    time.sleep(0.001)
            else:
                time.sleep(rng.uniform(0, 0.2))
            victim = rng.choice([pid for pid in managers if pid not in killed])
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)
        code = master.wait(180)
        stderr = master.stderr.read().decode()  # type: ignore[union-attr]
    finally:
        if master.poll() is None:
            master.kill()
        master.stderr.close()  # type: ignore[union-attr]
    assert code == 0, stderr
    assert stderr.count("was lost") >= KILLS, stderr
    assert final_sums(tmp_path / "out") == truth(COUNT)
    assert not [pid for pid in killed if os.path.exists(f"/proc/{pid}")]
