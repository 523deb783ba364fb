"""The fixture generator against real PyFlink: a fresh run gives snapshots statekit reads.

Needs PyFlink in .venv-flink (scripts/install_pyflink.sh) and about a minute of a JVM, so it
runs only when asked: STATEKIT_PYFLINK_TESTS=1. The committed fixtures (tests/golden/pyflink-*)
make every other Flink test run without PyFlink.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from statekit.flink import open_flink_snapshot, read_keyed_state, verify_flink_snapshot

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-flink" / "bin" / "python"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not VENV.exists(), reason="PyFlink is not installed: run scripts/install_pyflink.sh"),
    pytest.mark.skipif(os.environ.get("STATEKIT_PYFLINK_TESTS") != "1",
                       reason="runs a PyFlink job (about a minute): set STATEKIT_PYFLINK_TESTS=1"),
]


def test_a_fresh_pyflink_run_reads_like_the_committed_fixture(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_flink_fixtures.py"), "--only", "pyflink-2.3/rocksdb",
                    "--dest", str(tmp_path)], check=True, timeout=900)
    root = tmp_path / "pyflink-2.3" / "rocksdb"
    facts = json.loads((root / "facts.json").read_text())
    canonical, native = (root / facts["savepoints"][kind] for kind in ("canonical", "native"))
    assert verify_flink_snapshot(str(canonical)) == [] == verify_flink_snapshot(str(native))
    a, b = open_flink_snapshot(str(canonical)), open_flink_snapshot(str(native))
    counts = list(read_keyed_state(a, "profile", "python-state-count", value_type="int"))
    assert sorted(e.value for e in counts) == [3] * 1000
    assert sorted(map(repr, read_keyed_state(b, "profile", "python-state-count", value_type="int"))) == \
        sorted(map(repr, counts))


def test_a_fresh_sql_run_decodes_to_its_expected_json(tmp_path: Path) -> None:
    """scripts/gen_flink_sql_fixtures.py (about 20 s of a JVM): the group aggregates' state equals the truth."""
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_flink_sql_fixtures.py"), "--only", "hashmap",
                    "--dest", str(tmp_path)], check=True, timeout=600)
    root = tmp_path / "hashmap"
    facts = json.loads((root / "facts.json").read_text())
    truth = json.loads((root / "expected.json").read_text())
    snapshot = open_flink_snapshot(str(root / facts["savepoints"]["canonical"]))
    for query in truth["operators"].values():
        got = {tuple(e.key.values()): e.value for e in read_keyed_state(snapshot, query["name"], "accState")}
        assert len(got) == len(query["groups"])
        if "cnt" in query["accumulators"]:  # COUNT(*): its field in the accumulator layout
            field = f"f{query['accumulators'].index('cnt')}"
            assert sorted(v[field] for v in got.values()) == sorted(g["result"]["cnt"] for g in query["groups"])
    assert (root / "plan.json").exists()  # the variant's compiled plan, checked against the savepoint
    from statekit.flink.plan_check import check_compiled_plan

    assert check_compiled_plan(str(root / facts["savepoints"]["canonical"]), str(root / "plan.json")).compatible


def test_a_fresh_sql_operators_run_decodes_to_its_expected_json(tmp_path: Path) -> None:
    """scripts/gen_flink_sql_more_fixtures.py (about 30 s of a JVM): deduplication, Top-N and join state
    equal the truth on a fresh run too (the state does not hang on the run's timing)."""
    import datetime

    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_flink_sql_more_fixtures.py"), "--only", "hashmap",
                    "--dest", str(tmp_path)], check=True, timeout=600)
    root = tmp_path / "hashmap"
    facts = json.loads((root / "facts.json").read_text())
    truth = json.loads((root / "expected.json").read_text())["operators"]
    snapshot = open_flink_snapshot(str(root / facts["savepoints"]["canonical"]))

    def plain(value: object) -> object:
        if isinstance(value, dict):
            if value and all(name == f"f{i}" for i, name in enumerate(value)):
                return [plain(v) for v in value.values()]
            return {name: plain(v) for name, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        assert not isinstance(value, datetime.date)
        return value

    for op in truth.values():
        for state, entries in op["states"].items():
            got = []
            for e in read_keyed_state(snapshot, op["name"], state):
                value = plain(e.value)
                if state in op["unordered_lists"]:
                    value = sorted(value, key=json.dumps)  # type: ignore[arg-type]
                got.append(json.dumps([plain(e.key), plain(e.user_key), value], sort_keys=True))
            want = [json.dumps([x["key"], x.get("user_key"), sorted(x["value"], key=json.dumps)
                                if state in op["unordered_lists"] else x["value"]], sort_keys=True) for x in entries]
            assert sorted(got) == sorted(want), (op["name"], state)


def test_a_fresh_sql_window_run_decodes_to_its_expected_json(tmp_path: Path) -> None:
    """scripts/gen_flink_sql_window_fixtures.py (about 35 s of a JVM): the open windows' slices and timers."""
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_flink_sql_window_fixtures.py"), "--only", "hashmap",
                    "--dest", str(tmp_path)], check=True, timeout=600)
    from statekit.flink.plan_check import check_compiled_plan

    root = tmp_path / "hashmap"
    facts = json.loads((root / "facts.json").read_text())
    truth = json.loads((root / "expected.json").read_text())
    path = str(root / facts["savepoints"]["canonical"])
    snapshot = open_flink_snapshot(path)
    for query in truth["operators"].values():
        got = sorted((e.key["f0"], e.namespace, e.value["f0"]) for e in read_keyed_state(snapshot, query["uid"],
                                                                                          "window-aggs"))
        assert got == sorted((s["key"]["user_id"], s["slice_end"], s["acc"]["cnt"]) for s in query["slices"])
    assert check_compiled_plan(path, str(tmp_path / "plan.json")).compatible
