"""Proof in real Apache Flink: savepoints statekit *wrote* (bootstrap, convert) restore with every key's state.

* ``statekit bootstrap --format flink --spec`` writes one savepoint of four operators from
  Parquet, CSV and JSON rows: two in PyFlink's layout (``profile``: String keys; value LONG,
  DOUBLE, STRING, ROW_NAMED, list INT, map STRING->LONG, event-time timers; ``sparse``: LONG
  keys) and two in a Java job's (``java``: String keys at max parallelism 256 — two-byte
  key-group prefixes — with value, list, map, reducing and row state and timers;
  ``java-row``: ``Row(name, n)`` keys), once as metadata v6 and once as v3.
* A PyFlink job (scripts/flink_statekit_jobs.py) restores v6 at parallelism 2 (hashmap) and
  v3 at parallelism 3 (RocksDB); a Java job (scripts/FlinkStatekitCheck.java, compiled with
  javac against PyFlink's jars, run on the MiniCluster) restores v6 at parallelism 1
  (hashmap) and v3 at parallelism 4 (RocksDB). Each sends every key once and emits the
  state it finds; the end of input fires the restored timers: every value equals the rows.
* ``examples/wordcount.py`` runs on statekit over the first part of a text, its savepoint is
  converted (``statekit convert --to flink --pyflink``), and a PyFlink word count with the
  same uids and state restores it and counts the rest: the counts end at the totals of the
  whole text.

Controls: a bootstrap whose keys sit one key group off restores, but every state comes back
empty (so equal values prove the key groups); a Java job whose key type differs from the
savepoint's (``Row(String, Integer)`` restoring ``Row(String, Long)``) is refused by Flink's
key serializer check.

Marked ``flink`` (opt-in: ``pytest -m flink`` or scripts/test_flink.sh): two processes, one
PyFlink (4 jobs) and one JVM (3 jobs), about 3 minutes on 2 cores.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pyflink_runs import pyflink_python

from statekit.cli.main import cli
from statekit.flink import savepoint_bootstrap
from statekit.flink.keygroups import flink_murmur_hash

pytestmark = pytest.mark.flink

ROOT = Path(__file__).resolve().parents[2]
PYFLINK_JOBS = ROOT / "scripts" / "flink_statekit_jobs.py"
JAVA_JOB = ROOT / "scripts" / "FlinkStatekitCheck.java"
KEYS, SPARSE_KEYS = 300, 40
FAR_FUTURE = 4102444800000
TIMEOUT_S = 900
WORD = re.compile(r"[^\W\d_]+")


@pytest.fixture(scope="module")
def pyflink(request: pytest.FixtureRequest) -> Path:
    return pyflink_python(request.config, "restores in real Flink (about 3 minutes)", javac=True)


def statekit(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


# ----------------------------------------------------------------------------- the rows and what they say


def expected_profile(k: int) -> dict[str, Any]:
    return {"count": 7 * k, "ratio": k / 4, "name": f"näme-{k}", "pair": {"tag": f"t{k % 5}", "n": k},
            "seen": [k, k + 1, k + 2], "buckets": {"b0": k, "b1": 2 * k}}


def write_inputs(root: Path) -> Path:
    """The rows (Parquet, CSV, JSON lines) and the spec file naming them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir(parents=True, exist_ok=True)
    keys = [f"key-{k}" for k in range(KEYS)]
    pq.write_table(pa.table({"key": keys, "count": [7 * k for k in range(KEYS)], "ratio": [k / 4 for k in range(KEYS)],
                             "name": [f"näme-{k}" for k in range(KEYS)],
                             "pair": [{"tag": f"t{k % 5}", "n": k} for k in range(KEYS)],
                             "ts": [FAR_FUTURE + k for k in range(KEYS)]}), root / "main.parquet")
    with open(root / "seen.csv", "w") as f:
        f.write("key,n\n" + "".join(f"key-{k},{k + j}\n" for k in range(KEYS) for j in range(3)))
    with open(root / "buckets.jsonl", "w") as f:
        for k in range(KEYS):
            f.write(json.dumps({"key": f"key-{k}", "bucket": "b0", "sum": k}) + "\n")
            f.write(json.dumps({"key": f"key-{k}", "bucket": "b1", "sum": 2 * k}) + "\n")
    pq.write_table(pa.table({"n": [k * 1000003 for k in range(SPARSE_KEYS)], "total": list(range(SPARSE_KEYS))}),
                   root / "sparse.parquet")
    pq.write_table(pa.table({"rk": [{"name": "k", "n": k} for k in range(KEYS)],
                             "label": [f"label-{k}" for k in range(KEYS)]}), root / "rows.parquet")
    states = [
        {"name": "count", "value_column": "count", "value_type": "long"},
        {"name": "pair", "value_column": "pair", "value_type": "row<tag:string,n:int>"},
        {"name": "seen", "kind": "list", "value_column": "n", "value_type": "int", "input": "seen.csv"},
        {"name": "buckets", "kind": "map", "value_column": "sum", "user_key_column": "bucket",
         "input": "buckets.jsonl"},
        {"name": "timers", "kind": "event-timers", "value_column": "ts"},
    ]
    spec = {"operators": [
        {"uid": "profile", "pyflink": True, "key_type": "string", "parallelism": 2, "key_column": "key",
         "input": "main.parquet",
         "states": [*states, {"name": "ratio", "value_column": "ratio"}, {"name": "name", "value_column": "name"}]},
        {"uid": "sparse", "pyflink": True, "key_type": "long", "parallelism": 2, "key_column": "n",
         "input": "sparse.parquet", "states": [{"name": "total", "value_column": "total"}]},
        {"uid": "java", "key_type": "string", "parallelism": 3, "max_parallelism": 256, "key_column": "key",
         "input": "main.parquet",
         "states": [*states, {"name": "total", "kind": "reducing", "value_column": "count"}]},
        {"uid": "java-row", "key_type": "row<name:string,n:int>", "parallelism": 2, "key_column": "rk",
         "input": "rows.parquet", "states": [{"name": "label", "value_column": "label"}]},
    ]}
    (root / "spec.json").write_text(json.dumps(spec))
    return root / "spec.json"


