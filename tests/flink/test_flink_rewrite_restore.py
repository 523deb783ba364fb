"""Proof in real Apache Flink: savepoints statekit rewrote restore, with every key's state.

A PyFlink job (scripts/flink_rewrite_job.py, ``write``) keys 500 keys with ValueState,
ListState, MapState and an event-time timer each, at max parallelism 128, and takes a
canonical savepoint. statekit rewrites it (``statekit rescale --max-parallelism 1024``,
``statekit modify --rename-uid``); a second PyFlink job (``read``) restores the result at
parallelism 4, sends every key once and emits the state it finds, and the end of its input
fires the restored timers. Flink refuses a savepoint whose max parallelism differs from the
job's, and a key restored into the wrong key group comes back empty (or, for a timer, fails
the restore), so equal values prove the rewrite. Three controls show that the check can fail.

Marked ``flink`` and opt-in (7 Flink jobs, 6 to 21 minutes on 2 cores, by load): ``pytest -m flink``
or ``scripts/test_flink.sh``, which installs PyFlink first. Skipped where PyFlink (the
``apache-flink`` package in ``.venv-flink``, or ``STATEKIT_PYFLINK_PYTHON``) or Java is missing.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pyflink_runs import pyflink_python

from statekit.cli.main import cli
from statekit.flink import fast_regroup, regroup
from statekit.flink.entries import read_keyed_state
from statekit.flink.keygroups import flink_murmur_hash
from statekit.flink.storage import load_snapshot

pytestmark = pytest.mark.flink

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "scripts" / "flink_rewrite_job.py"
KEYS, EVENTS, MAX_PARALLELISM, NEW_MAX_PARALLELISM = 500, 2000, 128, 1024
FAR_FUTURE = 4102444800000
TIMEOUT_S = 600

State = dict[str, Any]


@pytest.fixture(scope="module")
def pyflink(request: pytest.FixtureRequest) -> Path:
    """The Python of the PyFlink virtualenv."""
    return pyflink_python(request.config, "restores in real Flink (7 Flink jobs, 6 to 21 minutes)")


def _run(python: Path, work: Path, *args: object) -> subprocess.CompletedProcess[str]:
    work.mkdir(parents=True, exist_ok=True)
    return subprocess.run([str(python), str(JOB), *map(str, args)], cwd=work, capture_output=True, text=True,
                          timeout=TIMEOUT_S)


def _tail(done: subprocess.CompletedProcess[str]) -> str:
    return (done.stdout[-3000:] + "\n" + done.stderr[-6000:]).strip()


def expected_state() -> dict[str, State]:
    """What the writer job holds per key: key-k saw k, k + 500, k + 1000, k + 1500 in that order."""
    out = {}
    for k in range(KEYS):
        seen = list(range(k, EVENTS, KEYS))
        buckets: dict[str, int] = {}
        for n in seen:
            buckets[f"b{n % 3}"] = buckets.get(f"b{n % 3}", 0) + n
        out[f"key-{k}"] = {"count": len(seen), "seen": seen, "buckets": buckets}
    return out


def expected_timers() -> dict[str, int]:
    return {f"key-{k}": FAR_FUTURE + k for k in range(KEYS)}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("flink-rewrite")


@pytest.fixture(scope="module")
def original(pyflink: Path, work: Path) -> Path:
    """The canonical savepoint of the writer job (max parallelism 128, parallelism 2)."""
    done = _run(pyflink, work / "write", "write", work / "write", KEYS, EVENTS, MAX_PARALLELISM, 2, "hashmap")
    lines = [line for line in done.stdout.splitlines() if line.startswith("REWRITE ")]
    if done.returncode != 0 or not lines:
        pytest.fail(f"the PyFlink writer job failed (exit {done.returncode}):\n{_tail(done)}")
    location = json.loads(lines[-1][len("REWRITE "):])["savepoint"]
    return Path(location.removeprefix("file:").replace("//", "/", 1) if location.startswith("file://")
                else location.removeprefix("file:"))


def read_back(python: Path, savepoint: Path, work: Path, max_parallelism: int, backend: str,
              uid: str) -> tuple[dict[str, State], dict[str, int]]:
    """Restore ``savepoint`` in the reader job: (state per key, timer per key)."""
    result = work / "result.jsonl"
    done = _run(python, work, "read", f"file://{savepoint}", result, KEYS, max_parallelism, 4, backend, uid)
    if done.returncode != 0:
        raise AssertionError(f"the PyFlink reader job failed (exit {done.returncode}):\n{_tail(done)}")
    states: dict[str, State] = {}
    timers: dict[str, int] = {}
    for line in result.read_text().splitlines():
        row = json.loads(line)
        if "timer" in row:
            assert row["timer"] not in timers
            timers[row["timer"]] = row["timestamp"]
        else:
            assert row["key"] not in states
            states[row.pop("key")] = row
    return states, timers


def statekit(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


@pytest.fixture(scope="module")
def rescaled(original: Path, work: Path) -> Path:
    out = work / "rescaled"
    report = statekit("rescale", str(original), "--max-parallelism", str(NEW_MAX_PARALLELISM), "-o", str(out))
    (regrouped,) = [op for op in report["operators"] if op["action"] == "regroup"]
    assert (regrouped["label"], regrouped["old_max_parallelism"], regrouped["max_parallelism"]) == (
        "state", MAX_PARALLELISM, NEW_MAX_PARALLELISM)
    assert statekit("verify", str(out))["ok"] is True
    return out


def test_the_savepoint_holds_what_the_job_computed(original: Path) -> None:
    """The baseline, read by statekit from the original savepoint: every key's value, list and map."""
    snapshot = load_snapshot(str(original))

    def values(state: str, value_type: str) -> list[Any]:
        return list(read_keyed_state(snapshot, "state", f"python-state-{state}", value_type=value_type))

    found: dict[str, State] = {}
    for e in values("count", "int"):
        found.setdefault(e.key["f0"], {})["count"] = e.value
    for e in values("seen", "list<int32>"):
        found[e.key["f0"]]["seen"] = e.value
    for e in values("buckets", "map<string,int>"):
        found[e.key["f0"]].setdefault("buckets", {})[e.user_key] = e.value
    assert found == expected_state()


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_the_rescaled_savepoint_restores_every_key_at_the_new_max_parallelism(
        pyflink: Path, rescaled: Path, work: Path, backend: str) -> None:
    states, timers = read_back(pyflink, rescaled, work / f"read-rescaled-{backend}", NEW_MAX_PARALLELISM, backend,
                               "state")
    assert states == expected_state()
    assert timers == expected_timers()


