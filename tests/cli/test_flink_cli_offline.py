"""`statekit inspect / checkpoints list / verify / dispose` on real Flink 2.3 snapshots.

The golden snapshots live in tests/golden/flink-2.3 (see its README.md); tests that write
or delete work on copies in tmp_path.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import mmh3
import pytest
from click.testing import CliRunner, Result

from statekit.cli.main import cli

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "flink-2.3"
JOBS = {
    "hashmap": "962f676fad747434cac50f82ef230c8d",
    "rocksdb-incremental": "668cf752b24f4c4ca6b3d8c1e6f0f929",
    "rocksdb-incremental-inline0": "41a19bb2434264c1a64f6d54dac65a72",
}
SAVEPOINT_DIRS = {
    "hashmap": "savepoint-962f67-bfc4c25148ed",
    "rocksdb-incremental": "savepoint-668cf7-10a2b9713d30",
    "rocksdb-incremental-inline0": "savepoint-41a19b-c3d04ad8af31",
}
INLINE0_OLD_PREFIX = "file:/tmp/stackcheck/flink/out_rocksdb_noinline/checkpoints"
INLINE0_SHARED = {
    "f9d21e4d-b186-4302-a801-d7767358b9fe", "96ea838d-eb15-43da-b57f-8e5405ec61c4",
    "8312a4c3-21c7-4007-88be-0e73b21a7ece", "af764ab4-7a1f-4ccb-95e2-e0570fef6ae7",
    "e338d51a-e053-4be0-8812-1442c40c94a4", "22ef2c4d-25d9-4a07-9d11-4e930a09e5a6",
    "9876836f-e34e-445b-bac8-8ffdc5805b46",
}
KEYED_ID = "569cdc4a96621daa7af4c159b985695c"
# (uid, operator id, name, parallelism, max parallelism, key-group ranges) in file order.
OPERATORS = [
    (None, "cbc357ccb763df2852fee8c4fc7d55f2", "Source: Collection Source", 1, 1, [[0, 0]]),
    ("running-count", KEYED_ID, "KEYED PROCESS", 1, 128, [[0, 127]]),
    (None, "7df19f87deec5680128845fd9a6ca18d", "Map, _stream_key_by_map_operator", 1, 1, [[0, 0]]),
    (None, "d1d9868dcd7475c232129f1525c5e87e", "Sink: Print to Std. Out", 1, 128, [[0, 127]]),
]
KEYED_STATES = [("_timer_state/event_user-timers", "timers"),
                ("_timer_state/processing_user-timers", "timers"), ("python-state-count", "list")]
# name -> (checkpoint id, kind, format, keyed handle, bytes, inline, file, shared)
SNAPSHOTS = {
    "hashmap/chk-4": (4, "checkpoint", "native", "key-groups", 30213, 0, 30213, 0),
    "rocksdb-incremental/chk-4": (4, "checkpoint", "native", "incremental", 60860, 39512, 21348, 0),
    "rocksdb-incremental-inline0/chk-4": (4, "checkpoint", "native", "incremental", 55421, 0, 23707, 31714),
    "hashmap/savepoint": (5, "savepoint", "canonical", "savepoint-key-groups", 32909, 0, 32909, 0),
    "rocksdb-incremental/savepoint": (5, "savepoint", "canonical", "savepoint-key-groups", 32909, 0, 32909, 0),
    "rocksdb-incremental-inline0/savepoint": (5, "savepoint", "canonical", "savepoint-key-groups",
                                              32909, 0, 32909, 0),
}


def snapshot(name: str) -> Path:
    backend, which = name.split("/")
    if which == "savepoint":
        return GOLDEN / backend / "savepoints" / SAVEPOINT_DIRS[backend]
    return GOLDEN / backend / "checkpoints" / JOBS[backend] / which


def run(*args: str) -> Result:
    return CliRunner(env={"COLUMNS": "250", "STATEKIT_OUTPUT": "rich"}).invoke(cli, list(args))


def run_json(*args: str, code: int = 0) -> Any:
    result = run("--json", *args)
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def error_line(result: Result) -> str:
    """The one error line of a failed command (and nothing else, no traceback)."""
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("statekit: error: ")
    return lines[0]


# ------------------------------------------------------------------ inspect


@pytest.mark.parametrize("name", sorted(SNAPSHOTS))
def test_inspect_json_golden(name: str) -> None:
    checkpoint_id, kind, fmt, handle, total, inline, file, shared = SNAPSHOTS[name]
    data = run_json("inspect", str(snapshot(name)))
    assert data["engine"] == "flink"
    assert (data["checkpoint_id"], data["kind"], data["format"], data["metadata_version"]) == (
        checkpoint_id, kind, fmt, 6)
    assert (data["bytes"], data["inline_bytes"], data["file_bytes"], data["shared_bytes"]) == (
        total, inline, file, shared)
    assert [(o["uid"], o["operator_id"], o["name"], o["parallelism"], o["max_parallelism"],
             o["key_group_ranges"]) for o in data["operators"]] == OPERATORS
    assert [o["label"] for o in data["operators"]] == [uid or op_id for uid, op_id, *_ in OPERATORS]
    keyed = data["operators"][1]
    assert keyed["operator_id"] == mmh3.hash_bytes(b"running-count").hex()
    assert sorted((s["name"], s["kind"]) for s in keyed["keyed_states"]) == KEYED_STATES
    assert keyed["keyed_state_problem"] is None and keyed["operator_states"] == []
    assert [(s["index"], s["key_group_range"], s["keyed_handle"], s["bytes"], s["inline_bytes"],
             s["file_bytes"], s["shared_bytes"]) for s in keyed["subtasks"]] == [
        (0, [0, 127], handle, total, inline, file, shared)]
    assert [o["bytes"] for o in data["operators"]] == [0, total, 0, 0]


def test_inspect_accepts_metadata_file_and_job_dir() -> None:
    by_dir = run_json("inspect", str(snapshot("hashmap/chk-4")))
    by_file = run_json("inspect", str(snapshot("hashmap/chk-4") / "_metadata"))
    by_job = run_json("inspect", str(GOLDEN / "hashmap" / "checkpoints" / JOBS["hashmap"]))
    assert by_dir == by_file == by_job
    assert by_dir["path"] == str(snapshot("hashmap/chk-4"))


def test_inspect_no_skew_reads_only_metadata(tmp_path: Path) -> None:
    copy = tmp_path / "savepoint-x"
    shutil.copytree(snapshot("hashmap/savepoint"), copy)
    for state_file in copy.iterdir():
        if state_file.name != "_metadata":
            state_file.unlink()
    data = run_json("inspect", "--no-skew", str(copy))
    assert data["operators"][1]["keyed_states"] == [] and data["bytes"] == 32909


def squeeze(text: str) -> list[str]:
    """The output's lines with runs of spaces collapsed."""
    return [" ".join(line.split()) for line in text.splitlines()]


