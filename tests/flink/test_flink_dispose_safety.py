"""Disposing a Flink snapshot deletes only what its _metadata references and what Flink itself
writes there; anything else (a user's files, a log, a link) makes it refuse, deleting nothing.
Dry runs list exactly what the real run deletes. Works on copies of the golden Flink 2.3
snapshots."""

from __future__ import annotations

import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

import statekit.flink.dispose as flink_dispose
from statekit.flink import dispose_flink_snapshot, plan_flink_dispose, relocate_flink_metadata
from statekit.flink.listing import list_checkpoints
from statekit.statefmt.errors import BadInputError


def files_under(path: Path) -> set[str]:
    return {str(Path(root) / n) for root, _, names in os.walk(path) for n in names}


def entries_under(path: Path) -> list[str]:
    """Every entry (file, directory, link) below ``path``, links not followed."""
    return sorted(os.path.relpath(os.path.join(root, n), path)
                  for root, dirs, files in os.walk(path) for n in dirs + files)


def home_like_folder(flink_golden: Any, folder: Path) -> Path:
    """A user's folder that happens to hold a copy of a real Flink savepoint's _metadata."""
    (folder / ".ssh").mkdir(parents=True)
    (folder / "docs").mkdir()
    (folder / ".bashrc").write_text("export PS1='$ '\n")
    (folder / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (folder / "docs" / "a.md").write_text("# notes\n")
    shutil.copy(flink_golden["hashmap/savepoint"] / "_metadata", folder / "_metadata")
    return folder


def test_a_folder_holding_a_flink_metadata_keeps_the_users_files(flink_golden: Any, tmp_path: Path) -> None:
    folder = home_like_folder(flink_golden, tmp_path / "home")
    before = entries_under(folder)
    message = (rf"{re.escape(str(folder))}: refusing to dispose: 3 file\(s\) not referenced by its _metadata, e.g. '.bashrc'; "
               "remove them first if they are yours")
    with pytest.raises(BadInputError, match=message):
        plan_flink_dispose(str(folder))
    for dry_run in (True, False):
        with pytest.raises(BadInputError, match=message):
            dispose_flink_snapshot(str(folder), dry_run)
    assert entries_under(folder) == before


@pytest.mark.parametrize("stray", ["taskmanager.log", "notes/todo.txt", ".nfs000001"])
def test_a_stray_file_in_a_checkpoint_is_never_deleted(flink_golden: Any, tmp_path: Path, stray: str) -> None:
    job = tmp_path / flink_golden.jobs["hashmap"]
    shutil.copytree(flink_golden["hashmap/chk-4"], job / "chk-4")
    (job / "chk-4" / stray).parent.mkdir(exist_ok=True)
    (job / "chk-4" / stray).write_text("2024-01-01 INFO started\n")
    before = entries_under(job)
    with pytest.raises(BadInputError, match=rf"chk-4: refusing to dispose: 1 file\(s\) not referenced by its "
                                            rf"_metadata, e.g. '{re.escape(stray)}'"):
        dispose_flink_snapshot(str(job / "chk-4"))
    assert entries_under(job) == before


def test_flinks_own_temp_files_are_accounted_for(flink_golden: Any, tmp_path: Path) -> None:
    copy = tmp_path / "savepoint-1"
    shutil.copytree(flink_golden["hashmap/savepoint"], copy)
    temps = [f"._metadata.inprogress.{uuid.uuid4()}", f"__metadata_tmp_{uuid.uuid4()}"]
    for name in temps:
        (copy / name).write_bytes(b"half a metadata")
    assert all(flink_dispose.FLINK_TEMP_FILE_PATTERN.match(name) for name in temps)
    assert not flink_dispose.FLINK_TEMP_FILE_PATTERN.match(f".state.inprogress.{uuid.uuid4()}")
    dry = dispose_flink_snapshot(str(copy), dry_run=True)
    assert set(dry.plan.delete_files) == files_under(copy) and dry.plan.delete_files[0] == str(copy / "_metadata")
    done = dispose_flink_snapshot(str(copy))
    assert done.deleted == (*dry.plan.delete_files, str(copy)) and not copy.exists()


def test_refuses_a_snapshot_path_that_is_or_passes_through_a_symlink(flink_golden: Any, tmp_path: Path) -> None:
    target = tmp_path / "real" / "savepoint-1"
    shutil.copytree(flink_golden["hashmap/savepoint"], target)
    (tmp_path / "link").symlink_to(target)
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    before = entries_under(target)
    for path in (tmp_path / "link", tmp_path / "link" / "_metadata"):
        for dry_run in (True, False):
            with pytest.raises(BadInputError, match=rf"is a symbolic link \(to {re.escape(str(target))}\)"):
                dispose_flink_snapshot(str(path), dry_run)
    assert entries_under(target) == before and (tmp_path / "link").is_symlink()
    dispose_flink_snapshot(str(tmp_path / "alias" / "savepoint-1"), False)  # a link among the ancestors resolves
    assert not target.exists() and (tmp_path / "alias").is_symlink()


@pytest.mark.parametrize("replace_state_file", [False, True])
def test_a_symlink_inside_is_a_foreign_file(flink_golden: Any, tmp_path: Path, replace_state_file: bool) -> None:
    copy = tmp_path / "savepoint-1"
    shutil.copytree(flink_golden["hashmap/savepoint"], copy)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"precious")
    name = "876e98d2-7ba3-4bfd-95bd-4f44843c2c61" if replace_state_file else "shortcut"
    if replace_state_file:  # the referenced state file itself is a link to a file elsewhere
        shutil.copy(copy / name, outside)
        (copy / name).unlink()
    (copy / name).symlink_to(outside)
    before = entries_under(copy)
    with pytest.raises(BadInputError, match=rf"refusing to dispose: 1 file\(s\) not referenced by its _metadata, "
                                            rf"e.g. '{re.escape(name)}' \(a symbolic link\)"):
        dispose_flink_snapshot(str(copy))
    assert entries_under(copy) == before and outside.exists()


