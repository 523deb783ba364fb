"""statekit on a real Spark standalone cluster (a master and two workers on 127.0.0.1).

The CLI runs as its own process (a process holds one SparkContext; this test process holds
the local[2] one) with ``--master spark://...``. Its executors run an interpreter where
statekit is NOT importable (``SparkCluster.hidden_python``): every job below works only
because statekit ships itself to them. Results are compared with the same command on the
in-process local[2] session. Kept few and small: the machine has 2 cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from statekit.readers.diff import DiffSpec
from statekit.readers.savepoint_reader import SavepointReader
from statekit.spark.bootstrap import bootstrap_with_spark
from statekit.spark.engine import diff as run_diff
from statekit.spark.engine import export as run_export
from statekit.spark.export import ExportSpec
from statekit.spark.session import SparkSettings
from statekit.statefmt.json_contract import json_data
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.bootstrap_spec import BootstrapSpec
from statekit.writers.savepoint_writer import SavepointWriter

pytestmark = [pytest.mark.spark]

LOCAL = SparkSettings("local[2]")
COUNT = StateDescriptor("count", StateKind.VALUE, value_type="int")


def run_cli(cluster: Any, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``statekit ARGS --master <cluster> --json`` in a new process whose executors lack statekit."""
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environment.update(PYSPARK_PYTHON=cluster.hidden_python(), SPARK_LOCAL_IP="127.0.0.1", **(env or {}))
    command = [sys.executable, "-m", "statekit.cli.main", *args, "--master", cluster.url, "--json"]
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=600, check=False)


def s3_env(s3_server: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """The driver's environment and the executors' ``--conf`` for the moto server (s3fs reads both)."""
    env = {"AWS_ENDPOINT_URL": s3_server["endpoint_url"], "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    return env, [arg for key, value in env.items() for arg in ("--conf", f"spark.executorEnv.{key}={value}")]


def exported_rows(root: str) -> dict[str, list[str]]:
    """Every exported Parquet row, per state directory, as sorted JSON text."""
    tables: dict[str, list[str]] = {}
    for part in sorted(Path(root).rglob("part-*.parquet")):
        rows = pq.read_table(part).to_pylist()
        state = part.parent.relative_to(root).as_posix()
        tables.setdefault(state, []).extend(json.dumps(r, sort_keys=True, default=str) for r in rows)
    return {state: sorted(rows) for state, rows in tables.items()}


@pytest.fixture(scope="module")
def local_export(spark: Any, sample: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    out = str(tmp_path_factory.mktemp("cluster-ref") / "export")
    run_export(ExportSpec(sample, out, spark=LOCAL), "spark")
    return exported_rows(out)


def test_export_on_the_cluster_without_statekit_on_the_executors(spark_cluster: Any, sample: str, tmp_path: Path,
                                                                 local_export: dict[str, list[str]]) -> None:
    out = str(tmp_path / "export")
    result = run_cli(spark_cluster, "export", sample, "-o", out)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["master"] == spark_cluster.url
    assert exported_rows(out) == local_export
    assert len(local_export) == 7 and sum(map(len, local_export.values())) == report["rows"]


@pytest.mark.s3
def test_export_from_s3_on_the_cluster(spark_cluster: Any, s3_server: dict[str, Any], s3_bucket: str,
                                       sample_writer: Any, tmp_path: Path, local_export: dict[str, list[str]]) -> None:
    remote = sample_writer(f"{s3_bucket}/sample", storage_options=s3_server["storage_options"])
    env, conf = s3_env(s3_server)
    out = str(tmp_path / "export")
    result = run_cli(spark_cluster, "export", remote, "-o", out, *conf, env=env)
    assert result.returncode == 0, result.stderr
    assert exported_rows(out) == local_export


def _counts(path: str, items: dict[str, int], storage_options: dict[str, Any] | None = None) -> str:
    SavepointWriter.new_savepoint(128).with_operator("counter", {COUNT: list(items.items())}, parallelism=2) \
        .write(path, storage_options=storage_options)
    return path


def _comparable(diff_json: dict[str, Any]) -> dict[str, Any]:
    """A diff without what legitimately differs between engines (engine name, --keys examples, paths)."""
    states = [{k: v for k, v in s.items() if k not in ("examples", "key_groups_skipped", "key_groups_compared")}
              for s in diff_json["states"]]
    return {"equal": diff_json["equal"], "totals": diff_json["totals"], "structural": diff_json["structural"],
            "states": states}


@pytest.mark.s3
def test_diff_of_a_local_and_an_s3_savepoint_on_the_cluster(spark: Any, spark_cluster: Any, s3_server: dict[str, Any],
                                                            s3_bucket: str, tmp_path: Path) -> None:
    before = {f"w{i}": i for i in range(300)}
    after = {**{f"w{i}": i for i in range(20, 300)}, "w5": 50, "w6": 60, **{f"n{i}": i for i in range(7)}}
    after.update({"w100": -1, "w101": -1})
    a = _counts(str(tmp_path / "a"), before)
    b = _counts(f"{s3_bucket}/b", after, s3_server["storage_options"])
    env, conf = s3_env(s3_server)
    result = run_cli(spark_cluster, "diff", a, b, "--engine", "spark", *conf, env=env)
    assert result.returncode == 1, result.stderr  # different
    on_cluster = json.loads(result.stdout)
    assert on_cluster["totals"] == {"only_in_a": 18, "only_in_b": 7, "changed": 4, "unchanged": 278}
    spec = DiffSpec(a, b, storage_options=s3_server["storage_options"])
    on_local = json_data(run_diff(spec, "spark", LOCAL))
    assert _comparable(on_cluster) == _comparable(on_local)


@pytest.mark.s3
def test_bootstrap_on_the_cluster_writes_to_s3_what_local_writes(spark: Any, spark_cluster: Any,
                                                                  s3_server: dict[str, Any], s3_bucket: str,
                                                                  tmp_path: Path) -> None:
    words = tmp_path / "words.parquet"
    pq.write_table(pa.table({"word": [f"w{i}" for i in range(500)], "n": list(range(500))}), words)
    args = ["--input", str(words), "--uid", "counter", "--state", "count", "--key-column", "word",
            "--value-column", "n", "-p", "3", "--max-parallelism", "128"]
    env, conf = s3_env(s3_server)
    result = run_cli(spark_cluster, "bootstrap", *args, "-o", f"{s3_bucket}/boot", "--engine", "spark", *conf, env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["engine"] == "spark"
    reference = str(tmp_path / "local")
    bootstrap_with_spark(BootstrapSpec(inputs=[str(words)], output=reference, uid="counter", state="count",
                                       key_column="word", value_columns=["n"], parallelism=3, max_parallelism=128),
                         LOCAL)
    on_s3 = SavepointReader.read(f"{s3_bucket}/boot", storage_options=s3_server["storage_options"])
    assert _files(on_s3) == _files(SavepointReader.read(reference))  # block for block: same sizes and checksums
    assert {e.key: e.value for e in on_s3.read_keyed_state("counter", "count")} == {f"w{i}": i for i in range(500)}


def _files(reader: SavepointReader) -> list[tuple[int, str, str, int, str, int]]:
    found = [(t.index, f.state, f.path, f.size, f.checksum, f.entries)
             for op in reader.operators for t in op.subtasks for f in t.files]
    assert len(found) == 3
    return sorted(found)