def test_inspect_text() -> None:
    path = snapshot("rocksdb-incremental-inline0/chk-4")
    result = run("inspect", str(path))
    assert result.exit_code == 0, result.output
    lines = squeeze(result.output)
    assert lines[:2] == [
        f"Flink checkpoint (native) {path}",
        "checkpoint 4 metadata v6 (2.1 KiB) 4 operators 54.1 KiB: inline 0 B, files 23.2 KiB, shared 31.0 KiB",
    ]
    assert "│ running-count │ KEYED PROCESS │ 1 │ 128 │ 0-127 │ 3 keyed │ 54.1 KiB │ - │ 23.2 KiB │ 31.0 KiB │" in lines
    # an operator without keyed state owns no key groups: none shown
    assert "│ cbc357ccb763df2852fee8c4fc7d55f2 │ Source: Collection Source │ 1 │ 1 │ - │ - │ - │ - │ - │ - │" in lines
    assert f"Operator running-count (id {KEYED_ID}): keyed state" in lines
    assert "│ python-state-count │ list │ value=ListSerializer, namespace=VoidNamespaceSerializer │ - │" in lines
    assert "│ 0 │ 0-127 │ incremental │ 54.1 KiB │ - │ 23.2 KiB │ 31.0 KiB │ - │" in lines


