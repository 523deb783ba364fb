"""The local export engine without Spark: no pyspark needed, ``--engine auto`` says what it
chose, files rotate, an empty state still gets its file, a failure leaves nothing, and the
spellings the text formats share with Spark (Java's doubles, Spark's DDL types).
(Its equality with the Spark export: ``test_local_export_parity.py``.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.spark import local_formats
from statekit.spark.engine import AUTO_LOCAL_MAX_BYTES, choose_export_engine
from statekit.spark.export import ExportSpec
from statekit.spark.local_export import ddl_arrow_schema
from statekit.spark.local_formats import java_double, java_float
from statekit.spark.session import SparkSettings
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

COUNT = StateDescriptor("count", StateKind.VALUE, value_type="int")
EMPTY = StateDescriptor("empty", StateKind.MAP, value_type="string", user_key_type="string")


@pytest.fixture
def savepoint(tmp_path: Path) -> str:
    path = tmp_path / "sp"
    SavepointWriter.new_savepoint(128).with_operator(
        "counter", {COUNT: [(f"k{i}", i) for i in range(1000)], EMPTY: []}, parallelism=2).write(str(path))
    return str(path)


def test_the_local_engine_runs_without_pyspark(savepoint: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    script = ("import sys; sys.modules['pyspark'] = None; from statekit.cli.main import main; "
              f"sys.argv = ['statekit', 'export', {savepoint!r}, '-o', {str(out)!r}, '--json']; main()")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "STATEKIT_RUNTIME_DIR": str(tmp_path / "runtime")})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["engine"], report["master"], report["rows"]) == ("local", None, 1000)
    assert report["engine_note"].startswith("auto: the local engine for ") and "below 1.0 GiB" in report["engine_note"]
    table = ds.dataset(out / "operator_uid=counter" / "state_name=count", format="parquet").to_table()
    assert sorted(table.column("value").to_pylist()) == list(range(1000))
    assert table.schema.field("expiry").type == pa.timestamp("us", tz="UTC")


def test_auto_says_what_it_chose_and_why(savepoint: str, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    assert choose_export_engine(ExportSpec(savepoint, out), "local") == ("local", None)
    assert choose_export_engine(ExportSpec(savepoint, out), "spark") == ("spark", None)
    engine, note = choose_export_engine(ExportSpec(savepoint, out))
    assert engine == "local" and note is not None and note.startswith("auto: the local engine for ")
    engine, note = choose_export_engine(ExportSpec(savepoint, out, spark=SparkSettings("spark://host:7077")))
    assert (engine, note) == ("spark", "auto: Spark, for spark://host:7077")
    engine, note = choose_export_engine(ExportSpec(savepoint, "s3a://bucket/out"))
    assert (engine, note) == ("spark", "auto: Spark, for an output that is not a local path")
    managed = SparkSettings(remote="sc://127.0.0.1:15002", managed=True)  # statekit spark start's: not a reason
    assert choose_export_engine(ExportSpec(savepoint, out, spark=managed))[0] == "local"
    assert AUTO_LOCAL_MAX_BYTES == 1 << 30


def test_auto_goes_to_spark_from_the_threshold(savepoint: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyspark")
    from statekit.spark import engine

    monkeypatch.setattr(engine, "AUTO_LOCAL_MAX_BYTES", 1000)
    chosen, note = choose_export_engine(ExportSpec(savepoint, str(tmp_path / "out")))
    assert chosen == "spark" and note is not None and note.startswith("auto: Spark for ") and "from 1000 B" in note


@pytest.mark.parametrize("args, message", [
    (["--engine", "local", "--remote", "sc://127.0.0.1:1"], "--remote runs the export on Spark Connect: it excludes "
                                                            "--engine local"),
    (["--engine", "local", "-o", "s3a://bucket/out"], "s3a://bucket/out: the local engine writes to a local directory"),
])
def test_local_engine_refusals_are_one_line(savepoint: str, tmp_path: Path, args: list[str], message: str) -> None:
    if "-o" not in args:
        args = [*args, "-o", str(tmp_path / "out")]
    result = CliRunner().invoke(cli, ["export", savepoint, *args])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"statekit: error: {message}"), line


def test_files_rotate_and_an_empty_state_gets_one_file(savepoint: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_formats, "ROWS_PER_FILE", 300)
    for fmt, suffix in (("parquet", ".snappy.parquet"), ("csv", ".csv"), ("jsonl", ".json")):
        out = tmp_path / fmt
        result = CliRunner().invoke(cli, ["export", savepoint, "-o", str(out), "--engine", "local", "--format", fmt,
                                          "--json"])
        assert result.exit_code == 0, result.output
        states = {s["state_name"]: s for s in json.loads(result.stdout)["states"]}
        assert (states["count"]["rows"], states["count"]["files"]) == (1000, 4)
        assert (states["empty"]["rows"], states["empty"]["files"]) == (0, 1)
        count_dir = out / "operator_uid=counter" / "state_name=count"
        parts = sorted(p.name for p in count_dir.iterdir())
        assert parts[0] == "_SUCCESS" and [p[:10] for p in parts[1:]] == [f"part-0000{i}" for i in range(4)]
        assert all(p.endswith("-c000" + suffix) for p in parts[1:])
        (empty,) = [p for p in (out / "operator_uid=counter" / "state_name=empty").iterdir() if p.name != "_SUCCESS"]
        if fmt == "csv":
            assert empty.read_text() == "key,namespace,user_key,value,expiry,key_group,subtask\n"
        elif fmt == "jsonl":
            assert empty.read_text() == ""
        else:
            assert ds.dataset(empty).to_table().num_rows == 0


def test_a_failed_local_export_leaves_nothing(tmp_path: Path) -> None:
    from statekit.readers.savepoint_reader import SavepointReader

    path = tmp_path / "sp"
    SavepointWriter.new_savepoint(8).with_operator(
        "op", {COUNT: [(f"k{i}", i) for i in range(200)]}, parallelism=2).write(str(path))
    file = SavepointReader.read(str(path)).operator("op").subtasks[1].file_of("count")
    assert file is not None
    data = bytearray((path / file.path).read_bytes())
    data[40] ^= 0xFF  # subtask 0 is written first, then subtask 1's damaged file fails the export
    (path / file.path).write_bytes(bytes(data))
    result = CliRunner().invoke(cli, ["export", str(path), "-o", str(tmp_path / "out"), "--engine", "local"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"statekit: error: {path / file.path}: "), result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sp"]


def test_java_spells_doubles_its_own_way() -> None:
    assert [java_double(v) for v in (0.5, 1.0, 100.0, 1e7, 1e20, 1e-5, 0.001, 12345678.0, -2.5e-10, -0.0)] == [
        "0.5", "1.0", "100.0", "1.0E7", "1.0E20", "1.0E-5", "0.001", "1.2345678E7", "-2.5E-10", "-0.0"]
    assert [java_double(v) for v in (float("nan"), float("inf"), float("-inf"))] == ["NaN", "Infinity", "-Infinity"]
    assert [java_float(v) for v in (0.1, 3.14, 1e10)] == ["0.1", "3.14", "1.0E10"]


def test_spark_ddl_types_as_arrow() -> None:
    schema = ddl_arrow_schema("key struct<f0:string>, namespace string, user_key map<string,array<bigint>>, "
                              "value struct<timestamp:bigint,`key`:int,w:struct<start:bigint,end:bigint>>, "
                              "expiry bigint, key_group int, subtask int")
    assert schema.field("key").type == pa.struct([("f0", pa.string())])
    assert schema.field("user_key").type == pa.map_(pa.string(), pa.list_(pa.int64()))
    assert schema.field("value").type == pa.struct([("timestamp", pa.int64()), ("key", pa.int32()),
                                                    ("w", pa.struct([("start", pa.int64()), ("end", pa.int64())]))])
    assert [ddl_arrow_schema(f"v {t}").field("v").type for t in ("tinyint", "smallint", "float", "boolean",
                                                                    "binary", "timestamp")] == [
        pa.int8(), pa.int16(), pa.float32(), pa.bool_(), pa.binary(), pa.timestamp("us", tz="UTC")]
    with pytest.raises(BadInputError, match="unsupported Spark type 'decimal"):
        ddl_arrow_schema("v decimal(10,2)")
