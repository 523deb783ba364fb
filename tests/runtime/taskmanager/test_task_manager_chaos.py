"""Chaos on TaskManager processes: SIGKILL single TaskManagers of a running `statekit run` (not the
whole job), at random moments and in the middle of checkpoints, in every checkpointing mode and
under the examples' windows and PostgreSQL sink; the job restarts from its latest completed
checkpoint in fresh TaskManagers and its exactly-once output is the one of an uninterrupted run:
every committed line of the numbers job is checked against its input (each record added exactly
once to its key's running sum), the examples' lines against a truth computed in plain Python."""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from chaos import (
    EXAMPLES,
    WordInput,
    assert_exactly_once,
    checkpoint_in_progress,
    latest_checkpoint,
    read_lines,
    windowed_input,
    windowed_truth,
)
from tm_support import JOB, assert_running_sums_exactly_once, task_managers

pytestmark = pytest.mark.slow

KILLS = 3
COUNT = 40_000
MODES = {
    "aligned": [],
    "unaligned": ["--unaligned"],
    "aligned-timeout": ["--unaligned", "--aligned-checkpoint-timeout", "20ms"],
    "incremental-rocksdb": ["--state-backend", "rocksdb", "--incremental"],
}


def kill_task_managers(master: subprocess.Popen[bytes], job_dir: Path, rng: random.Random, kills: int) -> list[int]:
    """SIGKILL ``kills`` TaskManagers of the job master ``master``, one at a time: each once the
    attempt completed a checkpoint of its own, every other one in the middle of a checkpoint,
    the others at a random moment. Returns the killed process ids."""
    killed: list[int] = []
    for attempt in range(kills):
        seen = latest_checkpoint(job_dir)
        deadline = time.monotonic() + 60
        while latest_checkpoint(job_dir) <= seen or len(managers := task_managers(master.pid)) < 2:
            assert master.poll() is None, f"the job ended early: {master.stderr.read()!r}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline, f"attempt {attempt} completed no checkpoint"
            time.sleep(0.005)
        if attempt % 2:  # in the middle of a checkpoint
            deadline = time.monotonic() + 2
            while not checkpoint_in_progress(job_dir) and time.monotonic() < deadline:
                time.sleep(0.001)
        else:
            time.sleep(rng.uniform(0, 0.2))
        victim = rng.choice([pid for pid in managers if pid not in killed])
        os.kill(victim, signal.SIGKILL)
        killed.append(victim)
    return killed


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
    try:
        killed = kill_task_managers(master, job_dir, rng, KILLS)
        code = master.wait(180)
        stderr = master.stderr.read().decode()  # type: ignore[union-attr]
    finally:
        if master.poll() is None:
            master.kill()
        master.stderr.close()  # type: ignore[union-attr]
    assert code == 0, stderr
    assert stderr.count("; restart ") >= KILLS, stderr  # every kill failed an attempt, which restarted
    assert_running_sums_exactly_once(tmp_path / "out", COUNT, parallelism=2)  # each record once, none lost
    assert not [pid for pid in killed if os.path.exists(f"/proc/{pid}")]


# ---------------------------------------------------------------- the examples: windows, PostgreSQL