# ------------------------------------------------------------------ checkpoints list


def test_list_checkpoint_root_json() -> None:
    data = run_json("checkpoints", "list", str(GOLDEN / "rocksdb-incremental-inline0" / "checkpoints"))
    (row,) = data["snapshots"]
    assert (row["engine"], row["job_id"], row["checkpoint_id"], row["status"], row["kind"],
            row["format"], row["size"]) == (
        "flink", JOBS["rocksdb-incremental-inline0"], 4, "complete", "checkpoint", "native", 2184 + 1507)
    assert row["age_s"] is not None and row["age_s"] >= 0


@pytest.mark.parametrize("backend", sorted(JOBS))
def test_list_savepoint_folder_and_job_dir(backend: str) -> None:
    (sp,) = run_json("checkpoints", "list", str(GOLDEN / backend / "savepoints"))["snapshots"]
    assert (sp["engine"], sp["checkpoint_id"], sp["status"], sp["kind"], sp["format"]) == (
        "flink", 5, "complete", "savepoint", "canonical")
    assert sp["path"] == str(snapshot(f"{backend}/savepoint"))
    (chk,) = run_json("checkpoints", "list", str(GOLDEN / backend / "checkpoints" / JOBS[backend]))["snapshots"]
    assert (chk["checkpoint_id"], chk["status"], chk["kind"], chk["job_id"]) == (
        4, "complete", "checkpoint", JOBS[backend])


def test_list_incomplete_damaged_and_mixed(tmp_path: Path, statekit_savepoint: Path) -> None:
    job = tmp_path / JOBS["hashmap"]
    shutil.copytree(snapshot("hashmap/chk-4").parent, job)
    (job / "chk-5").mkdir()
    (job / "chk-5" / "partial").write_bytes(b"x" * 10)
    (job / "chk-6").mkdir()
    (job / "chk-6" / "_metadata").write_bytes(bytes.fromhex("4960672d00000006"))
    (job / "chk-7").mkdir()
    rows = run_json("checkpoints", "list", str(job))["snapshots"]
    assert [(r["engine"], r["checkpoint_id"], r["status"]) for r in rows] == [
        ("flink", 4, "complete"), ("flink", 5, "incomplete"), ("flink", 6, "damaged"),
        ("flink", 7, "incomplete")]
    assert rows[1]["size"] == 10 and rows[1]["problem"] == "no _metadata"
    assert "byte offset 8" in rows[2]["problem"]

    mixed = tmp_path / "savepoints"
    mixed.mkdir()
    shutil.copytree(snapshot("hashmap/savepoint"), mixed / "savepoint-flink")
    shutil.copytree(statekit_savepoint, mixed / "savepoint-statekit")
    rows = run_json("checkpoints", "list", str(mixed))["snapshots"]
    assert sorted((Path(r["path"]).name, r["engine"], r["status"], r["format"]) for r in rows) == [
        ("savepoint-flink", "flink", "complete", "canonical"),
        ("savepoint-statekit", "statekit", "complete", "canonical"),
    ]
    text = run("checkpoints", "list", str(mixed))
    assert text.exit_code == 0 and "flink" in text.output and "statekit" in text.output


def test_list_snapshots_two_levels_down() -> None:
    (row,) = run_json("checkpoints", "list", str(GOLDEN / "hashmap"))["snapshots"]
    assert (row["engine"], row["path"], row["checkpoint_id"]) == ("flink", str(snapshot("hashmap/savepoint")), 5)


def test_list_statekit_only_is_unchanged(tmp_path: Path, statekit_savepoint: Path) -> None:
    shutil.copytree(statekit_savepoint, tmp_path / "savepoint-a")
    (row,) = run_json("checkpoints", "list", str(tmp_path))["snapshots"]
    assert row["engine"] == "statekit" and row["status"] == "complete" and row["modified"] is None


