"""Live status of an attached `statekit run` on a terminal, and each job's last checkpoint in
`statekit list`."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from statekit.cli.main import cli

JOB = '''
import sys, time
from statekit.runtime.dataflow.environment import get_execution_environment
from statekit.runtime.connectors.sources import NumberSequenceSource

def slow(value):
    time.sleep(float(sys.argv[2]))
    return value

env = get_execution_environment()
env.from_source(NumberSequenceSource(1, int(sys.argv[1])), "numbers").uid("numbers") \\
    .key_by(lambda v: v % 8).map(slow).uid("slow").sink_to(lambda v: None).uid("sink")
env.execute("status probe")
'''


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STATEKIT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "250")
    return tmp_path / "home"


@pytest.fixture
def job_file(tmp_path: Path) -> Path:
    path = tmp_path / "status_job.py"
    path.write_text(JOB)
    return path


def run_on_a_terminal(args: list[str], env: dict[str, str], timeout: float = 90.0) -> tuple[int, str]:
    """``statekit ARGS`` with stdout and stderr on a pseudo-terminal; (exit code, everything shown)."""
    master, slave = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "statekit.cli.main", *args], stdin=subprocess.DEVNULL,
                               stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif process.poll() is not None:
                break
        code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
    return code, b"".join(chunks).decode("utf-8", "replace")


def test_an_attached_run_on_a_terminal_shows_a_live_status(home: Path, job_file: Path, tmp_path: Path) -> None:
    env = {**os.environ, "STATEKIT_HOME": str(home), "COLUMNS": "250", "TERM": "xterm"}
    code, shown = run_on_a_terminal(
        # threads: a slow map behind TaskManagers' credits holds an aligned barrier for most of the run
        ["run", "-p", "2", "--executor", "threads", "--checkpoint-dir", str(tmp_path / "chk"),
         "--checkpoint-interval", "100ms", str(job_file), "8000", "0.001"], env)
    assert code == 0, shown
    assert re.search(r"RUNNING.* in [\d,]+ rec/s  out [1-9][\d,]* rec/s  checkpoints \d+ done, \d+ failed  "
                     r"last \S.*  backpressured (\x1b\[[\d;]*m)?\d+(\x1b\[[\d;]*m)?/4 tasks", shown), shown
    assert "has finished" in shown


def test_an_attached_run_off_a_terminal_shows_no_status(home: Path, job_file: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "statekit.cli.main", "run", str(job_file), "300", "0"],
                            capture_output=True, text=True, timeout=90, check=False,
                            env={**os.environ, "STATEKIT_HOME": str(home)})
    assert result.returncode == 0, result.stderr
    assert "rec/s" not in result.stdout + result.stderr
    assert "has finished" in result.stdout


def test_list_shows_the_last_checkpoint_of_running_and_ended_jobs(home: Path, job_file: Path,
                                                                   tmp_path: Path) -> None:
    runner = CliRunner()
    submitted = runner.invoke(cli, ["run", "-d", "--checkpoint-dir", str(tmp_path / "chk"),
                                    "--checkpoint-interval", "100ms", str(job_file), "100000000", "0.001"])
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.strip()
    try:
        deadline = time.monotonic() + 60
        while True:
            listed = runner.invoke(cli, ["--json", "list"])
            assert listed.exit_code == 0, listed.output
            (job,) = json.loads(listed.stdout)["jobs"]
            if job["last_checkpoint"] is not None:
                break
            assert time.monotonic() < deadline, "no checkpoint completed"
            time.sleep(0.2)
        last = job["last_checkpoint"]
        assert job["job_id"] == job_id and last["checkpoint_id"] >= 1 and last["size"] > 0
        assert last["completed_ms"] <= time.time() * 1000
        text = runner.invoke(cli, ["list"])
        row = next(line for line in text.stdout.splitlines() if job_id in line)
        assert "chk-" in row and ("B" in row.split("chk-")[1])
    finally:
        cancelled = runner.invoke(cli, ["cancel", job_id])
        assert cancelled.exit_code == 0, cancelled.output
    ended = json.loads(runner.invoke(cli, ["--json", "list", "-a"]).stdout)["jobs"]
    (job,) = [j for j in ended if j["job_id"] == job_id]
    # ended: read from its checkpoint directory (a cancelled job retains its last checkpoint by default)
    assert job["state"] == "CANCELED"
    assert job["last_checkpoint"]["checkpoint_id"] >= last["checkpoint_id"] and job["last_checkpoint"]["size"] > 0
    assert job["last_checkpoint"]["path"].startswith(str(tmp_path / "chk" / job_id / "chk-"))
