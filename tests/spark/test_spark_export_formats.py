"""``statekit export --format csv|jsonl``: the rows of the Parquet export, in each format's spelling.

CSV flattens (struct, list, map -> JSON text; binary -> base64; timestamps -> ISO-8601 UTC);
JSON Lines keeps nesting (binary and timestamps spelled as in CSV). Both are read back here
with pyarrow, DuckDB and ``json`` and compared with the Parquet export of the same snapshot,
statekit's (every state kind, TTL timestamps) and Apache Flink's (struct keys, binary lists).
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import re
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.spark.formats import FORMATS

pytestmark = pytest.mark.spark

FLINK_SAVEPOINT = (Path(__file__).resolve().parents[1] / "golden" / "flink-2.3" / "hashmap" / "savepoints"
                   / "savepoint-962f67-bfc4c25148ed")


def export_all_formats(source: str, root: Path) -> dict[str, tuple[Path, dict[str, Any]]]:
    """``statekit export SOURCE --format F`` for every format: (directory, JSON report) by format."""
    done = {}
    for fmt in FORMATS:
        out = root / fmt
        result = CliRunner().invoke(cli, ["export", source, "-o", str(out), "--format", fmt,
                                          "--master", "local[2]", "--json"])
        assert result.exit_code == 0, result.output
        done[fmt] = (out, json.loads(result.stdout))
    return done


@pytest.fixture(scope="module")
def statekit_exports(spark: Any, sample: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return export_all_formats(sample, tmp_path_factory.mktemp("formats"))


@pytest.fixture(scope="module")
def flink_exports(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return export_all_formats(str(FLINK_SAVEPOINT), tmp_path_factory.mktemp("flink-formats"))


# ---------------------------------------------------------------- the rows, in each spelling


def iso(value: datetime.datetime) -> str:
    return value.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def as_json(value: Any, type_: pa.DataType) -> Any:
    """A Parquet value as JSON spells it: nesting kept, bytes base64, timestamps ISO-8601."""
    if value is None:
        return None
    if pa.types.is_struct(type_):
        return {f.name: as_json(value[f.name], f.type) for f in type_}
    if pa.types.is_map(type_):
        return {k: as_json(v, type_.item_type) for k, v in value}
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        return [as_json(v, type_.value_type) for v in value]
    if pa.types.is_binary(type_):
        return base64.b64encode(value).decode("ascii")
    if pa.types.is_timestamp(type_):
        return iso(value)
    return value


def nested(type_: pa.DataType) -> bool:
    return pa.types.is_struct(type_) or pa.types.is_map(type_) or pa.types.is_list(type_)


def parquet_rows(directory: Path) -> tuple[pa.Schema, list[dict[str, Any]]]:
    table = ds.dataset(directory, format="parquet").to_table()
    return table.schema, table.to_pylist()


def csv_rows(directory: Path, schema: pa.Schema) -> list[dict[str, Any]]:
    """The CSV part files read with pyarrow, typed like the Parquet columns they flatten."""
    types = {f.name: pa.string() if nested(f.type) or pa.types.is_binary(f.type) else f.type for f in schema}
    options = pacsv.ConvertOptions(column_types=types, strings_can_be_null=True, quoted_strings_can_be_null=False)
    rows: list[dict[str, Any]] = []
    for part in sorted(directory.glob("part-*.csv")):
        rows += pacsv.read_csv(part, convert_options=options).to_pylist()
    return rows


def jsonl_rows(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for part in sorted(directory.glob("part-*.json"))
            for line in part.read_text(encoding="utf-8").splitlines()]


def canonical(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(row, sort_keys=True, default=str) for row in rows)


def csv_as_parquet_spells_it(row: dict[str, Any], schema: pa.Schema) -> dict[str, Any]:
    """A CSV row with its flattened cells parsed back, comparable with :func:`as_json` of Parquet's."""
    out = {}
    for f in schema:
        cell = row[f.name]
        out[f.name] = (json.loads(cell) if nested(f.type) and cell is not None
                       else iso(cell) if pa.types.is_timestamp(f.type) and cell is not None else cell)
    return out


def state_dirs(exported: dict[str, Any]) -> list[Path]:
    out, report = exported["parquet"]
    return [out / s["path"] for s in report["states"]]


