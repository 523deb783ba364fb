"""``verify`` on real Flink snapshots: healthy ones pass, each injected damage is named.

Every problem line must name the operator, the subtask and the file it is about.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.flink import open_flink_snapshot, verify_flink_snapshot
from statekit.flink.model import KeyedHandleKind
from statekit.flink.verify import key_group_offset_problem

UIDS = ("numbers", "throttle", "profile", "sparse")


def copy(path: Path, tmp_path: Path) -> Path:
    target = tmp_path / path.name
    shutil.copytree(path, target)
    for file in target.rglob("*"):
        file.chmod(file.stat().st_mode | 0o200)
    return target


def verify_json(path: Path, *args: str, code: int) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["verify", str(path), "--json", *args])
    assert result.exit_code == code, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_offset_rule_is_what_flink_writes() -> None:
    assert key_group_offset_problem((0, 0, 0), 100) is None  # nothing written: every key group empty
    assert key_group_offset_problem((10, 0, 40, 0, 0, 60), 100) is None  # empty key groups keep offset 0
    assert key_group_offset_problem((10, 20, 30), 100) is None  # heap snapshots: every key group written
    assert "not past the previous" in str(key_group_offset_problem((10, 0, 5), 100))
    assert "not past the previous" in str(key_group_offset_problem((10, 10), 100))
    assert "outside the 100-byte stream" in str(key_group_offset_problem((10, 99), 100))
    assert "outside the 100-byte stream" in str(key_group_offset_problem((-4,), 100))


def test_every_healthy_real_snapshot_verifies(pyflink_jobs: Any, tmp_path: Path) -> None:
    checked = 0
    for job in pyflink_jobs.values():
        kinds = list(job.facts["savepoints"])
        for path in [job.savepoint(kind) for kind in kinds] + [job.relocated_checkpoint(tmp_path)]:
            assert verify_flink_snapshot(str(path)) == [], path
            checked += 1
    assert checked == 7


def test_empty_key_groups_of_a_canonical_savepoint_are_not_damage(pyflink_jobs: Any) -> None:
    """Regression: zero offsets of empty key groups were reported as 'offsets not ascending'."""
    savepoint = pyflink_jobs["pyflink-2.3/rocksdb"].savepoint("canonical")
    op = open_flink_snapshot(str(savepoint), uids=UIDS).metadata.operator("sparse")
    handles = [s.managed_keyed_state for s in op.subtasks if s.managed_keyed_state]
    assert all(h.kind is KeyedHandleKind.SAVEPOINT_KEY_GROUPS for h in handles)
    assert sum(h.key_group_offsets.count(0) for h in handles) > 200  # 40 keys over 256 key groups
    assert verify_json(savepoint, code=0)["problems"] == []


def _offsets_at(snapshot_path: Path, uid: str, subtask: int) -> tuple[int, tuple[int, ...]]:
    handle = open_flink_snapshot(str(snapshot_path), uids=UIDS).metadata.operator(uid).subtasks[subtask]
    keyed = handle.managed_keyed_state
    assert keyed is not None
    return keyed.offset + 1 + 4 + 4, keyed.key_group_offsets  # type byte, range start, count


def _assert_named(problem: dict[str, Any], kind: str, operator: str, subtask: int, file: str) -> None:
    assert problem["kind"] == kind and problem["operator"] == operator and problem["subtask"] == subtask
    assert f"operator {operator} subtask {subtask}" in problem["message"] and file in problem["message"]
    assert file in problem["path"]


def test_each_injected_damage_exits_1_naming_operator_subtask_and_file(pyflink_jobs: Any, tmp_path: Path) -> None:
    job = pyflink_jobs["pyflink-2.3/rocksdb"]
    canonical = copy(job.savepoint("canonical"), tmp_path / "a")
    snapshot = open_flink_snapshot(str(canonical), uids=UIDS)
    files = {(op.label, sub.index): sub.managed_keyed_state.delegate.path
             for op in snapshot.metadata.operators for sub in op.subtasks
             if sub.managed_keyed_state is not None and sub.managed_keyed_state.delegate is not None}
    # 1. a truncated state file
    name = files[("profile", 1)]
    (canonical / name).write_bytes((canonical / name).read_bytes()[:-3])
    (problem,) = verify_json(canonical, "--uid", "profile", "--uid", "sparse", code=1)["problems"]
    _assert_named(problem, "size-mismatch", "profile", 1, name)
    # 2. a missing state file (a native savepoint's SST)
    native = copy(job.savepoint("native"), tmp_path / "b")
    op = open_flink_snapshot(str(native), uids=UIDS).metadata.operator("profile")
    handle = op.subtasks[1].managed_keyed_state
    assert handle is not None
    sst = next(n.handle.path for n in handle.shared + handle.private if n.handle and n.handle.path)
    (native / sst).unlink()
    (problem,) = verify_json(native, "--uid", "profile", code=1)["problems"]
    _assert_named(problem, "missing", "profile", 1, sst)
    # 3. key-group offsets out of order in _metadata
    fresh = copy(job.savepoint("canonical"), tmp_path / "c")
    at, offsets = _offsets_at(fresh, "sparse", 0)
    first, second = [i for i, o in enumerate(offsets) if o][:2]
    meta = bytearray((fresh / "_metadata").read_bytes())
    struct.pack_into(">q", meta, at + 8 * first, offsets[second])
    struct.pack_into(">q", meta, at + 8 * second, offsets[first])
    (fresh / "_metadata").write_bytes(bytes(meta))
    (problem,) = verify_json(fresh, "--uid", "sparse", code=1)["problems"]
    _assert_named(problem, "bad-offsets", "sparse", 0, files[("sparse", 0)])
    assert f"offset {offsets[first]} of key group {second} is not past" in problem["message"]
    # 4. an offset past the end of its stream
    struct.pack_into(">q", meta, at + 8 * first, 10**9)
    (fresh / "_metadata").write_bytes(bytes(meta))
    (problem,) = verify_json(fresh, "--uid", "sparse", code=1)["problems"]
    _assert_named(problem, "bad-offsets", "sparse", 0, files[("sparse", 0)])
    assert "outside the" in problem["message"]
    # the text output names them too, one line per problem
    result = CliRunner().invoke(cli, ["verify", str(fresh), "--uid", "sparse"])
    assert result.exit_code == 1 and "operator sparse subtask 0" in result.output.replace("\n", "")


def test_a_moved_checkpoint_says_so_and_relocate_auto_fixes_it(pyflink_jobs: Any, tmp_path: Path) -> None:
    job = pyflink_jobs["pyflink-2.3/rocksdb"]
    root = copy(job.root, tmp_path)
    checkpoint = root / job.facts["checkpoint"]
    report = verify_json(checkpoint, code=1)
    problems = report["problems"]
    assert len(problems) > 1 and {p["kind"] for p in problems} == {"missing"}
    for p in problems:  # each names its file here; the hint is said once, for all of them
        assert p["message"].endswith(f"; {p['moved_to']} is that file here")
        assert "statekit relocate" not in p["message"]
        assert p["moved_to"] and Path(p["moved_to"]).is_file() and p["operator"] in ("profile", "sparse")
    assert report["hint"].startswith("the checkpoint was moved from file:" + job.facts["work_dir"])
    assert report["hint"].endswith(f"rewrite its paths with `statekit relocate {checkpoint} --auto --force`")
    text = CliRunner().invoke(cli, ["verify", str(checkpoint)], env={"COLUMNS": "300"})
    assert text.exit_code == 1 and text.output.count("statekit relocate") == 1, text.output
    result = CliRunner().invoke(cli, ["relocate", str(checkpoint), "--auto", "--json"])
    assert result.exit_code == 2 and "already exists; pass --force" in result.output
    result = CliRunner().invoke(cli, ["relocate", str(checkpoint), "--auto", "--force", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["paths_changed"] == report["paths"] > 0
    assert report["old_prefix"] == f"file:{job.facts['work_dir']}/checkpoints/{job.facts['job_id']}"
    assert verify_json(checkpoint, code=0)["ok"] is True
    result = CliRunner().invoke(cli, ["relocate", str(checkpoint), "--auto", "--force"])
    assert result.exit_code == 2 and "nothing to relocate" in result.output


def test_relocate_auto_refuses_what_it_cannot_map(pyflink_jobs: Any, tmp_path: Path) -> None:
    job = pyflink_jobs["pyflink-2.3/rocksdb"]
    result = CliRunner().invoke(cli, ["relocate", str(job.savepoint("native")), "--auto", "-o", str(tmp_path / "x")])
    assert result.exit_code == 2 and "needs a checkpoint directory chk-N" in result.output
    root = copy(job.root, tmp_path)
    shared = root / "checkpoints" / job.facts["job_id"] / "shared"
    victim = sorted(shared.iterdir())[0]
    victim.unlink()
    result = CliRunner().invoke(cli, ["relocate", str(root / job.facts["checkpoint"]), "--auto", "--force"])
    assert result.exit_code == 2 and victim.name in result.output and "--from" in result.output
    problems = verify_json(root / job.facts["checkpoint"], code=1)["problems"]
    assert all("moved" not in p["message"] for p in problems)  # not every file is here: no claim of a move
    result = CliRunner().invoke(cli, ["relocate", str(root / job.facts["checkpoint"]), "--auto", "--from", "x"])
    assert result.exit_code == 2 and "either --auto or both" in result.output
