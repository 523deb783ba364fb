"""Job control of real runtime jobs: a continuous word count (examples/wordcount.py's
functions over a watching FileSource) driven through ``statekit run --detached``, ``list``,
``savepoint``, ``stop --savepoint-path``, ``cancel`` and the REST API; savepoints verified
and read back with SavepointReader; restore from the stop savepoint; SIGKILL shows CRASHED.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.readers.savepoint_reader import SavepointReader
from statekit.runtime.control.registry import JobRegistry, process_alive

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
STATEKIT = [sys.executable, "-m", "statekit.cli.main"]

WATCHING_WORDCOUNT = f'''
"""examples/wordcount.py over a watching source: runs until stopped or cancelled."""
import argparse, sys
sys.path.insert(0, {str(EXAMPLES)!r})
from wordcount import CountWords, encode, tokenize
from statekit.runtime.dataflow.environment import get_execution_environment
from statekit.runtime.connectors.sinks import FileSink
from statekit.runtime.connectors.sources import FileSource

parser = argparse.ArgumentParser()
parser.add_argument("--input", required=True)
parser.add_argument("--output", required=True)
args = parser.parse_args()
env = get_execution_environment()
(
    env.from_source(FileSource(args.input, watch=True, monitor_interval_s=0.05), "files").uid("source")
    .flat_map(tokenize, "tokenize").uid("tokenize")
    .key_by(lambda word: word)
    .process(CountWords(), "count words").uid("counter")
    .sink_to(FileSink(args.output, encoder=encode), "word counts").uid("sink")
)
env.execute("watching-wordcount")
'''


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """STATEKIT_HOME in tmp_path; every job process still alive at teardown is killed."""
    home = tmp_path / "home"
    monkeypatch.setenv("STATEKIT_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    yield {**os.environ, "STATEKIT_HOME": str(home)}
    for entry in JobRegistry(home).entries():
        if process_alive(entry.pid, entry.pid_start) and entry.pid != os.getpid():
            os.kill(entry.pid, signal.SIGKILL)


@pytest.fixture
def job(tmp_path: Path) -> Path:
    path = tmp_path / "watching_wordcount.py"
    path.write_text(WATCHING_WORDCOUNT)
    (tmp_path / "in").mkdir()
    return path


def submit(env: dict[str, str], *args: str) -> str:
    result = subprocess.run([*STATEKIT, "run", "--detached", "--checkpoint-dir", "chk", "--checkpoint-interval",
                             "100ms", *args], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def committed_counts(out: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for part in out.glob("part-*") if out.is_dir() else ():
        for line in part.read_text().splitlines():
            word, count = line.split("\t")
            counts[word] = max(counts.get(word, 0), int(count))
    return counts


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def read_counts(savepoint: str) -> dict[str, int]:
    reader = SavepointReader.read(savepoint)
    return {entry.key: entry.value for entry in reader.read_keyed_state("counter", "count")}


def request(url: str, method: str = "GET", token: str | None = None) -> tuple[int, dict[str, Any]]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method, headers=headers), timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_run_list_savepoint_stop_restore_cancel(env: dict[str, str], job: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    (tmp_path / "in" / "a.txt").write_text("to be or not to be\n")
    job_id = submit(env, "-p", "2", str(job), "--input", "in", "--output", "out")
    wait_for(lambda: committed_counts(tmp_path / "out") == {"to": 2, "be": 2, "or": 1, "not": 1}, "the first counts")

    [listed] = json.loads(runner.invoke(cli, ["--json", "list"]).stdout)["jobs"]
    assert (listed["job_id"], listed["name"], listed["state"]) == (job_id, "watching-wordcount", "RUNNING")

    # the REST API: refused without the token, 404 for an unknown job, Flink-shaped details
    entry = JobRegistry().get(job_id)
    token = JobRegistry().token(job_id)
    base = entry.rest_url
    assert request(f"{base}/jobs/{job_id}")[0] == 401
    assert request(f"{base}/jobs/{job_id}", "PATCH")[0] == 401
    assert request(f"{base}/jobs/{'f' * 32}", token=token) == (404, {"errors": [f"Job {'f' * 32} not found"]})
    code, details = request(f"{base}/jobs/{job_id}", token=token)
    assert code == 200 and details["state"] == "RUNNING"
    assert {v["id"] for v in details["vertices"]} >= {"source", "counter", "sink"}
    code, stats = request(f"{base}/jobs/{job_id}/checkpoints", token=token)
    assert code == 200 and set(stats) >= {"counts", "latest", "history"}

    taken = runner.invoke(cli, ["savepoint", job_id[:8], "sp"])
    assert taken.exit_code == 0, taken.output
    savepoint = taken.stdout.strip()
    assert Path(savepoint).parent == tmp_path / "sp" and Path(savepoint).name.startswith(f"savepoint-{job_id[:6]}")
    assert runner.invoke(cli, ["verify", savepoint]).exit_code == 0
    assert read_counts(savepoint) == {"to": 2, "be": 2, "or": 1, "not": 1}

    (tmp_path / "in" / "b.txt").write_text("be quick\n")
    wait_for(lambda: committed_counts(tmp_path / "out").get("quick") == 1, "the second file")
    stopped = runner.invoke(cli, ["--json", "stop", job_id, "--savepoint-path", "final"])
    assert stopped.exit_code == 0, stopped.output
    answer = json.loads(stopped.stdout)
    assert answer["operation"] == "stop" and answer["job_state"] == "FINISHED"
    assert runner.invoke(cli, ["verify", answer["location"]]).exit_code == 0
    assert read_counts(answer["location"]) == {"to": 2, "be": 3, "or": 1, "not": 1, "quick": 1}
    wait_for(lambda: not process_alive(entry.pid, entry.pid_start), "the stopped job's process to exit")
    assert JobRegistry().get(job_id).status == "FINISHED"

    # restore from the stop savepoint at another parallelism; cancel it
    restored = submit(env, "-p", "3", "-s", answer["location"], str(job), "--input", "in", "--output", "out")
    (tmp_path / "in" / "c.txt").write_text("be\n")
    wait_for(lambda: committed_counts(tmp_path / "out").get("be") == 4, "the restored count")
    cancelled = runner.invoke(cli, ["cancel", restored])
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stdout.strip() == f"Cancelled job {restored}."
    listed_all = json.loads(runner.invoke(cli, ["--json", "list", "--all"]).stdout)["jobs"]
    states = {j["job_id"]: j["state"] for j in listed_all}
    assert states == {job_id: "FINISHED", restored: "CANCELED"}


def test_killed_runtime_job_is_crashed(env: dict[str, str], job: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    job_id = submit(env, str(job), "--input", "in", "--output", "out")
    entry = JobRegistry().get(job_id)
    os.kill(entry.pid, signal.SIGKILL)
    wait_for(lambda: not process_alive(entry.pid, entry.pid_start), "the killed process to go")
    [listed] = json.loads(runner.invoke(cli, ["--json", "list", "--all"]).stdout)["jobs"]
    assert listed["state"] == "CRASHED" and listed["crash_reason"] == f"process {entry.pid} is gone"
    assert runner.invoke(cli, ["list"]).stdout.strip() == "No running jobs."
    for command in (["savepoint", job_id, "sp"], ["stop", job_id], ["cancel", job_id]):
        refused = runner.invoke(cli, command)
        assert refused.exit_code == 2
        assert refused.stderr.strip() == (f"statekit: error: no running job {job_id} "
                                          f"(it crashed: process {entry.pid} is gone)")
