"""The ``statekit`` Spark data source: typed columns, every state kind, metadata, pushdown, S3."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from statekit.readers.savepoint_reader import SavepointReader
from statekit.spark.source import read_state, scan_state
from statekit.statefmt.errors import BadInputError, PathNotFoundError, StateNotFoundError, UntrustedSerializerError
from statekit.statefmt.keygroups import assign_to_key_group, compute_operator_index_for_key_group
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

pytestmark = pytest.mark.spark


def load(spark: Any, path: str, state: str | None = None, **options: str) -> Any:
    reader = spark.read.format("statekit")
    if state:
        reader = reader.option("state", state)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(path)


def ms(value: dt.datetime | None) -> int | None:
    return None if value is None else round(value.timestamp() * 1000)  # int() truncates x.999 s to the ms below


def test_value_state_is_typed_and_equals_the_reader(spark: Any, sample: str) -> None:
    frame = load(spark, sample, "count")
    assert frame.schema.simpleString() == (
        "struct<key:string,namespace:string,user_key:string,value:bigint,expiry:timestamp,key_group:int,subtask:int>")
    rows = frame.collect()
    reader = SavepointReader.read(sample)
    assert sorted((r.key, r.value) for r in rows) == sorted(
        (e.key, e.value) for e in reader.read_keyed_state("counter", "count"))
    key_bytes = {f"w{i}": __import__("msgpack").packb(f"w{i}") for i in range(500)}
    for r in rows:
        assert r.key_group == assign_to_key_group(key_bytes[r.key], 128)
        assert r.subtask == compute_operator_index_for_key_group(128, 2, r.key_group)
        assert r.namespace is None and r.user_key is None and r.expiry is None


def test_map_state_with_struct_values(spark: Any, sample: str) -> None:
    frame = load(spark, sample, "tags", operator="counter")
    assert frame.schema["value"].dataType.simpleString() == "struct<n:bigint,seen:timestamp>"
    got = sorted((r.key, r.user_key, r.value.n, ms(r.value.seen)) for r in frame.collect())
    expected = sorted((e.key, e.user_key, e.value["n"], e.value["seen"])
                      for e in SavepointReader.read(sample).read_keyed_state("counter", "tags"))
    assert got == expected and len(got) == 120


def test_list_state_is_an_array_column(spark: Any, sample: str) -> None:
    frame = load(spark, sample, "history")
    assert frame.schema["value"].dataType.simpleString() == "array<double>"
    got = sorted((r.key, list(r.value)) for r in frame.collect())
    assert got == sorted((e.key, e.value) for e in SavepointReader.read(sample).read_keyed_state("counter", "history"))


def test_untyped_values_are_json_text_and_expired_entries_are_dropped(spark: Any, sample: str, now_ms: int) -> None:
    live = load(spark, sample, "session").collect()
    assert len(live) == 15 and all(r.key % 4 != 0 for r in live)
    assert {r.key: json.loads(r.value) for r in live}[1] == {"user": 1, "pages": [1, 2]}
    assert all(ms(r.expiry) == now_ms + 3_600_000 for r in live)
    everything = load(spark, sample, "session", includeExpired="true")
    assert everything.count() == 20


def test_operator_state_kinds(spark: Any, sample: str) -> None:
    reader = SavepointReader.read(sample)
    offsets = load(spark, sample, "offsets").collect()
    per_subtask = reader.read_operator_state_per_subtask("source", "offsets")
    assert sorted((r.subtask, r.value) for r in offsets) == sorted(
        (i, v) for i, part in enumerate(per_subtask) for v in part)
    assert all(r.key is None and r.key_group is None for r in offsets)
    assert sorted(r.value for r in load(spark, sample, "seen").collect()) == sorted(reader.read_union_state("source", "seen"))
    rules = load(spark, sample, "rules").collect()  # one copy, not one per subtask
    assert sorted((r.user_key, list(r.value)) for r in rules) == [("r1", [1, 2]), ("r2", [])]


def test_metadata_table(spark: Any, sample: str) -> None:
    rows = {(r.operator_uid, r.state_name): r for r in load(spark, sample).collect()}
    md = SavepointReader.read(sample).metadata
    assert set(rows) == {(op.uid, d.name) for op in md.operators for d in op.states}
    count = rows[("counter", "count")]
    assert (count.kind, count.keyed, count.parallelism, count.max_parallelism, count.entries, count.files) == (
        "value", True, 2, 128, 500, 2)
    assert count.bytes == sum(f.size for st in md.operator("counter").subtasks for f in st.files if f.state == "count")
    assert rows[("source", "rules")].kind == "broadcast"


def test_key_group_and_key_filters_are_pushed_down(spark: Any, sample: str) -> None:
    frame = read_state(spark, sample, "counter", "count")
    assert frame.rdd.getNumPartitions() >= 2 * spark.sparkContext.defaultParallelism
    assert frame.filter("key_group = 5").rdd.getNumPartitions() == 1
    everything = {(r.key, r.key_group) for r in frame.collect()}
    in_range = frame.filter("key_group >= 10 and key_group < 20").collect()
    assert {(r.key, r.key_group) for r in in_range} == {(k, g) for k, g in everything if 10 <= g < 20}
    one = frame.filter("key = 'w42'")
    assert one.rdd.getNumPartitions() == 1
    assert [(r.key, r.value) for r in one.collect()] == [("w42", 42)]
    assert frame.filter("key in ('w1', 'w2', 'nope')").count() == 2


def test_pickle_is_refused_unless_trusted(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "pickled")
    descriptor = StateDescriptor("p", StateKind.VALUE, value_serializer="pickle")
    SavepointWriter.new_savepoint(128).with_operator("op", {descriptor: [(1, {"a": 1})]}).write(path)
    with pytest.raises(Exception, match="trust"):
        load(spark, path, "p").collect()
    assert [json.loads(r.value) for r in load(spark, path, "p", trustPickle="true").collect()] == [{"a": 1}]


def test_unknown_state_is_a_clear_error(spark: Any, sample: str) -> None:
    with pytest.raises(Exception, match="no operator has a state named 'nope'"):
        load(spark, sample, "nope").collect()


@pytest.mark.parametrize(("operator", "state", "options"), [
    ("counter", "count", {}), ("counter", "tags", {}), ("counter", "history", {}), ("counter", "session", {}),
    ("counter", "session", {"includeExpired": "true"}), ("counter", "count", {"raw": "true"}),
    ("counter", "tags", {"raw": "true"}), ("source", "offsets", {}), ("source", "seen", {}),
    ("source", "rules", {}), ("source", "offsets", {"raw": "true"}), (None, None, {})])
def test_a_scan_gives_the_data_source_rows_and_schema(spark: Any, sample: str, operator: str | None,
                                                      state: str | None, options: dict[str, str]) -> None:
    scanned = scan_state(spark, sample, operator, state, options=options)
    loaded = read_state(spark, sample, operator, state, options=options)
    assert scanned.schema == loaded.schema
    rows = sorted(map(str, scanned.collect()))
    assert rows == sorted(map(str, loaded.collect())) and rows


def test_a_scan_starts_no_data_source_planner(spark: Any, sample: str) -> None:
    frame = scan_state(spark, sample, "counter", "count", partitions=5)
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert "MapInArrow" in plan and "PythonDataSource" not in plan and "BatchScan" not in plan
    assert frame.rdd.getNumPartitions() >= 5
    assert scan_state(spark, sample, "counter", "count", options={"numPartitions": "3"}).rdd.getNumPartitions() == 3
    assert read_state(spark, sample, "counter", "count")._jdf.queryExecution().executedPlan().toString().count(
        "BatchScan") == 1  # the data source's plan, for contrast


def test_a_scan_of_an_empty_state_has_no_rows(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "empty")
    SavepointWriter.new_savepoint(128).with_operator("op", {StateDescriptor("v", StateKind.VALUE, value_type="int"): []},
                                                       parallelism=2).write(path)
    frame = scan_state(spark, path, "op", "v")
    assert frame.collect() == [] and frame.schema["value"].dataType.simpleString() == "bigint"


def test_a_scan_fails_in_the_driver_on_bad_input(spark: Any, sample: str, tmp_path: Path) -> None:
    with pytest.raises(StateNotFoundError, match="no operator has a state named 'nope'"):
        scan_state(spark, sample, None, "nope")
    with pytest.raises(PathNotFoundError, match=str(tmp_path / "missing")):
        scan_state(spark, str(tmp_path / "missing"), "counter", "count")
    with pytest.raises(BadInputError, match="storageOptions is not valid JSON"):
        scan_state(spark, sample, "counter", "count", options={"storageOptions": "{"})
    path = str(tmp_path / "pickled")
    SavepointWriter.new_savepoint(128).with_operator(
        "op", {StateDescriptor("p", StateKind.VALUE, value_serializer="pickle"): [(1, {"a": 1})]}).write(path)
    with pytest.raises(UntrustedSerializerError, match="trust"):
        scan_state(spark, path, "op", "p")
    assert [json.loads(r.value) for r in scan_state(spark, path, "op", "p", options={"trustPickle": "true"}).collect()
            ] == [{"a": 1}]


@pytest.mark.s3
def test_s3_gives_the_same_rows_as_local_disk(spark: Any, sample: str, sample_writer: Any,
                                             s3_server: dict[str, Any], s3_bucket: str) -> None:
    remote = sample_writer(f"{s3_bucket}/sample", storage_options=s3_server["storage_options"])
    options = {"storageOptions": json.dumps(s3_server["storage_options"])}
    for state in ("count", "tags", "offsets"):
        local = sorted(map(str, load(spark, sample, state).drop("expiry").collect()))
        over_s3 = sorted(map(str, load(spark, remote, state, **options).drop("expiry").collect()))
        assert over_s3 == local and local
