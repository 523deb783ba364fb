"""Writers over a native incremental checkpoint (RocksDB SSTs in the job's ``shared/``): the output
is a canonical savepoint holding every key, never a ``_metadata`` naming native files it did not
copy (``../shared/...`` outside the output)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from jobs_for_checkpoints import SlowSink, keyed_sums, retained_checkpoints, start_with, summing_job

from statekit.cli.main import cli
from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.verification import verify_snapshot
from statekit.runtime.api.checkpoint_config import ExternalizedCheckpointCleanup
from statekit.runtime.dataflow.run_options import RunOptions
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.json_contract import json_data
from statekit.statefmt.metadata import SnapshotFormat
from statekit.writers.savepoint_writer import SavepointWriter


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("native")
    env = summing_job(50_000_000, 2, SlowSink(0.0), storage=str(root / "chk"))
    env.set_state_backend("rocksdb", incremental=True)
    env.enable_checkpointing(20, num_retained=2,
                             externalized_cleanup=ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    handle = start_with(env, RunOptions(), "native")
    deadline = time.monotonic() + 120
    try:
        while handle.checkpoint_stats()["counts"]["completed"] < 3:
            assert not handle.status.is_terminal and time.monotonic() < deadline, handle.describe()
            time.sleep(0.02)
    finally:
        handle.cancel()
        handle.wait(60)
    io, job_dir = FileIO.for_path(str(root / "chk" / handle.job_id))
    checkpoint = f"{job_dir}/chk-{max(retained_checkpoints(io, job_dir))}"
    assert SavepointReader.read(checkpoint).metadata.format is SnapshotFormat.NATIVE
    yield checkpoint, root


def check_output(out: str, checkpoint: str, uid: str = "sums") -> None:
    report = verify_snapshot(out)
    assert report.ok, json_data(report)
    reader = SavepointReader.read(out)
    assert reader.metadata.format is SnapshotFormat.CANONICAL
    assert {e.key: e.value for e in reader.read_keyed_state(uid, "reduce")} == keyed_sums(checkpoint)


@pytest.mark.parametrize(("name", "args", "uid"), [
    ("modify", ["modify", "{chk}", "--rename-uid", "sums=sums-v2", "-o", "{out}"], "sums-v2"),
    ("bootstrap", ["bootstrap", "--input", "{rows}", "--uid", "extra", "--state", "count", "--key-column", "user",
                   "--value-column", "count", "--from", "{chk}", "-o", "{out}"], "sums"),
])
def test_writers_copy_native_state_as_canonical_files(native: tuple[str, Path], name: str, args: list[str],
                                                       uid: str) -> None:
    checkpoint, root = native
    rows = root / "rows.csv"
    rows.write_text("user,count\nx,1\n", encoding="utf-8")
    out = str(root / name)
    done = CliRunner().invoke(cli, [a.format(chk=checkpoint, out=out, rows=rows) for a in args])
    assert done.exit_code == 0, done.output
    check_output(out, checkpoint, uid)


def test_the_writer_api_copies_native_state_as_canonical_files(native: tuple[str, Path]) -> None:
    checkpoint, root = native
    out = str(root / "api")
    SavepointWriter.from_existing_savepoint(checkpoint).write(out)
    check_output(out, checkpoint)
