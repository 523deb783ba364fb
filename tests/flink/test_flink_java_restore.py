"""Proof in real Apache Flink: Tuple-keyed savepoints statekit rewrote restore, with every key's state.

The golden Java savepoints of ``tuple`` (plain) and ``tuple-compressed`` (snapshot
compression) are keyed by ``Tuple2<String, Integer>``, whose key group statekit computes
from Flink's own ``Tuple.hashCode``. ``statekit rescale --max-parallelism 256`` rewrites both
(the compressed one stays compressed); one JVM (scripts/flink_java/FixtureJobs.java,
``restore``) restores each in the same job at max parallelism 256 and parallelism 3, sends
every key once and reports the state it finds, and the end of its input fires the restored
event-time timers. The control: the original savepoint at max parallelism 256 must fail.

Marked ``flink`` and opt-in (one JVM, about a minute): ``pytest -m flink`` or
scripts/test_flink.sh. Skipped where PyFlink's jars (``.venv-flink``) or javac are missing.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pyflink_runs import flink_tests_selected, pyflink_venv_python

from statekit.cli.main import cli

pytestmark = pytest.mark.flink

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "flink-java-2.3"
NEW_MAX_PARALLELISM = 256
FAR_FUTURE = 4102444800000
sys.path.insert(0, str(ROOT / "scripts"))


@pytest.fixture(scope="module")
def flink_lib(request: pytest.FixtureRequest) -> Path:
    """PyFlink's bundled jars (pyflink/lib)."""
    if not flink_tests_selected(request.config):
        pytest.skip("restores in real Flink (one JVM): run `pytest -m flink` or scripts/test_flink.sh")
    venv = pyflink_venv_python().parent.parent
    found = sorted(venv.glob("lib/python*/site-packages/pyflink/lib"))
    if not found:
        pytest.skip(f"PyFlink is not installed in {venv}: scripts/test_flink.sh installs it")
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("java and javac (17) are needed to compile and run the Java job")
    return found[0]


def _savepoint(variant: str) -> Path:
    facts = json.loads((GOLDEN / variant / "facts.json").read_text())
    return GOLDEN / variant / facts["savepoint"]


def expected_state() -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """What the writer job held per key (numbers 0..599, key ("k" + n % 40, n % 40 % 7))."""
    states, timers = {}, {}
    for i in range(40):
        ns = [n for n in range(600) if n % 40 == i]
        buckets = {f"b{b}": sum(n for n in ns if n % 3 == b) for b in range(3) if any(n % 3 == b for n in ns)}
        key = json.dumps([f"k{i}", i % 7])
        states[key] = {"count": len(ns), "last": f"last-{ns[-1]}", "history": ns, "buckets": buckets,
                       "choice": f"e{ns[-1]}" if ns[-1] % 2 == 0 else ns[-1]}
        timers[key] = FAR_FUTURE + i
    return states, timers


def statekit(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


@pytest.fixture(scope="module")
def restored(flink_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Rescale both savepoints, then restore them and the control in one JVM: RESULT/<i>.jsonl or .error."""
    from gen_flink_java_fixtures import compile_jobs, java

    work = tmp_path_factory.mktemp("flink-java-restore")
    rescaled = []
    for variant in ("tuple", "tuple-compressed"):
        out = work / f"rescaled-{variant}"
        report = statekit("rescale", str(_savepoint(variant)), "--max-parallelism", str(NEW_MAX_PARALLELISM),
                          "-o", str(out))
        assert [op["label"] for op in report["operators"] if op["action"] == "regroup"] == ["tuple-state"]
        rescaled.append(out)
    compile_jobs(flink_lib, work / "classes")
    result = work / "result"
    result.mkdir()
    plan = [f"file://{path}::{NEW_MAX_PARALLELISM}" for path in [*rescaled, _savepoint("tuple")]]
    done = java(flink_lib, work / "classes", "restore", str(result), *plan, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return result


def _read(result: Path, index: int) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    error = result / f"{index}.error"
    assert not error.exists(), error.read_text()[:3000]
    states: dict[str, dict[str, Any]] = {}
    timers: dict[str, int] = {}
    for line in (result / f"{index}.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "timer" in row:
            timers[json.dumps(row["timer"])] = row["timestamp"]
        else:
            states[json.dumps(row.pop("key"))] = row
    return states, timers


@pytest.mark.parametrize("index", [0, 1], ids=["plain", "compressed"])
def test_the_rescaled_tuple_savepoint_restores_every_key(restored: Path, index: int) -> None:
    states, timers = _read(restored, index)
    truth, truth_timers = expected_state()
    assert states == truth
    assert timers == truth_timers


def test_flink_refuses_the_original_at_the_new_max_parallelism(restored: Path) -> None:
    """The control: without the rewrite, Flink cannot restore at max parallelism 256."""
    error = restored / "2.error"
    assert error.exists(), "Flink restored the original savepoint at another max parallelism"
    assert "max parallelism" in error.read_text().lower()
