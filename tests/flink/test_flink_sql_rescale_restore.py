"""Proof in real Apache Flink: a Flink SQL savepoint statekit rescaled continues the same SQL job.

A PyFlink SQL job (scripts/flink_sql_rescale_job.py) runs four group aggregates over the
numbers 0..1999 at max parallelism 128 (keys ``BinaryRowData`` of STRING; INT, BOOLEAN;
INT, STRING, BOOLEAN; INT — one with a ``COUNT(DISTINCT)`` map state) and takes a canonical
savepoint. statekit rewrites it: ``rescale --max-parallelism 256`` and ``100`` (not a multiple:
every key hashed, ``BinaryRowData.hashCode``) and ``modify --remove-operator numbers`` (the
source's position, so that the restored source starts again). The same job (same plan, so the
planner gives the SQL operators the same generated ids) restores each result at the new max
parallelism — at 256 on RocksDB at parallelism 2, at 100 on the hashmap backend at
parallelism 3 — and reads the numbers 2000..3999: every aggregate's last value equals the
truth over 0..3999, computed here in plain Python. A key restored into the wrong key group
is not found by Flink (its aggregate would start again from the new numbers only).

Controls: Flink refuses the original savepoint (only its source's state removed) at max
parallelism 256 ("Max parallelism mismatch"); a rescale that puts every key one key group off restores, but every aggregate
starts again (its value is the truth over 2000..3999 only) — so the check can fail.

Marked ``flink`` (opt-in: ``pytest -m flink`` or scripts/test_flink.sh): one PyFlink process
(one JVM) runs the five jobs while the test rewrites the first one's savepoint: 38 s to 66 s
measured on 2 cores at load average 2 to 6.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pyflink_runs import pyflink_python

from statekit.cli.main import cli
from statekit.flink import fast_regroup, regroup
from statekit.flink.keygroups import flink_murmur_hash
from statekit.flink.storage import load_snapshot

pytestmark = pytest.mark.flink

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "scripts" / "flink_sql_rescale_job.py"
N1, N2 = 2000, 4000  # the first job reads 0..N1-1, the restored ones N1..N2-1
MAX_PARALLELISM = 128
TIMEOUT_S = 900
ADD_OPENS = " ".join(f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in (
    "java.lang", "java.util", "java.nio", "sun.nio.ch", "java.lang.reflect", "java.io", "java.net",
    "java.text", "java.time", "java.util.concurrent", "java.util.concurrent.atomic"))
KEY_FIELDS = {"by_user": 1, "by_pair": 2, "by_three": 3, "distincts": 1}
SQL_OPERATORS = {"GroupAggregate[4]", "GroupAggregate[9]", "GroupAggregate[14]", "GroupAggregate[19]"}
# name -> (max parallelism, parallelism, backend) of the restoring job
RESTORES = {"rescaled-256": (256, 2, "rocksdb"), "rescaled-100": (100, 3, "hashmap"),
            "original-256": (256, 2, "hashmap"), "misplaced-100": (100, 2, "hashmap")}

Aggregates = dict[str, dict[tuple[Any, ...], tuple[Any, ...]]]


@pytest.fixture(scope="module")
def pyflink(request: pytest.FixtureRequest) -> Path:
    """The Python of the PyFlink virtualenv."""
    return pyflink_python(request.config, "restores in real Flink (5 SQL jobs in one JVM, about a minute)")


def truth(first: int, last: int) -> Aggregates:
    """Every query's groups over the numbers first..last-1, as the job's SQL computes them."""
    out: Aggregates = {query: {} for query in KEY_FIELDS}
    users: dict[int, set[str]] = {}
    for n in range(first, last):
        user, bucket, even, tag = f"user-{n % 397}", n % 61, n % 2 == 0, f"t{n % 11}"
        cnt, total, top = out["by_user"].get((user,), (0, 0, n))
        out["by_user"][(user,)] = (cnt + 1, total + n, max(top, n))
        cnt, amount, low = out["by_pair"].get((bucket, even), (0, 0.0, n))
        out["by_pair"][(bucket, even)] = (cnt + 1, amount + n / 8, min(low, n))  # sums of eighths: exact
        cnt, top = out["by_three"].get((n % 3, tag, even), (0, n))
        out["by_three"][(n % 3, tag, even)] = (cnt + 1, max(top, n))
        users.setdefault(n % 7, set()).add(user)
        out["distincts"][(n % 7,)] = (len(users[n % 7]), out["distincts"].get((n % 7,), (0, 0))[1] + 1)
    return out


def last_values(directory: Path, restored: Aggregates | None = None) -> Aggregates:
    """Each group's last value in the changelogs a job wrote (one file per query and subtask, in
    order). Every retraction retracts the group's value before it: the last one in the log, or
    for the first change of a group, the value its state held when the job started, which must
    be the one in ``restored``; a restored group is never inserted anew, and every one of them
    changes (the new numbers reach every group)."""
    out: Aggregates = {}
    for query, fields in KEY_FIELDS.items():
        values: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        before = dict(restored[query]) if restored is not None else {}
        files = glob.glob(str(directory / f"{query}-*.jsonl"))
        assert files, f"{directory}: no changelog of {query}"
        for path in files:
            for line in Path(path).read_text().splitlines():
                kind, *row = json.loads(line)
                key, value = tuple(row[:fields]), tuple(row[fields:])
                if kind == "INSERT":
                    assert key not in values and key not in before, (path, kind, row)
                    values[key] = value
                elif kind == "UPDATE_AFTER":
                    values[key] = value
                else:
                    previous = values.pop(key) if key in values else before.pop(key)
                    assert previous == value, (path, kind, row)
        assert not before, (query, "restored groups that never changed", sorted(before)[:5])
        out[query] = values
    return out


def statekit(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def rewrite(original: Path, work: Path) -> dict[str, Path]:
    """The savepoints to restore, each without the source's state (``modify --remove-operator numbers``)."""
    without_source = work / "original-without-source"
    report = statekit("modify", str(original), "--remove-operator", "numbers", "-o", str(without_source))
    assert [op["label"] for op in report["removed"]] == ["numbers"]
    sql_ids = {op.operator_id for op in load_snapshot(str(original)).metadata.operators if op.name in SQL_OPERATORS}
    assert len(sql_ids) == len(SQL_OPERATORS)
    out = {"original-256": without_source}
    for new in (256, 100):
        rescaled = work / f"rescaled-{new}-with-source"
        report = statekit("rescale", str(original), "--max-parallelism", str(new), "-o", str(rescaled))
        regrouped = {op["label"] for op in report["operators"] if op["action"] == "regroup"}
        assert regrouped == sql_ids, report["operators"]
        assert statekit("verify", str(rescaled))["ok"] is True
        out[f"rescaled-{new}"] = work / f"rescaled-{new}"
        statekit("modify", str(rescaled), "--remove-operator", "numbers", "-o", str(out[f"rescaled-{new}"]))
    with pytest.MonkeyPatch.context() as patch:  # every key one key group off: its lowest bit flipped
        patch.setattr(regroup, "flink_murmur_hash", lambda code: flink_murmur_hash(code) ^ 1)
        vectorized = fast_regroup.murmur_hash_array
        patch.setattr(fast_regroup, "murmur_hash_array", lambda codes: vectorized(codes) ^ 1)
        out["misplaced-100"] = work / "misplaced-100"
        statekit("rescale", str(without_source), "--max-parallelism", "100", "-o", str(out["misplaced-100"]))
    return out


