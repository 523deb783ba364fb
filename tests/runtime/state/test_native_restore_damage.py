"""Restoring a native (incremental RocksDB) checkpoint whose shared SST file was damaged: every
backend, at the same and at a new parallelism, fails with an error naming the file (exit 2)
instead of running on with the keys of the damaged file lost."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from statekit.readers.snapshot import open_snapshot

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def damaged(native_snapshots: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a copy of the checkpoint, its damaged shared SST file)."""
    job = native_snapshots.checkpoint.parent
    copy = tmp_path_factory.mktemp("damaged") / job.name
    shutil.copytree(job, copy, symlinks=True)
    checkpoint = copy / native_snapshots.checkpoint.name
    snapshot = open_snapshot(str(checkpoint))
    file = max((f for f in snapshot.metadata.native_files() if f.shared), key=lambda f: f.size)
    sst = Path(snapshot.file_path(file.path))
    data = bytearray(sst.read_bytes())
    data[len(data) // 3] ^= 0x01
    sst.write_bytes(bytes(data))
    return checkpoint, sst


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
@pytest.mark.parametrize("parallelism", [2, 3])
def test_run_from_a_damaged_native_checkpoint_fails_naming_the_file(
        native_snapshots: Any, damaged: tuple[Path, Path], tmp_path: Path, backend: str, parallelism: int) -> None:
    checkpoint, sst = damaged
    command = [sys.executable, "-m", "statekit.cli.main", "run", "-p", str(parallelism), "--state-backend", backend,
               "-s", str(checkpoint), "--savepoint-on-finish", str(tmp_path / "sp"),
               str(ROOT / "examples" / "wordcount.py"), "--input", str(native_snapshots.inputs),
               "--output", str(tmp_path / "out")]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]  # after the job's own log lines (submission, task failures)
    assert last.startswith(f"statekit: error: {sst}: ") and "differs from the recorded" in last, done.stderr
    assert not (tmp_path / "sp").exists()