def test_control_flink_refuses_the_original_at_the_new_max_parallelism(
        pyflink: Path, original: Path, work: Path) -> None:
    with pytest.raises(AssertionError, match=r"(?s)reader job failed.*Max parallelism mismatch.*with max "
                                             r"parallelism 128 to new program with max parallelism 1024"):
        read_back(pyflink, original, work / "read-original-1024", NEW_MAX_PARALLELISM, "hashmap", "state")


def test_control_keys_written_to_other_key_groups_come_back_empty(
        pyflink: Path, original: Path, work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rescale that stores every key one key group off (its key group with the lowest bit
    flipped: the same subtask's range): Flink restores it, but the keyed states are not where
    it looks them up. Timers are not compared: Flink puts them back by their key on restore."""
    monkeypatch.setattr(regroup, "flink_murmur_hash", lambda code: flink_murmur_hash(code) ^ 1)
    vectorized = fast_regroup.murmur_hash_array
    monkeypatch.setattr(fast_regroup, "murmur_hash_array", lambda codes: vectorized(codes) ^ 1)
    out = work / "misplaced"
    statekit("rescale", str(original), "--max-parallelism", str(NEW_MAX_PARALLELISM), "-o", str(out))
    states, _ = read_back(pyflink, out, work / "read-misplaced", NEW_MAX_PARALLELISM, "hashmap", "state")
    assert set(states) == set(expected_state())
    assert all(state == {"count": None, "seen": [], "buckets": {}} for state in states.values())


def test_a_renamed_uid_restores_every_key_under_the_new_uid(pyflink: Path, original: Path, work: Path) -> None:
    out = work / "renamed"
    report = statekit("modify", str(original), "--rename-uid", "state=state-v2", "-o", str(out))
    assert [r["uid"] for r in report["renamed"]] == ["state-v2"]
    states, timers = read_back(pyflink, out, work / "read-renamed", MAX_PARALLELISM, "hashmap", "state-v2")
    assert states == expected_state()
    assert timers == expected_timers()
    # control: under the old uid the job finds no state (the savepoint's state went to state-v2)
    states, timers = read_back(pyflink, out, work / "read-renamed-old-uid", MAX_PARALLELISM, "hashmap", "state")
    assert set(states) == set(expected_state()) and timers == {}
    assert all(state == {"count": None, "seen": [], "buckets": {}} for state in states.values())