def assert_same_rows_in_every_format(exports: dict[str, Any]) -> None:
    for parquet_dir in state_dirs(exports):
        relative = parquet_dir.relative_to(exports["parquet"][0])
        schema, rows = parquet_rows(parquet_dir)
        expected = canonical([{f.name: as_json(r[f.name], f.type) for f in schema} for r in rows])
        csv = [csv_as_parquet_spells_it(r, schema) for r in csv_rows(exports["csv"][0] / relative, schema)]
        assert canonical(csv) == expected, relative
        assert canonical(jsonl_rows(exports["jsonl"][0] / relative)) == expected, relative


# ---------------------------------------------------------------- tests


def test_every_format_has_the_hive_layout_and_the_row_counts_of_parquet(statekit_exports: dict[str, Any]) -> None:
    counts = {fmt: [(s["path"], s["rows"]) for s in report["states"]] for fmt, (_, report) in statekit_exports.items()}
    assert counts["csv"] == counts["jsonl"] == counts["parquet"]
    assert sum(rows for _, rows in counts["parquet"]) == 500 + 120 + 30 + 15 + 5 + 2 + 2
    for fmt, suffix in (("csv", ".csv"), ("jsonl", ".json")):
        out, report = statekit_exports[fmt]
        assert report["format"] == fmt
        for state in report["states"]:
            parts = [p for p in os.listdir(out / state["path"]) if p.startswith("part-")]
            assert parts and all(p.endswith(suffix) for p in parts)
            assert state["files"] == len(parts)
        assert not [p for p in os.listdir(out.parent) if p.startswith(".")]


def test_csv_and_jsonl_hold_the_parquet_rows_of_every_state_kind(statekit_exports: dict[str, Any]) -> None:
    assert_same_rows_in_every_format(statekit_exports)


def test_csv_spells_nested_values_as_json_text_and_timestamps_in_iso_8601(statekit_exports: dict[str, Any]) -> None:
    out, _ = statekit_exports["csv"]
    parts = sorted((out / "operator_uid=counter" / "state_name=tags").glob("part-*.csv"))
    assert {p.read_text(encoding="utf-8").split("\n", 1)[0] for p in parts} == {
        "key,namespace,user_key,value,expiry,key_group,subtask"}
    values = [json.loads(v) for p in parts for v in pacsv.read_csv(p).column("value").to_pylist()]
    assert len(values) == 120 and all(set(v) == {"n", "seen"} for v in values)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", v["seen"]) for v in values)
    session = "operator_uid=counter/state_name=session"
    query = "SELECT typeof(expiry), key, epoch_ms(expiry) FROM {}('{}/{}/*.{}') ORDER BY key"
    con = duckdb.connect()
    from_csv = con.execute(query.format("read_csv", out, session, "csv")).fetchall()
    parquet_out = statekit_exports["parquet"][0]
    from_parquet = con.execute(query.format("read_parquet", parquet_out, session, "parquet")).fetchall()
    assert len(from_csv) == 15 and from_csv == from_parquet
    assert {t for t, _, _ in from_csv} == {"TIMESTAMP WITH TIME ZONE"}


def test_jsonl_keeps_nesting(statekit_exports: dict[str, Any]) -> None:
    out, _ = statekit_exports["jsonl"]
    rows = jsonl_rows(out / "operator_uid=counter" / "state_name=history")
    assert len(rows) == 30 and all(isinstance(r["value"], list) for r in rows)
    assert set(rows[0]) == {"key", "namespace", "user_key", "value", "expiry", "key_group", "subtask"}
    glob = f"{out}/operator_uid=counter/state_name=count/*.json"
    counts = duckdb.connect().execute(f"SELECT key, value FROM read_json('{glob}', format='newline_delimited')")
    assert dict(counts.fetchall()) == {f"w{i}": i for i in range(500)}


def test_a_flink_savepoint_exports_the_same_rows_in_every_format(flink_exports: dict[str, Any]) -> None:
    counts = {fmt: {s["path"]: s["rows"] for s in report["states"]} for fmt, (_, report) in flink_exports.items()}
    assert counts["csv"] == counts["jsonl"] == counts["parquet"]
    assert counts["csv"]["operator_uid=running-count/state_name=python-state-count"] == 1000
    assert_same_rows_in_every_format(flink_exports)
    row = jsonl_rows(flink_exports["jsonl"][0] / "operator_uid=running-count" / "state_name=python-state-count")[0]
    assert set(row["key"]) == {"f0"} and isinstance(base64.b64decode(row["value"][0]), bytes)


def test_an_unknown_format_is_bad_input(spark: Any, sample: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["export", sample, "-o", str(tmp_path / "o"), "--format", "xml"])
    assert result.exit_code == 2 and "'xml' is not one of 'parquet', 'csv', 'jsonl'" in result.output
    assert not (tmp_path / "o").exists()
