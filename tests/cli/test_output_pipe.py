"""Output that survives a pipe: full-width tables off a terminal, JSON errors with --json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from statekit.cli.main import cli
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

LONG_UID = "an-operator-uid-long-enough-that-an-80-column-table-would-have-to-cut-or-wrap-it-" + "x" * 40


@pytest.fixture
def long_savepoint(tmp_path: Path) -> Path:
    count = StateDescriptor("count", StateKind.VALUE, value_type="int")
    path = tmp_path / "savepoint-with-a-long-name"
    SavepointWriter.new_savepoint(max_parallelism=8).with_operator(
        LONG_UID, {count: [("a", 1), ("b", 2)]}, parallelism=2).write(str(path))
    return path


def statekit(*args: str, columns: str | None = None) -> subprocess.CompletedProcess[str]:
    """``statekit ARGS`` in a child process whose stdout is a pipe (not a terminal)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run([sys.executable, "-m", "statekit.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


def test_a_piped_table_keeps_full_values(long_savepoint: Path) -> None:
    result = statekit("inspect", str(long_savepoint))
    assert result.returncode == 0, result.stderr
    # the whole uid on one line of the plain operators table, not cut to 80 columns or wrapped
    row = next(line for line in result.stdout.splitlines() if line.startswith(LONG_UID[:20]))
    assert row.split()[:2] == [LONG_UID, LONG_UID]  # uid, name
    assert max(len(line) for line in result.stdout.splitlines()) > 80
    assert "│" not in result.stdout and "hidden to fit" not in result.stdout


def test_columns_is_respected_off_a_terminal(long_savepoint: Path) -> None:
    """At 60 columns the uid and the path (wider than that) are printed whole, the row's lines
    vertical; every other line fits."""
    result = statekit("inspect", str(long_savepoint), columns="60")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines if LONG_UID not in line and str(long_savepoint) not in line) <= 60
    assert "uid              " + LONG_UID in lines


def test_a_piped_listing_keeps_full_paths(long_savepoint: Path) -> None:
    result = statekit("checkpoints", "list", str(long_savepoint.parent))
    assert result.returncode == 0, result.stderr
    assert any(str(long_savepoint) in line for line in result.stdout.splitlines())


# ---------------------------------------------------------------- --json errors


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def json_error(result: Result) -> dict[str, object]:
    """The one JSON error object on stderr of a failed ``--json`` command (stdout empty)."""
    assert result.stdout == "", result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    error = json.loads(lines[0])["error"]
    assert isinstance(error, dict) and set(error) == {"message", "path", "exit_code", "type"}
    assert error["exit_code"] == result.exit_code
    return error


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_bad_path_is_a_json_error_with_its_path(tmp_path: Path, where: str) -> None:
    missing = tmp_path / "nope"
    args = ["--json", "inspect", str(missing)] if where == "before" else ["inspect", str(missing), "--json"]
    result = invoke(*args)
    assert result.exit_code == 2
    error = json_error(result)
    assert error["path"] == str(missing)
    assert str(error["message"]).startswith(f"{missing}: ")


def test_a_damaged_metadata_is_a_json_error(tmp_path: Path) -> None:
    (tmp_path / "_metadata").write_text("hello world\n")
    error = json_error(invoke("--json", "verify", str(tmp_path)))
    assert error["type"] == "MetadataError" and error["path"] == str(tmp_path / "_metadata")
    assert "not a statekit or Apache Flink _metadata file" in str(error["message"])


@pytest.mark.parametrize("args", [["--json", "inspect"], ["inspect", "--json", "--no-such-option", "x"],
                                  ["--json", "rescale", "x", "-p", "not-a-number", "-o", "y"]], ids=" ".join)
def test_a_usage_error_is_a_json_error_with_exit_2(args: list[str]) -> None:
    result = invoke(*args)
    assert result.exit_code == 2
    error = json_error(result)
    assert error["path"] is None and error["message"]


def test_without_json_errors_stay_one_text_line(tmp_path: Path) -> None:
    result = invoke("inspect", str(tmp_path / "nope"))
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"statekit: error: {tmp_path / 'nope'}: ")


def test_an_internal_error_keeps_exit_3_in_json(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import statekit.flink.dispatch as dispatch

    def boom(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(dispatch, "inspect_any", boom)
    result = invoke("--json", "inspect", str(tmp_path))
    assert result.exit_code == 3
    error = json_error(result)
    assert error["type"] == "InternalError" and "RuntimeError: boom" in str(error["message"])
