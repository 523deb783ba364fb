"""`statekit dispose` deletes nothing it cannot account for, through the CLI: a folder that
happens to hold a Flink _metadata, stray files, symbolic links; what it reports is what it
deleted, and a dry run lists exactly that. `checkpoints list` shows the staging folder a
killed savepoint leaves behind, and `dispose` removes it once nothing can still be writing it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from statekit.cli.main import cli
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
FLINK_SAVEPOINT = GOLDEN / "flink-2.3" / "hashmap" / "savepoints" / "savepoint-962f67-bfc4c25148ed"
FLINK_JOB = "962f676fad747434cac50f82ef230c8d"
FLINK_CHK = GOLDEN / "flink-2.3" / "hashmap" / "checkpoints" / FLINK_JOB / "chk-4"
STATEKIT_SAVEPOINT = GOLDEN / "statekit-v1" / "statekit-0.1-v1-all-kinds"
VALUE = StateDescriptor("v", StateKind.VALUE)

# Writes a savepoint and SIGKILLs itself after its state files, before _metadata.
KILLED_SAVEPOINT = r"""
import os, signal, sys
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

FileIO.write_atomic = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
SavepointWriter.new_savepoint().with_operator(
    "op", {StateDescriptor("v", StateKind.VALUE): [(i, i) for i in range(10)]}, parallelism=2).write(sys.argv[1])
