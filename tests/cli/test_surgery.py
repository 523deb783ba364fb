"""``statekit rescale / modify / bootstrap`` through click's CliRunner, text and --json."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from statekit.cli.main import cli
from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.statefmt.statefile import StateFileReader
from statekit.writers.savepoint_writer import SavepointWriter


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


@pytest.fixture(scope="module")
def savepoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("surgery") / "sp")
    writer = SavepointWriter.new_savepoint(8, job_id="0" * 32)
    writer.with_operator("counter", {
        StateDescriptor("count", StateKind.VALUE, value_type="int"): [(f"w{i}", i) for i in range(40)],
        StateDescriptor("offsets", StateKind.OPERATOR_LIST): [1, 2, 3],
    }, parallelism=2)
    writer.write(path)
    return path


def test_rescale_dry_run_text(savepoint: str) -> None:
    result = invoke("rescale", savepoint, "-p", "3", "--dry-run")
    assert result.exit_code == 0, result.output
    assert result.output == f"""\
Rescale plan for {savepoint} (dry run: nothing written)
operator counter: rescale, parallelism 2 -> 3, max parallelism 8
subtask  key groups  with state    bytes  entries
-------  ----------  ----------  -------  -------
      0  0-2                  3  1.6 KiB       16
      1  3-5                  3  1.6 KiB       14
      2  6-7                  2  1.2 KiB       10
  keyed states count: 4.5 KiB, 40 entries, skew 1.10 (largest subtask / mean)
  operator-list state offsets: elements per subtask [1, 1, 1]
"""


def test_rescale_dry_run_json_equals_the_real_run(savepoint: str, tmp_path: Path) -> None:
    plan = invoke("--json", "rescale", savepoint, "-p", "3", "--dry-run")
    out = str(tmp_path / "out")
    real = invoke("rescale", savepoint, "-p", "3", "-o", out, "--json")
    assert plan.exit_code == real.exit_code == 0, real.output
    planned, done = json.loads(plan.output), json.loads(real.output)
    assert planned["dry_run"] is True and planned["output"] is None and done["output"] == out
    assert planned["operators"] == done["operators"]
    assert done["operators"][0]["subtasks"][0] == {"index": 0, "key_group_range": [0, 2], "key_groups": 3,
                                                   "bytes": planned["operators"][0]["subtasks"][0]["bytes"],
                                                   "entries": 16}
    assert (done["operators"][0]["old_parallelism"], done["operators"][0]["parallelism"]) == (2, 3)
    assert done["bytes_written"] == sum(f.size for f in SavepointReader.read(out).metadata.files())


def test_rescale_text_and_max_parallelism(savepoint: str, tmp_path: Path) -> None:
    out = str(tmp_path / "wide")
    result = invoke("rescale", savepoint, "--max-parallelism", "16", "--operator", "counter=4", "-o", out)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f"Rescaled {savepoint} -> {out} in ")
    assert lines[1] == "operator counter: regroup, parallelism 2 -> 4, max parallelism 8 -> 16"
    op = SavepointReader.read(out).operator("counter")
    assert (op.parallelism, op.max_parallelism) == (4, 16)


@pytest.mark.parametrize("args, message", [
    (["-p", "0"], "{sp}: operator 'counter': parallelism must be at least 1, got 0"),
    (["-p", "9"], "{sp}: operator 'counter': parallelism 9 is larger than max parallelism 8 "
                  "(raise it with --max-parallelism)"),
    (["--operator", "nope=2"], "{sp}: --operator nope=2: no operator with uid 'nope' (operators: counter)"),
    (["--operator", "counter"], "--operator 'counter': expected UID=N"),
    ([], "{sp}: nothing to do: give -p N, --operator UID=N or --max-parallelism M"),
])
def test_rescale_bad_input_is_one_line_exit_2(savepoint: str, tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "out"
    result = invoke("rescale", savepoint, *args, "-o", str(out))
    assert result.exit_code == 2
    assert result.output == f"statekit: error: {message.format(sp=savepoint)}\n"
    assert not out.exists()


def test_rescale_damaged_or_incomplete_sources(tmp_path: Path, savepoint: str) -> None:
    incomplete = tmp_path / "savepoint-123456-abcdef"
    incomplete.mkdir()
    result = invoke("rescale", str(incomplete), "-p", "2", "-o", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert result.output == (f"statekit: error: {incomplete}: incomplete checkpoint: no _metadata (it was never "
                             "completed; it holds no usable state)\n")
    damaged = tmp_path / "damaged"
    SavepointWriter.new_savepoint(8).with_operator(
        "counter", {StateDescriptor("count", StateKind.VALUE): [(i, i) for i in range(50)]}, parallelism=2,
    ).write(str(damaged))
    file = SavepointReader.read(str(damaged)).operator("counter").subtasks[0].file_of("count")
    assert file is not None
    data = bytearray((damaged / file.path).read_bytes())
    with open(damaged / file.path, "rb") as stream:
        first = StateFileReader(stream, len(data), path="").index
    block = min(first, key=lambda e: e.offset)
    data[block.offset + block.length // 2] ^= 0xFF  # inside the first block's body
    (damaged / file.path).write_bytes(bytes(data))
    result = invoke("rescale", str(damaged), "-p", "3", "-o", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert result.output.startswith(f"statekit: error: {damaged / file.path}: key group ")
    assert result.output.endswith(": block checksum mismatch\n") and result.output.count("\n") == 1
    assert sorted(os.listdir(tmp_path)) == ["damaged", incomplete.name]
    assert invoke("rescale", savepoint, "-p", "abc").exit_code == 2
    missing_output = invoke("rescale", savepoint, "-p", "2")
    assert missing_output.exit_code == 2 and "give the output directory (-o OUT)" in missing_output.output


def test_modify_text_json_and_errors(savepoint: str, tmp_path: Path) -> None:
    plan = invoke("modify", savepoint, "--rename-uid", "counter=c2", "--dry-run")
    assert plan.exit_code == 0, plan.output
    assert plan.output == f"""\