# ------------------------------------------------------------------ verify


@pytest.mark.parametrize("name", [n for n in SNAPSHOTS if n.endswith("savepoint")] + ["hashmap/chk-4"])
def test_verify_passes(name: str) -> None:
    data = run_json("verify", str(snapshot(name)))
    assert data["ok"] is True and data["problems"] == [] and data["files"] == 1
    result = run("verify", str(snapshot(name)))
    assert result.exit_code == 0 and result.output.startswith("OK ")


def test_verify_reports_missing_absolute_files_by_name(tmp_path: Path) -> None:
    """Without the job's shared/ beside it (a moved checkpoint reads them from there), the files are missing."""
    original = snapshot("rocksdb-incremental-inline0/chk-4")
    path = tmp_path / original.parent.name / original.name
    shutil.copytree(original, path)
    data = run_json("verify", str(path), code=1)
    assert data["ok"] is False and data["files"] == 8
    shared = f"{INLINE0_OLD_PREFIX}/{JOBS['rocksdb-incremental-inline0']}/shared/".replace("file:", "")
    assert {p["kind"] for p in data["problems"]} == {"missing"}
    assert {p["path"] for p in data["problems"]} == {shared + name for name in INLINE0_SHARED}
    result = run("verify", str(path))
    assert result.exit_code == 1
    text = result.output.replace("\n", "")
    assert "DAMAGED" in text and all(name in text for name in INLINE0_SHARED)
    alone = tmp_path / "b" / "chk-4"
    shutil.copytree(snapshot("rocksdb-incremental/chk-4"), alone)
    (problem,) = run_json("verify", str(alone), code=1)["problems"]
    assert problem["path"].endswith("/shared/13f5b204-570b-4228-8880-eddf4f28fc7a")


def test_verify_detects_resized_and_missing_relative_files(tmp_path: Path) -> None:
    copy = tmp_path / "savepoint-x"
    shutil.copytree(snapshot("hashmap/savepoint"), copy)
    state = copy / "876e98d2-7ba3-4bfd-95bd-4f44843c2c61"
    state.write_bytes(state.read_bytes()[:-10])
    (problem,) = run_json("verify", str(copy), code=1)["problems"]
    assert problem["kind"] == "size-mismatch" and "32899 bytes, metadata records 32909" in problem["message"]
    state.unlink()
    (problem,) = run_json("verify", str(copy), code=1)["problems"]
    assert (problem["kind"], problem["path"]) == ("missing", str(state))


# ------------------------------------------------------------------ dispose


def relocate_cli(job: Path, root: Path, checkpoint: str = "chk-4") -> None:
    result = run("relocate", str(job / checkpoint), "--from", INLINE0_OLD_PREFIX, "--to", f"file:{root}",
                 "-o", str(job / checkpoint / "_metadata"), "--force")
    assert result.exit_code == 0, result.output


def test_dispose_savepoint_dry_run_then_for_real(tmp_path: Path) -> None:
    copy = tmp_path / "savepoint-x"
    shutil.copytree(snapshot("hashmap/savepoint"), copy)
    plan = run_json("dispose", "--dry-run", str(copy))
    assert plan["dry_run"] is True and plan["disposed"] is False
    assert plan["files"] == [str(copy / "_metadata"), str(copy / "876e98d2-7ba3-4bfd-95bd-4f44843c2c61")]
    assert plan["bytes"] == 2130 + 32909 and copy.exists()
    text = run("dispose", "--dry-run", str(copy))
    assert text.exit_code == 0 and text.output.startswith("would delete ")
    done = run_json("dispose", str(copy / "_metadata"))
    assert done["disposed"] is True and not copy.exists()


