"""Jobs and helpers shared by the checkpoint-mode tests (unaligned, incremental)."""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable
from typing import Any

from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.shared_refs import shared_files_of, shared_references
from statekit.runtime.connectors.sinks import CollectSink
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.dataflow.job_handle import JobHandle
from statekit.runtime.dataflow.run_options import RunOptions, set_run_options
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.metadata import CheckpointMetadata

KEYS = 10


class SlowSink(CollectSink):
    """Keeps nothing and sleeps ``delay_s`` per record: backpressure on the whole job."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    def invoke(self, value: Any) -> None:
        if self.delay_s:
            time.sleep(self.delay_s)


def summing_job(n: int, parallelism: int, sink: CollectSink, *, storage: str | None = None,
                storage_options: dict[str, Any] | None = None) -> StreamEnvironment:
    """numbers 1..n -> key_by(v % KEYS) -> running sum (uid ``sums``, state ``reduce``) -> sink."""
    env = StreamEnvironment().set_parallelism(parallelism)
    if storage is not None:
        env.set_checkpoint_storage(storage, storage_options)
    (env.from_sequence(1, n).uid("numbers")
        .key_by(lambda v: v % KEYS)
        .sum().uid("sums")
        .sink_to(sink).uid("sink"))
    return env


def expected_sums(n: int) -> dict[int, int]:
    sums = dict.fromkeys(range(KEYS), 0)
    for v in range(1, n + 1):
        sums[v % KEYS] += v
    return sums


def keyed_sums(path: str, storage_options: dict[str, Any] | None = None) -> dict[Any, Any]:
    reader = SavepointReader.read(path, storage_options=storage_options)
    return {e.key: e.value for e in reader.read_keyed_state("sums", "reduce")}


def run_with(env: StreamEnvironment, options: RunOptions, name: str) -> Any:
    set_run_options(options)
    try:
        return env.execute(name)
    finally:
        set_run_options(None)


def start_with(env: StreamEnvironment, options: RunOptions, name: str) -> JobHandle:
    set_run_options(options)
    try:
        return env.execute_async(name)
    finally:
        set_run_options(None)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def completed(handle: JobHandle) -> list[dict[str, Any]]:
    """The completed checkpoints of the job's history (newest first)."""
    return [e for e in handle.checkpoint_stats()["history"] if e["status"] == "COMPLETED" and not e["is_savepoint"]]


def retained_checkpoints(io: FileIO, job_dir: str) -> dict[int, CheckpointMetadata]:
    """Checkpoint id -> metadata, for every complete checkpoint of the job directory."""
    references = shared_references(io, job_dir)
    assert not references.damaged, references.damaged
    return {checkpoint_id: metadata for checkpoint_id, _, metadata in references.checkpoints}


def shared_listing(io: FileIO, job_dir: str) -> set[str]:
    """The files of the job's ``shared/`` (relative to it)."""
    shared = posixpath.join(job_dir, "shared")
    if not io.exists(shared):
        return set()
    return {posixpath.relpath(f.path, shared) for f in io.walk_files(shared)}


def referenced_shared(checkpoints: dict[int, CheckpointMetadata]) -> set[str]:
    return set().union(*(shared_files_of(m) for m in checkpoints.values())) if checkpoints else set()