def run_example(tmp_path: Path, job_file: str, job_args: list[str], feed: Sequence[Callable[[], None]]) -> None:
    """``statekit run`` of ``job_file`` (watching its input: it never ends on its own) at
    parallelism 2 on TaskManager processes; before each of ``len(feed)`` TaskManager SIGKILLs
    (each failure restarts the job in fresh TaskManagers) the next ``feed`` call adds input; then
    the job is stopped with a savepoint, and the savepoint run to the end of its input in a new
    job (also on TaskManager processes)."""
    rng = random.Random(job_file)
    job_id = f"{rng.getrandbits(128):032x}"
    job_dir = tmp_path / "chk" / job_id
    env = dict(os.environ, STATEKIT_HOME=str(tmp_path / "home"))
    options = ["-p", "2", "--executor", "processes", "--checkpoint-dir", str(tmp_path / "chk"),
               "--checkpoint-interval", "100ms", "--restart-attempts", str(len(feed) + 2), "--restart-delay", "0"]
    command = [sys.executable, "-m", "statekit.cli.main", "run", *options, "--job-id", job_id, job_file, *job_args,
               "--watch"]
    master = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    killed: list[int] = []
    try:
        for add_input in feed:
            add_input()
            killed += kill_task_managers(master, job_dir, rng, 1)
        checkpoints_before = latest_checkpoint(job_dir)
        deadline = time.monotonic() + 60
        while latest_checkpoint(job_dir) <= checkpoints_before:  # the last restart runs again
            assert master.poll() is None, f"the job ended early: {master.stderr.read()!r}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the job completed no checkpoint after the last kill"
            time.sleep(0.01)
        deadline = time.monotonic() + 60
        while True:  # while the job restarts (a TaskManager lost again), stop refuses and says to try again
            stop = subprocess.run([sys.executable, "-m", "statekit.cli.main", "stop", job_id, "-p",
                                   str(tmp_path / "savepoints")], env=env, capture_output=True, text=True, timeout=120)
            if stop.returncode == 0 or "starting or restarting" not in stop.stderr or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert stop.returncode == 0, stop.stderr
        savepoint = stop.stdout.strip().splitlines()[-1]
        assert os.path.isfile(os.path.join(savepoint, "_metadata")), stop.stdout
        code = master.wait(120)
        stderr = master.stderr.read().decode()  # type: ignore[union-attr]
    finally:
        if master.poll() is None:
            master.kill()
        master.stderr.close()  # type: ignore[union-attr]
    assert code == 0, stderr
    assert stderr.count("; restart ") >= len(feed), stderr
    assert not [pid for pid in killed if os.path.exists(f"/proc/{pid}")]
    final = subprocess.run([sys.executable, "-m", "statekit.cli.main", "run", *options, "-s", savepoint, job_file,
                            *job_args], env=env, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stderr


def test_windows_are_exactly_once_when_task_managers_die(tmp_path: Path) -> None:
    files, lines = 4, 3_000
    written = windowed_input(tmp_path / "in", files, lines)

    def batch(index: int) -> Callable[[], None]:
        return lambda: written.extend(windowed_input(tmp_path / "in", files, lines, seed=6 + index,
                                                     first=files * (index + 1)))

    out = tmp_path / "out"
    run_example(tmp_path, str(EXAMPLES / "windowed_counts.py"),
                ["--input", str(tmp_path / "in"), "--output", str(out), "--window", "10s", "--out-of-orderness", "2s"],
                [batch(i) for i in range(KILLS)])
    got, expected = read_lines(out), windowed_truth(written)
    assert got == expected, f"{sum((got - expected).values())} extra, {sum((expected - got).values())} missing lines"


def test_postgres_rows_are_exactly_once_when_task_managers_die(tmp_path: Path, postgres_dsn: str) -> None:
    import psycopg

    expected: collections.Counter[str] = collections.Counter()

    def batch(index: int) -> Callable[[], None]:
        def add() -> None:  # written aside, then renamed into the watched directory
            staged = tmp_path / f"batch-{index}"
            expected.update(WordInput(files=3, lines=3_000, seed=11 + index, vocabulary=500,
                                      extra_words=("Straße",)).write(staged))
            for part in sorted(staged.iterdir()):
                part.rename(tmp_path / "in" / f"{index}-{part.name}")
        return add

    (tmp_path / "in").mkdir()
    batch(0)()
    run_example(tmp_path, str(EXAMPLES / "wordcount_postgres.py"),
                ["--input", str(tmp_path / "in"), "--dsn", postgres_dsn], [batch(i) for i in range(1, KILLS + 1)])
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT word, count FROM word_counts").fetchall()
        prepared = conn.execute("SELECT gid FROM pg_prepared_xacts WHERE database = current_database()").fetchall()
    got: dict[str, list[int]] = collections.defaultdict(list)
    for word, count in rows:
        got[word].append(count)
    assert_exactly_once(got, expected, what="rows")
    assert not prepared, f"prepared transactions left on the server: {prepared}"
