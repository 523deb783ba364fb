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