Modify plan for {savepoint} (dry run: nothing written)
  renamed counter -> c2
uid  was      parallelism  max parallelism  states          files    bytes
---  -------  -----------  ---------------  --------------  -----  -------
c2   counter            2                8  count, offsets      4  4.9 KiB
"""
    out = str(tmp_path / "out")
    result = invoke("--json", "modify", savepoint, "-o", out, "--rename-uid", "counter=c2",
                    "--remove-state", "counter/offsets")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["renamed"] == [{"from": "counter", "uid": "c2"}]
    assert report["removed_states"] == [{"uid": "counter", "state": "offsets"}]
    assert [(o["uid"], o["states"]) for o in report["operators"]] == [("c2", ["count"])]
    bad = invoke("modify", savepoint, "-o", str(tmp_path / "bad"), "--remove-operator", "counter-v1")
    assert bad.exit_code == 2
    assert bad.output == (f"statekit: error: {savepoint}: --remove-operator counter-v1: the savepoint has no "
                          "operator with uid 'counter-v1' (operators: 'counter')\n")
    assert not (tmp_path / "bad").exists()


def test_bootstrap_text_and_json(tmp_path: Path, savepoint: str) -> None:
    pq.write_table(pa.table({"word": ["a", "b", "a"], "n": [1, 2, 3]}), tmp_path / "in.parquet")
    out = str(tmp_path / "boot")
    result = invoke("bootstrap", "--input", str(tmp_path / "in.parquet"), "--uid", "counter", "--state", "count",
                    "--key-column", "word", "--value-column", "n", "-p", "2", "-o", out)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f"Bootstrapped counter/count (value) into {out} in ")
    assert lines[0].endswith(" s: 3 rows -> 2 entries, 1.5 KiB")
    assert lines[1:] == [
        "  parallelism 2, max parallelism 128, value type int (msgpack)",
        "subtask  key groups    bytes  entries",
        "-------  ----------  -------  -------",
        "      0  0-63        1.1 KiB        2",
        "      1  64-127        436 B        0",
    ]
    assert {e.key: e.value for e in SavepointReader.read(out).read_keyed_state("counter", "count")} == {"a": 3, "b": 2}
    added = str(tmp_path / "added")
    result = invoke("--json", "bootstrap", "--input", str(tmp_path / "in.parquet"), "--uid", "words",
                    "--state", "seen", "--kind", "map", "--key-column", "word", "--user-key-column", "n",
                    "--value-column", "n", "--from", savepoint, "-o", added)
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.output)
    assert report["copied_operators"] == ["counter"] and report["max_parallelism"] == 8
    assert report["kind"] == "map" and report["entries"] == 3 and report["rows_read"] == 3
    bad = invoke("bootstrap", "--input", str(tmp_path / "in.parquet"), "--uid", "u", "--state", "s",
                 "--key-column", "nope", "--value-column", "n", "-o", str(tmp_path / "bad"))
    assert bad.exit_code == 2
    assert bad.output == (f"statekit: error: {tmp_path / 'in.parquet'}: no column 'nope' in the input "
                          "(columns: word, n)\n")
    missing = invoke("bootstrap", "--uid", "u", "--state", "s", "--value-column", "n", "-o", str(tmp_path / "bad"))
    assert missing.output == "statekit: error: give --input (a file or a directory of Parquet, CSV or JSON-lines files)\n"
    assert missing.exit_code == 2
    assert not (tmp_path / "bad").exists()
