"""statekit on a Spark Connect server (``--remote sc://...``), started from the installed pyspark.

The server (master local[2]) runs Python workers where statekit is NOT importable: every job
below works only because statekit ships itself as a Connect artifact. The CLI runs as its own
process (this test process holds the classic local[2] session) and its results are compared
with the same command on local[2]. Kept to two exports (statekit, Apache Flink) and one diff: the machine has 2 cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from statekit.readers.diff import DiffSpec
from statekit.spark.engine import diff as run_diff
from statekit.spark.engine import export as run_export
from statekit.spark.export import ExportSpec
from statekit.spark.session import SparkSettings
from statekit.statefmt.json_contract import json_data, json_document
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

pytestmark = [pytest.mark.spark]

LOCAL = SparkSettings("local[2]")
FLINK_SAVEPOINT = (Path(__file__).resolve().parents[1] / "golden" / "flink-2.3" / "hashmap" / "savepoints"
                   / "savepoint-962f67-bfc4c25148ed")
COUNT = StateDescriptor("count", StateKind.VALUE, value_type="int")


def run_cli(server: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """``statekit ARGS --remote <server> --json`` in a new process."""
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    command = [sys.executable, "-m", "statekit.cli.main", *args, "--remote", server.url, "--json"]
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=600, check=False)


def table_rows(root: str) -> dict[str, list[str]]:
    """Every Parquet row under ``root``, per directory, as sorted JSON text."""
    tables: dict[str, list[str]] = {}
    for part in sorted(Path(root).rglob("part-*.parquet")):
        state = part.parent.relative_to(root).as_posix()
        tables.setdefault(state, []).extend(json.dumps(r, sort_keys=True, default=str)
                                            for r in pq.read_table(part).to_pylist())
    return {state: sorted(rows) for state, rows in tables.items()}


def test_export_over_spark_connect_equals_local(spark: Any, connect_server: Any, sample: str, tmp_path: Path) -> None:
    reference = str(tmp_path / "local")
    local = run_export(ExportSpec(sample, reference, spark=LOCAL), "spark")
    out = str(tmp_path / "remote")
    result = run_cli(connect_server, "export", sample, "-o", out)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["master"] == connect_server.url
    assert report["rows"] == json_data(local)["rows"]
    remote_rows = table_rows(out)
    assert len(remote_rows) == 7 and remote_rows == table_rows(reference)
    assert not [p for p in Path(tmp_path).iterdir() if p.name.startswith(".")]  # no staging left


def test_a_flink_savepoint_exports_over_spark_connect_as_locally(spark: Any, connect_server: Any,
                                                                 tmp_path: Path) -> None:
    reference = str(tmp_path / "local")
    run_export(ExportSpec(str(FLINK_SAVEPOINT), reference, state="python-state-count", spark=LOCAL), "spark")
    out = str(tmp_path / "remote")
    result = run_cli(connect_server, "export", str(FLINK_SAVEPOINT), "-o", out, "--state", "python-state-count")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["rows"] == 1000
    remote_rows = table_rows(out)
    assert sum(map(len, remote_rows.values())) == 1000 and remote_rows == table_rows(reference)


def _counts(path: str, items: dict[str, int]) -> str:
    SavepointWriter.new_savepoint(128).with_operator("counter", {COUNT: list(items.items())}, parallelism=2).write(path)
    return path


def test_diff_over_spark_connect_equals_local(spark: Any, connect_server: Any, tmp_path: Path) -> None:
    before = {f"w{i}": i for i in range(300)}
    after = {**{f"w{i}": i for i in range(20, 300)}, "w5": 50, "w6": 60, **{f"n{i}": i for i in range(7)}}
    after.update({"w100": -1, "w101": -1})
    a, b = _counts(str(tmp_path / "a"), before), _counts(str(tmp_path / "b"), after)
    result = run_cli(connect_server, "diff", a, b, "--keys", "-o", str(tmp_path / "remote"))
    assert result.returncode == 1, result.stderr  # different
    remote = json.loads(result.stdout)
    local = json_document(run_diff(DiffSpec(a, b, keys=True, output=str(tmp_path / "local")), "spark", LOCAL))
    assert remote["totals"] == {"only_in_a": 18, "only_in_b": 7, "changed": 4, "unchanged": 278}
    assert {k: v for k, v in remote.items() if k not in ("engine", "output")} == \
        {k: v for k, v in local.items() if k not in ("engine", "output")}
    remote_rows = table_rows(str(tmp_path / "remote"))
    assert sum(map(len, remote_rows.values())) == 29 and remote_rows == table_rows(str(tmp_path / "local"))


@pytest.mark.parametrize(("args", "message"), [
    (["export", "snap", "-o", "out", "--master", "local[1]", "--remote", "sc://127.0.0.1:1"],
     "--master and --remote exclude each other"),
    (["diff", "a", "b", "--remote", "sc://127.0.0.1:1", "--engine", "local"], "it excludes --engine local"),
    (["export", "snap", "-o", "out", "--remote", "http://127.0.0.1:1"], "is not a Spark Connect URL"),
])
def test_bad_remote_options_are_one_line_bad_input(args: list[str], message: str) -> None:
    from click.testing import CliRunner

    from statekit.cli.main import cli

    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1


def test_remote_without_the_client_packages_is_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    from statekit.spark import session
    from statekit.statefmt.errors import BadInputError

    monkeypatch.setattr(session, "CONNECT_CLIENT_MODULES", ("grpc", "statekit_no_such_module"))
    with pytest.raises(BadInputError, match=r"missing: statekit_no_such_module \(pip install 'statekit\[connect\]'\)"):
        session._start_remote("sc://127.0.0.1:1", {})


def test_a_remote_session_is_refused_where_a_classic_one_runs(spark: Any) -> None:
    from statekit.statefmt.errors import BadInputError

    with pytest.raises(BadInputError, match="holds a classic Spark session already"):
        SparkSettings(remote="sc://127.0.0.1:1").session()
