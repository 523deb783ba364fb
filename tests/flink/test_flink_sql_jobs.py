"""A real Flink SQL job's state (tests/golden/flink-sql-2.3): group aggregates over RowData.

Written by PyFlink 2.3 (scripts/gen_flink_sql_fixtures.py): four ``GROUP BY`` aggregates, on
the hashmap backend (canonical savepoint, retained heap checkpoint) and RocksDB (canonical and
native savepoints).
``expected.json`` holds every group's aggregates computed from the input rows in Python and
the planner's accumulator layout; every savepoint decodes to it, inspects with the SQL
types, verifies, exports on the local engine and diffs equal to the others. The third
aggregate's ``LAST_VALUE`` accumulators nest named ROWs holding an ARRAY, a MAP and a STRING;
the fourth's ``DISTINCT`` aggregates keep their values in map states of their own.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from statekit.cli.main import cli
from statekit.flink.entries import read_keyed_state
from statekit.flink.storage import load_snapshot

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "flink-sql-2.3"
# (variant, snapshot): the savepoints, and the hashmap job's retained heap checkpoint (moved: read in place)
SAVEPOINTS = [("hashmap", "canonical"), ("hashmap", "checkpoint"), ("rocksdb", "canonical"), ("rocksdb", "native"),
              ("hashmap-ttl", "canonical")]
KEY_TYPES = {"by_user": "RowData<STRING NOT NULL>", "by_bucket": "RowData<INT NOT NULL, BOOLEAN NOT NULL>",
             "last": "RowData<INT NOT NULL, INT NOT NULL, STRING NOT NULL>", "distincts": "RowData<INT NOT NULL>"}
ACC_TYPES = {
    "by_user": "RowData<BIGINT, DOUBLE, DOUBLE, DECIMAL(38, 2), TIMESTAMP(3), TIMESTAMP(6), DATE>",
    "by_bucket": "RowData<BIGINT, FLOAT, TINYINT, SMALLINT, INT, TIMESTAMP_LTZ(3), STRING, TIME(0)>",
    "last": "RowData<ROW<`lastValue` ARRAY<INT NOT NULL>, `lastOrder` BIGINT>, "
            "ROW<`lastValue` MAP<CHAR(1) NOT NULL, BIGINT NOT NULL>, `lastOrder` BIGINT>, "
            "ROW<`lastValue` STRING, `lastOrder` BIGINT>>",
    "distincts": "RowData<BIGINT, TINYINT, BIGINT, RAW, RAW>",  # RAW: the data views' placeholders
}


def savepoint(variant: str, kind: str) -> Path:
    facts = json.loads((GOLDEN / variant / "facts.json").read_text())
    return GOLDEN / variant / (facts["checkpoint"] if kind == "checkpoint" else facts["savepoints"][kind])


def expected(variant: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / variant / "expected.json").read_text())
    return data


def statekit(*args: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(cli, [*args, "--json"])
    try:
        return result.exit_code, json.loads(result.stdout)
    except json.JSONDecodeError:
        raise AssertionError(result.output) from None


def operator_ids(path: Path) -> dict[str, str]:
    """Operator name -> id (SQL operators have generated ids and no uid)."""
    return {op.name or "": op.operator_id for op in load_snapshot(str(path)).metadata.operators}


def _as_truth(value: Any) -> Any:
    """A decoded accumulator value in expected.json's spelling (ISO text for dates and times)."""
    if isinstance(value, datetime.date):
        return value.isoformat()
    return value


def _ms_text(epoch_ms: int) -> str:
    return (datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=epoch_ms)).isoformat(
        timespec="milliseconds")


@pytest.mark.parametrize(("variant", "kind"), SAVEPOINTS)
def test_group_aggregates_decode_to_the_truth(variant: str, kind: str) -> None:
    assert_decodes_to_the_truth(savepoint(variant, kind), variant)


def assert_decodes_to_the_truth(path: Path, variant: str) -> None:
    """Every group's accumulators in ``path`` are expected.json's (of ``variant``)."""
    ids = operator_ids(path)
    snapshot = load_snapshot(str(path))
    for query, truth in expected(variant)["operators"].items():
        got = {}
        for entry in read_keyed_state(snapshot, ids[truth["name"]], "accState"):
            key = tuple(entry.key[f"f{i}"] for i in range(len(truth["key"])))
            got[key] = entry.value
        assert len(got) == len(truth["groups"]), query
        for group in truth["groups"]:
            acc = got[tuple(group["key"][name] for name in truth["key"])]
            assert len(acc) == len(truth["accumulators"]), query
            for i, name in enumerate(truth["accumulators"]):
                value = _as_truth(acc[f"f{i}"])
                if name == "first_ts":  # TIMESTAMP(3): epoch ms of the wall-clock time
                    value = _ms_text(value)
                assert value == group["result"][name], (query, group["key"], name)