def write_texts(root: Path) -> tuple[Path, Path, dict[str, int]]:
    """Two parts of a text (the second continues the first) and the word totals of both."""
    import random

    rng = random.Random(7)
    words = ["apple", "banana", "cherry", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo",
             "übermut", "naïve", "café", "zulu"]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(2400)]
    first, second = root / "part1", root / "part2"
    first.mkdir(parents=True)
    second.mkdir()
    (first / "a.txt").write_text("\n".join(lines[:900]) + "\n", encoding="utf-8")
    (first / "b.txt").write_text("\n".join(lines[900:1400]) + "\n", encoding="utf-8")
    (second / "c.txt").write_text("\n".join(lines[1400:2300]) + "\n", encoding="utf-8")
    (second / "d.txt").write_text("\n".join(lines[2300:]) + "\n", encoding="utf-8")
    totals: dict[str, int] = {}
    for line in lines:
        for word in WORD.findall(line.lower()):
            totals[word] = totals.get(word, 0) + 1
    return first, second, totals


# ----------------------------------------------------------------------------- the runs


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("flink-write")


@pytest.fixture(scope="module")
def savepoints(pyflink: Path, work: Path) -> dict[str, Path]:
    """The bootstrapped savepoints: v6, v3, keys one key group off, and the Java row key as Row(String, Long)."""
    spec = write_inputs(work / "rows")
    out = {"v6": work / "sp-v6", "v3": work / "sp-v3", "misplaced": work / "sp-misplaced",
           "long-key": work / "sp-long-key"}
    report = statekit("bootstrap", "--format", "flink", "--spec", str(spec), "-o", str(out["v6"]))
    assert [op["uid"] for op in report["operators"]] == ["profile", "sparse", "java", "java-row"]
    statekit("bootstrap", "--format", "flink", "--spec", str(spec), "--metadata-version", "3", "-o", str(out["v3"]))
    for name in ("v6", "v3"):
        assert statekit("verify", str(out[name]))["ok"] is True
    original = savepoint_bootstrap.flink_murmur_hash
    try:  # every key one key group off: the lowest bit of its key group flipped (same subtask range)
        savepoint_bootstrap.flink_murmur_hash = lambda code: flink_murmur_hash(code) ^ 1  # type: ignore[assignment]
        statekit("bootstrap", "--format", "flink", "--spec", str(spec), "-o", str(out["misplaced"]))
    finally:
        savepoint_bootstrap.flink_murmur_hash = original  # type: ignore[assignment]
    long_spec = json.loads(spec.read_text())
    long_spec["operators"][3]["key_type"] = "row<name:string,n:long>"
    (spec.parent / "long-key.json").write_text(json.dumps(long_spec))
    statekit("bootstrap", "--format", "flink", "--spec", str(spec.parent / "long-key.json"), "-o", str(out["long-key"]))
    return out


