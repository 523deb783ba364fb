"""A RocksDB job's process exits 0: every store is closed on its task thread before the job
reports its end, so none is still closing on a daemon thread while the interpreter exits
(which aborted the process, exit 134, in about one run of three)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("rocksdict")

ROOT = Path(__file__).resolve().parents[3]
RUNS = 6


def test_rocksdb_wordcount_processes_exit_cleanly(tmp_path: Path) -> None:
    texts = tmp_path / "in"
    texts.mkdir()
    words = [f"word{chr(97 + i)}{chr(97 + j)}" for i in range(26) for j in range(12)]
    (texts / "a.txt").write_text("\n".join(" ".join(words[(i * 7 + j) % len(words)] for j in range(10))
                                           for i in range(4000)), encoding="utf-8")
    for run in range(RUNS):
        done = subprocess.run(
            [sys.executable, "-X", "faulthandler", "-m", "statekit.cli.main", "run", "-p", "2",
             "--checkpoint-dir", str(tmp_path / f"chk{run}"), "--checkpoint-interval", "100ms",
             "--state-backend", "rocksdb", *(["--incremental"] if run % 2 else []),
             str(ROOT / "examples" / "wordcount.py"), "--input", str(texts), "--output", str(tmp_path / f"out{run}")],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
            env={**os.environ, "STATEKIT_HOME": str(tmp_path / "home")},
        )
        assert done.returncode == 0, f"run {run} exited {done.returncode}: {done.stderr[-1500:]}"
