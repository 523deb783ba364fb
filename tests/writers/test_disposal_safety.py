"""dispose (statekit snapshots) never deletes what it cannot account for: links, special
files, foreign files; a dry run lists exactly what a real run deletes; the staging folder a
killed savepoint leaves behind can be disposed, but not while it may still be written."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from statekit.statefmt.errors import BadInputError, NotACheckpointError, StatekitError
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.disposal import dispose_snapshot
from statekit.writers.savepoint_writer import SavepointWriter

VALUE = StateDescriptor("v", StateKind.VALUE)
TEMP = ".00000-of-00002.sks.0123456789abcdef0123456789abcdef.tmp"

# Writes a savepoint and SIGKILLs itself part-way: "metadata" before _metadata is published,
# "rename" after it, before the staging folder is moved into place.
KILLED_SAVEPOINT = r"""
import os, signal, sys
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers import staging
from statekit.writers.savepoint_writer import SavepointWriter

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

if sys.argv[2] == "metadata":
    FileIO.write_atomic = die
else:
    staging.publish_dir = die
SavepointWriter.new_savepoint().with_operator(
    "op", {StateDescriptor("v", StateKind.VALUE): [(i, i) for i in range(10)]}, parallelism=2).write(sys.argv[1])
"""


def write(path: Path) -> Path:
    SavepointWriter.new_savepoint().with_operator("op", {VALUE: [(i, i) for i in range(10)]}, parallelism=2).write(str(path))
    return path


def tree(path: Path) -> list[str]:
    """Every entry below ``path`` (files, directories, links), never following a link."""
    found = []
    for root, dirs, files in os.walk(path):
        found += [os.path.relpath(os.path.join(root, n), path) for n in dirs + files]
    return sorted(found)


def files_under(path: Path) -> set[str]:
    return {str(Path(root) / n) for root, _, names in os.walk(path) for n in names}


def killed_savepoint(parent: Path, stage: str) -> Path:
    """The staging folder a savepoint writer killed with SIGKILL at ``stage`` leaves behind."""
    target = parent / "savepoint-abcdef-0123456789ab"
    done = subprocess.run([sys.executable, "-c", KILLED_SAVEPOINT, str(target), stage], capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    (staging,) = [p for p in parent.iterdir() if p.name.startswith(".savepoint-abcdef-0123456789ab.inprogress-")]
    assert not target.exists()
    return staging


def make_idle(path: Path, seconds: float) -> None:
    """Pretend nothing below ``path`` (nor it) changed for ``seconds``."""
    then = time.time() - seconds
    for root, dirs, files in os.walk(path, topdown=False):
        for name in dirs + files:
            os.utime(os.path.join(root, name), (then, then), follow_symlinks=False)
    os.utime(path, (then, then))


# ------------------------------------------------------------------ symbolic links


def test_refuses_a_snapshot_path_that_is_a_symlink(tmp_path: Path) -> None:
    target = write(tmp_path / "target")
    (tmp_path / "link").symlink_to(target)
    before = tree(target)
    for path in (tmp_path / "link", tmp_path / "link" / "_metadata"):
        for dry_run in (True, False):
            with pytest.raises(BadInputError, match=rf"link: is a symbolic link \(to {re.escape(str(target))}\)"):
                dispose_snapshot(str(path), dry_run=dry_run)
    assert tree(target) == before and (tmp_path / "link").is_symlink()


def test_a_link_among_the_ancestors_is_resolved(tmp_path: Path) -> None:
    write(tmp_path / "real" / "sp")
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    dispose_snapshot(str(tmp_path / "alias" / "sp"))
    assert not (tmp_path / "real" / "sp").exists() and (tmp_path / "alias").is_symlink()


@pytest.mark.parametrize("where", ["notes", "op/v/link", "op/linked-dir"])
def test_a_symlink_inside_is_a_foreign_file(tmp_path: Path, where: str) -> None:
    sp = write(tmp_path / "sp")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("mine")
    (sp / where).symlink_to(outside if where.endswith("dir") else outside / "secret")
    before = tree(sp)
    with pytest.raises(BadInputError, match=rf"sp: refusing to dispose: 1 file\(s\) not named by its _metadata, "
                                            rf"e.g. '{re.escape(where)}' \(a symbolic link\)"):
        dispose_snapshot(str(sp), dry_run=True)
    with pytest.raises(BadInputError):
        dispose_snapshot(str(sp))
    assert tree(sp) == before and (outside / "secret").read_text() == "mine"


def test_a_metadata_symlink_is_refused(tmp_path: Path) -> None:
    other = write(tmp_path / "other")
    chk = write(tmp_path / "job" / "chk-2")
    (chk / "_metadata").unlink()
    (chk / "_metadata").symlink_to(other / "_metadata")
    with pytest.raises(BadInputError, match=r"chk-2/_metadata: is a symbolic link, not a regular file; refusing to "
                                            r"dispose a snapshot whose _metadata cannot be read"):
        dispose_snapshot(str(chk))
    assert (other / "_metadata").is_file() and len(tree(chk)) == 5
    (chk / "_metadata").unlink()
    (chk / "_metadata").mkdir()  # an empty directory in its place: rmdir would take it, with the state files
    with pytest.raises(BadInputError, match=r"chk-2/_metadata: is a directory, not a regular file"):
        dispose_snapshot(str(chk), dry_run=True)
    assert len(tree(chk)) == 5


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_inside_is_a_foreign_file_and_is_never_opened(tmp_path: Path) -> None:
    sp = write(tmp_path / "sp")
    os.mkfifo(sp / "op" / "pipe")  # opening it for reading would block
    with pytest.raises(BadInputError, match=r"e.g. 'op/pipe' \(a FIFO\)"):
        dispose_snapshot(str(sp))
    assert (sp / "_metadata").is_file()


# ------------------------------------------------------------------ dry run == real run


def test_dry_run_lists_exactly_what_a_real_run_deletes(tmp_path: Path) -> None:
    sp = write(tmp_path / "savepoint-1")
    (sp / "op" / TEMP).write_bytes(b"x")
    (sp / "op" / "empty").mkdir()
    dry = dispose_snapshot(str(sp), dry_run=True)
    assert set(dry.files) == files_under(sp) and len(dry.files) == 4
    real = dispose_snapshot(str(sp))
    assert real.files == dry.files and real.bytes == dry.bytes and real.disposed
    assert not sp.exists() and list(tmp_path.iterdir()) == []


def test_a_file_that_appears_after_the_plan_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import statekit.writers.disposal as disposal

    sp = write(tmp_path / "chk-1")
    real_remove_files = disposal.remove_files

    def late_writer(*args: object, **kwargs: object) -> object:
        (sp / "op" / "late.txt").write_text("written after the plan")
        return real_remove_files(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(disposal, "remove_files", late_writer)
    with pytest.raises(StatekitError, match=r"dispose incomplete: deleted 3 of 3 file\(s\), then .*chk-1/op: .*kept it"):
        dispose_snapshot(str(sp))
    assert (sp / "op" / "late.txt").read_text() == "written after the plan"


# ------------------------------------------------------------------ staging folders of killed savepoints


@pytest.mark.parametrize("stage", ["metadata", "rename"])
def test_disposes_the_staging_folder_of_a_killed_savepoint(tmp_path: Path, stage: str) -> None:
    staging = killed_savepoint(tmp_path, stage)
    make_idle(staging, 3600)
    expected = files_under(staging)
    assert any(f.endswith(".sks") for f in expected) and (stage == "rename") == (staging / "_metadata").exists()
    dry = dispose_snapshot(str(staging), dry_run=True)
    assert set(dry.files) == expected and dry.complete == (stage == "rename")
    done = dispose_snapshot(str(staging))
    assert done.disposed and done.files == dry.files
    assert list(tmp_path.iterdir()) == []


def test_a_recently_changed_staging_folder_needs_force(tmp_path: Path) -> None:
    staging = killed_savepoint(tmp_path, "metadata")
    before = tree(staging)
    with pytest.raises(BadInputError, match=r"inprogress-[0-9a-f]{12}: in-progress folder changed \d+ s ago: a savepoint "
                                            r"or command may still be writing it; .*--force"):
        dispose_snapshot(str(staging))
    with pytest.raises(BadInputError, match="may still be writing it"):
        dispose_snapshot(str(staging), dry_run=True)
    assert tree(staging) == before
    make_idle(staging, 500)  # still inside the 10 minutes
    with pytest.raises(BadInputError, match="may still be writing it"):
        dispose_snapshot(str(staging))
    assert dispose_snapshot(str(staging), force=True).disposed and not staging.exists()


def test_a_staging_folder_holding_anything_else_is_refused_even_with_force(tmp_path: Path) -> None:
    staging = killed_savepoint(tmp_path, "metadata")
    (staging / "op" / "v" / "notes.md").write_text("mine")
    make_idle(staging, 3600)
    with pytest.raises(BadInputError, match=r"refusing to dispose: 1 file\(s\) that are not statekit state or temp files, "
                                            r"in a snapshot without _metadata, e.g. 'op/v/notes.md'"):
        dispose_snapshot(str(staging), force=True)
    assert (staging / "op" / "v" / "notes.md").exists() and len(files_under(staging)) == 3


def test_other_hidden_folders_are_not_snapshots(tmp_path: Path) -> None:
    for name in (".savepoint-x.inprogress-0123", ".cache", ".savepoint-x.inprogress-0123456789AB"):
        (tmp_path / name / "op" / "v").mkdir(parents=True)
        (tmp_path / name / "op" / "v" / "00000-of-00001.sks").write_bytes(b"x")
        make_idle(tmp_path / name, 3600)
        with pytest.raises(NotACheckpointError, match="not a checkpoint or savepoint directory"):
            dispose_snapshot(str(tmp_path / name))
        assert (tmp_path / name / "op" / "v" / "00000-of-00001.sks").exists()
