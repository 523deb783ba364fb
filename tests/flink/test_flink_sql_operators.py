"""Real Flink SQL deduplication, Top-N and join state (tests/golden/flink-sql-ops-2.3).

Written by PyFlink 2.3 (scripts/gen_flink_sql_more_fixtures.py): eleven queries over the numbers
0..1999 on the hashmap backend (canonical savepoint), four of them on RocksDB (canonical and
native). ``expected.json`` holds every key's content of every state of these operators,
computed from the input rows in Python; every savepoint decodes to it (value and map states of
rows, Booleans, ``Tuple2<RowData, Integer>``, ``Tuple2<Integer, Integer>``, lists of rows and
of ``Tuple2<RowData, Boolean>``, the Top-N ``SortedMap``, rows kept as ``+U``, timers),
inspects without a problem, verifies, exports on the local engine and diffs equal.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.flink.entries import read_keyed_state
from statekit.flink.storage import load_snapshot

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "flink-sql-ops-2.3"
SAVEPOINTS = [("hashmap", "canonical"), ("rocksdb", "canonical"), ("rocksdb", "native")]
TIMERS = "_timer_state/event_user-timers"


def savepoint(variant: str, kind: str) -> Path:
    facts = json.loads((GOLDEN / variant / "facts.json").read_text())
    return GOLDEN / variant / facts["savepoints"][kind]


def expected(variant: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / variant / "expected.json").read_text())["operators"]
    return data


def statekit(*args: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(cli, [*args, "--json"])
    try:
        return result.exit_code, json.loads(result.stdout)
    except json.JSONDecodeError:
        raise AssertionError(result.output) from None


def plain(value: Any) -> Any:
    """A decoded value in expected.json's spelling: rows and tuples (fields f0..) as lists."""
    if isinstance(value, dict):
        if value and all(name == f"f{i}" for i, name in enumerate(value)):
            return [plain(v) for v in value.values()]
        return {name: plain(v) for name, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def canonical(entries: list[dict[str, Any]], unordered: bool) -> list[str]:
    out = []
    for e in entries:
        if unordered:
            e = {**e, "value": sorted(e["value"], key=json.dumps)}
        out.append(json.dumps(e, sort_keys=True))
    return sorted(out)


def decoded(snapshot: Any, operator: str, state: str) -> list[dict[str, Any]]:
    out = []
    for e in read_keyed_state(snapshot, operator, state):
        row: dict[str, Any] = {"key": plain(e.key)}
        if e.user_key is not None:
            row["user_key"] = plain(e.user_key)
        row["value"] = plain(e.value)
        out.append(row)
    return out


@pytest.mark.parametrize(("variant", "kind"), SAVEPOINTS)
def test_every_state_decodes_to_the_truth(variant: str, kind: str) -> None:
    snapshot = load_snapshot(str(savepoint(variant, kind)))
    for query, truth in expected(variant).items():
        for state, entries in truth["states"].items():
            got = decoded(snapshot, truth["name"], state)
            unordered = state in truth["unordered_lists"]
            assert len(got) == len(entries), (query, state)
            assert canonical(got, unordered) == canonical(entries, unordered), (query, state)


def test_the_operators_cover_every_state_layout() -> None:
    """The fixture holds what the brief asked for: each layout named by its serializers."""
    path = savepoint("hashmap", "canonical")
    code, report = statekit("inspect", str(path))
    assert code == 0
    by_name = {op["name"]: op for op in report["operators"]}
    names = {query: truth["name"] for query, truth in expected("hashmap").items()}
    layouts = {}
    for query, name in names.items():
        op = by_name[name]
        assert op["keyed_state_problem"] is None, name
        for st in op["keyed_states"]:
            assert st["problem"] is None, (name, st["name"])
            layouts[(query, st["name"])] = {s["key"]: s["short_name"] for s in st["serializers"]}["VALUE_SERIALIZER"]
    assert layouts[("dedup_first", "deduplicate-state")] == "BooleanSerializer"
    assert layouts[("dedup_last", "deduplicate-state")] == "RowData<BIGINT, TIMESTAMP_LTZ(3) NOT NULL, INT, STRING>"
    assert layouts[("topn_retract", "sorted-map")] == "SortedMapSerializer"
    assert layouts[("join_unique", "left-records")] == "TupleSerializer"
    assert layouts[("interval_join", "IntervalJoinLeftCache")] == "MapSerializer"
    assert layouts[("interval_join", "IntervalJoinLeftTimerState")] == "LongSerializer"


@pytest.mark.parametrize(("variant", "kind"), SAVEPOINTS)
def test_verify_passes(variant: str, kind: str) -> None:
    code, verified = statekit("verify", str(savepoint(variant, kind)))
    assert (code, verified["ok"]) == (0, True)


def test_the_top_n_sorted_map_and_the_interval_join_cache_have_typed_decoders() -> None:
    from statekit.flink.entries import decodable_states

    snapshot = load_snapshot(str(savepoint("hashmap", "canonical")))
    truth = expected("hashmap")
    names = {}
    for query in ("topn_retract", "interval_join", "join_nokey", "join_uk"):
        for support in decodable_states(snapshot, truth[query]["name"]):
            assert support.decoder is not None, (query, support.name)
            names[(query, support.name)] = support.decoder
    assert names[("topn_retract", "sorted-map")].value.spark_type == (
        "array<struct<key:struct<f0:bigint>,value:bigint>>")
    assert names[("interval_join", "IntervalJoinLeftCache")].value.spark_type == (
        "array<struct<f0:struct<f0:bigint,f1:int,f2:timestamp_ntz>,f1:boolean>>")
    assert names[("join_nokey", "left-records")].value.spark_type == "struct<f0:int,f1:int>"
    assert names[("join_uk", "left-records")].value.spark_type == (
        "struct<f0:struct<f0:int,f1:boolean,f2:bigint>,f1:int>")


def _ms(value: datetime.datetime) -> int:
    return round((value - datetime.datetime(1970, 1, 1)).total_seconds() * 1000)


@pytest.mark.parametrize(("variant", "kind"), [("hashmap", "canonical"), ("rocksdb", "native")])
def test_local_export_writes_every_state_as_typed_columns(variant: str, kind: str, tmp_path: Path) -> None:
    path = savepoint(variant, kind)
    ids = {op.name or "": op.operator_id for op in load_snapshot(str(path)).metadata.operators}
    out = tmp_path / "out"
    code, report = statekit("export", str(path), "-o", str(out), "--engine", "local")
    assert code == 0, report
    truth = expected(variant)
    for query, op in truth.items():
        for state, entries in op["states"].items():
            if not entries:
                continue
            partition = f"state_name={state.replace('/', '%2F')}"  # Hive partition values are escaped
            table = pq.read_table(out / f"operator_uid={ids[op['name']]}" / partition)
            assert table.num_rows == len(entries), (query, state)
    join = truth["interval_join"]
    table = pq.read_table(out / f"operator_uid={ids[join['name']]}" / "state_name=IntervalJoinLeftCache")
    value = table.schema.field("value").type
    assert str(value) == "list<element: struct<f0: struct<f0: int64, f1: int32, f2: timestamp[us]>, f1: bool>>"
    rows = [{"key": [r["key"]["f0"]], "user_key": r["user_key"],
             "value": [[[t["f0"]["f0"], t["f0"]["f1"], _ms(t["f0"]["f2"])], t["f1"]] for t in r["value"]]}
            for r in table.to_pylist()]
    assert canonical(rows, False) == canonical(join["states"]["IntervalJoinLeftCache"], False)
    rank = truth["topn_retract"]
    table = pq.read_table(out / f"operator_uid={ids[rank['name']]}" / "state_name=sorted-map")
    assert str(table.schema.field("value").type) == "list<element: struct<key: struct<f0: int64>, value: int64>>"
    rows = [{"key": [r["key"]["f0"]], "value": [{"key": [e["key"]["f0"]], "value": e["value"]} for e in r["value"]]}
            for r in table.to_pylist()]
    assert canonical(rows, False) == canonical(rank["states"]["sorted-map"], False)


def test_the_rocksdb_savepoints_diff_equal() -> None:
    truth = expected("rocksdb")
    code, report = statekit("diff", str(savepoint("rocksdb", "canonical")), str(savepoint("rocksdb", "native")))
    assert code == 0, report
    assert report["equal"] is True
    states = sum(len(entries) for op in truth.values() for entries in op["states"].values())
    groups = 7 * 50  # the upstream GROUP BY bucket, user_id of the retractable Top-N
    assert report["totals"]["unchanged"] == states + groups  # every timer: an interval join's key holds two
    timers = {s["state_name"]: s["unchanged"] for s in report["states"]
              if s["operator_uid"] == operator_id(savepoint("rocksdb", "native"), truth["interval_join"]["name"])}
    assert timers[TIMERS] == len(truth["interval_join"]["states"][TIMERS]) == 10


def operator_id(path: Path, name: str) -> str:
    return {op.name or "": op.operator_id for op in load_snapshot(str(path)).metadata.operators}[name]


def test_a_diff_tells_timers_of_one_key_apart() -> None:
    """Of an interval join key's two timers, one moved: the diff finds it (a timer is key, namespace and time)."""
    from statekit.flink.diff import _merge_by_key_group, _Tally, _timer_identity
    from statekit.flink.entries import FlinkKeyedEntry

    snapshot = load_snapshot(str(savepoint("rocksdb", "native")))
    name = expected("rocksdb")["interval_join"]["name"]
    a = list(read_keyed_state(snapshot, name, TIMERS))
    moved = a[:1] + [FlinkKeyedEntry(a[1].key_group, a[1].key, a[1].namespace, None, a[1].value + 1, a[1].subtask)]
    assert a[0].key == a[1].key  # the first key group's two timers
    tally = _Tally()
    _merge_by_key_group(iter(a), iter(moved + a[2:]), tally, 0, _timer_identity)
    assert (tally.only_a, tally.only_b, tally.same) == (1, 1, len(a) - 1)


def test_a_diff_names_the_changed_deduplicated_rows() -> None:
    """hashmap and RocksDB ran different queries: the diff of one to itself is equal, of the two not."""
    hashmap = str(savepoint("hashmap", "canonical"))
    code, report = statekit("diff", hashmap, hashmap)
    assert (code, report["equal"]) == (0, True)
    code, report = statekit("diff", hashmap, str(savepoint("rocksdb", "native")))
    assert report["equal"] is False
