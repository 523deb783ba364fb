"""SIGKILL chaos for every checkpointing mode: word count killed ten times at random moments
(half of them while a checkpoint is being written), restored each time from its job
directory, then run to the end.

Exactly-once modes (unaligned, RocksDB incremental) must write every count exactly once;
at-least-once must lose nothing (a word's counts are 1..m without gaps, m >= its true count).
"""

from __future__ import annotations

import collections
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from statekit.readers.snapshot import latest_complete_checkpoint, open_snapshot
from statekit.statefmt.fileio import FileIO

WORDCOUNT = str(Path(__file__).resolve().parents[2] / "examples" / "wordcount.py")
KILLS = 10

MODES = {
    "unaligned": ["--unaligned"],
    "unaligned-after-timeout": ["--unaligned", "--aligned-checkpoint-timeout", "5ms"],
    "rocksdb-incremental": ["--state-backend", "rocksdb", "--incremental", "--retained-checkpoints", "2"],
    "at-least-once": ["--checkpointing-mode", "at-least-once"],
}


def make_input(directory: Path, *, files: int = 8, lines: int = 50_000, seed: int = 5) -> collections.Counter[str]:
    rng = random.Random(seed)
    vocabulary = ["".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(2, 6))) for _ in range(1500)]
    directory.mkdir()
    counts: collections.Counter[str] = collections.Counter()
    for f in range(files):
        text = [" ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 10))) for _ in range(lines)]
        for line in text:
            counts.update(re.findall(r"[^\W\d_]+", line))
        (directory / f"part-{f}.txt").write_text("\n".join(text) + "\n", encoding="utf-8")
    return counts


def checkpoint_state(job_dir: Path) -> tuple[int | None, bool]:
    """(latest complete checkpoint id, whether an incomplete chk-N exists right now)."""
    if not job_dir.is_dir():
        return None, False
    latest, in_progress = None, False
    for entry in os.listdir(job_dir):
        if entry.startswith("chk-"):
            if (job_dir / entry / "_metadata").exists():
                latest = max(latest or 0, int(entry[4:]))
            else:
                in_progress = True
    return latest, in_progress


def command(mode: str, checkpoints: Path, job_id: str, inputs: Path, output: Path, parallelism: int = 2) -> list[str]:
    args = [sys.executable, "-m", "statekit.runtime.control.launcher", "-p", str(parallelism), "--checkpoint-dir",
            str(checkpoints), "--checkpoint-interval", "100ms", "--job-id", job_id, *MODES[mode]]
    io, job_dir = FileIO.for_path(str(checkpoints / job_id))
    if io.exists(job_dir) and latest_complete_checkpoint(io, job_dir) is not None:
        args += ["-s", str(checkpoints / job_id)]
    return [*args, WORDCOUNT, "--input", str(inputs), "--output", str(output)]


def read_counts(output: Path) -> dict[str, list[int]]:
    names = os.listdir(output)
    assert not [n for n in names if n.startswith(".")], "pending or in-progress files are visible"
    got: dict[str, list[int]] = collections.defaultdict(list)
    for name in names:
        for line in (output / name).read_text(encoding="utf-8").splitlines():
            word, count = line.split("\t")
            got[word].append(int(count))
    return got


def kill_repeatedly(mode: str, tmp_path: Path, job_id: str, inputs: Path, output: Path) -> list[int | None]:
    """Run and SIGKILL the job KILLS times; returns the checkpoint each attempt restored from."""
    checkpoints, job_dir = tmp_path / "chk", tmp_path / "chk" / job_id
    rng = random.Random(17)
    restored_ids: list[int | None] = []
    kills_mid_checkpoint = 0
    for attempt in range(KILLS):
        restored = checkpoint_state(job_dir)[0]
        restored_ids.append(restored)
        process = subprocess.Popen(command(mode, checkpoints, job_id, inputs, output), stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while (checkpoint_state(job_dir)[0] or 0) <= (restored or 0):
            assert process.poll() is None, f"attempt {attempt} ended: {process.stderr.read()!r}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline, f"attempt {attempt} completed no checkpoint"
            time.sleep(0.005)
        if attempt % 2:
            deadline = time.monotonic() + 2
            while not checkpoint_state(job_dir)[1] and time.monotonic() < deadline:
                time.sleep(0.001)
            time.sleep(rng.uniform(0, 0.01))
            kills_mid_checkpoint += checkpoint_state(job_dir)[1]
        else:
            time.sleep(rng.uniform(0, 0.3))
        assert process.poll() is None, f"attempt {attempt} ended on its own: {process.stderr.read()!r}"  # type: ignore[union-attr]
        process.send_signal(signal.SIGKILL)
        process.wait()
        process.stderr.close()  # type: ignore[union-attr]
    assert kills_mid_checkpoint >= 2
    return restored_ids


@pytest.mark.parametrize("mode", sorted(MODES))
def test_sigkill_chaos_keeps_the_mode_guarantee(tmp_path: Path, mode: str) -> None:
    expected = make_input(tmp_path / "in")
    job_id = {"unaligned": "a1", "unaligned-after-timeout": "a2", "rocksdb-incremental": "b1",
              "at-least-once": "c1"}[mode] * 16
    output = tmp_path / "out"
    restored_ids = kill_repeatedly(mode, tmp_path, job_id, tmp_path / "in", output)
    final = subprocess.run(command(mode, tmp_path / "chk", job_id, tmp_path / "in", output),
                           capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stderr

    progress = [i for i in restored_ids if i is not None]
    assert progress == sorted(progress) and len(set(progress)) == KILLS - 1, restored_ids
    got = read_counts(output)
    assert set(got) == set(expected)
    if mode == "at-least-once":
        lost = {w: n for w, n in expected.items() if sorted(got[w]) != list(range(1, len(got[w]) + 1)) or len(got[w]) < n}
        assert not lost, f"{len(lost)} words lost counts, e.g. {list(lost.items())[:3]}"
    else:
        wrong = {w: (n, len(got[w])) for w, n in expected.items() if sorted(got[w]) != list(range(1, n + 1))}
        assert not wrong, f"{len(wrong)} words with missing or duplicated counts, e.g. {list(wrong.items())[:3]}"
    latest = open_snapshot(str(tmp_path / "chk" / job_id)).metadata
    assert latest.properties["checkpointing_mode"] == ("at-least-once" if mode == "at-least-once" else
                                                       "aligned" if mode == "rocksdb-incremental" else
                                                       latest.properties["checkpointing_mode"])
    if mode == "rocksdb-incremental":
        assert latest.format.value == "native"