@pytest.mark.parametrize(("variant", "kind"), SAVEPOINTS)
def test_distinct_values_decode_from_their_map_states(variant: str, kind: str) -> None:
    """``COUNT(DISTINCT user_id)``, ``SUM(DISTINCT tiny)``: one MapView state per distinct aggregate
    (``distinctAcc_N``, keys by Flink's ``ExternalSerializer``), the value a Long per distinct value."""
    path = savepoint(variant, kind)
    snapshot = load_snapshot(str(path))
    truth = expected(variant)["operators"]["distincts"]
    for state, rows in truth["states"].items():
        got = sorted(({"bucket": e.key["f0"]}["bucket"], e.user_key, e.value)
                     for e in read_keyed_state(snapshot, truth["name"], state))
        assert got == sorted((r["key"]["bucket"], r["user_key"], r["value"]) for r in rows), state
    for state in ("distinctAcc_0_null_state", "distinctAcc_1_null_state"):  # no null values were seen
        assert list(read_keyed_state(snapshot, truth["name"], state)) == []


def test_state_with_a_ttl_carries_each_groups_last_access_time() -> None:
    """``table.exec.state.ttl``: accumulators wrapped in Flink's TTL serializer; the time goes to ``expiry``."""
    path = savepoint("hashmap-ttl", "canonical")
    snapshot = load_snapshot(str(path))
    facts = json.loads((GOLDEN / "hashmap-ttl" / "facts.json").read_text())
    assert facts["state_ttl"] == "1 d"
    for query, truth in expected("hashmap-ttl")["operators"].items():
        entries = list(read_keyed_state(snapshot, truth["name"], "accState"))
        assert len(entries) == len(truth["groups"]), query
        stamps = {e.expiry for e in entries}
        assert None not in stamps and min(stamps) > 1_700_000_000_000  # epoch ms of the job's run
        assert max(stamps) - min(stamps) < 600_000  # all written within the job's few seconds (and its checkpoints)


@pytest.mark.parametrize(("variant", "kind"), SAVEPOINTS)
def test_inspect_names_the_sql_types_and_verify_passes(variant: str, kind: str) -> None:
    path = savepoint(variant, kind)
    code, report = statekit("inspect", str(path))
    assert code == 0
    by_name = {op["name"]: op for op in report["operators"]}
    for query, truth in expected(variant)["operators"].items():
        op = by_name[truth["name"]]
        assert op["uid"] is None and op["keyed_state_problem"] is None
        (acc,) = [st for st in op["keyed_states"] if st["name"] == "accState"]
        assert acc["problem"] is None
        value = {s["key"]: s["short_name"] for s in acc["serializers"]}["VALUE_SERIALIZER"]
        assert value == (f"Ttl<{ACC_TYPES[query]}>" if variant.endswith("-ttl") else ACC_TYPES[query])
    code, verified = statekit("verify", str(path))
    assert (code, verified["ok"]) == (0, True)


def test_inspect_text_shows_the_operator_name_and_key_types() -> None:
    result = CliRunner().invoke(cli, ["inspect", str(savepoint("hashmap", "canonical"))], terminal_width=250)
    assert result.exit_code == 0, result.output
    assert "Operator GroupAggregate[4] (id " in result.output
    assert ACC_TYPES["by_user"] in result.output


def test_an_operator_without_uid_is_found_by_its_name_or_id() -> None:
    from statekit.statefmt.errors import StateNotFoundError

    metadata = load_snapshot(str(savepoint("hashmap", "canonical"))).metadata
    by_name = metadata.operator("GroupAggregate[14]")
    assert by_name.uid is None and metadata.operator(by_name.operator_id) is by_name
    with pytest.raises(StateNotFoundError, match="GroupAggregate"):
        metadata.operator("GroupAggregate[99]")


def test_the_key_types_are_read_from_the_key_serializer() -> None:
    from statekit.flink.sources import keyed_sources

    snapshot = load_snapshot(str(savepoint("hashmap", "canonical")))
    ids = operator_ids(savepoint("hashmap", "canonical"))
    for query, truth in expected("hashmap")["operators"].items():
        source = next(iter(keyed_sources(snapshot, snapshot.metadata.operator(ids[truth["name"]]))))
        assert source.meta.key_serializer is not None
        assert source.meta.key_serializer.short_name == KEY_TYPES[query]


