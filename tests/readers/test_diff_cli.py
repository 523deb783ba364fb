"""``statekit diff`` with the local engine: exit codes, text and JSON output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

COUNT = StateDescriptor("count", StateKind.VALUE, value_type="int")


def savepoint(path: Path, rows: list[tuple[str, int]], parallelism: int = 2) -> str:
    SavepointWriter.new_savepoint(128).with_operator("counter", {COUNT: rows}, parallelism=parallelism).write(str(path))
    return str(path)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    root = tmp_path_factory.mktemp("cli")
    a = savepoint(root / "a", [(f"k{i}", i) for i in range(50)])
    a_p3 = savepoint(root / "a_p3", [(f"k{i}", i) for i in range(50)], parallelism=3)
    b = savepoint(root / "b", [(f"k{i}", i * 2 if i == 7 else i) for i in range(1, 51)])
    return a, a_p3, b


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_equal_savepoints_exit_0(pair: tuple[str, str, str]) -> None:
    a, a_p3, _ = pair
    code, out, _ = run("diff", a, a_p3)
    assert code == 0
    assert out.startswith(f"EQUAL (engine local)\nA: {a}\nB: {a_p3}\n")
    assert "parallelism_changed (layout)" in out


def test_different_savepoints_exit_1_with_counts(pair: tuple[str, str, str]) -> None:
    a, _, b = pair
    code, out, _ = run("diff", "--json", a, b)
    assert code == 1
    data = json.loads(out)
    assert data["equal"] is False
    assert data["totals"] == {"only_in_a": 1, "only_in_b": 1, "changed": 1, "unchanged": 48}
    assert data["states"][0]["examples"] == []


def test_keys_lists_the_differences(pair: tuple[str, str, str]) -> None:
    a, _, b = pair
    code, out, _ = run("--json", "diff", a, b, "--keys")
    assert code == 1
    examples = json.loads(out)["states"][0]["examples"]
    assert sorted((e["change"], e["key"], e["value_a"], e["value_b"]) for e in examples) == [
        ("changed", "k7", 7, 14), ("only_in_a", "k0", 0, None), ("only_in_b", "k50", None, 50)]
    code, out, _ = run("diff", a, b, "--keys")
    assert code == 1 and "Differences in counter/count (first 3)" in out and "'k7'" in out


def test_bad_input_exits_2_with_one_line(pair: tuple[str, str, str], tmp_path: Path) -> None:
    a, _, _ = pair
    code, _, err = run("diff", a, str(tmp_path / "missing"))
    assert code == 2
    assert err == f"statekit: error: {tmp_path / 'missing'}: no such file or directory\n"
    code, _, err = run("diff", a, a, "--operator", "nope")
    assert code == 2 and "no operator with uid 'nope'" in err
    code, _, _ = run("diff", a, a, "--engine", "flink")
    assert code == 2
    code, _, err = run("diff", a, a, "--limit", "-1")
    assert code == 2


def test_output_directory(pair: tuple[str, str, str], tmp_path: Path) -> None:
    a, _, b = pair
    out_dir = tmp_path / "out"
    code, out, _ = run("diff", a, b, "-o", str(out_dir))
    assert code == 1 and f"differences written to {out_dir}" in out
    assert (out_dir / "operator_uid=counter" / "state_name=count" / "part-00000.parquet").is_file()
