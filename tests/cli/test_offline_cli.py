"""The offline commands through the CLI, in text and JSON mode: checkpoints list, inspect,
verify, dispose."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import types
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import statekit.readers.listing as listing
from statekit.cli.main import cli
from statekit.statefmt.metadata import SnapshotKind, StateDescriptor, StateKind, serialize_metadata
from statekit.writers.savepoint_writer import SavepointWriter

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "statekit-v1" / "statekit-0.1-v1-all-kinds"
JOB = "ab" * 16
NOW_S = 1_700_003_600.0  # one hour after the checkpoints were taken
VALUE = StateDescriptor("count", StateKind.VALUE, value_type="int")
UNION = StateDescriptor("offsets", StateKind.UNION)


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setenv("STATEKIT_OUTPUT", "rich")  # bordered tables off a terminal too: the tests read cells by │


def run(*args: str) -> Result:
    result = CliRunner().invoke(cli, list(args))
    assert "Traceback" not in result.output
    return result


def rows(text: str) -> list[list[str]]:
    """The body rows of every rich table in ``text``, as stripped cells."""
    return [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines() if line.startswith("│")]


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def write_checkpoint(path: Path, checkpoint_id: int) -> None:
    md = (SavepointWriter.new_savepoint(max_parallelism=8, job_id=JOB)
          .with_operator("counter", {VALUE: [(i, i) for i in range(checkpoint_id * 5)]}, parallelism=2)
          .with_operator("source", {UNION: [1, 2]})
          .write(str(path), created_at_ms=1_700_000_000_000 + checkpoint_id * 1000))
    md = dataclasses.replace(md, kind=SnapshotKind.CHECKPOINT, checkpoint_id=checkpoint_id)
    (path / "_metadata").write_bytes(serialize_metadata(md))


@pytest.fixture(scope="module")
def checkpoint_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """<root>/<job>/chk-1,2 complete, chk-3 incomplete, chk-4 damaged, shared/; <root>/savepoints/savepoint-*."""
    root = tmp_path_factory.mktemp("checkpoints")
    job = root / JOB
    write_checkpoint(job / "chk-1", 1)
    write_checkpoint(job / "chk-2", 2)
    (job / "chk-3" / "counter" / "count").mkdir(parents=True)
    (job / "chk-3" / "counter" / "count" / "00000-of-00002.sks").write_bytes(b"x" * 10)
    os.utime(job / "chk-3", (NOW_S - 30, NOW_S - 30))
    (job / "chk-4").mkdir()
    (job / "chk-4" / "_metadata").write_bytes(b"not metadata")
    (job / "shared").mkdir()
    (SavepointWriter.new_savepoint(max_parallelism=8, job_id=JOB)
     .with_operator("counter", {VALUE: [(i, i) for i in range(7)]}, parallelism=2)
     .write(str(root / "savepoints" / "savepoint-ababab-000000000001"), created_at_ms=1_700_000_100_000))
    return root


@pytest.fixture
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listing, "time", types.SimpleNamespace(time=lambda: NOW_S))


# ---------------------------------------------------------------- checkpoints list


def expected_listing(root: Path) -> list[dict[str, Any]]:
    job = root / JOB
    savepoint = root / "savepoints" / "savepoint-ababab-000000000001"

    def complete(path: Path, checkpoint_id: int, kind: str, created: int) -> dict[str, Any]:
        return {"path": str(path), "job_id": JOB, "checkpoint_id": checkpoint_id, "status": "complete", "kind": kind,
                "format": "canonical", "size": dir_size(path), "created_at_ms": created,
                "age_s": NOW_S - created / 1000, "problem": "", "engine": "statekit", "modified": None}

    damaged_problem = (f"{job / 'chk-4' / '_metadata'}: truncated metadata (12 bytes)")
    return [
        complete(job / "chk-1", 1, "checkpoint", 1_700_000_001_000),
        complete(job / "chk-2", 2, "checkpoint", 1_700_000_002_000),
        {"path": str(job / "chk-3"), "job_id": JOB, "checkpoint_id": 3, "status": "incomplete", "kind": "checkpoint",
         "format": "", "size": 10, "created_at_ms": None, "age_s": 30.0, "problem": "no _metadata",
         "engine": "statekit", "modified": None},
        {"path": str(job / "chk-4"), "job_id": JOB, "checkpoint_id": 4, "status": "damaged", "kind": "checkpoint",
         "format": "", "size": 12, "created_at_ms": None, "age_s": None, "problem": damaged_problem,
         "engine": "statekit", "modified": None},
        complete(savepoint, 0, "savepoint", 1_700_000_100_000),
    ]


def test_checkpoints_list_json(checkpoint_root: Path, fixed_clock: None) -> None:
    result = run("--json", "checkpoints", "list", str(checkpoint_root))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"schema_version": 1, "path": str(checkpoint_root),
                                         "snapshots": expected_listing(checkpoint_root)}
    # --json is accepted after the command too
    after = run("checkpoints", "list", str(checkpoint_root), "--json")
    assert json.loads(after.stdout) == json.loads(result.stdout)


def test_checkpoints_list_text(checkpoint_root: Path, fixed_clock: None) -> None:
    result = run("checkpoints", "list", str(checkpoint_root))
    assert result.exit_code == 0, result.output
    job = checkpoint_root / JOB
    sizes = {name: dir_size(job / name) for name in ("chk-1", "chk-2")}
    assert sizes == {"chk-1": 3926, "chk-2": 4630}  # the writer is deterministic
    assert result.stdout.splitlines()[0].strip() == f"Snapshots in {checkpoint_root}"
    assert rows(result.stdout) == [
        ["abababababab", "1", "checkpoint", "complete", "canonical", "3.8 KiB", "60 min", str(job / "chk-1")],
        ["abababababab", "2", "checkpoint", "complete", "canonical", "4.5 KiB", "60 min", str(job / "chk-2")],
        ["abababababab", "3", "checkpoint", "incomplete (no _metadata)", "-", "10 B", "30 s", str(job / "chk-3")],
        ["abababababab", "4", "checkpoint", "damaged", "-", "12 B", "-", str(job / "chk-4")],
        ["abababababab", "0", "savepoint", "complete", "canonical", "3.6 KiB", "58 min",
         str(checkpoint_root / "savepoints" / "savepoint-ababab-000000000001")],
    ]


def test_checkpoints_list_of_a_job_dir_and_a_savepoint_dir(checkpoint_root: Path, fixed_clock: None) -> None:
    job = json.loads(run("--json", "checkpoints", "list", str(checkpoint_root / JOB)).stdout)
    assert [s["checkpoint_id"] for s in job["snapshots"]] == [1, 2, 3, 4]
    savepoints = json.loads(run("--json", "checkpoints", "list", str(checkpoint_root / "savepoints")).stdout)
    assert [(s["kind"], s["status"]) for s in savepoints["snapshots"]] == [("savepoint", "complete")]
    single = json.loads(run("--json", "checkpoints", "list", str(checkpoint_root / JOB / "chk-2")).stdout)
    assert [s["path"] for s in single["snapshots"]] == [str(checkpoint_root / JOB / "chk-2")]


# ---------------------------------------------------------------- inspect


def state_json(name: str, kind: str, serializer: str, value_type: str | None, user_key: str | None, ttl: int | None,
               per_subtask: list[tuple[int, int]], skew: dict[str, Any] | None) -> dict[str, Any]:
    return {"name": name, "kind": kind, "value_serializer": serializer, "value_type": value_type,
            "user_key_serializer": user_key, "ttl_ms": ttl, "bytes": sum(b for b, _ in per_subtask),
            "entries": sum(e for _, e in per_subtask),
            "per_subtask": [{"subtask": i, "bytes": b, "entries": e} for i, (b, e) in enumerate(per_subtask)],
            "skew": skew, "namespace_type": None}


def skew(groups: int, max_bytes: int, mean: float, histogram: list[int]) -> dict[str, Any]:
    return {"key_groups_with_state": groups, "max_bytes": max_bytes, "mean_bytes": mean, "max_key_group": 0,
            "ratio": max_bytes / mean, "histogram": histogram, "min_bytes": 0}


GOLDEN_INSPECTION: dict[str, Any] = {
    "job_id": "5eed0000000000000000000000000001", "job_name": "golden-all-kinds", "checkpoint_id": 0,
    "kind": "savepoint", "format": "canonical", "created_at_ms": 1_700_000_000_000, "bytes": 6488, "entries": 20,
    "operators": [
        {"uid": "counter", "name": "Counter", "parallelism": 2, "max_parallelism": 4, "key_serializer": "msgpack",
         "key_group_ranges": [[0, 1], [2, 3]], "bytes": 4704, "entries": 12, "windows": None, "in_flight": None,
         "operator_states": [], "keyed_states": [
             state_json("count", "value", "msgpack", "int", None, None, [(668, 2), (604, 1)],
                        skew(2, 592, 280.0, [2, 0, 0, 0, 0, 0, 0, 0, 1, 1])),
             state_json("events", "list", "msgpack", "string", None, None, [(676, 2), (44, 0)],
                        skew(1, 600, 150.0, [3, 0, 0, 0, 0, 0, 0, 0, 0, 1])),
             state_json("attrs", "map", "msgpack", "int", "utf8", None, [(684, 2), (604, 1)],
                        skew(2, 608, 284.0, [2, 0, 0, 0, 0, 0, 0, 0, 1, 1])),
             state_json("window-sum", "reducing", "msgpack", "float", None, 60000, [(716, 3), (44, 0)],
                        skew(1, 640, 160.0, [3, 0, 0, 0, 0, 0, 0, 0, 0, 1])),
             state_json("average", "aggregating", "json", "struct<sum:int,count:int>", None, None, [(620, 1), (44, 0)],
                        skew(1, 544, 136.0, [3, 0, 0, 0, 0, 0, 0, 0, 0, 1])),
         ]},
        {"uid": "source", "name": "Source", "parallelism": 2, "max_parallelism": 4, "key_serializer": None,
         "key_group_ranges": [[0, 1], [2, 3]], "bytes": 1784, "entries": 8, "windows": None, "in_flight": None,
         "keyed_states": [], "operator_states": [
             state_json("offsets", "operator-list", "int64", "int", None, None, [(356, 2), (332, 1)], None),
             state_json("watermarks", "union", "msgpack", "timestamp", None, None, [(340, 1), (44, 0)], None),
             state_json("rules", "broadcast", "msgpack", "json", "utf8", None, [(356, 2), (356, 2)], None),
         ]},
    ],
}


def test_inspect_json() -> None:
    result = run("--json", "inspect", str(GOLDEN))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"schema_version": 1, "path": str(GOLDEN), **GOLDEN_INSPECTION,
                                         "engine": "statekit"}


def test_inspect_json_without_skew() -> None:
    data = json.loads(run("--json", "inspect", "--no-skew", str(GOLDEN)).stdout)
    assert [s["skew"] for op in data["operators"] for s in op["keyed_states"] + op["operator_states"]] == [None] * 8
    assert data["bytes"] == 6488


def test_inspect_text() -> None:
    result = run("inspect", str(GOLDEN))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"savepoint {GOLDEN}"
    assert lines[1] == ("job 5eed0000000000000000000000000001 golden-all-kinds  checkpoint 0  format canonical  "
                        "created 2023-11-14 22:13:20 UTC  6.3 KiB, 20 entries")
    assert rows(result.stdout) == [
        ["counter", "Counter", "2", "4", "msgpack", "5", "4.6 KiB", "12"],
        ["source", "Source", "2", "4", "-", "3", "1.7 KiB", "8"],
        ["count", "value", "msgpack", "int", "-", "1.2 KiB", "3", "2.11 (kg 0)", "█       ▄▄ 0 B..592 B"],
        ["events", "list", "msgpack", "string", "-", "720 B", "2", "4.00 (kg 0)", "█        ▃ 0 B..600 B"],
        ["attrs", "map", "msgpack", "int", "-", "1.3 KiB", "3", "2.14 (kg 0)", "█       ▄▄ 0 B..608 B"],
        ["window-sum", "reducing", "msgpack", "float", "60000 ms", "760 B", "3", "4.00 (kg 0)", "█        ▃ 0 B..640 B"],
        ["average", "aggregating", "json", "struct<sum:int,count:int>", "-", "664 B", "1", "4.00 (kg 0)", "█        ▃ 0 B..544 B"],
        ["0", "0-1", "668 B / 2", "676 B / 2", "684 B / 2", "716 B / 3", "620 B / 1"],
        ["1", "2-3", "604 B / 1", "44 B / 0", "604 B / 1", "44 B / 0", "44 B / 0"],
        ["offsets", "operator-list", "int64", "int", "-", "688 B", "3", "-", "-"],
        ["watermarks", "union", "msgpack", "timestamp", "-", "384 B", "1", "-", "-"],
        ["rules", "broadcast", "msgpack", "json", "-", "712 B", "4", "-", "-"],
        ["0", "-", "356 B / 2", "340 B / 1", "356 B / 2"],  # operator state: no key groups
        ["1", "-", "332 B / 1", "44 B / 0", "356 B / 2"],
    ]


def test_inspect_a_job_dir_reads_its_latest_complete_checkpoint(checkpoint_root: Path, tmp_path: Path) -> None:
    # the newest chk-N with a _metadata is chk-4, whose _metadata is damaged: named, not skipped
    result = run("--json", "inspect", str(checkpoint_root / JOB))
    assert result.exit_code == 2 and result.stdout == ""
    error = json.loads(result.stderr)["error"]  # --json: the error is JSON too
    assert error["message"].startswith(f"{checkpoint_root / JOB / 'chk-4' / '_metadata'}: ")
    assert error["path"] == str(checkpoint_root / JOB / "chk-4" / "_metadata") and error["exit_code"] == 2
    job = tmp_path / "job"
    shutil.copytree(checkpoint_root / JOB, job)
    shutil.rmtree(job / "chk-4")
    data = json.loads(run("--json", "inspect", str(job)).stdout)
    assert data["path"] == str(job / "chk-2") and data["checkpoint_id"] == 2  # chk-3 is incomplete


# ---------------------------------------------------------------- verify


@pytest.fixture
def damaged(tmp_path: Path) -> Path:
    copy = tmp_path / "sp"
    shutil.copytree(GOLDEN, copy)
    target = copy / "counter" / "count" / "00001-of-00002.sks"
    data = bytearray(target.read_bytes())
    data[40] ^= 0x01
    target.write_bytes(bytes(data))
    return copy


def test_verify_ok_text_and_json() -> None:
    text = run("verify", str(GOLDEN))
    assert text.exit_code == 0
    assert text.stdout == f"OK {GOLDEN}: 16 files, 6.3 KiB, every checksum matches\n"
    result = run("--json", "verify", str(GOLDEN))
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {"schema_version": 1, "path": str(GOLDEN), "ok": True, "files": 16,
                                         "blocks": 12, "bytes": 6488, "problems": [], "engine": "statekit"}


def test_verify_damage_text(damaged: Path) -> None:
    result = run("verify", str(damaged))
    assert result.exit_code == 1
    file = damaged / "counter" / "count" / "00001-of-00002.sks"
    assert result.stdout.splitlines() == [
        f"DAMAGED {damaged}: 2 problem(s) in 16 files",
        f"  {file}: file checksum crc32:6782e2b9 differs from the recorded crc32:c56ddfd2",
        f"  {file} key group 3: block checksum mismatch",
    ]
    assert result.stderr == ""


def test_verify_damage_json(damaged: Path) -> None:
    result = run("--json", "verify", str(damaged))
    assert result.exit_code == 1
    file = str(damaged / "counter" / "count" / "00001-of-00002.sks")
    assert json.loads(result.stdout) == {
        "schema_version": 1, "engine": "statekit", "path": str(damaged), "ok": False, "files": 16, "blocks": 12,
        "bytes": 6488,
        "problems": [
            {"path": file, "key_group": None,
             "message": "file checksum crc32:6782e2b9 differs from the recorded crc32:c56ddfd2"},
            {"path": file, "key_group": 3, "message": "block checksum mismatch"},
        ],
    }


def test_verify_truncated_file(damaged: Path) -> None:
    target = damaged / "source" / "rules" / "00000-of-00002.sks"
    target.write_bytes(target.read_bytes()[:100])
    result = run("--json", "verify", str(damaged))
    assert result.exit_code == 1
    problems = [d for d in json.loads(result.stdout)["problems"] if d["path"] == str(target)]
    assert problems[0]["message"] == "size 100 differs from the recorded 356"


def test_verify_missing_file(damaged: Path) -> None:
    (damaged / "source" / "rules" / "00000-of-00002.sks").unlink()
    text = run("verify", str(damaged))
    assert text.exit_code == 1
    assert f"  {damaged / 'source' / 'rules' / '00000-of-00002.sks'}: missing: named in _metadata but not present" in (
        text.stdout.splitlines())


# ---------------------------------------------------------------- dispose


def test_dispose_dry_run_text_and_json(tmp_path: Path) -> None:
    copy = tmp_path / "savepoint-x"
    shutil.copytree(GOLDEN, copy)
    files = sorted(str(p) for p in copy.rglob("*") if p.is_file())
    text = run("dispose", "--dry-run", str(copy))
    assert text.exit_code == 0
    assert text.stdout.splitlines() == [f"would delete {copy} (17 files, 10.2 KiB)", *(f"  {f}" for f in files)]
    result = run("--json", "dispose", "--dry-run", str(copy))
    assert json.loads(result.stdout) == {"schema_version": 1, "path": str(copy), "files": files,
                                         "bytes": dir_size(copy), "complete": True, "dry_run": True, "disposed": False,
                                         "shared_files": [], "kept_shared": 0, "notes": [], "engine": "statekit"}
    assert sorted(str(p) for p in copy.rglob("*") if p.is_file()) == files


def test_dispose_deletes(tmp_path: Path) -> None:
    copy = tmp_path / "savepoint-x"
    shutil.copytree(GOLDEN, copy)
    size = dir_size(copy)
    result = run("dispose", str(copy))
    assert result.exit_code == 0
    assert result.stdout == f"deleted {copy} (17 files, 10.2 KiB)\n" and size == 10_423
    assert not copy.exists()
    copy2 = tmp_path / "savepoint-y"
    shutil.copytree(GOLDEN, copy2)
    data = json.loads(run("--json", "dispose", str(copy2)).stdout)
    assert data["disposed"] is True and data["dry_run"] is False and not copy2.exists()


def test_dispose_refuses_foreign_files(tmp_path: Path) -> None:
    copy = tmp_path / "savepoint-x"
    shutil.copytree(GOLDEN, copy)
    (copy / "notes.txt").write_text("mine")
    result = run("dispose", str(copy))
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (f"statekit: error: {copy}: refusing to dispose: 1 file(s) not named by its _metadata, "
                             "e.g. 'notes.txt'; remove them first if they are yours\n")
    assert (copy / "_metadata").exists()


def test_dispose_refuses_a_non_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "a.jpg").write_bytes(b"x")
    result = run("dispose", str(tmp_path / "photos"))
    assert result.exit_code == 2
    assert result.stderr == (f"statekit: error: {tmp_path / 'photos'}: not a checkpoint or savepoint directory "
                             "(no _metadata)\n")
    assert (tmp_path / "photos" / "a.jpg").exists()


def test_dispose_an_incomplete_checkpoint(checkpoint_root: Path, tmp_path: Path) -> None:
    job = tmp_path / "job"
    shutil.copytree(checkpoint_root / JOB, job)
    dry = json.loads(run("--json", "dispose", "--dry-run", str(job / "chk-3")).stdout)
    assert dry == {"schema_version": 1, "path": str(job / "chk-3"),
                   "files": [str(job / "chk-3" / "counter" / "count" / "00000-of-00002.sks")],
                   "bytes": 10, "complete": False, "dry_run": True, "disposed": False,
                   "shared_files": [], "kept_shared": 0, "notes": [], "engine": "statekit"}
    result = run("dispose", str(job / "chk-3"))
    assert result.exit_code == 0 and result.stdout == f"deleted {job / 'chk-3'} (1 files, 10 B)\n"
    assert sorted(p.name for p in job.iterdir()) == ["chk-1", "chk-2", "chk-4", "shared"]