@pytest.mark.parametrize(("variant", "kind"), [("hashmap", "canonical"), ("rocksdb", "native")])
def test_local_export_has_typed_columns(variant: str, kind: str, tmp_path: Path) -> None:
    path = savepoint(variant, kind)
    by_user = operator_ids(path)["GroupAggregate[4]"]
    out = tmp_path / "out"
    code, report = statekit("export", str(path), "-o", str(out), "--engine", "local",  # matched by its name
                            "--operator", "GroupAggregate[4]", "--state", "accState")
    assert code == 0, report
    table = pq.read_table(out / f"operator_uid={by_user}" / "state_name=accState")
    assert table.num_rows == 50
    value = table.schema.field("value").type
    assert [str(value.field(i).type) for i in range(value.num_fields)] == [
        "int64", "double", "double", "string", "timestamp[us]", "string", "date32[day]"]
    assert str(table.schema.field("key").type) == "struct<f0: string>"
    rows = {r["key"]["f0"]: r["value"] for r in table.to_pylist()}
    truth = {g["key"]["user_id"]: g["result"] for g in expected(variant)["operators"]["by_user"]["groups"]}
    assert {k: (v["f0"], v["f3"], v["f6"].isoformat()) for k, v in rows.items()} == {
        k: (t["cnt"], t["price_sum"], t["last_day"]) for k, t in truth.items()}
    assert {k: v["f4"].isoformat(timespec="milliseconds") for k, v in rows.items()} == {
        k: t["first_ts"] for k, t in truth.items()}


@pytest.mark.parametrize(("variant", "kind"), [("hashmap", "checkpoint"), ("rocksdb", "canonical"), ("rocksdb", "native"),
                                               ("hashmap-ttl", "canonical")])
def test_every_savepoint_diffs_equal_to_the_hashmap_one(variant: str, kind: str) -> None:
    code, report = statekit("diff", str(savepoint("hashmap", "canonical")), str(savepoint(variant, kind)))
    assert code == 0, report
    assert report["equal"] is True
    assert report["totals"]["unchanged"] == 50 + 14 + 150 + 7 + 350 + 700  # accumulators, distinct values


@pytest.mark.parametrize(("variant", "max_parallelism"), [("hashmap", 256), ("hashmap", 100), ("rocksdb", 64),
                                                          ("hashmap-ttl", 1000)])
def test_a_rescaled_sql_savepoint_keeps_every_group_in_the_key_group_of_its_binary_row(
        tmp_path: Path, variant: str, max_parallelism: int) -> None:
    """``rescale --max-parallelism`` of a SQL savepoint: every key moves to the key group of its
    ``BinaryRowData.hashCode``, every accumulator and distinct value decodes as before and the
    rest of the savepoint is kept (the restore in real Flink: test_flink_sql_rescale_restore.py)."""
    from statekit.flink.key_hash import key_hasher
    from statekit.flink.keygroups import flink_murmur_hash
    from statekit.flink.sources import keyed_sources, prefix_bytes

    source, out = savepoint(variant, "canonical"), tmp_path / "out"
    code, report = statekit("rescale", str(source), "--max-parallelism", str(max_parallelism), "-o", str(out))
    assert code == 0, report
    ids = operator_ids(source)
    sql = {ids[truth["name"]] for truth in expected(variant)["operators"].values()}
    assert {op["label"] for op in report["operators"] if op["action"] == "regroup"} == sql
    assert_decodes_to_the_truth(out, variant)
    code, diffed = statekit("diff", str(source), str(out))
    assert (code, diffed["equal"], diffed["totals"]["unchanged"]) == (0, True, 1271), diffed
    snapshot = load_snapshot(str(out))
    assert {op.max_parallelism for op in snapshot.metadata.operators} == {max_parallelism}
    assert [op.operator_id for op in snapshot.metadata.operators] == list(operator_ids(source).values())
    placed = 0
    for op in snapshot.metadata.operators:
        if op.operator_id not in sql:
            continue
        assert len(op.subtasks) == 2
        for keyed in keyed_sources(snapshot, op):
            assert keyed.meta.key_serializer is not None
            hasher = key_hasher(keyed.meta.key_serializer.tree)
            assert hasher is not None
            for state in keyed.meta.states:
                for key_group, key, _, where in keyed.entries(snapshot, state.name, prefix_bytes(max_parallelism), None):
                    code = hasher.java_hash(key, prefix_bytes(max_parallelism), where=where)[0]
                    assert flink_murmur_hash(code) % max_parallelism == key_group
                    assert key_group in keyed.handle.key_group_range
                    placed += 1
    assert placed == 1271
    code, verified = statekit("verify", str(out))
    assert (code, verified["ok"]) == (0, True)


