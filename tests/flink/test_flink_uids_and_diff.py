"""``--uid`` labels operators of metadata v4 (PyFlink 1.20), and ``diff`` of Flink snapshots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.flink import open_flink_snapshot
from statekit.flink.uids import operator_id_for_uid
from statekit.statefmt.errors import BadInputError


def run_json(*args: str, code: int = 0) -> Any:
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == code, result.output
    return json.loads(result.stdout) if code in (0, 1) else result.output


def test_operator_ids_are_flinks_hash_of_the_uid(pyflink_jobs: Any, flink_golden: Any) -> None:
    recorded = open_flink_snapshot(str(flink_golden["hashmap/savepoint"])).metadata.operator("running-count")
    assert operator_id_for_uid("running-count") == recorded.operator_id  # v6 records both
    v6 = open_flink_snapshot(str(pyflink_jobs["pyflink-2.3/rocksdb"].savepoint("canonical"))).metadata
    assert {op.uid: op.operator_id for op in v6.operators if op.uid} == {
        uid: operator_id_for_uid(uid) for uid in ("numbers", "throttle", "profile", "sparse", "drop")}


def test_v4_metadata_has_no_uids_until_named(pyflink_jobs: Any) -> None:
    savepoint = pyflink_jobs["pyflink-1.20/rocksdb"].savepoint("canonical")
    plain = run_json("inspect", "--no-skew", str(savepoint))
    assert plain["metadata_version"] == 4 and all(op["uid"] is None for op in plain["operators"])
    named = run_json("inspect", "--no-skew", str(savepoint), "--uid", "profile", "--uid", "sparse")
    labels = {op["operator_id"]: op["label"] for op in named["operators"]}
    assert labels[operator_id_for_uid("profile")] == "profile" and labels[operator_id_for_uid("sparse")] == "sparse"
    assert sum(1 for op in named["operators"] if op["uid"]) == 2
    output = run_json("inspect", str(savepoint), "--uid", "no-such-uid", code=2)
    assert "--uid 'no-such-uid'" in output and operator_id_for_uid("no-such-uid") in output
    assert len(output.strip().splitlines()) == 1
    assert run_json("verify", str(savepoint), "--uid", "profile")["ok"] is True


def test_uid_on_a_statekit_snapshot_is_bad_input(tmp_path: Path) -> None:
    golden = Path(__file__).resolve().parents[1] / "golden" / "statekit-v1"
    snapshot = next(p.parent for p in golden.rglob("_metadata"))
    output = run_json("inspect", str(snapshot), "--uid", "x", code=2)
    assert "--uid labels the operators of Apache Flink snapshots" in output


def test_diff_of_canonical_native_and_checkpoint_is_equal(pyflink_jobs: Any, tmp_path: Path) -> None:
    job = pyflink_jobs["pyflink-2.3/rocksdb"]
    canonical = str(job.savepoint("canonical"))
    for other in (str(job.savepoint("native")), str(job.relocated_checkpoint(tmp_path))):
        data = run_json("diff", canonical, other, "--operator", "sparse", "--value-type", "total=int")
        assert data["equal"] is True and data["structural"] == []
        compared = {s["state_name"]: s for s in data["states"]}
        assert compared["python-state-total"]["unchanged"] == 40
        assert compared["_timer_state/processing_user-timers"]["unchanged"] == 40


def test_diff_across_max_parallelism_and_versions_counts_changes(pyflink_jobs: Any, flink_golden: Any) -> None:
    a, b = flink_golden["hashmap/savepoint"], flink_golden["rocksdb-incremental/savepoint"]
    data = run_json("diff", str(a), str(b), "--state", "python-state-count", "--keys", "--limit", "2",
                    "--value-type", "int", code=1)
    (state,) = data["states"]
    assert (state["changed"], state["unchanged"], state["only_in_a"], state["only_in_b"]) == (1000, 0, 0, 0)
    assert len(state["examples"]) == 2
    assert all(e["change"] == "changed" and e["value_a"] - e["value_b"] in (1, 2, 3) for e in state["examples"])
    v4 = pyflink_jobs["pyflink-1.20/rocksdb"].savepoint("canonical")
    v6 = pyflink_jobs["pyflink-2.3/rocksdb"].savepoint("canonical")
    data = run_json("diff", str(v4), str(v6), "--uid", "profile", "--operator", "profile",
                    "--state", "python-state-pair", "--value-type", "struct<tag:string,n:int32>")
    assert data["equal"] is True and data["states"][0]["unchanged"] == 1000


def test_diff_refusals_are_one_line(pyflink_jobs: Any, flink_golden: Any) -> None:
    a = str(pyflink_jobs["pyflink-2.3/rocksdb"].savepoint("canonical"))
    golden = Path(__file__).resolve().parents[1] / "golden" / "statekit-v1"
    statekit = str(next(p.parent for p in golden.rglob("_metadata")))
    for args, message in [
        (["diff", a, statekit], "diff compares two of a kind"),
        (["diff", a, a, "-o", "/tmp/never"], "-o and --engine spark apply to statekit snapshots"),
        (["diff", a, a, "--uid", "nope"], "names no operator of either snapshot"),
        (["diff", a, a, "--value-type", "int"], "name the state (STATE=TYPE)"),
        (["diff", a, a, "--value-type", "count=pickle"], "never unpickled"),
    ]:
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2 and message in result.output, (args, result.output)
        assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_bad_uid_in_the_library_is_bad_input(pyflink_jobs: Any) -> None:
    with pytest.raises(BadInputError, match="names no operator"):
        open_flink_snapshot(str(pyflink_jobs["pyflink-1.20/rocksdb"].savepoint("canonical")), uids=("nope",))
    with pytest.raises(BadInputError, match="must not be empty"):
        operator_id_for_uid("")


def test_sides_with_different_key_groups_are_joined_in_a_temporary_file(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    from statekit.flink.decoding import FlinkKeyedEntry
    from statekit.flink.diff import _spilled, _Tally

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    a = [FlinkKeyedEntry(1, "k1", None, None, 1, 0), FlinkKeyedEntry(2, "k2", None, None, b"x", 0),
         FlinkKeyedEntry(3, "k3", None, "u", [1], 0)]
    b = [FlinkKeyedEntry(7, "k2", None, None, b"y", 1), FlinkKeyedEntry(9, "k3", None, "u", [1], 1),
         FlinkKeyedEntry(5, "k4", None, None, None, 1)]
    tally = _Tally()
    _spilled(iter(a), iter(b), tally, limit=10)
    assert (tally.only_a, tally.only_b, tally.changed, tally.same) == (1, 1, 1, 1)
    assert sorted(e.change for e in tally.examples) == ["changed", "only_in_a", "only_in_b"]
    assert list(tmp_path.iterdir()) == []
