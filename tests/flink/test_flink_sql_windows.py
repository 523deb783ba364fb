"""Flink SQL window TVF aggregates (tests/golden/flink-sql-window-2.3) and compiled plans.

Written by PyFlink 2.3 (scripts/gen_flink_sql_window_fixtures.py): TUMBLE, HOP and CUMULATE
aggregates run from their compiled plan and stopped with a savepoint while windows are open.
``expected.json`` holds, computed from the input in plain Python by Flink's slicing rules, every
key's slice accumulators (state ``window-aggs``, namespace = slice end) and event-time timers.
The compiled plans of both SQL fixtures (``plan.json``) check compatible against their own
savepoints, and changed plans (a TTL, a key type, an extra or a missing stateful node) do not.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.flink.entries import read_keyed_state
from statekit.flink.storage import load_snapshot

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
WINDOWS = GOLDEN / "flink-sql-window-2.3"
GROUPS = GOLDEN / "flink-sql-2.3"
SAVEPOINTS = [("hashmap", "canonical"), ("rocksdb", "canonical"), ("rocksdb", "native")]


def savepoint(root: Path, variant: str, kind: str) -> Path:
    facts = json.loads((root / variant / "facts.json").read_text())
    return root / variant / facts["savepoints"][kind]


def expected(variant: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((WINDOWS / variant / "expected.json").read_text())
    return data


def statekit(*args: str) -> tuple[int, Any]:
    result = CliRunner().invoke(cli, ["--json", *args])
    try:
        return result.exit_code, json.loads(result.stdout)
    except json.JSONDecodeError:
        raise AssertionError(result.output) from None


@pytest.mark.parametrize(("variant", "kind"), SAVEPOINTS)
def test_window_accumulators_decode_per_key_and_slice_end(variant: str, kind: str) -> None:
    snapshot = load_snapshot(str(savepoint(WINDOWS, variant, kind)))
    for query, truth in expected(variant)["operators"].items():
        got = {(e.key["f0"], e.namespace): e.value for e in read_keyed_state(snapshot, truth["uid"], "window-aggs")}
        want = {(s["key"]["user_id"], s["slice_end"]): s["acc"] for s in truth["slices"]}
        assert got.keys() == want.keys(), query
        for at, acc in want.items():
            assert {name: got[at][f"f{i}"] for i, name in enumerate(truth["accumulators"])} == acc, (query, at)


@pytest.mark.parametrize(("variant", "kind"), SAVEPOINTS)
def test_window_timers_decode_with_their_window_namespaces(variant: str, kind: str) -> None:
    snapshot = load_snapshot(str(savepoint(WINDOWS, variant, kind)))
    for truth in expected(variant)["operators"].values():
        got = sorted((e.key["f0"], e.namespace, e.value)
                     for e in read_keyed_state(snapshot, truth["uid"], "_timer_state/event_window-timers"))
        assert got == sorted((t["key"]["user_id"], t["window_end"], t["timestamp"]) for t in truth["event_timers"])
        assert all(t > expected(variant)["watermark"] for _, _, t in got)  # none of them has fired
        assert list(read_keyed_state(snapshot, truth["uid"], "_timer_state/processing_window-timers")) == []


@pytest.mark.parametrize(("variant", "kind"), [("hashmap", "canonical"), ("rocksdb", "native")])
def test_inspect_with_the_plan_shows_windows_accumulator_names_and_timers(variant: str, kind: str) -> None:
    code, report = statekit("inspect", "--compiled-plan", str(WINDOWS / "plan.json"),
                            str(savepoint(WINDOWS, variant, kind)))
    assert code == 0, report
    views = {v["name"]: v for v in report["sql_operators"]}
    texts = {"tumble": "TUMBLE(size 1 min)", "hop": "HOP(size 3 min, slide 1 min)",
             "cumulate": "CUMULATE(max size 4 min, step 1 min)"}
    for query, truth in expected(variant)["operators"].items():
        view = views[truth["name"]]
        assert (view["plan_node"], view["node_type"]) == (int(truth["uid"].split("_")[0]),
                                                          "stream-exec-window-aggregate_1")
        assert view["accumulators"] == truth["accumulators"] and view["window"] == texts[query]
        assert view["key_type"] == "RowData<STRING NOT NULL>"
        slice_keys: dict[int, int] = {}
        for s in truth["slices"]:
            slice_keys[s["slice_end"]] = slice_keys.get(s["slice_end"], 0) + 1
        assert [(s["slice_end"], s["keys"]) for s in view["slices"]] == sorted(slice_keys.items())
        assert [s["slice_end_time"] for s in view["slices"]] == [
            s["slice_end_time"] for s in truth["slices"] if s["key"]["user_id"] == "u0"]
        for s in view["slices"]:  # what a slice covers: the window, one slide, or a cumulate window's running acc
            if query == "tumble":
                assert (s["start"], s["end"]) == (s["slice_end"] - truth["size"], s["slice_end"])
            elif query == "hop":
                assert (s["start"], s["end"]) == (s["slice_end"] - truth["slide"], s["slice_end"])
            elif s["holds"].startswith("first slice"):
                assert s["end"] - s["start"] == truth["max_size"] and s["slice_end"] == s["start"] + truth["step"]
        timers = {(t["window_end"], t["timestamp"]): 0 for t in truth["event_timers"]}
        for t in truth["event_timers"]:
            timers[(t["window_end"], t["timestamp"])] += 1
        assert [(t["window_end"], t["timestamp"], t["keys"]) for t in view["event_timers"]] == [
            (w, ts, n) for (w, ts), n in sorted(timers.items())]


def test_inspect_text_with_the_plan_shows_readable_windows() -> None:
    result = CliRunner().invoke(cli, ["inspect", "--compiled-plan", str(WINDOWS / "plan.json"),
                                      str(savepoint(WINDOWS, "hashmap", "canonical"))], terminal_width=250)
    assert result.exit_code == 0, result.output
    assert ("SQL WindowAggregate[6]: plan node 6 stream-exec-window-aggregate_1; key RowData<STRING NOT NULL>; "
            "accumulators cnt, total, max_amount, min_tag; window TUMBLE(size 1 min)") in result.output
    assert "[2023-11-14T22:23:00Z, 2023-11-14T22:24:00Z)" in result.output  # the open tumble window
    assert "first slice: the running accumulator of the window" in result.output


def test_local_export_of_window_state_has_slice_ends_and_timers(tmp_path: Path) -> None:
    path = savepoint(WINDOWS, "hashmap", "canonical")
    truth = expected("hashmap")["operators"]["hop"]
    for state, rows in (("window-aggs", truth["slices"]), ("_timer_state/event_window-timers", truth["event_timers"])):
        out = tmp_path / state.replace("/", "_")
        code, report = statekit("export", str(path), "-o", str(out), "--engine", "local", "--operator", truth["uid"],
                                "--state", state)
        assert code == 0, report
        table = pq.read_table(next(out.rglob("*.parquet")).parent)
        got = sorted((r["key"]["f0"], r["namespace"]) for r in table.to_pylist())
        ends = "slice_end" if state == "window-aggs" else "window_end"
        assert got == sorted((r["key"]["user_id"], r[ends]) for r in rows)


# ----------------------------------------------------------------------------- check --compiled-plan


@pytest.mark.parametrize(("root", "variant", "kind", "plan"), [
    (WINDOWS, "hashmap", "canonical", WINDOWS / "plan.json"),
    (WINDOWS, "rocksdb", "native", WINDOWS / "plan.json"),
    (GROUPS, "hashmap", "canonical", GROUPS / "hashmap" / "plan.json"),
    (GROUPS, "rocksdb", "native", GROUPS / "rocksdb" / "plan.json"),
    (GROUPS, "hashmap-ttl", "canonical", GROUPS / "hashmap-ttl" / "plan.json"),
])
def test_the_compiled_plan_checks_compatible_with_its_savepoint(root: Path, variant: str, kind: str,
                                                                plan: Path) -> None:
    code, report = statekit("check", "--compiled-plan", str(plan), str(savepoint(root, variant, kind)))
    assert (code, report["compatible"]) == (0, True), report
    nodes = [(c["node"], c["operator_name"], c["verdict"]) for c in report["checks"]]
    if root == WINDOWS:
        assert nodes == [(n, f"WindowAggregate[{n}]", "compatible") for n in (6, 9, 12)]
    else:
        assert nodes == [(n, f"GroupAggregate[{n}]", "compatible") for n in (4, 9, 14, 19)]


def _changed_plan(tmp_path: Path, source: Path, change: Any) -> Path:
    plan = json.loads(source.read_text())
    change(plan)
    out = tmp_path / "plan.json"
    out.write_text(json.dumps(plan))
    return out


def _node(plan: dict[str, Any], node_id: int) -> dict[str, Any]:
    found: dict[str, Any] = next(n for n in plan["nodes"] if n["id"] == node_id)
    return found


def _check(plan: Path, path: Path) -> dict[int | None, list[str]]:
    code, report = statekit("check", "--compiled-plan", str(plan), str(path))
    assert code == 1 and report["compatible"] is False, report
    return {c["node"]: c["reasons"] for c in report["checks"] if c["verdict"] == "incompatible"}


def test_a_changed_ttl_is_incompatible(tmp_path: Path) -> None:
    def ttl(plan: dict[str, Any]) -> None:
        _node(plan, 9)["state"][0]["ttl"] = "1 h"
    bad = _check(_changed_plan(tmp_path, GROUPS / "hashmap" / "plan.json", ttl), savepoint(GROUPS, "hashmap", "canonical"))
    assert list(bad) == [9] and bad[9][0].startswith("TTL: the plan keeps 'accState' with a TTL of 3600000 ms")
    # and the other way round: the TTL savepoint against the plan without one
    bad = _check(GROUPS / "hashmap" / "plan.json", savepoint(GROUPS, "hashmap-ttl", "canonical"))
    assert sorted(bad) == [4, 9, 14, 19] and all("values carry a TTL, the plan has none" in r[0] for r in bad.values())


def test_a_changed_ttl_length_stays_compatible(tmp_path: Path) -> None:
    def longer(plan: dict[str, Any]) -> None:
        for node_id in (4, 9, 14, 19):
            _node(plan, node_id)["state"][0]["ttl"] = "2 d"
    plan = _changed_plan(tmp_path, GROUPS / "hashmap-ttl" / "plan.json", longer)
    code, report = statekit("check", "--compiled-plan", str(plan), str(savepoint(GROUPS, "hashmap-ttl", "canonical")))
    assert (code, report["compatible"]) == (0, True)


def test_a_changed_key_type_is_incompatible(tmp_path: Path) -> None:
    def key(plan: dict[str, Any]) -> None:  # the window aggregates group by user_id, field 0 of node 5's output
        _node(plan, 5)["outputType"]["fields"][0]["fieldType"] = "BIGINT NOT NULL"
    bad = _check(_changed_plan(tmp_path, WINDOWS / "plan.json", key), savepoint(WINDOWS, "hashmap", "canonical"))
    assert sorted(bad) == [6, 9, 12]
    assert bad[6] == ["key type: the plan groups by RowData<BIGINT NOT NULL>, the snapshot's key is "
                      "RowData<STRING NOT NULL>"]


def test_an_extra_stateful_node_is_incompatible(tmp_path: Path) -> None:
    def extra(plan: dict[str, Any]) -> None:
        node = copy.deepcopy(_node(plan, 19))
        node["id"] = 99
        plan["nodes"].append(node)
        plan["edges"].append({"source": 18, "target": 99, "shuffle": {"type": "FORWARD"}, "shuffleMode": "PIPELINED"})
    bad = _check(_changed_plan(tmp_path, GROUPS / "hashmap" / "plan.json", extra),
                 savepoint(GROUPS, "hashmap", "canonical"))
    assert list(bad) == [99] and bad[99][0].startswith("missing operator: the snapshot has no state of node 99")


def test_a_snapshot_operator_without_its_node_is_incompatible(tmp_path: Path) -> None:
    def drop(plan: dict[str, Any]) -> None:
        plan["nodes"] = [n for n in plan["nodes"] if n["id"] != 12]
    bad = _check(_changed_plan(tmp_path, WINDOWS / "plan.json", drop), savepoint(WINDOWS, "rocksdb", "native"))
    assert list(bad) == [None]
    assert "keyed state of WindowAggregate[12] but no node of the plan names it" in bad[None][0]


def test_a_window_plan_against_the_group_savepoint_names_every_mismatch(tmp_path: Path) -> None:
    """Node 9 is a window aggregate in one plan and a group aggregate in the other snapshot; nodes 4
    and 14 of the window plan keep no state; it has no node 19; nodes 6 and 12 have no operator."""
    bad = _check(WINDOWS / "plan.json", savepoint(GROUPS, "hashmap", "canonical"))
    assert set(bad) == {4, 6, 9, 12, 14, None}
    assert "node 4 (stream-exec-calc_1) keeps no state" in bad[4][0]
    assert "keyed state of GroupAggregate[19] but no node of the plan names it" in bad[None][0]
    assert bad[6][0].startswith("missing operator: the snapshot has no state of node 6")
    assert bad[9][0].startswith("state names: stream-exec-window-aggregate_1 keeps its accumulators in 'window-aggs'")


def test_inspect_names_the_group_aggregates_accumulators_from_the_plan() -> None:
    truth = json.loads((GROUPS / "hashmap" / "expected.json").read_text())["operators"]
    code, report = statekit("inspect", "--compiled-plan", str(GROUPS / "hashmap" / "plan.json"),
                            str(savepoint(GROUPS, "hashmap", "canonical")))
    assert code == 0, report
    views = {v["name"]: v for v in report["sql_operators"]}
    assert set(views) == {t["name"] for t in truth.values()}
    for query, t in truth.items():
        names = views[t["name"]]["accumulators"]
        assert names == t["accumulators"][:len(names)] and len(names) >= 3, query  # distincts: views unnamed
        assert views[t["name"]]["slices"] == [] and views[t["name"]]["window"] is None
    assert views["GroupAggregate[19]"]["accumulators"] == ["users", "tinies", "cnt"]


@pytest.mark.parametrize("text", ["not json", "{\"nodes\": [{\"id\": 1}]}", "[]"])
def test_a_bad_plan_is_a_one_line_error(tmp_path: Path, text: str) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(text)
    result = CliRunner().invoke(cli, ["check", "--compiled-plan", str(plan),
                                      str(savepoint(GROUPS, "hashmap", "canonical"))])
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert str(plan) in line and ("compiled plan" in line)