"""


def run(*args: str) -> Result:
    result = CliRunner(env={"COLUMNS": "250"}).invoke(cli, list(args))
    assert "Traceback" not in result.output
    return result


def run_json(*args: str) -> Any:
    result = run("--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def refusal(result: Result) -> str:
    """The one error line of a refused dispose (exit 2, nothing on stdout); with --json its message."""
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    if lines[0].startswith("{"):
        error = json.loads(lines[0])["error"]
        assert error["exit_code"] == 2 and error["type"] == "BadInputError", error
        return str(error["message"])
    assert lines[0].startswith("statekit: error: "), result.stderr
    return lines[0].removeprefix("statekit: error: ")


def entries_under(path: Path) -> list[str]:
    return sorted(os.path.relpath(os.path.join(root, n), path) for root, dirs, files in os.walk(path) for n in dirs + files)


def files_under(path: Path) -> set[str]:
    return {str(Path(root) / n) for root, _, names in os.walk(path) for n in names}


def killed_savepoint(parent: Path) -> Path:
    target = parent / "savepoint-abcdef-0123456789ab"
    done = subprocess.run([sys.executable, "-c", KILLED_SAVEPOINT, str(target)], capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    (staging,) = [p for p in parent.iterdir() if p.name.startswith(".savepoint-abcdef-0123456789ab.inprogress-")]
    return staging


def make_idle(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    for root, dirs, files in os.walk(path, topdown=False):
        for name in dirs + files:
            os.utime(os.path.join(root, name), (then, then), follow_symlinks=False)
    os.utime(path, (then, then))


# ------------------------------------------------------------------ foreign files


def test_a_folder_holding_a_flink_metadata_is_refused_and_kept(tmp_path: Path) -> None:
    folder = tmp_path / "home"
    (folder / ".ssh").mkdir(parents=True)
    (folder / "docs").mkdir()
    (folder / ".bashrc").write_text("alias ll='ls -l'\n")
    (folder / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (folder / "docs" / "a.md").write_text("# a\n")
    shutil.copy(FLINK_SAVEPOINT / "_metadata", folder / "_metadata")
    before = entries_under(folder)
    expected = (f"{folder}: refusing to dispose: 3 file(s) not referenced by its _metadata, e.g. '.bashrc'; "
                "remove them first if they are yours")
    for args in (["dispose", str(folder)], ["dispose", "--dry-run", str(folder)], ["dispose", str(folder / "_metadata")],
                 ["--json", "dispose", str(folder)]):
        assert refusal(run(*args)) == expected
    assert entries_under(folder) == before


def test_a_stray_log_in_a_flink_checkpoint_is_refused_and_kept(tmp_path: Path) -> None:
    chk = tmp_path / FLINK_JOB / "chk-4"
    shutil.copytree(FLINK_CHK, chk)
    (chk / "jobmanager.log").write_text("INFO checkpoint 4 complete\n")
    (chk / "my-notes.txt").write_text("keep\n")
    line = refusal(run("dispose", str(chk)))
    assert line == (f"{chk}: refusing to dispose: 2 file(s) not referenced by its _metadata, e.g. 'jobmanager.log'; "
                    "remove them first if they are yours")
    assert sorted(p.name for p in chk.iterdir()) == ["_metadata", "d70b93db-afc9-4190-9432-5d637d8b6f20",
                                                     "jobmanager.log", "my-notes.txt"]


# ------------------------------------------------------------------ symbolic links


@pytest.mark.parametrize("engine", ["statekit", "flink"])
def test_dispose_through_a_symlink_is_refused_and_deletes_nothing(tmp_path: Path, engine: str) -> None:
    target = tmp_path / "savepoint-target"
    shutil.copytree(STATEKIT_SAVEPOINT if engine == "statekit" else FLINK_SAVEPOINT, target)
    (tmp_path / "link").symlink_to(target)
    before = entries_under(target)
    for path in (tmp_path / "link", tmp_path / "link" / "_metadata"):
        line = refusal(run("dispose", str(path)))
        assert line == (f"{tmp_path / 'link'}: is a symbolic link (to {target}); "
                        "refusing to dispose through links: give the real path if that is what you mean to delete")
    assert entries_under(target) == before and (tmp_path / "link").is_symlink()


@pytest.mark.parametrize("engine", ["statekit", "flink"])
def test_a_symlink_inside_a_snapshot_is_a_foreign_file(tmp_path: Path, engine: str) -> None:
    sp = tmp_path / "savepoint-x"
    shutil.copytree(STATEKIT_SAVEPOINT if engine == "statekit" else FLINK_SAVEPOINT, sp)
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "data.bin").write_bytes(b"\x00" * 100)
    (sp / "backup").symlink_to(tmp_path / "precious")
    before = entries_under(sp)
    line = refusal(run("dispose", str(sp)))
    why = "not named by its _metadata" if engine == "statekit" else "not referenced by its _metadata"
    assert line == f"{sp}: refusing to dispose: 1 file(s) {why}, e.g. 'backup' (a symbolic link); remove them first if they are yours"
    assert entries_under(sp) == before and (tmp_path / "precious" / "data.bin").stat().st_size == 100


# ------------------------------------------------------------------ the report is what was deleted


@pytest.mark.parametrize("engine", ["statekit", "flink"])
def test_dry_run_and_report_list_exactly_the_files_removed(tmp_path: Path, engine: str) -> None:
    sp = tmp_path / "savepoint-x"
    shutil.copytree(STATEKIT_SAVEPOINT if engine == "statekit" else FLINK_SAVEPOINT, sp)
    temp = ("._metadata.0123456789abcdef0123456789abcdef.tmp" if engine == "statekit"
            else "._metadata.inprogress.0f8fad5b-d9cb-469f-a165-70867728950e")
    (sp / temp).write_bytes(b"x")
    (sp / "empty-dir").mkdir()
    before = files_under(sp)
    dry = run_json("dispose", "--dry-run", str(sp))
    text = run("dispose", "--dry-run", str(sp)).stdout.splitlines()
    assert set(dry["files"]) == before and [line.strip() for line in text[1:]] == dry["files"]
    assert text[0].startswith(f"would delete {sp} ({len(before)} files")
    done = run("dispose", str(sp))
    assert done.exit_code == 0 and done.stdout.startswith(f"deleted {sp} ({len(before)} files")
    assert not sp.exists() and list(tmp_path.iterdir()) == []


def test_json_report_of_a_real_run_is_what_was_removed(tmp_path: Path) -> None:
    sp = tmp_path / "savepoint-x"
    shutil.copytree(FLINK_SAVEPOINT, sp)
    before = files_under(sp)
    data = run_json("dispose", str(sp))
    assert set(data["files"]) == before and data["deleted"] == [*data["files"], str(sp)] and data["disposed"]
    assert not sp.exists()


# ------------------------------------------------------------------ staging folders of killed savepoints


def test_checkpoints_list_shows_a_staging_folder_as_incomplete(tmp_path: Path) -> None:
    root = tmp_path / "savepoints"
    root.mkdir()
    staging = killed_savepoint(root)
    SavepointWriter.new_savepoint().with_operator("op", {VALUE: [(1, 1)]}).write(str(root / "savepoint-aaaaaa-000000000000"))
    rows = run_json("checkpoints", "list", str(root))["snapshots"]
    row = next(r for r in rows if r["path"] == str(staging))
    assert (row["status"], row["kind"], row["problem"]) == ("incomplete", "savepoint", "in-progress savepoint (may still be written)")
    assert row["size"] == sum(os.path.getsize(f) for f in files_under(staging)) > 0
    make_idle(staging, 3600)
    row = next(r for r in run_json("checkpoints", "list", str(root))["snapshots"] if r["path"] == str(staging))
    assert row["problem"] == "abandoned in-progress savepoint" and row["age_s"] >= 3600
    text = run("checkpoints", "list", str(root)).stdout
    assert "incomplete (abandoned in-progress savepoint)" in text and str(staging) in text
    # the staging folder alone is listed too, as is a folder of only that
    (only,) = run_json("checkpoints", "list", str(staging))["snapshots"]
    assert only["status"] == "incomplete" and only["path"] == str(staging)


def test_checkpoints_list_beside_flink_savepoints_names_statekit_as_the_engine(tmp_path: Path) -> None:
    root = tmp_path / "savepoints"
    shutil.copytree(FLINK_SAVEPOINT, root / FLINK_SAVEPOINT.name)
    staging = killed_savepoint(root)
    rows = {Path(r["path"]).name: r for r in run_json("checkpoints", "list", str(root))["snapshots"]}
    assert rows[staging.name]["engine"] == "statekit" and rows[staging.name]["status"] == "incomplete"
    assert rows[FLINK_SAVEPOINT.name]["engine"] == "flink" and rows[FLINK_SAVEPOINT.name]["status"] == "complete"


def test_dispose_a_staging_folder_once_idle_or_with_force(tmp_path: Path) -> None:
    staging = killed_savepoint(tmp_path)
    before = entries_under(staging)
    line = refusal(run("dispose", str(staging)))
    assert line.startswith(f"{staging}: in-progress folder changed ") and line.endswith(
        "s ago: a savepoint or command may still be writing it; dispose it once it has been idle for 10 minutes, "
        "or pass --force if nothing is writing it")
    assert entries_under(staging) == before
    assert run_json("dispose", "--force", "--dry-run", str(staging))["files"] == sorted(files_under(staging))
    make_idle(staging, 3600)
    dry = run_json("dispose", "--dry-run", str(staging))
    assert dry["complete"] is False and set(dry["files"]) == files_under(staging) and len(dry["files"]) == 2
    done = run_json("dispose", str(staging))
    assert done["disposed"] and done["files"] == dry["files"] and list(tmp_path.iterdir()) == []

    staging = killed_savepoint(tmp_path)
    assert run("dispose", "--force", str(staging)).exit_code == 0 and list(tmp_path.iterdir()) == []


def test_a_staging_folder_holding_foreign_files_is_refused_even_with_force(tmp_path: Path) -> None:
    staging = killed_savepoint(tmp_path)
    (staging / "op" / "README").write_text("mine\n")
    line = refusal(run("dispose", "--force", str(staging)))
    assert line == (f"{staging}: refusing to dispose: 1 file(s) that are not statekit state or temp files, in a snapshot "
                    "without _metadata, e.g. 'op/README'; remove them first if they are yours")
    assert (staging / "op" / "README").exists()
