"""dispose: deletes checkpoints and savepoints, refuses everything else."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekit.statefmt.errors import (
    BadInputError,
    MetadataError,
    NotACheckpointError,
    PathNotFoundError,
    StatekitError,
)
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.disposal import dispose_snapshot
from statekit.writers.savepoint_writer import SavepointWriter

VALUE = StateDescriptor("v", StateKind.VALUE)


def write(path: Path) -> Path:
    SavepointWriter.new_savepoint().with_operator("op", {VALUE: [(i, i) for i in range(10)]}, parallelism=2).write(str(path))
    return path


def listing(path: Path) -> list[str]:
    return sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())


def test_dry_run_lists_and_deletes_nothing(tmp_path: Path) -> None:
    sp = write(tmp_path / "savepoint-1")
    before = listing(sp)
    plan = dispose_snapshot(str(sp), dry_run=True)
    assert plan.dry_run and not plan.disposed and plan.complete
    assert plan.files == sorted(str(sp / f) for f in before)
    assert plan.bytes == sum((sp / f).stat().st_size for f in before)
    assert listing(sp) == before


def test_dispose_deletes_the_directory(tmp_path: Path) -> None:
    sp = write(tmp_path / "job" / "chk-3")
    plan = dispose_snapshot(str(sp))
    assert plan.disposed and not plan.dry_run and len(plan.files) == 3
    assert not sp.exists() and (tmp_path / "job").is_dir()


def test_dispose_through_the_metadata_file(tmp_path: Path) -> None:
    sp = write(tmp_path / "sp")
    assert dispose_snapshot(str(sp / "_metadata")).disposed
    assert not sp.exists()


def test_temp_files_do_not_block_disposal(tmp_path: Path) -> None:
    sp = write(tmp_path / "sp")
    (sp / "op" / ".00000-of-00002.sks.0123456789abcdef0123456789abcdef.tmp").write_bytes(b"x")
    assert dispose_snapshot(str(sp)).disposed


def test_refuses_foreign_files(tmp_path: Path) -> None:
    sp = write(tmp_path / "sp")
    (sp / "notes.txt").write_text("mine")
    with pytest.raises(BadInputError, match=r"refusing to dispose: 1 file\(s\) not named by its _metadata, e.g. 'notes.txt'"):
        dispose_snapshot(str(sp))
    assert (sp / "_metadata").exists() and (sp / "notes.txt").exists()


def test_refuses_what_is_not_a_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.sks").write_bytes(b"x")
    with pytest.raises(NotACheckpointError, match="data: not a checkpoint or savepoint directory"):
        dispose_snapshot(str(tmp_path / "data"))
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(NotACheckpointError, match="is a file"):
        dispose_snapshot(str(tmp_path / "file.txt"))
    with pytest.raises(PathNotFoundError, match="no such file or directory"):
        dispose_snapshot(str(tmp_path / "missing"))
    job = tmp_path / "job"
    write(job / "chk-1")
    with pytest.raises(NotACheckpointError):  # a job directory holding checkpoints is not one
        dispose_snapshot(str(job))
    assert (job / "chk-1" / "_metadata").exists()


def test_refuses_damaged_metadata(tmp_path: Path) -> None:
    sp = write(tmp_path / "sp")
    (sp / "_metadata").write_bytes(b"garbage")
    with pytest.raises(MetadataError):
        dispose_snapshot(str(sp))
    assert sp.exists()


def test_incomplete_checkpoint(tmp_path: Path) -> None:
    chk = write(tmp_path / "job" / "chk-7")
    os.remove(chk / "_metadata")
    plan = dispose_snapshot(str(chk), dry_run=True)
    assert not plan.complete and len(plan.files) == 2
    assert dispose_snapshot(str(chk)).disposed and not chk.exists()

    chk = write(tmp_path / "job" / "chk-8")
    os.remove(chk / "_metadata")
    (chk / "readme.md").write_text("x")
    with pytest.raises(BadInputError, match=r"chk-8: refusing to dispose: 1 file\(s\) that are not statekit state or temp "
                                            r"files, in a snapshot without _metadata, e.g. 'readme.md'"):
        dispose_snapshot(str(chk))
    assert (chk / "readme.md").exists() and len(listing(chk)) == 3


def test_metadata_goes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import statekit.writers.removal as removal

    sp = write(tmp_path / "chk-1")
    real_delete = removal.delete_file
    removed: list[str] = []

    def crash_after_first(io: FileIO, root: str, path: str) -> None:
        if removed:
            raise OSError("crash (injected)")
        real_delete(io, root, path)
        removed.append(path)

    monkeypatch.setattr(removal, "delete_file", crash_after_first)
    with pytest.raises(StatekitError, match=r"chk-1: dispose incomplete: deleted 1 of 3 file\(s\), then .*\.sks: "
                                            r"crash \(injected\); .* rerun dispose to finish"):
        dispose_snapshot(str(sp))
    # what remains is an incomplete checkpoint, never a complete-looking one with files missing
    assert [Path(p).name for p in removed] == ["_metadata"]
    assert not (sp / "_metadata").exists() and len(listing(sp)) == 2
    monkeypatch.undo()
    assert dispose_snapshot(str(sp)).disposed and not sp.exists()  # the rerun finishes