@pytest.fixture(scope="module")
def runs(pyflink: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The writer job, the rewrites, then every restore: one PyFlink process, waiting for the plan between them."""
    work = tmp_path_factory.mktemp("flink-sql-rescale")
    env = dict(os.environ)
    env["JAVA_TOOL_OPTIONS"] = (env.get("JAVA_TOOL_OPTIONS", "") + " " + ADD_OPENS).strip()
    log = (work / "job.log").open("w")
    job = subprocess.Popen([str(pyflink), str(JOB), str(work), str(N1), str(N2)], cwd=work, env=env,
                           stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + TIMEOUT_S
        while not (work / "write.json").exists():
            if job.poll() is not None or time.time() > deadline:
                pytest.fail(f"the PyFlink SQL writer job failed (exit {job.poll()}):\n"
                            + (work / "job.log").read_text()[-6000:])
            time.sleep(0.5)
        location = json.loads((work / "write.json").read_text())["savepoint"]
        original = Path(location.removeprefix("file:").replace("//", "/", 1) if location.startswith("file://")
                        else location.removeprefix("file:"))
        (work / "original").symlink_to(original)
        savepoints = rewrite(original, work / "rewritten")
        plan = [{"name": name, "savepoint": f"file://{savepoints[name]}", "max_parallelism": max_parallelism,
                 "parallelism": parallelism, "backend": backend}
                for name, (max_parallelism, parallelism, backend) in RESTORES.items()]
        (work / "plan.json.tmp").write_text(json.dumps(plan))
        (work / "plan.json.tmp").rename(work / "plan.json")
        code = job.wait(timeout=max(deadline - time.time(), 60))
        assert code == 0, (work / "job.log").read_text()[-6000:]
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
        log.close()
    return work


def status(runs: Path, name: str) -> str:
    return (runs / name / "status").read_text()


def test_the_first_job_computed_the_truth_over_its_input(runs: Path) -> None:
    """The baseline: the changelogs of the job whose savepoint is rewritten."""
    assert last_values(runs / "write") == truth(0, N1)
    snapshot = load_snapshot(str(runs / "original"))
    keyed = {op.name for op in snapshot.metadata.operators if any(sub.managed_keyed_state for sub in op.subtasks)}
    assert keyed == SQL_OPERATORS and {op.max_parallelism for op in snapshot.metadata.operators} == {MAX_PARALLELISM}


@pytest.mark.parametrize("name", ["rescaled-256", "rescaled-100"])
def test_the_rescaled_sql_savepoint_continues_every_aggregate_at_the_new_max_parallelism(runs: Path,
                                                                                        name: str) -> None:
    assert status(runs, name) == "done", status(runs, name)
    assert last_values(runs / name, restored=truth(0, N1)) == truth(0, N2)


def test_control_flink_refuses_the_original_at_the_new_max_parallelism(runs: Path) -> None:
    assert status(runs, "original-256").startswith("failed")
    assert "Max parallelism mismatch" in status(runs, "original-256")
    assert "max parallelism 128 to new program with max parallelism 256" in status(runs, "original-256")


def test_control_keys_one_key_group_off_start_their_aggregates_again(runs: Path) -> None:
    """Flink restores the misplaced savepoint, but finds no key's state: every group ends at the
    truth over the new numbers only (so equal values above prove the key groups)."""
    assert status(runs, "misplaced-100") == "done", status(runs, "misplaced-100")
    got = last_values(runs / "misplaced-100")
    assert got == truth(N1, N2)
    assert all(got[query] != truth(0, N2)[query] for query in KEY_FIELDS)
