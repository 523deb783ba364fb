"""checkpoints list (library): what is found where, and that only _metadata is read."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import fsspec
import pytest

from statekit.readers.listing import list_checkpoints
from statekit.statefmt.errors import NotACheckpointError, PathNotFoundError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.json_contract import json_data
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

VALUE = StateDescriptor("v", StateKind.VALUE)


def write(url: str, job_id: str = "f" * 32) -> None:
    SavepointWriter.new_savepoint(job_id=job_id).with_operator("op", {VALUE: [(1, 1)]}).write(url, created_at_ms=5_000)


def test_checkpoint_root_with_jobs(tmp_path: Path) -> None:
    write(str(tmp_path / "job-a" / "chk-1"), "a" * 32)
    write(str(tmp_path / "job-a" / "chk-10"), "a" * 32)
    write(str(tmp_path / "job-b" / "chk-2"), "b" * 32)
    (tmp_path / "job-b" / "chk-3").mkdir()
    (tmp_path / "job-b" / "shared").mkdir()
    (tmp_path / "job-b" / "not-a-checkpoint").mkdir()
    listing = list_checkpoints(str(tmp_path))
    assert listing.path == str(tmp_path)
    assert [(c.job_id, c.checkpoint_id, c.status) for c in listing.listings] == [
        ("a" * 32, 0, "complete"), ("a" * 32, 0, "complete"),  # written as savepoints: id 0
        ("b" * 32, 0, "complete"), ("job-b", 3, "incomplete")]
    assert [Path(c.path).name for c in listing.listings] == ["chk-1", "chk-10", "chk-2", "chk-3"]
    complete = listing.listings[0]
    assert complete.created_at_ms == 5_000 and complete.format == "canonical" and complete.size > 0
    assert json_data(complete)["path"] == str(tmp_path / "job-a" / "chk-1")


def test_a_single_snapshot_and_its_metadata(tmp_path: Path) -> None:
    write(str(tmp_path / "sp"))
    [row] = list_checkpoints(str(tmp_path / "sp")).listings
    assert row.status == "complete" and row.kind == "savepoint" and row.path == str(tmp_path / "sp")


def test_folders_of_snapshots_with_any_names(tmp_path: Path) -> None:
    """A folder holding a _metadata is a snapshot whatever its name (it was listed as an unreadable
    Apache Flink snapshot when the statekit listing knew only chk-N and savepoint-* names)."""
    write(str(tmp_path / "before-upgrade"))
    write(str(tmp_path / "nightly"))
    (tmp_path / "notes").mkdir()
    listing = list_checkpoints(str(tmp_path))
    assert [(Path(c.path).name, c.status, c.kind) for c in listing.listings] == [
        ("before-upgrade", "complete", "savepoint"), ("nightly", "complete", "savepoint")]


def test_refusals(tmp_path: Path) -> None:
    with pytest.raises(PathNotFoundError):
        list_checkpoints(str(tmp_path / "missing"))
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotACheckpointError, match="is a file"):
        list_checkpoints(str(tmp_path / "f"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotACheckpointError, match="no checkpoints or savepoints here"):
        list_checkpoints(str(tmp_path / "empty"))


def test_reads_no_state_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(str(tmp_path / "job" / "chk-1"))
    write(str(tmp_path / "savepoint-1"))

    def refuse(self: FileIO, path: str) -> None:
        raise AssertionError(f"listing opened {path}")

    monkeypatch.setattr(FileIO, "open_input", refuse)
    assert len(list_checkpoints(str(tmp_path)).listings) == 1  # level 1 wins: savepoint-1
    assert len(list_checkpoints(str(tmp_path / "job")).listings) == 1


def test_memory_filesystem() -> None:
    root = f"memory://statekit-listing-{uuid.uuid4().hex}"
    try:
        write(f"{root}/job/chk-1")
        fs = fsspec.filesystem("memory")
        fs.pipe_file(f"{root}/job/chk-2/op/v/00000-of-00001.sks", b"partial")
        rows = list_checkpoints(root).listings
        assert [(r.job_id, r.status, r.path.rsplit("/", 1)[-1]) for r in rows] == [
            ("f" * 32, "complete", "chk-1"), ("job", "incomplete", "chk-2")]
        assert rows[0].path.startswith("memory://")
    finally:
        fsspec.filesystem("memory").rm(root, recursive=True)


def test_age_of_an_incomplete_checkpoint_comes_from_its_mtime(tmp_path: Path) -> None:
    (tmp_path / "job" / "chk-5").mkdir(parents=True)
    old = os.path.getmtime(tmp_path / "job" / "chk-5") - 3600
    os.utime(tmp_path / "job" / "chk-5", (old, old))
    [row] = list_checkpoints(str(tmp_path / "job")).listings
    assert row.age_s is not None and 3590 < row.age_s < 3700
    shutil.rmtree(tmp_path / "job")
