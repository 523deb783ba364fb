"""``statekit diff --engine spark``: the same answer as the local engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.readers.diff import DiffSpec
from statekit.spark.engine import diff
from statekit.spark.session import SparkSettings
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

pytestmark = pytest.mark.spark
ON_SPARK = SparkSettings("local[2]")

COUNT = StateDescriptor("count", StateKind.VALUE, value_type="int")
TAGS = StateDescriptor("tags", StateKind.MAP, value_type="int", user_key_type="string")
HISTORY = StateDescriptor("history", StateKind.LIST, value_type="int")
OFFSETS = StateDescriptor("offsets", StateKind.OPERATOR_LIST, value_type="int")


def write(path: Path, version: str, parallelism: int = 2, max_parallelism: int = 128) -> str:
    """Version a: keys 0..299; version b: 0..29 gone, 300..339 new, 100..119 changed."""
    keys = range(300) if version == "a" else range(30, 340)
    bump = 0 if version == "a" else 1
    rows = [(f"k{i}", i + (1000 if bump and 100 <= i < 120 else 0)) for i in keys]
    tags = [(i, f"t{j}", i * j + (bump if i == 3 else 0)) for i in range(10) for j in range(3)]
    history = [(i, [i, i + bump * (i == 5)]) for i in range(10)]
    writer = SavepointWriter.new_savepoint(max_parallelism)
    writer.with_operator("counter", {COUNT: rows, TAGS: tags, HISTORY: history}, parallelism=parallelism)
    writer.with_operator("source", {OFFSETS: [1, 2, 3] if version == "a" else [1, 2, 4]}, parallelism=parallelism)
    writer.write(str(path))
    return str(path)


@pytest.fixture(scope="module")
def savepoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("sparkdiff")
    return {"a": write(root / "a", "a"), "a_p5": write(root / "a_p5", "a", parallelism=5),
            "b": write(root / "b", "b"), "b_m256": write(root / "b_m256", "b", parallelism=3, max_parallelism=256)}


def counts(result: Any) -> dict[tuple[str, str], tuple[int, int, int, int]]:
    return {(s.operator_uid, s.state_name): (s.only_in_a, s.only_in_b, s.changed, s.unchanged) for s in result.states}


EXPECTED = {
    ("counter", "count"): (30, 40, 20, 250),
    ("counter", "tags"): (0, 0, 3, 27),
    ("counter", "history"): (0, 0, 1, 9),
    ("source", "offsets"): (1, 1, 0, 2),
}


def test_both_engines_give_the_same_counts(spark: Any, savepoints: dict[str, str]) -> None:
    local = diff(DiffSpec(savepoints["a"], savepoints["b"]))
    on_spark = diff(DiffSpec(savepoints["a"], savepoints["b"]), "spark", ON_SPARK)
    assert counts(local) == counts(on_spark) == EXPECTED
    assert on_spark.engine == "spark" and not on_spark.equal


def test_rescaled_copy_is_equal_on_spark(spark: Any, savepoints: dict[str, str]) -> None:
    result = diff(DiffSpec(savepoints["a"], savepoints["a_p5"]), "spark", ON_SPARK)
    assert result.equal
    assert counts(result)[("counter", "count")] == (0, 0, 0, 300)


def test_different_max_parallelism_on_spark(spark: Any, savepoints: dict[str, str]) -> None:
    result = diff(DiffSpec(savepoints["a"], savepoints["b_m256"], state="count"), "spark", ON_SPARK)
    assert counts(result) == {("counter", "count"): EXPECTED[("counter", "count")]}


def test_keys_and_output_match_the_local_engine(spark: Any, savepoints: dict[str, str], tmp_path: Path) -> None:
    local = diff(DiffSpec(savepoints["a"], savepoints["b"], keys=True, limit=3, output=str(tmp_path / "local")))
    on_spark = diff(DiffSpec(savepoints["a"], savepoints["b"], keys=True, limit=3, output=str(tmp_path / "spark")),
                    "spark", ON_SPARK)
    for result in (local, on_spark):
        assert [len(s.examples) for s in result.states] == [3, 3, 1, 2]
    tables = [ds.dataset(str(tmp_path / name), format="parquet", partitioning="hive").to_table()
              for name in ("local", "spark")]
    columns = ["operator_uid", "state_name", "change", "key", "namespace", "user_key", "value_a", "value_b", "key_group"]
    rows = [sorted(tuple(str(r[c]) for c in columns) for r in t.to_pylist()) for t in tables]
    assert rows[0] == rows[1] and len(rows[0]) == 30 + 40 + 20 + 3 + 1 + 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local", "spark"]


def test_cli_exit_codes_with_the_spark_engine(spark: Any, savepoints: dict[str, str], tmp_path: Path) -> None:
    runner = CliRunner()
    same = runner.invoke(cli, ["diff", savepoints["a"], savepoints["a_p5"], "--engine", "spark", "--json"])
    assert same.exit_code == 0, same.output
    assert json.loads(same.stdout)["equal"] is True
    different = runner.invoke(cli, ["diff", savepoints["a"], savepoints["b"], "--engine", "spark", "--state", "count"])
    assert different.exit_code == 1
    assert "DIFFERENT (engine spark)" in different.stdout
    bad = runner.invoke(cli, ["diff", savepoints["a"], str(tmp_path / "missing"), "--engine", "spark"])
    assert bad.exit_code == 2 and "no such file or directory" in bad.stderr
