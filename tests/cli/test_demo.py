"""The README's first command, scripts/demo.sh, end to end (install step included)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_demo_runs_and_shows_final_counts_job_control_and_export(tmp_path: Path) -> None:
    env = {**os.environ, "DEMO_OUT": str(tmp_path / "demo-out"), "STATEKIT_HOME": str(tmp_path / "home"),
           "SPARK_LOCAL_IP": "127.0.0.1"}
    result = subprocess.run(["bash", str(ROOT / "scripts" / "demo.sh")], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=900, check=False)
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-3000:]
    # the committed output is each word's final count (the sink writes every running count)
    lines = out.splitlines()
    start = lines.index("committed output (exactly once), final counts of the top words:")
    assert lines[start + 1:start + 6] == ["the\t4", "a\t3", "fox\t3", "it\t3", "dog\t2"]
    # job control: detached run, savepoint, stop with a savepoint
    job_id = re.search(r"Job has been submitted with JobID ([0-9a-f]{32}) \(log: ", result.stderr + out)  # the -d one
    assert job_id is not None
    savepoints = re.findall(rf"^{re.escape(str(tmp_path))}/demo-out/savepoints/savepoint-{job_id.group(1)[:6]}-\S+$",
                            out, flags=re.MULTILINE)
    assert len(savepoints) == 2 and all(Path(p, "_metadata").is_file() for p in savepoints)
    assert re.search(rf"{job_id.group(1)}\s+clickstream\s+FINISHED", out)
    # the export on this machine (auto: it says so) and on Spark (the extra the demo installs): the same rows
    assert "auto: the local engine for " in out and re.search(r"rows in [0-9.]+ s on local\[\*\]", out)
    assert "counter/count: 28 rows" in out and "top words: the=4, a=3, fox=3 (total 40 words)" in out
    assert "local and Spark exports: the same rows and columns" in out
