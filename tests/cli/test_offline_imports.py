"""``statekit --help`` and ``statekit checkpoints list`` start fast: no pyarrow, pyspark or
rocksdict is imported (checked in a fresh interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

GOLDEN_ROOT = Path(__file__).resolve().parents[1] / "golden" / "statekit-v1"
HEAVY = ("pyarrow", "pyspark", "rocksdict", "duckdb", "pandas", "numpy", "s3fs", "boto3")

PROBE = """
import json, sys
from click.testing import CliRunner
from statekit.cli.main import cli
results = {}
for args in json.loads(sys.argv[1]):
    result = CliRunner().invoke(cli, args)
    results[" ".join(args)] = [result.exit_code, result.output[-300:]]
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.argv[2])))
print(json.dumps({"results": results, "heavy": heavy}))
"""


def probe(*commands: list[str]) -> dict[str, object]:
    completed = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(list(commands)), json.dumps(HEAVY)],
        capture_output=True, text=True, check=True, timeout=120,
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_help_imports_nothing_heavy() -> None:
    out = probe(["--help"])
    assert out["results"]["--help"][0] == 0  # type: ignore[index]
    assert out["heavy"] == []


def test_checkpoints_list_imports_nothing_heavy() -> None:
    out = probe(["checkpoints", "list", str(GOLDEN_ROOT)], ["--json", "checkpoints", "list", str(GOLDEN_ROOT)])
    results = out["results"]
    assert results[f"checkpoints list {GOLDEN_ROOT}"][0] == 0, results  # type: ignore[index]
    assert results[f"--json checkpoints list {GOLDEN_ROOT}"][0] == 0, results  # type: ignore[index]
    assert out["heavy"] == []


def test_console_script_help_in_a_fresh_process() -> None:
    completed = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "from statekit.cli.main import main; main()", "--help"],
        capture_output=True, text=True, timeout=60,
    )
    assert completed.returncode == 0 and "checkpoints" in completed.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in completed.stderr.splitlines() if "|" in line}
    assert imported.isdisjoint(HEAVY), sorted(imported & set(HEAVY))
