"""Bootstrap at scale: executors write the key-group files, the driver commits ``_metadata``; and the
engine choice (``statekit.spark.engine.bootstrap``), whose tests need no JVM."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.readers.diff import DiffSpec
from statekit.readers.savepoint_reader import SavepointReader
from statekit.spark.bootstrap import bootstrap_with_spark
from statekit.spark.engine import bootstrap
from statekit.spark.session import SparkSettings
from statekit.statefmt.errors import BadInputError
from statekit.writers.bootstrap import bootstrap_savepoint
from statekit.writers.bootstrap_spec import BootstrapSpec
from statekit.writers.diff_output import write_diff


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


@pytest.mark.spark
def test_value_state_matches_the_local_engine_block_for_block(spark: Any, inputs: dict[str, str], tmp_path: Path) -> None:
    common: dict[str, Any] = dict(inputs=[inputs["words"]], uid="counter", state="count", kind="value",
                                  key_column="word", value_columns=["n"], max_parallelism=128, parallelism=3)
    report = bootstrap_with_spark(BootstrapSpec(output=str(tmp_path / "spark"), **common),
                                  SparkSettings("local[2]"))
    assert (report.engine, report.rows_read, report.entries, report.value_type) == ("spark", 2000, 2000, "int")
    bootstrap_savepoint(BootstrapSpec(output=str(tmp_path / "local"), **common))
    entries = {e.key: e.value for e in SavepointReader.read(str(tmp_path / "spark")).read_keyed_state("counter", "count")}
    assert entries == {f"w{i}": i for i in range(2000)}
    result = write_diff(DiffSpec(str(tmp_path / "local"), str(tmp_path / "spark")))
    assert result.equal
    count = result.states[0]
    assert count.key_groups_compared == 0 and count.unchanged == 2000  # identical blocks, skipped by checksum


@pytest.mark.spark
def test_struct_values_from_several_columns(spark: Any, inputs: dict[str, str], tmp_path: Path) -> None:
    spec = BootstrapSpec(inputs=[inputs["words"]], uid="op", state="s", key_column="word",
                         value_columns=["n", "score"], parallelism=2, output=str(tmp_path / "o"))
    report = bootstrap_with_spark(spec, SparkSettings("local[2]"))
    assert report.value_type == "struct<n:int,score:float>"
    first = {e.key: e.value for e in SavepointReader.read(str(tmp_path / "o")).read_keyed_state("op", "s")}["w3"]
    assert first == {"n": 3, "score": 1.5}


@pytest.mark.spark
def test_map_and_list_state_from_csv(spark: Any, inputs: dict[str, str], tmp_path: Path) -> None:
    bootstrap_with_spark(BootstrapSpec(inputs=[inputs["events"]], input_format="csv", uid="u", state="pages",
                                       kind="map", key_column="user", user_key_column="page",
                                       value_columns=["visits"], parallelism=2, output=str(tmp_path / "map")),
                         SparkSettings("local[2]"))
    pages = list(SavepointReader.read(str(tmp_path / "map")).read_keyed_state("u", "pages"))
    assert len(pages) == len({(i % 50, i % 7) for i in range(600)})
    bootstrap_with_spark(BootstrapSpec(inputs=[inputs["events"]], uid="u", state="visits", kind="list",
                                       key_column="user", value_columns=["visits"], parallelism=2,
                                       output=str(tmp_path / "list")), SparkSettings("local[2]"))
    lists = {e.key: sorted(e.value) for e in SavepointReader.read(str(tmp_path / "list")).read_keyed_state("u", "visits")}
    assert lists[7] == [i for i in range(600) if i % 50 == 7]


@pytest.mark.spark
def test_cli_bootstrap_with_the_spark_engine(spark: Any, inputs: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "cli"
    result = CliRunner().invoke(cli, ["bootstrap", "--input", inputs["words"], "--uid", "counter", "--state", "count",
                                      "--key-column", "word", "--value-column", "n", "-p", "2", "-o", str(out),
                                      "--engine", "spark", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["engine"], report["entries"], report["parallelism"]) == ("spark", 2000, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cli"]


@pytest.mark.spark
def test_a_failed_bootstrap_leaves_nothing(spark: Any, inputs: dict[str, str], tmp_path: Path) -> None:
    spec = BootstrapSpec(inputs=[inputs["words"]], uid="op", state="s", key_column="word", value_columns=["word"],
                         value_type="int", output=str(tmp_path / "bad"))
    with pytest.raises(Exception, match="does not match the declared type|cannot be cast"):
        bootstrap_with_spark(spec, SparkSettings("local[2]"))
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- the engine choice (no JVM)


def _spec(inputs: dict[str, str], tmp_path: Path, **fields: Any) -> BootstrapSpec:
    return BootstrapSpec(**({"inputs": [inputs["events"]], "uid": "u", "state": "s", "key_column": "user",
                             "value_columns": ["visits"], "output": str(tmp_path / "out")} | fields))


def test_an_unknown_engine_is_refused(inputs: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match=r"^--engine 'flink': expected one of local, spark$"):
        bootstrap(_spec(inputs, tmp_path), "flink")
    assert not (tmp_path / "out").exists()


def test_spark_engine_without_pyspark(inputs: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)  # as if PySpark were not installed
    with pytest.raises(BadInputError, match=r"^--engine spark needs PySpark: pip install 'statekit\[spark\]'$"):
        bootstrap(_spec(inputs, tmp_path), "spark")
    assert not (tmp_path / "out").exists()


def test_operator_state_goes_to_the_local_engine(inputs: dict[str, str], tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    spec = _spec(inputs, tmp_path, kind="union", key_column=None)
    report = bootstrap(spec, "spark")
    assert (report.engine, report.kind, report.rows_read) == ("local", "union", 600)
    assert SavepointReader.read(spec.output).read_union_state("u", "s") == list(range(600))
    with pytest.raises(BadInputError, match="^union state is operator state: the Spark bootstrap writes keyed state"):
        bootstrap_with_spark(_spec(inputs, tmp_path, kind="union", key_column=None, output=str(tmp_path / "o2")))
    assert not (tmp_path / "o2").exists()


def test_the_local_engine_never_loads_spark(inputs: dict[str, str], tmp_path: Path) -> None:
    spec = (f"BootstrapSpec(inputs=[{inputs['events']!r}], uid='u', state='s', key_column='user', "
            f"value_columns=['visits'], output={str(tmp_path / 'out')!r})")
    code = ("import sys; from statekit.spark.engine import bootstrap; "
            f"from statekit.writers.bootstrap_spec import BootstrapSpec; bootstrap({spec}, 'local'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j') "
            "or m.startswith('statekit.spark.') and m not in ('statekit.spark.engine', 'statekit.spark.session')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert SavepointReader.read(str(tmp_path / "out")).operator("u").parallelism == 1


def test_cli_bootstrap_passes_master_and_conf_to_the_spark_engine(inputs: dict[str, str], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import statekit.spark.bootstrap as spark_bootstrap

    seen: list[Any] = []
    monkeypatch.setattr(spark_bootstrap, "bootstrap_with_spark",
                        lambda spec, spark=None, **_: seen.append(spark) or bootstrap_savepoint(spec))
    args = ["bootstrap", "--input", inputs["events"], "--uid", "u", "--state", "s", "--key-column", "user",
            "--value-column", "visits", "-o", str(tmp_path / "out"), "--engine", "spark"]
    result = CliRunner().invoke(cli, [*args, "--master", "spark://127.0.0.1:7077", "--conf", "spark.a=1", "--json"])
    assert result.exit_code == 0, result.output
    assert seen == [SparkSettings("spark://127.0.0.1:7077", {"spark.a": "1"}, False)]
    bad = CliRunner().invoke(cli, [*args[:-4], "-o", str(tmp_path / "bad"), "--conf", "novalue"])
    assert bad.exit_code == 2 and "--conf 'novalue' is not KEY=VALUE" in bad.output
    assert not (tmp_path / "bad").exists()
