"""``statekit.spark.engine``: the one place that chooses the engine and the exporter (no JVM here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from statekit.readers.diff import DiffSpec
from statekit.spark import engine
from statekit.spark.export import ExportResult, ExportSpec
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

FLINK_SAVEPOINT = (Path(__file__).resolve().parents[1] / "golden" / "flink-2.3" / "hashmap" / "savepoints"
                   / "savepoint-962f67-bfc4c25148ed")
COUNT = StateDescriptor("count", StateKind.VALUE, value_type="int")


def savepoint(path: Path, rows: int) -> str:
    SavepointWriter.new_savepoint(128).with_operator("counter", {COUNT: [(f"k{i}", i) for i in range(rows)]},
                                                      parallelism=2).write(str(path))
    return str(path)


def test_the_local_diff_loads_neither_pyspark_nor_a_spark_module(tmp_path: Path) -> None:
    a, b = savepoint(tmp_path / "a", 10), savepoint(tmp_path / "b", 12)
    out = str(tmp_path / "out")
    code = ("import sys; from statekit.spark.engine import diff; from statekit.readers.diff import DiffSpec; "
            f"r = diff(DiffSpec({a!r}, {b!r}, output={out!r})); print(r.equal, r.states[0].only_in_b); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j') "
            "or m.startswith('statekit.spark.') and m not in ('statekit.spark.engine', 'statekit.spark.session')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["False 2", "[]"]
    assert (tmp_path / "out" / "operator_uid=counter" / "state_name=count").is_dir()


def test_an_unknown_engine_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match=r"^--engine 'flink': expected one of local, spark$"):
        engine.diff(DiffSpec(str(tmp_path / "missing"), str(tmp_path / "missing")), "flink")


def test_spark_without_pyspark_is_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)  # as if PySpark were not installed
    a = savepoint(tmp_path / "a", 3)
    with pytest.raises(BadInputError, match=r"^--engine spark needs PySpark: pip install 'statekit\[spark\]'$"):
        engine.diff(DiffSpec(a, a), "spark")
    with pytest.raises(BadInputError, match=r"^statekit export on Spark needs PySpark"):
        engine.export(ExportSpec(a, str(tmp_path / "out")), "spark")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]
    # the local engine (and auto, which picks it) needs no PySpark
    result = engine.export(ExportSpec(a, str(tmp_path / "out")))
    assert (result.engine, result.master, result.rows) == ("local", None, 3)
    assert result.engine_note is not None and result.engine_note.startswith("auto: the local engine for ")


def test_export_chooses_the_exporter_by_the_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyspark")
    from statekit.spark import export as statekit_export
    from statekit.spark import flink_export

    chosen: list[tuple[str, str]] = []

    def exporter(kind: str) -> Any:
        def run(spec: ExportSpec, *_: Any, **__: Any) -> ExportResult:
            chosen.append((kind, spec.path))
            return ExportResult(spec.path, spec.output, spec.fmt, "local[2]", (), 0.0)

        return run

    monkeypatch.setattr(statekit_export, "export_statekit", exporter("statekit"))
    monkeypatch.setattr(flink_export, "export_flink", exporter("flink"))
    a = savepoint(tmp_path / "a", 3)
    for path in (a, str(FLINK_SAVEPOINT), str(FLINK_SAVEPOINT / "_metadata"), str(tmp_path / "missing")):
        engine.export(ExportSpec(path, str(tmp_path / "out")), "spark")
    assert [kind for kind, _ in chosen] == ["statekit", "flink", "flink", "statekit"]
    assert chosen[1] == ("flink", str(FLINK_SAVEPOINT))


def test_an_export_spec_refuses_an_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match=r"^unsupported export format 'xml' \(supported: parquet, csv, jsonl\)$"):
        ExportSpec(str(tmp_path), str(tmp_path / "out"), fmt="xml")


def test_specs_are_frozen() -> None:
    spec: Any = DiffSpec("a", "b")
    with pytest.raises(AttributeError):
        spec.limit = 3
