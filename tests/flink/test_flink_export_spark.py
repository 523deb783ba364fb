"""``statekit export`` of native Flink snapshots gives the rows of the canonical savepoint.

The three snapshots of tests/golden/pyflink-2.3/rocksdb hold the same job state: a
canonical savepoint, a native savepoint and an incremental checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statekit.cli.main import cli

pytestmark = pytest.mark.spark


def export(path: Path, out: Path, *args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["export", str(path), "-o", str(out), "--master", "local[2]", "--json", *args])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def table_rows(out: Path, report: dict[str, Any]) -> list[str]:
    import pyarrow.dataset as ds

    (state,) = report["states"]
    table = ds.dataset(out / state["path"], format="parquet").to_table()
    return sorted(json.dumps({k: v for k, v in row.items() if k != "subtask"}, sort_keys=True, default=str)
                  for row in table.to_pylist())


def test_native_savepoint_and_checkpoint_export_the_canonical_rows(pyflink_jobs: Any, tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    job = pyflink_jobs["pyflink-2.3/rocksdb"]
    sources = {"canonical": job.savepoint("canonical"), "native": job.savepoint("native"),
               "checkpoint": job.relocated_checkpoint(tmp_path)}
    reports = {kind: export(path, tmp_path / kind, "--operator", "sparse", "--state", "python-state-seen",
                            "--value-type", "list<string>") for kind, path in sources.items()}
    rows = {kind: table_rows(tmp_path / kind, report) for kind, report in reports.items()}
    assert len(rows["canonical"]) == 40 and rows["native"] == rows["canonical"] == rows["checkpoint"]
    import pyarrow.dataset as ds

    seen = ds.dataset(tmp_path / "native" / reports["native"]["states"][0]["path"], format="parquet").to_table()
    assert str(seen.schema.field("value").type) == "list<element: string>"
    assert str(seen.schema.field("key").type) == "struct<f0: int32>"
    assert all(v is not None for v in seen.column("expiry").to_pylist())  # TTL state


def test_v4_operators_export_under_the_uids_named(pyflink_jobs: Any, tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    savepoint = pyflink_jobs["pyflink-1.20/rocksdb"].savepoint("canonical")
    report = export(savepoint, tmp_path / "out", "--uid", "sparse", "--operator", "sparse",
                    "--state", "python-state-total", "--value-type", "int")
    assert [(s["operator_uid"], s["state_name"], s["rows"]) for s in report["states"]] == [
        ("sparse", "python-state-total", 40)]
    assert (tmp_path / "out" / "operator_uid=sparse" / "state_name=python-state-total").is_dir()


def test_java_tuple_savepoint_with_compression_exports_the_truth(tmp_path: Path) -> None:
    """Real Java job, Tuple2 keys, snapshot compression: every state's rows, and the source's offsets table."""
    pytest.importorskip("pyspark")
    import pyarrow.dataset as ds

    golden = Path(__file__).resolve().parents[1] / "golden" / "flink-java-2.3" / "tuple-compressed"
    savepoint = golden / json.loads((golden / "facts.json").read_text())["savepoint"]
    truth = json.loads((golden / "expected.json").read_text())["states"]
    report = export(savepoint, tmp_path / "out")
    exported = {(s["operator_uid"], s["state_name"]): s for s in report["states"]}
    for state in ("stats", "history", "buckets", "choice"):
        table = ds.dataset(tmp_path / "out" / exported[("tuple-state", state)]["path"], format="parquet").to_table()
        rows = [{"key": r["key"], "value": r["value"]} | ({"user_key": r["user_key"]} if state == "buckets" else {})
                for r in table.to_pylist()]
        assert sorted(json.dumps(r, sort_keys=True) for r in rows) == sorted(
            json.dumps(r, sort_keys=True) for r in truth[state]), state
    misc = ds.dataset(tmp_path / "out" / exported[("tuple-state", "misc")]["path"], format="parquet").to_table()
    assert str(misc.schema.field("value").type).startswith("struct<f0: string, f1: timestamp")
    assert misc.num_rows == 40
    offsets = ds.dataset(tmp_path / "out" / exported[("numbers", "offsets")]["path"], format="parquet").to_table()
    (split,) = offsets.to_pylist()
    assert split["connector"] == "number-sequence" and split["last_number"] == (1 << 63) - 1


@pytest.mark.parametrize("variant", ["pojo", "kryo"])
def test_java_pojo_and_kryo_savepoints_export_the_truth(variant: str, tmp_path: Path) -> None:
    """POJO keys, values and subclasses; Kryo value classes and declared classes: every row equals expected.json."""
    pytest.importorskip("pyspark")
    import pyarrow.dataset as ds

    golden = Path(__file__).resolve().parents[1] / "golden" / "flink-java-2.3" / variant
    savepoint = golden / json.loads((golden / "facts.json").read_text())["savepoint"]
    truth = json.loads((golden / "expected.json").read_text())
    declared = [f"--value-type={state}={kind}" for state, kind in truth["value_types"].items()]
    report = export(savepoint, tmp_path / "out", *declared)
    exported = {s["state_name"]: s for s in report["states"] if s["operator_uid"] == truth["operator"]}
    for state, rows in truth["states"].items():
        table = ds.dataset(tmp_path / "out" / exported[state]["path"], format="parquet").to_table()
        got = [{"key": r["key"], "value": r["value"]} | ({"user_key": r["user_key"]} if "user_key" in rows[0] else {})
               for r in table.to_pylist()]
        assert sorted(json.dumps(r, sort_keys=True) for r in got) == sorted(
            json.dumps(r, sort_keys=True) for r in rows), state
