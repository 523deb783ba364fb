"""Incremental RocksDB checkpoints: shared-file lifecycle and restore at a new parallelism,
on a local directory and on S3 (moto)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from jobs_for_checkpoints import (
    SlowSink,
    completed,
    expected_sums,
    keyed_sums,
    referenced_shared,
    retained_checkpoints,
    run_with,
    shared_listing,
    start_with,
    summing_job,
)

from statekit.runtime.api.checkpoint_config import ExternalizedCheckpointCleanup
from statekit.runtime.connectors.sinks import CollectSink
from statekit.runtime.dataflow.job_handle import JobStatus
from statekit.runtime.dataflow.run_options import RunOptions
from statekit.statefmt.fileio import FileIO

# (at least, at most) completed checkpoints: the run goes on past the minimum until some shared
# file has been released; moto serves each request in Python, so fewer on s3
CHECKPOINTS = {"local": (100, 100), "s3": (12, 40)}


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any] | None]:
    """(checkpoint storage URL, storage options)."""
    if request.param == "local":
        return str(tmp_path / "chk"), None
    server = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    return f"{bucket}/chk", server["storage_options"]


def _incremental(env: Any, *, interval_ms: int, retained: int) -> Any:
    env.set_state_backend("rocksdb", incremental=True)
    env.enable_checkpointing(interval_ms, num_retained=retained,
                             externalized_cleanup=ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    return env


def test_shared_files_live_exactly_as_long_as_a_retained_checkpoint_names_them(
    storage: tuple[str, dict[str, Any] | None]
) -> None:
    url, options = storage
    at_least, at_most = CHECKPOINTS["local" if options is None else "s3"]
    env = _incremental(summing_job(50_000_000, 2, SlowSink(0.0), storage=url, storage_options=options),
                       interval_ms=20, retained=3)
    handle = start_with(env, RunOptions(), "shared lifecycle")
    io, job_dir = FileIO.for_path(f"{url}/{handle.job_id}", options)
    seen_shared: set[str] = set()
    try:
        deadline = time.monotonic() + 420
        while True:
            done = handle.checkpoint_stats()["counts"]["completed"]
            listing = shared_listing(io, job_dir)
            released = bool(seen_shared - listing)
            seen_shared |= listing
            if done >= at_most or (done >= at_least and released):
                break
            assert not handle.status.is_terminal, handle.describe()
            assert time.monotonic() < deadline, f"timed out after {done} of {at_least} checkpoints"
            time.sleep(0.05)
    finally:
        handle.cancel()
        handle.wait(60)
    assert handle.status is JobStatus.CANCELED, handle.describe()

    retained = retained_checkpoints(io, job_dir)
    assert len(retained) == 3, sorted(retained)
    referenced, present = referenced_shared(retained), shared_listing(io, job_dir)
    assert referenced, "incremental checkpoints named no shared file"
    assert referenced <= present, f"deleted while referenced: {sorted(referenced - present)[:3]}"
    assert present <= referenced, f"leaked: {sorted(present - referenced)[:3]}"
    assert seen_shared - present, "no shared file was ever released over the run"
    newest = max(retained)
    entry = next(e for e in completed(handle) if e["id"] == newest)
    assert entry["incremental"] and 0 <= entry["checkpointed_size"] <= entry["state_size"]


def test_an_incremental_checkpoint_restores_at_a_new_parallelism(storage: tuple[str, dict[str, Any] | None]) -> None:
    url, options = storage
    n = 30_000
    env = _incremental(summing_job(n, 2, CollectSink(), storage=url, storage_options=options),
                       interval_ms=30, retained=2)
    env.storage_options = options or {}
    result = run_with(env, RunOptions(), "incremental p2")
    assert result.status is JobStatus.FINISHED
    checkpoint = result.latest_checkpoint
    assert checkpoint is not None

    for parallelism in (2, 3, 1):
        sink = CollectSink()
        env = _incremental(summing_job(n, parallelism, sink, storage=url, storage_options=options),
                           interval_ms=30, retained=2)
        env.storage_options = options or {}
        savepoints = f"{url}/savepoints-{parallelism}"
        restored = run_with(env, RunOptions(restore_path=checkpoint, savepoint_on_finish=savepoints), "restored")
        assert restored.status is JobStatus.FINISHED
        assert sink.values == []  # the restored sources had nothing left to read
        assert restored.savepoint_path is not None
        assert keyed_sums(restored.savepoint_path, options) == expected_sums(n)