@pytest.fixture(scope="module")
def wordcount(work: Path) -> dict[str, Any]:
    """examples/wordcount.py over the first part on statekit, its savepoint converted for PyFlink."""
    first, second, totals = write_texts(work / "texts")
    done = subprocess.run([sys.executable, "-m", "statekit.cli.main", "run", "--checkpoint-dir", str(work / "wc-chk"),
                           "--savepoint-on-finish", str(work / "wc-sp"), str(ROOT / "examples" / "wordcount.py"),
                           "--input", str(first), "--output", str(work / "wc-out")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (savepoint,) = glob.glob(str(work / "wc-sp" / "savepoint-*"))
    report = statekit("convert", savepoint, "--to", "flink", "--pyflink", "-o", str(work / "wc-flink"))
    assert [(s["uid"], s["target"]) for s in report["states"]] == [("counter", "python-state-count")]
    assert sorted((s["uid"], s["state"]) for s in report["left_out"]) == [("sink", "pending-files"),
                                                                          ("source", "offsets")]
    counted: dict[str, int] = {}
    for path in glob.glob(str(work / "wc-out" / "**" / "*"), recursive=True):
        if os.path.isfile(path) and not os.path.basename(path).startswith((".", "_")):
            for line in Path(path).read_text(encoding="utf-8").splitlines():
                word, count = line.split("\t")
                counted[word] = max(counted.get(word, 0), int(count))
    return {"savepoint": work / "wc-flink", "rest": second, "totals": totals, "statekit_counts": counted}


def _job(work: Path, name: str, **fields: Any) -> dict[str, Any]:
    return {"result": str(work / name / "result.jsonl"), "status": str(work / name / "status"), **fields}


@pytest.fixture(scope="module")
def pyflink_runs(pyflink: Path, savepoints: dict[str, Path], wordcount: dict[str, Any], work: Path) -> Path:
    """Every PyFlink job, in one process."""
    runs = work / "pyflink"
    plan = [
        _job(runs, "v6-p2", job="bootstrap", savepoint=f"file://{savepoints['v6']}", parallelism=2, backend="hashmap",
             keys=KEYS, sparse_keys=SPARSE_KEYS),
        _job(runs, "v3-p3", job="bootstrap", savepoint=f"file://{savepoints['v3']}", parallelism=3, backend="rocksdb",
             keys=KEYS, sparse_keys=SPARSE_KEYS),
        _job(runs, "misplaced", job="bootstrap", savepoint=f"file://{savepoints['misplaced']}", parallelism=2,
             backend="hashmap", keys=KEYS, sparse_keys=SPARSE_KEYS),
        _job(runs, "wordcount", job="wordcount", savepoint=f"file://{wordcount['savepoint']}",
             input=str(wordcount["rest"]), parallelism=2),
    ]
    runs.mkdir()
    (runs / "plan.json").write_text(json.dumps(plan))
    done = subprocess.run([str(pyflink), str(PYFLINK_JOBS), str(runs / "plan.json")], cwd=runs, capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, (done.stdout[-3000:] + done.stderr[-6000:])
    return runs


@pytest.fixture(scope="module")
def java_runs(pyflink: Path, savepoints: dict[str, Path], work: Path) -> Path:
    """Every Java job, in one JVM."""
    runs = work / "java"
    classes = runs / "classes"
    classes.mkdir(parents=True)
    lib = next(Path(p) for p in glob.glob(str(pyflink.parent.parent / "lib" / "python*" / "site-packages" /
                                                  "pyflink" / "lib")))
    compiled = subprocess.run(["javac", "-nowarn", "-d", str(classes), "-cp", f"{lib}/*", str(JAVA_JOB)],
                              capture_output=True, text=True, timeout=300)
    assert compiled.returncode == 0, compiled.stderr
    jobs = [("v6-p1", savepoints["v6"], 1, "hashmap"), ("v3-p4", savepoints["v3"], 4, "rocksdb"),
            ("long-key", savepoints["long-key"], 2, "hashmap")]
    lines = []
    for name, savepoint, parallelism, backend in jobs:
        (runs / name).mkdir()
        lines.append(f"file://{savepoint} {runs / name / 'result.jsonl'} {runs / name / 'status'} {parallelism} "
                     f"{backend} {KEYS}")
    (runs / "plan.txt").write_text("\n".join(lines) + "\n")
    done = subprocess.run(["java", "-XX:+IgnoreUnrecognizedVMOptions", "--add-opens=java.base/java.util=ALL-UNNAMED",
                           "--add-opens=java.base/java.lang=ALL-UNNAMED", "-cp", f"{classes}:{lib}/*",
                           "FlinkStatekitCheck", str(runs / "plan.txt")], cwd=runs, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return runs


def results(runs: Path, name: str) -> list[dict[str, Any]]:
    status = (runs / name / "status").read_text()
    assert status == "done", status[-6000:]
    return [json.loads(line) for line in (runs / name / "result.jsonl").read_text().splitlines()]


def by_op(rows: list[dict[str, Any]], op: str) -> tuple[dict[Any, dict[str, Any]], dict[Any, int]]:
    states: dict[Any, dict[str, Any]] = {}
    timers: dict[Any, int] = {}
    for row in rows:
        if row.pop("op") != op:
            continue
        if "timer" in row:
            assert row["timer"] not in timers
            timers[row["timer"]] = row["timestamp"]
        else:
            key = row.pop("key")
            assert key not in states
            states[key] = row
    return states, timers


# ----------------------------------------------------------------------------- the proofs


@pytest.mark.parametrize("run", ["v6-p2", "v3-p3"])
def test_pyflink_restores_every_bootstrapped_key(pyflink_runs: Path, run: str) -> None:
    rows = results(pyflink_runs, run)
    profile, timers = by_op([dict(r) for r in rows], "profile")
    assert profile == {f"key-{k}": expected_profile(k) for k in range(KEYS)}
    assert timers == {f"key-{k}": FAR_FUTURE + k for k in range(KEYS)}
    sparse, _ = by_op([dict(r) for r in rows], "sparse")
    assert sparse == {k * 1000003: {"total": k} for k in range(SPARSE_KEYS)}


@pytest.mark.parametrize("run", ["v6-p1", "v3-p4"])
def test_a_java_job_restores_every_bootstrapped_key(java_runs: Path, run: str) -> None:
    rows = results(java_runs, run)
    java, timers = by_op([dict(r) for r in rows], "java")
    expected = {}
    for k in range(KEYS):
        e = expected_profile(k)
        expected[f"key-{k}"] = {"count": e["count"], "seen": e["seen"], "buckets": e["buckets"], "total": e["count"],
                                "pair": e["pair"]}
    assert java == expected
    assert timers == {f"key-{k}": FAR_FUTURE + k for k in range(KEYS)}
    labels, _ = by_op([dict(r) for r in rows], "java-row")
    assert labels == {k: {"label": f"label-{k}"} for k in range(KEYS)}


def test_pyflink_continues_the_statekit_word_count_to_the_totals(pyflink_runs: Path,
                                                                  wordcount: dict[str, Any]) -> None:
    final = dict(wordcount["statekit_counts"])
    continued = results(pyflink_runs, "wordcount")
    assert continued
    for row in continued:
        final[row["word"]] = max(final.get(row["word"], 0), row["count"])
    assert final == wordcount["totals"]
    # the restored counts mattered: words of both parts went on from the statekit job's counts
    restarted = {row["word"] for row in continued if row["count"] == 1}
    assert restarted == set(wordcount["totals"]) - set(wordcount["statekit_counts"])


def test_control_keys_in_other_key_groups_come_back_empty(pyflink_runs: Path) -> None:
    rows = results(pyflink_runs, "misplaced")
    profile, _ = by_op([dict(r) for r in rows], "profile")
    assert set(profile) == {f"key-{k}" for k in range(KEYS)}
    empty = {"count": None, "ratio": None, "name": None, "pair": None, "seen": [], "buckets": {}}
    assert all(state == empty for state in profile.values())


def test_control_flink_refuses_a_savepoint_whose_key_type_differs(java_runs: Path) -> None:
    status = (java_runs / "long-key" / "status").read_text()
    assert status.startswith("failed")
    assert "must be compatible with the previous key serializer" in status
