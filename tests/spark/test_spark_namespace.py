"""The ``namespace`` column of the ``statekit`` data source and of ``export``: typed by the
state's declared ``namespace_type`` (``list<int>``: ``array<bigint>``), JSON text without one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pyspark.sql.types import ArrayType, LongType, StringType

from statekit.spark.engine import export
from statekit.spark.export import ExportSpec
from statekit.spark.session import SparkSettings
from statekit.statefmt.errors import SerializationError
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

pytestmark = pytest.mark.spark

PER_DAY = StateDescriptor("per-day", StateKind.VALUE, value_type="int", namespace_type="string")
SPANS = StateDescriptor("spans", StateKind.MAP, value_type="int", user_key_type="string", namespace_type="list<int>")
UNDECLARED = StateDescriptor("undeclared", StateKind.VALUE, value_type="int")
MISFIT = StateDescriptor("misfit", StateKind.VALUE, value_type="int", namespace_type="int")


@pytest.fixture(scope="module")
def savepoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("namespaced") / "sp")
    (SavepointWriter.new_savepoint(128).with_operator("op", {
        PER_DAY: [("a", "2026-11-23", 1), ("a", "2026-11-24", 2), ("b", None, 3)],
        SPANS: [("a", [0, 10], "x", 1), ("b", [], "y", 2)],
        UNDECLARED: [("a", {"day": 1}, 1), ("b", None, 2)],
    }, parallelism=2).with_operator("bad", {MISFIT: [("a", "not-an-int", 1)]}, parallelism=1).write(path))
    return path


def _load(spark: Any, path: str, state: str, operator: str = "op", **options: str) -> Any:
    reader = spark.read.format("statekit").option("operator", operator).option("state", state)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(path)


def test_a_declared_namespace_type_types_the_column(spark: Any, savepoint: str) -> None:
    per_day = _load(spark, savepoint, "per-day")
    assert per_day.schema["namespace"].dataType == StringType()
    assert sorted((r.key, r.namespace, r.value) for r in per_day.collect()) == [
        ("a", "2026-11-23", 1), ("a", "2026-11-24", 2), ("b", None, 3)]  # plain text, not JSON; void: null
    spans = _load(spark, savepoint, "spans")
    assert spans.schema["namespace"].dataType == ArrayType(LongType(), True)
    assert sorted((r.key, r.namespace, r.user_key) for r in spans.collect()) == [("a", [0, 10], "x"), ("b", [], "y")]


def test_an_undeclared_namespace_stays_json_text(spark: Any, savepoint: str) -> None:
    frame = _load(spark, savepoint, "undeclared")
    assert frame.schema["namespace"].dataType == StringType()
    assert sorted((r.key, r.namespace) for r in frame.collect()) == [("a", '{"day":1}'), ("b", None)]


def test_a_namespace_that_does_not_fit_its_type_names_the_option(spark: Any, savepoint: str) -> None:
    from statekit.spark.session import spark_errors

    misfit = r"state 'misfit': a namespace does not fit .*namespaceType=json"
    with pytest.raises(SerializationError, match=misfit), spark_errors():
        _load(spark, savepoint, "misfit", "bad").collect()
    as_text = _load(spark, savepoint, "misfit", "bad", namespaceType="json")
    assert [r.namespace for r in as_text.collect()] == ['"not-an-int"']


def test_export_keeps_the_namespace_type(spark: Any, savepoint: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    export(ExportSpec(savepoint, str(out), operator="op", spark=SparkSettings("local[2]")), "spark")
    spans = ds.dataset(out / "operator_uid=op" / "state_name=spans").to_table()
    assert spans.schema.field("namespace").type == pa.list_(pa.int64())
    assert "window_start" not in spans.schema.names  # not a window operator
    per_day = ds.dataset(out / "operator_uid=op" / "state_name=per-day").to_table()
    assert sorted(per_day.column("namespace").to_pylist(), key=str) == ["2026-11-23", "2026-11-24", None]
