"""A failing task is logged in one line (task, exception type, message); its traceback only
with ``--verbose``. Run as a real process, so stderr is exactly what a user sees."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

FAILING_JOB = '''
from statekit.runtime.dataflow.environment import get_execution_environment
from statekit.runtime.connectors.sinks import DiscardingSink

def explode(value):
    if value == 3:
        raise ValueError("bad record 3\\nsecond line of the message")
    return value

env = get_execution_environment()
env.from_collection([1, 2, 3, 4]).uid("numbers").map(explode).uid("explode").sink_to(DiscardingSink()).uid("sink")
env.execute("failing")
'''


def run(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    job = tmp_path / "failing.py"
    job.write_text(FAILING_JOB)
    env = {**os.environ, "STATEKIT_HOME": str(tmp_path / "home")}
    return subprocess.run([sys.executable, "-m", "statekit.cli.main", *options, "run", str(job)],
                          env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("verbose", [False, True])
def test_task_failure_is_one_line_unless_verbose(tmp_path: Path, verbose: bool) -> None:
    result = run(tmp_path, *(["--verbose"] if verbose else []))
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    # the line ends with the innermost frame of the user's code: the job file's line that raised
    task_line = ("task Collection Source -> Map -> Sink (1/1) failed: ValueError: bad record 3 second line of the message"
                 f" (at {tmp_path / 'failing.py'}:7, in explode)")
    logged = [line for line in lines if line.endswith(task_line)]
    assert len(logged) == 1, result.stderr
    assert lines[-1].startswith("statekit: error: job ") and lines[-1].endswith(
        f"(failing) failed: ValueError: bad record 3 second line of the message (at {tmp_path / 'failing.py'}:7, in explode)")
    if verbose:
        assert "Traceback (most recent call last):" in result.stderr
        assert 'raise ValueError("bad record 3' in result.stderr
    else:
        assert lines[0].startswith("Job has been submitted with JobID ")
        assert lines[1:-1] == [task_line], result.stderr
        assert "Traceback" not in result.stderr
