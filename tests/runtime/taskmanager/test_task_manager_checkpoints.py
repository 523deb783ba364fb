"""Checkpoint paths on TaskManager processes: unaligned checkpoints persist the buffers in flight
between processes and restore from them (at the same or a new parallelism) with every record
counted once; at-least-once checkpoints lose nothing; a canonical savepoint taken on processes
restores at another parallelism. Every output is checked line by line against the input
(tm_support.assert_running_sums_exactly_once)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from tm_support import JOB, RunningJob, assert_running_sums_exactly_once, committed_sums, task_managers

from statekit.runtime import JobStatus, RunOptions, run_job_file
from statekit.runtime.dataflow.run_options import add_job_listener, remove_job_listener

COUNT = 12_000


def options(tmp_path: Path, name: str, *job_args: str, **settings: object) -> RunOptions:
    values: dict[str, object] = {"executor": "processes", "parallelism": 2, "checkpoint_dir": str(tmp_path / f"chk-{name}"),
                                 "checkpoint_interval_ms": 200}
    values.update(settings)
    return RunOptions(job_args=("--count", str(COUNT), "--output", str(tmp_path / f"out-{name}"), *job_args),
                      **values)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the checker itself


def test_the_exactly_once_check_finds_a_lost_a_duplicated_and_a_reordered_line(tmp_path: Path) -> None:
    def write(lines: list[tuple[int, int]]) -> Path:
        out = tmp_path / f"o{len(list(tmp_path.iterdir()))}"
        out.mkdir()
        (out / "part-0").write_text("".join(f"{k}\t{s}\n" for k, s in lines))
        return out

    # count 8, 2 keys, p=2: splits 0..3 and 4..7; key 0 gets 0, 2, 4, 6 and key 1 gets 1, 3, 5, 7
    good = [(0, 4), (0, 4), (0, 6), (0, 12), (1, 5), (1, 6), (1, 9), (1, 16)]  # 4, 0, 2, 6 and 5, 1, 3, 7
    assert_running_sums_exactly_once(write(good), 8, keys=2)
    for wrong in ([line for line in good if line != (1, 9)],  # lost: 3 and 7 merge into a step of 10
                  [*good, (1, 9)],  # duplicated: a step of 0 key 1 has no record for
                  [(0, 6), (0, 6), (0, 10), (0, 12), *good[4:]]):  # 6 before 4: one split out of order
        with pytest.raises(AssertionError, match="not counted exactly once"):
            assert_running_sums_exactly_once(write(wrong), 8, keys=2)


# ---------------------------------------------------------------- unaligned checkpoints


@pytest.mark.slow
@pytest.mark.parametrize("restore_parallelism", [2, 3])
def test_unaligned_checkpoints_persist_buffers_between_processes_and_restore_exactly(
        tmp_path: Path, restore_parallelism: int) -> None:
    # a slow sink chained to the keyed sum: its input gates fill from both sources, over the network
    slow = options(tmp_path, "1", "--rate", "1500", "--slow-sink", "0.001", "--latency", str(tmp_path / "latency"),
                   unaligned=True, checkpoint_interval_ms=300)
    with RunningJob(slow) as job:
        job.wait_for(lambda: job.completed_checkpoints() >= 3, "no 3 unaligned checkpoints completed")
        job.handle.cancel()
        assert job.finish(60) is JobStatus.CANCELED
        stats = job.handle.checkpoint_stats()
        job_id = job.handle.job_id
    completed = [c for c in stats["history"] if c["status"] == "COMPLETED"]
    latest = max(completed, key=lambda c: c["id"])  # the one a restore of the job directory takes
    assert latest["persisted_data"] > 0, completed
    assert all(c["persisted_data"] > 0 for c in completed), [(c["id"], c["persisted_data"]) for c in completed]
    committed = [p for p in (tmp_path / "out-1").iterdir() if not p.name.startswith(".")]
    assert 0 < sum(len(p.read_text().splitlines()) for p in committed) < COUNT, "the first run must end mid-stream"

    # into the same directory: the restore commits the checkpoint's pending files and drops the others
    rest = options(tmp_path, "1", "--latency", str(tmp_path / "latency"), unaligned=True,
                   parallelism=restore_parallelism, restore_path=str(tmp_path / "chk-1" / job_id),
                   checkpoint_dir=str(tmp_path / "chk-2"))
    assert run_job_file(JOB, rest) is JobStatus.FINISHED
    assert_running_sums_exactly_once(tmp_path / "out-1", COUNT, parallelism=2)


# ---------------------------------------------------------------- commits under backpressure


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["threads", "processes"])
def test_a_backpressured_sink_commits_a_completed_checkpoint_at_once(tmp_path: Path, executor: str) -> None:
    """The notification of a completed checkpoint overtakes the input queued at the sink (its
    snapshot is taken already): the committed files appear within the input buffer in progress, not after the seconds
    of queued records a slow sink has ahead of it (Flink's mailbox runs it between records)."""
    # 2 KiB network buffers keep the queue ahead of the sink at a few thousand records (seconds at
    # 4 ms a record), so a checkpoint completes while more records wait behind its barrier
    slow = options(tmp_path, "1", "--rate", "4000", "--slow-sink", "0.004", "--latency", str(tmp_path / "latency"),
                   "--count", "60000", executor=executor, checkpoint_interval_ms=500, buffer_size=2048)
    out = tmp_path / "out-1"

    def latest_completed(job: RunningJob) -> int:
        history = job.handle.checkpoint_stats()["history"]
        return max((int(c["id"]) for c in history if c["status"] == "COMPLETED"), default=0)

    def committed(checkpoint_id: int) -> bool:  # the file sink names a committed part by its checkpoint
        return out.exists() and any(p.name.startswith(f"part-{checkpoint_id:08d}-") for p in out.iterdir())

    with RunningJob(slow) as job:
        # the sink's gate fills first: the checkpoints after the first complete behind queued input
        job.wait_for(lambda: latest_completed(job) >= 1, "no checkpoint completed")
        first = latest_completed(job)
        job.wait_for(lambda: latest_completed(job) > first, "no further checkpoint completed")
        completed_at = time.monotonic()
        checkpoint_id = latest_completed(job)
        figures = job.handle.task_metrics()
        job.wait_for(lambda: committed(checkpoint_id), f"checkpoint {checkpoint_id} was never committed", timeout=60)
        waited = time.monotonic() - completed_at
        job.handle.cancel()
        job.finish(60)
    sent = sum(f.report.records_out for f in figures if f.report.source)
    taken = sum(f.report.records_in for f in figures if not f.report.source)
    assert sent - taken >= 300, (sent, taken)  # records queued ahead of the sink: about a second of its work
    # at most the input buffer in progress (about 0.6 s of records here; 0.55-0.94 s on a loaded
    # machine), not the queue ahead of the sink (3.2 s on processes, 6.3 s on threads before)
    assert waited < 2.0, f"checkpoint {checkpoint_id} was committed {waited:.1f} s after it completed"


# ---------------------------------------------------------------- at-least-once


@pytest.mark.slow
def test_at_least_once_checkpoints_on_processes_count_every_record(tmp_path: Path) -> None:
    handles: list[object] = []
    add_job_listener(handles.append)
    try:
        # a slow sink queues input: the barriers of a checkpoint reach the sum apart, records between
        status = run_job_file(JOB, options(tmp_path, "1", "--rate", "3000", "--slow-sink", "0.0003", "--latency",
                                           str(tmp_path / "latency"), checkpointing_mode="at-least-once",
                                           checkpoint_interval_ms=100))
    finally:
        remove_job_listener(handles.append)
    assert status is JobStatus.FINISHED
    stats = handles[0].checkpoint_stats()  # type: ignore[attr-defined]
    assert stats["counts"]["completed"] >= 3, stats["counts"]  # the output was committed in several checkpoints
    assert_running_sums_exactly_once(tmp_path / "out-1", COUNT)  # no failure: at least once is exactly once
    assert not task_managers(os.getpid())


# ---------------------------------------------------------------- canonical savepoints


@pytest.mark.slow
def test_a_canonical_savepoint_taken_on_processes_restores_at_another_parallelism(tmp_path: Path) -> None:
    with RunningJob(options(tmp_path, "1", "--rate", "2000")) as job:
        job.wait_for(lambda: job.completed_checkpoints() >= 1, "no checkpoint completed")
        assert len(job.handle.task_manager_pids()) == 2
        savepoint = job.handle.trigger_savepoint(str(tmp_path / "sp"), stop=True).result(60)
        assert job.finish(60) is JobStatus.FINISHED
    part = committed_sums(tmp_path / "out-1")
    assert 0 < sum(map(len, part.values())) < COUNT, "the savepoint must be taken mid-stream"
    assert run_job_file(JOB, options(tmp_path, "2", parallelism=3, restore_path=savepoint)) is JobStatus.FINISHED
    assert_running_sums_exactly_once([tmp_path / "out-1", tmp_path / "out-2"], COUNT, parallelism=2)