def test_modify_renames_and_removes_sql_operators(tmp_path: Path) -> None:
    """SQL operators have no uid: ``modify`` names them by id (``--rename-uid ID=NEW`` gives one
    Flink's id of NEW) or by name; the other operators' state is copied as it is."""
    from statekit.flink.uids import operator_id_for_uid

    source = savepoint("hashmap", "canonical")
    ids = operator_ids(source)
    truth = expected("hashmap")["operators"]
    by_user, distincts = ids[truth["by_user"]["name"]], ids[truth["distincts"]["name"]]
    out = tmp_path / "out"
    code, report = statekit("modify", str(source), "--rename-uid", f"{by_user}=by-user-v2",
                            "--remove-operator", distincts, "-o", str(out))
    assert code == 0, report
    assert [r["label"] for r in report["removed"]] == [distincts]
    snapshot = load_snapshot(str(out))
    renamed = snapshot.metadata.operator("by-user-v2")
    assert renamed.operator_id == operator_id_for_uid("by-user-v2")
    got = {e.key["f0"]: e.value["f0"] for e in read_keyed_state(snapshot, "by-user-v2", "accState")}
    assert got == {g["key"]["user_id"]: g["result"]["cnt"] for g in truth["by_user"]["groups"]}
    assert distincts not in {op.operator_id for op in snapshot.metadata.operators}
    code, diffed = statekit("diff", str(source), str(out), "--operator", ids[truth["last"]["name"]])
    assert (code, diffed["equal"]) == (0, True), diffed


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12708), st.integers(0, 255)), min_size=1, max_size=4))
def test_a_damaged_sql_state_header_is_a_statekit_error_or_a_named_problem(flips: list[tuple[int, int]]) -> None:
    """Bytes of the keyed-state header (the Java-serialized LogicalTypes of nested ROW, ARRAY and MAP
    accumulators) changed: reading fails with one StatekitError or names a state's problem, never crashes."""
    import shutil
    import tempfile

    from statekit.flink.entries import decodable_states
    from statekit.statefmt.errors import StatekitError

    source = savepoint("hashmap", "canonical")
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / source.name
        shutil.copytree(source, copy)
        snapshot = load_snapshot(str(copy))
        op = snapshot.metadata.operator("GroupAggregate[14]")
        handle = op.subtasks[1].managed_keyed_state
        assert handle is not None and handle.delegate is not None and handle.delegate.path is not None
        stream = copy / handle.delegate.path  # a relative file of the savepoint
        data = bytearray(stream.read_bytes())
        for at, byte in flips:
            data[at] = byte
        stream.write_bytes(bytes(data))
        try:
            for support in decodable_states(load_snapshot(str(copy)), op.operator_id):
                if support.decoder is not None:
                    list(read_keyed_state(load_snapshot(str(copy)), op.operator_id, support.name))
        except StatekitError:
            pass


def test_a_sql_savepoint_converts_to_statekit(tmp_path: Path) -> None:
    """Every SQL state converts (TIMESTAMP as statekit timestamps, DATE as ISO text) and reads back."""
    from statekit.readers.savepoint_reader import SavepointReader

    path = savepoint("hashmap", "canonical")
    result = CliRunner().invoke(cli, ["convert", str(path), "--to", "statekit", "-o", str(tmp_path / "sk")])
    assert result.exit_code == 0, result.output
    reader = SavepointReader.read(str(tmp_path / "sk"))
    truth = expected("hashmap")["operators"]["by_user"]
    by_user = operator_ids(path)[truth["name"]]
    accs = {e.key["f0"]: e.value for e in reader.read_keyed_state(by_user, "accState")}
    assert {k: (v["f0"], v["f3"], v["f4"], v["f6"]) for k, v in accs.items()} == {
        g["key"]["user_id"]: (g["result"]["cnt"], g["result"]["price_sum"],
                              round((datetime.datetime.fromisoformat(g["result"]["first_ts"])
                                     - datetime.datetime(1970, 1, 1)).total_seconds() * 1000),
                              g["result"]["last_day"]) for g in truth["groups"]}
    distinct = expected("hashmap")["operators"]["distincts"]
    views = sorted((e.key["f0"], e.user_key) for e in reader.read_keyed_state(
        operator_ids(path)[distinct["name"]], "distinctAcc_0"))
    assert views == sorted((r["key"]["bucket"], r["user_key"]) for r in distinct["states"]["distinctAcc_0"])
