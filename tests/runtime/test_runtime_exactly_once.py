"""Exactly-once under SIGKILL: word count killed at random moments (also mid-checkpoint),
restarted each time from its latest complete checkpoint, commits every count exactly once."""

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

from statekit.readers.snapshot import latest_complete_checkpoint
from statekit.statefmt.fileio import FileIO

WORDCOUNT = str(Path(__file__).resolve().parents[2] / "examples" / "wordcount.py")
JOB_ID = "5eed" * 8
KILLS = 12


def make_input(directory: Path) -> collections.Counter[str]:
    """8 files of 80,000 lines (about 4 million words: more than twelve attempts, each with its
    own checkpoint, get through); returns the true word counts."""
    rng = random.Random(3)
    vocabulary = ["".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(2, 6))) for _ in range(2500)]
    vocabulary += ["Straße", "naïve", "ÉCOLE"]
    lines = [" ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 12))) + rng.choice(["", ",", "!", " 42"])
             for _ in range(20_000)]
    directory.mkdir()
    uses: collections.Counter[int] = collections.Counter()
    for f in range(8):
        chosen = rng.choices(range(len(lines)), k=80_000)
        uses.update(chosen)
        (directory / f"part-{f}.txt").write_text("\n".join(lines[i] for i in chosen) + "\n", encoding="utf-8")
    counts: collections.Counter[str] = collections.Counter()
    for i, n in uses.items():
        for word in re.findall(r"[^\W\d_]+", lines[i].lower()):
            counts[word] += n
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


def command(checkpoints: Path, inputs: Path, output: Path) -> list[str]:
    args = [sys.executable, "-m", "statekit.runtime.control.launcher", "-p", "2", "--checkpoint-dir", str(checkpoints),
            "--checkpoint-interval", "150ms", "--job-id", JOB_ID]
    io, job_dir = FileIO.for_path(str(checkpoints / JOB_ID))
    if io.exists(job_dir) and latest_complete_checkpoint(io, job_dir) is not None:
        args += ["-s", str(checkpoints / JOB_ID)]
    return args + [WORDCOUNT, "--input", str(inputs), "--output", str(output)]


def test_wordcount_is_exactly_once_under_sigkill(tmp_path: Path) -> None:
    expected = make_input(tmp_path / "in")
    checkpoints, output = tmp_path / "chk", tmp_path / "out"
    job_dir = checkpoints / JOB_ID
    rng = random.Random(11)
    kills_mid_checkpoint = 0
    restored_ids: list[int | None] = []
    for attempt in range(KILLS):
        restored = checkpoint_state(job_dir)[0]
        restored_ids.append(restored)
        process = subprocess.Popen(command(checkpoints, tmp_path / "in", output), stderr=subprocess.PIPE)
        # let the attempt complete one checkpoint of its own (so every attempt makes progress) ...
        deadline = time.monotonic() + 20
        while (checkpoint_state(job_dir)[0] or 0) <= (restored or 0) and time.monotonic() < deadline:
            assert process.poll() is None, f"attempt {attempt} ended: {process.stderr.read()!r}"  # type: ignore[union-attr]
            time.sleep(0.005)
        # ... then kill it at a random moment, or (every other attempt) while a checkpoint is being written
        if attempt % 2:
            deadline = time.monotonic() + 2
            while not checkpoint_state(job_dir)[1] and time.monotonic() < deadline:
                time.sleep(0.001)
            time.sleep(rng.uniform(0, 0.01))
            kills_mid_checkpoint += checkpoint_state(job_dir)[1]
        else:
            time.sleep(rng.uniform(0, 0.4))
        assert process.poll() is None, f"attempt {attempt} ended on its own: {process.stderr.read()!r}"  # type: ignore[union-attr]
        process.send_signal(signal.SIGKILL)
        process.wait()
        process.stderr.close()  # type: ignore[union-attr]
    final = subprocess.run(command(checkpoints, tmp_path / "in", output), capture_output=True, text=True, timeout=120)
    assert final.returncode == 0, final.stderr

    assert kills_mid_checkpoint >= 3
    progress = [i for i in restored_ids if i is not None]
    assert progress == sorted(progress) and len(set(progress)) == KILLS - 1, restored_ids
    names = os.listdir(output)
    assert not [n for n in names if n.startswith(".")], "pending or in-progress files are visible"
    got: dict[str, list[int]] = collections.defaultdict(list)
    for name in names:
        for line in (output / name).read_text(encoding="utf-8").splitlines():
            word, count = line.split("\t")
            got[word].append(int(count))
    assert set(got) == set(expected)
    wrong = {w: (n, len(got[w])) for w, n in expected.items() if sorted(got[w]) != list(range(1, n + 1))}
    assert not wrong, f"{len(wrong)} words with missing or duplicated counts, e.g. {list(wrong.items())[:3]}"