def test_dispose_keeps_shared_files_another_checkpoint_references(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    shutil.copytree(GOLDEN / "rocksdb-incremental-inline0" / "checkpoints", root)
    job = root / JOBS["rocksdb-incremental-inline0"]
    relocate_cli(job, root)
    shutil.copytree(job / "chk-4", job / "chk-5")  # a retained checkpoint sharing every file
    assert run("verify", str(job / "chk-5")).exit_code == 0

    dry = run_json("dispose", "--dry-run", str(job / "chk-4"))
    assert dry["delete_shared"] == [] and len(dry["keep_shared"]) == len(INLINE0_SHARED)
    assert all(k["referenced_by"] == [str(job / "chk-5")] for k in dry["keep_shared"])
    done = run_json("dispose", str(job / "chk-4"))
    assert done["disposed"] is True and not (job / "chk-4").exists()
    assert {p.name for p in (job / "shared").iterdir()} == INLINE0_SHARED
    assert run("verify", str(job / "chk-5")).exit_code == 0

    last = run_json("dispose", str(job / "chk-5"))
    assert sorted(Path(p).name for p in last["delete_shared"]) == sorted(INLINE0_SHARED)
    assert list((job / "shared").iterdir()) == [] and not (job / "chk-5").exists()


def test_dispose_refuses_job_dir(tmp_path: Path) -> None:
    job = tmp_path / JOBS["hashmap"]
    shutil.copytree(snapshot("hashmap/chk-4").parent, job)
    result = run("dispose", str(job))
    assert result.exit_code == 2 and (job / "chk-4" / "_metadata").exists()


# ------------------------------------------------------------------ bad input


def truncation_offsets(size: int) -> list[int]:
    offsets = set(range(24)) | set(range(24, size, 97)) | {size - 2, size - 1}
    return sorted(o for o in offsets if o < size)


@pytest.mark.parametrize("name", ["hashmap/savepoint", "rocksdb-incremental/chk-4"])
def test_truncated_metadata_is_one_line_exit_2(tmp_path: Path, name: str) -> None:
    data = (snapshot(name) / "_metadata").read_bytes()
    target = tmp_path / "savepoint-cut"
    target.mkdir()
    meta = target / "_metadata"
    for offset in truncation_offsets(len(data)):
        meta.write_bytes(data[:offset])
        for command in ("inspect", "verify"):
            result = run(command, str(target))
            assert result.exit_code == 2, (offset, command, result.output)
            line = error_line(result)
            assert str(meta) in line and "byte offset" in line, (offset, line)
    result = run("dispose", str(target))
    assert result.exit_code == 2 and meta.exists()


def test_random_bytes_are_one_line_exit_2(tmp_path: Path) -> None:
    rng = random.Random(6)
    meta = tmp_path / "_metadata"
    for head in (b"", bytes.fromhex("4960672d")):
        for _ in range(20):
            meta.write_bytes(head + rng.randbytes(rng.randrange(1, 300)))
            if meta.read_bytes()[:7] == b"STKMETA":
                continue
            for command in ("inspect", "verify"):
                result = run(command, str(tmp_path))
                assert result.exit_code == 2, (command, result.output)
                line = error_line(result)
                assert str(meta) in line and "byte offset" in line, line


@pytest.fixture(scope="module")
def statekit_savepoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from statekit.statefmt.metadata import StateDescriptor, StateKind
    from statekit.writers.savepoint_writer import SavepointWriter

    path = tmp_path_factory.mktemp("statekit") / "savepoint-statekit"
    writer = SavepointWriter.new_savepoint(128)
    writer.with_operator("counter", {StateDescriptor("count", StateKind.VALUE): [(1, 1), (2, 2)]}, parallelism=1)
    writer.write(str(path))
    return path


def test_statekit_snapshots_still_go_to_the_statekit_readers(tmp_path: Path, statekit_savepoint: Path) -> None:
    copy = tmp_path / "savepoint-a"
    shutil.copytree(statekit_savepoint, copy)
    inspected = run_json("inspect", str(copy))
    assert inspected["engine"] == "statekit" and [o["uid"] for o in inspected["operators"]] == ["counter"]
    verified = run_json("verify", str(copy / "_metadata"))
    assert verified["ok"] is True and "problems" in verified
    plan = run_json("dispose", "--dry-run", str(copy))
    assert plan["engine"] == "statekit" and plan["dry_run"] is True and copy.exists()
