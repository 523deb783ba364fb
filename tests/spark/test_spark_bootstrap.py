"""Bootstrap at scale: executors write the key-group files, the driver commits ``_metadata``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.readers.diff import diff_savepoints
from statekit.readers.savepoint_reader import SavepointReader
from statekit.writers.bootstrap import bootstrap_savepoint
from statekit.spark.bootstrap import bootstrap_with_spark

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("boot")
    words = pa.table({"word": [f"w{i}" for i in range(2000)], "n": list(range(2000)),
                      "score": [i / 2 for i in range(2000)]})
    pq.write_table(words, root / "words.parquet")
    events = pa.table({"user": [i % 50 for i in range(600)], "page": [f"p{i % 7}" for i in range(600)],
                       "visits": list(range(600))})
    pacsv.write_csv(events, root / "events.csv")
    return {"words": str(root / "words.parquet"), "events": str(root / "events.csv")}


def test_value_state_matches_the_local_engine_block_for_block(spark: Any, inputs: dict[str, str], tmp_path: Path) -> None:
    common = dict(uid="counter", state="count", kind="value", key_column="word", value_columns=["n"],
                  max_parallelism=128, parallelism=3)
    report = bootstrap_with_spark(input=inputs["words"], output=str(tmp_path / "spark"), master="local[2]", **common)
    assert (report.engine, report.rows_read, report.entries, report.value_type) == ("spark", 2000, 2000, "int")
    bootstrap_savepoint(inputs=[inputs["words"]], output=str(tmp_path / "local"), **common)
    entries = {e.key: e.value for e in SavepointReader.read(str(tmp_path / "spark")).read_keyed_state("counter", "count")}
    assert entries == {f"w{i}": i for i in range(2000)}
    result = diff_savepoints(str(tmp_path / "local"), str(tmp_path / "spark"))
    assert result.equal
    count = result.states[0]
    assert count.key_groups_compared == 0 and count.unchanged == 2000  # identical blocks, skipped by checksum


def test_struct_values_from_several_columns(spark: Any, inputs: dict[str, str], tmp_path: Path) -> None:
    report = bootstrap_with_spark(input=inputs["words"], uid="op", state="s", key_column="word",
                                  value_columns=["n", "score"], parallelism=2, output=str(tmp_path / "o"),
                                  master="local[2]")
    assert report.value_type == "struct<n:int,score:float>"
    first = {e.key: e.value for e in SavepointReader.read(str(tmp_path / "o")).read_keyed_state("op", "s")}["w3"]
    assert first == {"n": 3, "score": 1.5}


def test_map_and_list_state_from_csv(spark: Any, inputs: dict[str, str], tmp_path: Path) -> None:
    bootstrap_with_spark(input=inputs["events"], input_format="csv", uid="u", state="pages", kind="map",
                         key_column="user", user_key_column="page", value_columns=["visits"], parallelism=2,
                         output=str(tmp_path / "map"), master="local[2]")
    pages = list(SavepointReader.read(str(tmp_path / "map")).read_keyed_state("u", "pages"))
    assert len(pages) == len({(i % 50, i % 7) for i in range(600)})
    bootstrap_with_spark(input=inputs["events"], uid="u", state="visits", kind="list", key_column="user",
                         value_columns=["visits"], parallelism=2, output=str(tmp_path / "list"), master="local[2]")
    lists = {e.key: sorted(e.value) for e in SavepointReader.read(str(tmp_path / "list")).read_keyed_state("u", "visits")}
    assert lists[7] == [i for i in range(600) if i % 50 == 7]


def test_cli_bootstrap_with_the_spark_engine(spark: Any, inputs: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "cli"
    result = CliRunner().invoke(cli, ["bootstrap", "--input", inputs["words"], "--uid", "counter", "--state", "count",
                                      "--key-column", "word", "--value-column", "n", "-p", "2", "-o", str(out),
                                      "--engine", "spark", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["engine"], report["entries"], report["parallelism"]) == ("spark", 2000, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cli"]


def test_a_failed_bootstrap_leaves_nothing(spark: Any, inputs: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(Exception, match="does not match the declared type|cannot be cast"):
        bootstrap_with_spark(input=inputs["words"], uid="op", state="s", key_column="word", value_columns=["word"],
                             value_type="int", output=str(tmp_path / "bad"), master="local[2]")
    assert list(tmp_path.iterdir()) == []
