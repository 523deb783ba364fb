"""``statekit checkpoint --full`` on incremental checkpoints: a checkpoint that reuses no shared
file of an earlier one (Flink's CheckpointType.FULL), after which incremental ones go on."""

from __future__ import annotations

import posixpath
from pathlib import Path

import pytest
from jobs_for_checkpoints import SlowSink, completed, retained_checkpoints, start_with, summing_job, wait_until

from statekit.readers.shared_refs import shared_files_of
from statekit.runtime.api.checkpoint_config import ExternalizedCheckpointCleanup
from statekit.runtime.dataflow.run_options import RunOptions
from statekit.statefmt.fileio import FileIO

pytest.importorskip("rocksdict")


def test_a_full_checkpoint_reuses_no_shared_file_of_an_earlier_one(tmp_path: Path) -> None:
    env = summing_job(50_000_000, 2, SlowSink(0.0), storage=str(tmp_path / "chk"))
    env.set_state_backend("rocksdb", incremental=True)
    env.enable_checkpointing(10_000, num_retained=10,
                             externalized_cleanup=ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    handle = start_with(env, RunOptions(), "full checkpoint")
    try:
        wait_until(lambda: handle.status.value == "RUNNING", "the job to run")
        wait_until(lambda: handle.trigger_checkpoint().exception(60) is None, "a first checkpoint (all tasks run)")
        first = handle.trigger_checkpoint().result(60)
        second = handle.trigger_checkpoint().result(60)
        full = handle.trigger_checkpoint(full=True).result(60)
        after = handle.trigger_checkpoint().result(60)
    finally:
        handle.cancel()
        handle.wait(60)
    io, job_dir = FileIO.for_path(str(tmp_path / "chk" / handle.job_id))
    checkpoints = retained_checkpoints(io, job_dir)
    ids = [int(posixpath.basename(p.rstrip("/")).split("-")[1]) for p in (first, second, full, after)]
    shared = {i: shared_files_of(checkpoints[i]) for i in ids}
    assert all(shared.values()), "incremental checkpoints name their SST files in shared/"
    assert shared[ids[1]] & shared[ids[0]], "an incremental checkpoint reuses files of the one before"
    assert not shared[ids[2]] & (shared[ids[0]] | shared[ids[1]]), "the full checkpoint reused a file"
    entries = {e["id"]: e for e in completed(handle)}
    assert entries[ids[2]]["incremental"] and entries[ids[2]]["checkpointed_size"] == entries[ids[2]]["state_size"]
