"""``statekit export`` on an Apache Flink canonical savepoint (the golden Flink 2.3 ones)."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.spark.flink_export import epoch_ms_schema, rows_to_batch

pytestmark = pytest.mark.spark

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "flink-2.3"
SAVEPOINT = GOLDEN / "hashmap" / "savepoints" / "savepoint-962f67-bfc4c25148ed"
CHECKPOINT = GOLDEN / "hashmap" / "checkpoints" / "962f676fad747434cac50f82ef230c8d" / "chk-4"


def test_export_writes_typed_decoded_rows_and_names_what_it_skipped(spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["export", str(SAVEPOINT), "-o", str(out), "--master", "local[2]", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [(s["operator_uid"], s["state_name"], s["kind"], s["rows"]) for s in report["states"]] == [
        ("running-count", "python-state-count", "list", 1000),
        ("running-count", "_timer_state/processing_user-timers", "timers", 0),
        ("running-count", "_timer_state/event_user-timers", "timers", 0)]
    assert report["skipped"] == []
    table = ds.dataset(out / "operator_uid=running-count" / "state_name=python-state-count",
                       format="parquet").to_table()
    assert str(table.schema.field("key").type) == "struct<f0: string>"
    assert str(table.schema.field("value").type) == "list<element: binary>"
    counts = {row["key"]["f0"]: int.from_bytes(row["value"][0], "big") for row in table.to_pylist()}
    assert counts == {f"key-{i}": 9 if i < 303 else 8 for i in range(1000)}
    assert {row["key_group"] for row in table.to_pylist()} <= set(range(128))
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]


def test_a_declared_timestamp_value_exports_as_a_utc_timestamp(spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["export", str(SAVEPOINT), "-o", str(out), "--master", "local[2]", "--state",
                                      "python-state-count", "--value-type", "timestamp"])
    assert result.exit_code == 0, result.output
    table = ds.dataset(out, format="parquet").to_table()
    assert str(table.schema.field("value").type) == "timestamp[us, tz=UTC]"
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    stamps = {row["key"]["f0"]: (row["value"] - epoch) // dt.timedelta(milliseconds=1) for row in table.to_pylist()}
    assert stamps == {f"key-{i}": 9 if i < 303 else 8 for i in range(1000)}  # the counts, read as epoch ms


def test_a_value_that_does_not_fit_its_declared_type_is_one_line_naming_the_key_group(spark: Any,
                                                                                      tmp_path: Path) -> None:
    pyflink = GOLDEN.parent / "pyflink-2.3" / "hashmap" / "savepoints" / "savepoint-48634f-b2be849ccf0d"
    out = tmp_path / "out"
    # doubles read as epoch milliseconds: far outside Spark's timestamp range
    result = CliRunner().invoke(cli, ["export", str(pyflink), "-o", str(out), "--master", "local[2]", "--operator",
                                      "profile", "--state", "python-state-ratio", "--value-type", "timestamp"])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and str(pyflink) in result.output
    assert "state 'python-state-ratio' of operator 'profile', key group " in result.output
    assert "out of bounds timestamp" in result.output and "is the declared type right?" in result.output
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if p.startswith(".")]


def test_rows_become_batches_with_epoch_ms_timestamps_at_any_depth() -> None:
    import pyarrow as pa

    target = pa.schema([
        pa.field("t", pa.timestamp("us", tz="UTC")),
        pa.field("s", pa.struct([pa.field("at", pa.timestamp("us", tz="UTC")), pa.field("n", pa.int64())])),
        pa.field("l", pa.list_(pa.timestamp("us", tz="UTC"))),
        pa.field("m", pa.map_(pa.string(), pa.timestamp("us", tz="UTC"))),
        pa.field("b", pa.binary())])
    given = epoch_ms_schema(target)
    assert str(given.field("s").type) == "struct<at: timestamp[ms, tz=UTC], n: int64>"
    assert str(given.field("m").type) == "map<string, timestamp[ms, tz=UTC]>"
    batch = rows_to_batch([(1_700_000_000_123, {"at": 5, "n": 1}, [1, None], {"k": 2}, b"x"),
                           (None, None, None, None, None)], given, target)
    assert batch.schema == target
    row = batch.to_pylist()[0]
    assert row["t"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.timezone.utc)
    assert row["s"]["at"] == dt.datetime(1970, 1, 1, 0, 0, 0, 5000, tzinfo=dt.timezone.utc)
    assert row["l"][0].microsecond == 1000 and row["l"][1] is None and row["m"][0][1].microsecond == 2000
    assert batch.to_pylist()[1] == {"t": None, "s": None, "l": None, "m": None, "b": None}


def test_bad_requests_exit_2_with_one_line_and_leave_no_output(spark: Any, tmp_path: Path) -> None:
    runner = CliRunner()
    cases = [
        (["export", str(SAVEPOINT), "--state", "python-state-count", "--value-type", "map<string,int>"],
         "not a map state"),
        (["export", str(SAVEPOINT), "--state", "nope"], "no keyed state named 'nope'"),
        (["export", str(SAVEPOINT), "--operator", "nope"], "nope"),
    ]
    for args, message in cases:
        out = tmp_path / "out"
        result = runner.invoke(cli, [*args, "-o", str(out), "--master", "local[2]"])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output and "Traceback" not in result.output
        assert len(result.output.strip().splitlines()) == 1
        assert not out.exists()


def test_a_damaged_state_file_fails_the_export_atomically(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "sp"
    shutil.copytree(SAVEPOINT, target)
    (state_file,) = [p for p in target.iterdir() if p.name != "_metadata"]
    data = state_file.read_bytes()
    state_file.write_bytes(data[: len(data) * 3 // 4])
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["export", str(target), "-o", str(out), "--master", "local[2]"])
    assert result.exit_code == 2, result.output
    assert "truncated" in result.output and state_file.name in result.output
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if p.startswith(".")]


def test_a_flink_sql_savepoint_exports_the_same_rows_on_spark_and_locally(spark: Any, tmp_path: Path) -> None:
    """Flink SQL rows (``RowData``: DECIMAL(38, 2), TIMESTAMP(3) as timestamp_ntz, TIMESTAMP(6), DATE, nested
    ROW, ARRAY and MAP, ...)."""
    variant = GOLDEN.parent / "flink-sql-2.3" / "hashmap"
    sql = variant / json.loads((variant / "facts.json").read_text())["savepoints"]["canonical"]
    rows = {}
    for engine in ("spark", "local"):
        out = tmp_path / engine
        args = ["export", str(sql), "-o", str(out), "--state", "accState", "--format", "jsonl", "--engine", engine]
        result = CliRunner().invoke(cli, args + (["--master", "local[2]"] if engine == "spark" else []))
        assert result.exit_code == 0, result.output
        rows[engine] = sorted(json.dumps({k: v for k, v in json.loads(line).items() if k != "subtask"}, sort_keys=True)
                              for part in out.glob("*/*/*.json") for line in part.read_text().splitlines())
    assert len(rows["local"]) == 50 + 14 + 150 + 7
    assert rows["spark"] == rows["local"]
    assert '"f4": "2023-11-14T22:13:20.000"' in next(r for r in rows["local"] if '"u0"' in r)
