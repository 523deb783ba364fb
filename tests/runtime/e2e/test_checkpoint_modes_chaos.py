"""SIGKILL chaos for every checkpointing mode: word count killed ten times at random moments
(half of them while a checkpoint is being written), restored each time from its job
directory, then run to the end.

Exactly-once modes (unaligned, RocksDB incremental) must write every count exactly once;
at-least-once must lose nothing (a word's counts are 1..m without gaps, m >= its true count).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from chaos import (
    WORDCOUNT,
    KillPlan,
    WordInput,
    assert_at_least_once,
    assert_exactly_once,
    finish,
    kill_repeatedly,
    read_counts,
    restore_from,
    statekit_run,
)

from statekit.readers.snapshot import open_snapshot

KILLS = 10
PLAN = KillPlan(attempts=KILLS, seed=17, checkpoint_timeout_s=30, random_delay_s=0.3, mid_checkpoint_wait_s=2,
                mid_checkpoint_delay_s=0.01)
INPUT = WordInput(files=8, lines=50_000, seed=5, vocabulary=1500)

MODES = {
    "unaligned": ["--unaligned"],
    "unaligned-after-timeout": ["--unaligned", "--aligned-checkpoint-timeout", "5ms"],
    "rocksdb-incremental": ["--state-backend", "rocksdb", "--incremental", "--retained-checkpoints", "2"],
    "at-least-once": ["--checkpointing-mode", "at-least-once"],
}


def command(mode: str, checkpoints: Path, job_id: str, inputs: Path, output: Path, parallelism: int = 2) -> list[str]:
    options = ["-p", str(parallelism), "--checkpoint-dir", str(checkpoints), "--checkpoint-interval", "100ms",
               "--job-id", job_id, *MODES[mode], *restore_from(checkpoints / job_id)]
    return statekit_run(WORDCOUNT, options, ["--input", str(inputs), "--output", str(output)])


@pytest.mark.parametrize("mode", sorted(MODES))
def test_sigkill_chaos_keeps_the_mode_guarantee(tmp_path: Path, mode: str) -> None:
    expected = INPUT.write(tmp_path / "in")
    job_id = {"unaligned": "a1", "unaligned-after-timeout": "a2", "rocksdb-incremental": "b1",
              "at-least-once": "c1"}[mode] * 16
    checkpoints, output = tmp_path / "chk", tmp_path / "out"
    run = kill_repeatedly(checkpoints / job_id, lambda _: command(mode, checkpoints, job_id, tmp_path / "in", output),
                          PLAN, home=tmp_path / "home")
    finish(command(mode, checkpoints, job_id, tmp_path / "in", output), home=tmp_path / "home", timeout=300)

    assert run.kills_mid_checkpoint >= 2
    run.assert_progress()
    got = read_counts(output)
    if mode == "at-least-once":
        assert_at_least_once(got, expected)
    else:
        assert_exactly_once(got, expected)
    latest = open_snapshot(str(tmp_path / "chk" / job_id)).metadata
    assert latest.properties["checkpointing_mode"] == ("at-least-once" if mode == "at-least-once" else
                                                       "aligned" if mode == "rocksdb-incremental" else
                                                       latest.properties["checkpointing_mode"])
    if mode == "rocksdb-incremental":
        assert latest.format.value == "native"
