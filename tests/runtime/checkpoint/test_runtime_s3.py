"""Checkpoints and savepoints on an object store (moto S3) through the fsspec file IO."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekit.readers.savepoint_reader import SavepointReader
from statekit.runtime.connectors.sinks import CollectSink
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.dataflow.job_handle import JobStatus
from statekit.runtime.dataflow.run_options import RunOptions, set_run_options


def counting_job(bucket: str, storage_options: dict[str, Any], sink: CollectSink, n: int) -> StreamEnvironment:
    env = StreamEnvironment().set_parallelism(2)
    env.enable_checkpointing(60_000)
    env.set_checkpoint_storage(f"{bucket}/checkpoints", storage_options)
    (env.from_sequence(1, n).uid("numbers")
        .key_by(lambda v: v % 5)
        .sum().uid("sums")
        .sink_to(sink).uid("sink"))
    return env


@pytest.mark.s3
def test_checkpoints_and_savepoints_on_s3(s3_server: dict[str, Any], s3_bucket: str, tmp_path: Path) -> None:
    options = s3_server["storage_options"]
    sink = CollectSink()
    env = counting_job(s3_bucket, options, sink, 1000)
    set_run_options(RunOptions(savepoint_on_finish=f"{s3_bucket}/savepoints"))
    try:
        result = env.execute("s3 sums")
    finally:
        set_run_options(None)
    assert result.status is JobStatus.FINISHED
    assert result.latest_checkpoint == f"{s3_bucket}/checkpoints/{result.job_id}/chk-1"
    assert result.savepoint_path is not None and result.savepoint_path.startswith(f"{s3_bucket}/savepoints/savepoint-")
    expected = {k: sum(v for v in range(1, 1001) if v % 5 == k) for k in range(5)}
    for path in (result.latest_checkpoint, result.savepoint_path):
        reader = SavepointReader.read(path, storage_options=options)
        assert {e.key: e.value for e in reader.read_keyed_state("sums", "reduce")} == expected

    # restore from the object-store savepoint at another parallelism
    sink = CollectSink()
    env = counting_job(s3_bucket, options, sink, 1000).set_parallelism(3)
    env.storage_options = options
    set_run_options(RunOptions(restore_path=result.savepoint_path))
    try:
        assert env.execute("s3 sums restored").status is JobStatus.FINISHED
    finally:
        set_run_options(None)
    assert sink.values == []  # the restored sources had nothing left to read