def test_dry_run_lists_exactly_what_a_real_run_deletes(relocated_inline0: Path) -> None:
    job = relocated_inline0
    shutil.copytree(job / "chk-4", job / "chk-5")
    meta5 = job / "chk-5" / "_metadata"
    shared = job / "shared"
    # chk-5 keeps referencing every shared file except the two whose names start with "9"
    meta5.write_bytes(relocate_flink_metadata(meta5.read_bytes(), f"file:{shared}/9", "file:/elsewhere/9"))
    (job / "chk-4" / f"._metadata.inprogress.{uuid.uuid4()}").write_bytes(b"x")
    before = files_under(job)
    dry = dispose_flink_snapshot(str(job / "chk-4"), dry_run=True)
    listed = set(dry.plan.delete_files + dry.plan.delete_shared)
    assert files_under(job) == before and len(listed) == 3 + 2
    done = dispose_flink_snapshot(str(job / "chk-4"))
    assert before - files_under(job) == listed
    assert set(done.deleted) == listed | {str(job / "chk-4")} and done.failed == ()


def test_the_listing_leaves_statekits_staging_folders_to_the_statekit_listing(flink_golden: Any, tmp_path: Path) -> None:
    root = tmp_path / "savepoints"
    shutil.copytree(flink_golden["hashmap/savepoint"], root / "savepoint-962f67-bfc4c25148ed")
    staging = root / ".savepoint-abcdef-0123456789ab.inprogress-0123456789ab"
    staging.mkdir()
    (staging / "_metadata").write_bytes(b"STKMETA\x01")
    assert [Path(e.path).name for e in list_checkpoints(str(root))] == ["savepoint-962f67-bfc4c25148ed"]


def test_plan_of_a_referenced_file_that_is_missing(flink_golden: Any, tmp_path: Path) -> None:
    copy = tmp_path / "savepoint-1"
    shutil.copytree(flink_golden["hashmap/savepoint"], copy)
    (copy / "876e98d2-7ba3-4bfd-95bd-4f44843c2c61").unlink()
    plan = plan_flink_dispose(str(copy))
    assert plan.delete_files == (str(copy / "_metadata"),)
    assert plan.missing == (str(copy / "876e98d2-7ba3-4bfd-95bd-4f44843c2c61"),)


def test_a_shared_folder_linked_to_a_users_folder_is_never_disposed_through(relocated_inline0: Path,
                                                                            tmp_path: Path) -> None:
    """The _metadata names files under <job>/shared, which is a link to a user's folder: those
    files are the user's, and dispose refuses before deleting anything (a dry run too)."""
    job = relocated_inline0
    user = tmp_path / "user-documents"
    shutil.move(str(job / "shared"), user)
    (user / "taxes-2024.pdf").write_bytes(b"%PDF precious")
    (job / "shared").symlink_to(user)
    before_user, before_chk = entries_under(user), entries_under(job / "chk-4")
    assert len(before_user) > 1
    for dry_run in (True, False):
        with pytest.raises(BadInputError, match=r"the shared file .* is reached through the symbolic link "
                                                rf"{re.escape(str(job / 'shared'))} \(to {re.escape(str(user))}\); "
                                                "refusing to delete through links: nothing was deleted"):
            dispose_flink_snapshot(str(job / "chk-4"), dry_run)
    assert entries_under(user) == before_user and entries_under(job / "chk-4") == before_chk
    assert {p.name for p in user.iterdir()} >= {"taxes-2024.pdf"}


def test_the_shared_files_go_when_nothing_on_the_way_is_a_link(relocated_inline0: Path) -> None:
    job = relocated_inline0
    done = dispose_flink_snapshot(str(job / "chk-4"))
    assert done.failed == () and done.plan.delete_shared and not any(
        os.path.exists(p) for p in done.plan.delete_shared)
