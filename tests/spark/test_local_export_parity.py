"""``statekit export --engine local`` writes what ``--engine spark`` writes: the same state
directories, ``part-*`` files and ``_SUCCESS`` markers, the same columns with the same types and
the same rows — in Parquet, and line for line in CSV and JSON Lines — for statekit snapshots
(every state kind, TTL, text that needs quoting, doubles Java spells its own way, window state)
and Apache Flink snapshots (canonical, native RocksDB, PyFlink)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.spark.formats import FORMATS
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "golden"
FLINK_SNAPSHOTS = {
    "flink-canonical": GOLDEN / "flink-2.3" / "hashmap" / "savepoints" / "savepoint-962f67-bfc4c25148ed",
    "flink-native-rocksdb": GOLDEN / "flink-2.3" / "rocksdb-incremental" / "savepoints" / "savepoint-668cf7-10a2b9713d30",
    "pyflink-canonical": GOLDEN / "pyflink-2.3" / "hashmap" / "savepoints" / "savepoint-48634f-b2be849ccf0d",
}

TEXT = StateDescriptor("text", StateKind.VALUE, value_type="string")
NUMBERS = StateDescriptor("numbers", StateKind.LIST, value_type="float")
BLOBS = StateDescriptor("blobs", StateKind.MAP, value_type="bytes", user_key_type="string")
NESTED = StateDescriptor("nested", StateKind.VALUE, value_type="struct<name:string,tags:list<string>,at:timestamp>")
ANY = StateDescriptor("any", StateKind.VALUE)  # no declared type: JSON text
STRINGS = ["plain", "a,b", 'say "hi"', "two\nlines", "", "ünïcødé ✓", "back\\slash", "tab\there", "\r", " padded ",
           "\ttabbed"]
DOUBLES = [0.1, 1.0, 100.0, 1e20, 1e-5, 12345678.0, 1234567.0, -2.5e-10, 3.141592653589793, 0.001, -0.0]


def write_text_savepoint(path: Path) -> str:
    (SavepointWriter.new_savepoint(128).with_operator("text", {
        TEXT: [(f"k{i}", s) for i, s in enumerate(STRINGS)] + [("null", None)],
        NUMBERS: [(i, [d, -d]) for i, d in enumerate(DOUBLES)],
        BLOBS: [("b", "x", b"\x00\xffbytes"), ("b", "y,z", b""), ("c", 'q"', b"\n")],
        NESTED: [(1, {"name": "a,b", "tags": ["x", 'y"z'], "at": 1_700_000_000_123}),
                 (2, {"name": None, "tags": [], "at": None}), (3, {"name": "", "tags": [None, "n"], "at": 0})],
        ANY: [(1, {"a": [1, 2.5, None], "b": "c,d"}), (2, [True, False]), (3, 1e20), (4, "x")],
    }, parallelism=2).write(str(path)))
    return str(path)


def _window_helpers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("window_state_helpers", ROOT / "readers" / "test_window_state.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def snapshots(sample: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("parity-snapshots")
    helpers = _window_helpers()
    return {"sample": sample, "text": write_text_savepoint(root / "text"),
            "windows": str(helpers.write_window_savepoint(root / "windows")),
            **{name: str(path) for name, path in FLINK_SNAPSHOTS.items()}}


def export(source: str, out: Path, engine: str, fmt: str) -> dict[str, Any]:
    args = ["export", source, "-o", str(out), "--engine", engine, "--format", fmt, "--json"]
    if engine == "spark":
        args += ["--master", "local[2]"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def state_dirs(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.glob("operator_uid=*/state_name=*"))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", ["sample", "text", "windows", *FLINK_SNAPSHOTS])
def test_local_and_spark_write_the_same_files_columns_and_rows(spark: Any, snapshots: dict[str, str], name: str,
                                                              fmt: str, tmp_path: Path) -> None:
    on_spark = export(snapshots[name], tmp_path / "spark", "spark", fmt)
    local = export(snapshots[name], tmp_path / "local", "local", fmt)
    assert (on_spark["engine"], local["engine"], local["master"]) == ("spark", "local", None)
    assert [(s["operator_uid"], s["state_name"], s["kind"], s["rows"]) for s in local["states"]] == \
           [(s["operator_uid"], s["state_name"], s["kind"], s["rows"]) for s in on_spark["states"]]
    assert local["skipped"] == on_spark["skipped"]
    dirs = state_dirs(tmp_path / "spark")
    assert dirs and state_dirs(tmp_path / "local") == dirs
    suffix = {"parquet": ".snappy.parquet", "csv": ".csv", "jsonl": ".json"}[fmt]
    for relative in dirs:
        spark_dir, local_dir = tmp_path / "spark" / relative, tmp_path / "local" / relative
        names = sorted(p.name for p in local_dir.iterdir())
        assert names[0] == "_SUCCESS" and (local_dir / "_SUCCESS").stat().st_size == 0
        assert names[1:] and all(n.startswith("part-0") and n.endswith("-c000" + suffix) for n in names[1:])
        assert {p.name for p in spark_dir.iterdir() if not p.name.startswith(".")} >= {"_SUCCESS"}
        if fmt == "parquet":
            spark_table = ds.dataset(spark_dir, format="parquet").to_table()
            local_table = ds.dataset(local_dir, format="parquet").to_table()
            assert local_table.schema.remove_metadata() == spark_table.schema.remove_metadata(), relative
            assert _rows(local_table) == _rows(spark_table), relative
        else:
            spark_header, spark_lines = _lines(spark_dir, suffix, fmt)
            local_header, local_lines = _lines(local_dir, suffix, fmt)
            if spark_lines:  # Spark writes no header into a file without rows
                assert local_header == spark_header, relative
            assert local_lines == spark_lines, relative


def _rows(table: Any) -> list[str]:
    return sorted(json.dumps(row, default=repr, sort_keys=True) for row in table.to_pylist())


def _lines(directory: Path, suffix: str, fmt: str) -> tuple[str | None, list[str]]:
    """(the header line, the sorted data records) of a table's text files; a CSV record may span lines."""
    import csv
    import io

    header = None
    records: list[str] = []
    for part in sorted(directory.glob(f"part-*{suffix}")):
        text = part.read_text(encoding="utf-8")
        if fmt == "csv":
            rows = list(csv.reader(io.StringIO(text, newline="")))
            raw = _csv_records(text)
            if raw:
                header, raw = raw[0], raw[1:]
            assert len(raw) == max(0, len(rows) - 1)
            records += raw
        else:
            records += text.splitlines()
    return header, sorted(records)


def _csv_records(text: str) -> list[str]:
    """The records of a CSV text as written (quoted line breaks kept inside their record)."""
    records, current, quoted = [], [], False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        if ch == "\n" and not quoted:
            records.append("".join(current))
            current = []
            continue
        current.append(ch)
    if current:
        records.append("".join(current))
    return records
