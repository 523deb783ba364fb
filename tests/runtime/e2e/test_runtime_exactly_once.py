"""Exactly-once under SIGKILL: word count killed at random moments (also mid-checkpoint),
restarted each time from its latest complete checkpoint, commits every count exactly once."""

from __future__ import annotations

from pathlib import Path

from chaos import (
    WORDCOUNT,
    KillPlan,
    WordInput,
    assert_exactly_once,
    finish,
    kill_repeatedly,
    read_counts,
    restore_from,
    statekit_run,
)

JOB_ID = "5eed" * 8
KILLS = 12
# let each attempt complete one checkpoint of its own (so every attempt makes progress), then kill
# it at a random moment, or (every other attempt) while a checkpoint is being written
# (a checkpoint on TaskManager processes can be written in a few ms: the kill follows its start closely)
PLAN = KillPlan(attempts=KILLS, seed=11, checkpoint_timeout_s=20, random_delay_s=0.4, mid_checkpoint_wait_s=5,
                mid_checkpoint_delay_s=0.002)
# 8 files of 80,000 lines (about 4 million words: more than twelve attempts, each with its own
# checkpoint, get through)
INPUT = WordInput(files=8, lines=80_000, seed=3, vocabulary=2500, extra_words=("Straße", "naïve", "ÉCOLE"),
                  max_words=12, endings=("", ",", "!", " 42"), distinct_lines=20_000)


def command(checkpoints: Path, inputs: Path, output: Path) -> list[str]:
    options = ["-p", "2", "--checkpoint-dir", str(checkpoints), "--checkpoint-interval", "150ms", "--job-id", JOB_ID,
               *restore_from(checkpoints / JOB_ID)]
    return statekit_run(WORDCOUNT, options, ["--input", str(inputs), "--output", str(output)])


def test_wordcount_is_exactly_once_under_sigkill(tmp_path: Path) -> None:
    expected = INPUT.write(tmp_path / "in")
    checkpoints, output = tmp_path / "chk", tmp_path / "out"
    run = kill_repeatedly(checkpoints / JOB_ID, lambda _: command(checkpoints, tmp_path / "in", output), PLAN,
                          home=tmp_path / "home")
    finish(command(checkpoints, tmp_path / "in", output), home=tmp_path / "home", timeout=120)

    assert run.kills_mid_checkpoint >= 3
    run.assert_progress()
    assert_exactly_once(read_counts(output), expected)
