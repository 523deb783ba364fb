"""``statekit export``: Parquet through Spark, read back with DuckDB and pyarrow."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.readers.savepoint_reader import SavepointReader
from statekit.spark.engine import export
from statekit.spark.export import ExportSpec
from statekit.spark.session import SparkSettings
from statekit.statefmt.errors import CorruptStateError

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def exported(spark: Any, sample: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    out = str(tmp_path_factory.mktemp("export") / "out")
    result = CliRunner().invoke(cli, ["export", sample, "-o", out, "--master", "local[2]", "--json"])
    assert result.exit_code == 0, result.output
    return out, json.loads(result.stdout)


def test_every_state_lands_in_its_hive_partition(exported: tuple[str, dict[str, Any]], sample: str) -> None:
    out, report = exported
    expected = {(op.uid, d.name) for op in SavepointReader.read(sample).operators for d in op.states}
    assert {(s["operator_uid"], s["state_name"]) for s in report["states"]} == expected
    for uid, name in expected:
        assert (Path(out) / f"operator_uid={uid}" / f"state_name={name}").is_dir()
    assert report["rows"] == 500 + 120 + 30 + 15 + 5 + 2 + 2
    assert not [p for p in os.listdir(Path(out).parent) if p.startswith(".")]


def test_duckdb_reads_typed_values_equal_to_the_state(exported: tuple[str, dict[str, Any]], sample: str) -> None:
    out, _ = exported
    glob = f"{out}/operator_uid=counter/state_name=count/*.parquet"
    con = duckdb.connect()
    types = {row[0]: row[1] for row in con.execute(
        f"DESCRIBE SELECT * FROM read_parquet('{glob}', hive_partitioning=true)").fetchall()}
    assert types["value"] == "BIGINT" and types["key"] == "VARCHAR" and types["key_group"] == "INTEGER"
    assert types["expiry"].startswith("TIMESTAMP")
    rows = con.execute(f"SELECT key, value, operator_uid, state_name FROM read_parquet('{glob}', hive_partitioning=true)").fetchall()
    expected = {e.key: e.value for e in SavepointReader.read(sample).read_keyed_state("counter", "count")}
    assert {k: v for k, v, _, _ in rows} == expected
    assert {(u, s) for _, _, u, s in rows} == {("counter", "count")}


def test_pyarrow_reads_map_list_and_operator_state(exported: tuple[str, dict[str, Any]]) -> None:
    out, _ = exported
    tags = ds.dataset(f"{out}/operator_uid=counter/state_name=tags", format="parquet").to_table()
    assert str(tags.schema.field("value").type) == "struct<n: int64, seen: timestamp[us, tz=UTC]>"
    assert tags.num_rows == 120
    history = ds.dataset(f"{out}/operator_uid=counter/state_name=history", format="parquet").to_table()
    assert str(history.schema.field("value").type).startswith("list<")
    offsets = ds.dataset(f"{out}/operator_uid=source/state_name=offsets", format="parquet").to_table()
    assert sorted(offsets.column("value").to_pylist()) == [10, 20, 30, 40, 50]
    rules = ds.dataset(f"{out}/operator_uid=source/state_name=rules", format="parquet").to_table()
    assert sorted(rules.column("user_key").to_pylist()) == ["r1", "r2"]


def test_chosen_state_only(spark: Any, sample: str, tmp_path: Path) -> None:
    result = export(ExportSpec(sample, str(tmp_path / "one"), operator="counter", state="history",
                               spark=SparkSettings("local[2]")), "spark")
    assert [(s.operator_uid, s.state_name, s.rows) for s in result.states] == [("counter", "history", 30)]
    assert os.listdir(tmp_path / "one") == ["operator_uid=counter"]


def test_a_failed_export_leaves_nothing(spark: Any, sample: str, tmp_path: Path) -> None:
    damaged = tmp_path / "damaged"
    shutil.copytree(sample, damaged)
    reader = SavepointReader.read(str(damaged))
    file = next(f for st in reader.operator("counter").subtasks for f in st.files if f.state == "tags" and f.entries)
    with reader.open_file(file) as state_file:
        block = state_file.index[len(state_file.index) // 2]
    with open(damaged / file.path, "r+b") as f:  # flip one byte inside a block: same size, bad CRC
        f.seek(block.offset + block.length // 2)
        byte = f.read(1)
        f.seek(block.offset + block.length // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    out = tmp_path / "out"
    with pytest.raises(CorruptStateError, match="checksum"):
        export(ExportSpec(str(damaged), str(out), spark=SparkSettings("local[2]")), "spark")
    assert sorted(os.listdir(tmp_path)) == ["damaged"]
    result = CliRunner().invoke(cli, ["export", str(damaged), "-o", str(out), "--state", "tags"])
    assert result.exit_code == 2
    assert result.stderr.startswith("statekit: error: ") and "block checksum mismatch" in result.stderr
    assert result.stderr.count("\n") == 1
    assert sorted(os.listdir(tmp_path)) == ["damaged"]


def test_bad_input_exits_2(spark: Any, sample: str, tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("x")
    for args, message in (
        (["export", sample, "-o", str(taken)], "not empty"),
        (["export", sample, "-o", str(tmp_path / "o"), "--operator", "nope"], "no operator with uid 'nope'"),
        (["export", sample, "-o", str(tmp_path / "o"), "--conf", "novalue"], "is not KEY=VALUE"),
        (["export", str(tmp_path / "missing"), "-o", str(tmp_path / "o")], "no such file or directory"),
    ):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.stderr
