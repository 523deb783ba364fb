"""What `inspect` draws: a histogram that shows evenly spread state, no key groups for
operator state, and `verify`'s words for a file that is no _metadata in every command."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from statekit.cli.main import cli
from statekit.readers.inspection import HISTOGRAM_BUCKETS, _skew
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
FLINK_SAVEPOINT = GOLDEN / "flink-2.3" / "hashmap" / "savepoints" / "savepoint-962f67-bfc4c25148ed"
NOT_METADATA = "not a statekit or Apache Flink _metadata file"


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setenv("STATEKIT_OUTPUT", "rich")  # bordered tables off a terminal too: the tests read cells by │


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("│").split("│")]


# ---------------------------------------------------------------- histogram


def test_even_key_groups_fill_the_histogram() -> None:
    # 64 key groups of 900..1100 bytes: all land in the top buckets of [0, max], spread over [min, max]
    view = _skew({g: 900 + (g * 37) % 201 for g in range(64)}, 64)
    assert view.min_bytes == 900 and view.max_bytes == 1100
    assert sum(view.histogram) == 64 and len(view.histogram) == HISTOGRAM_BUCKETS
    assert sum(1 for n in view.histogram if n) >= HISTOGRAM_BUCKETS - 1


def test_an_empty_key_group_keeps_zero_as_the_bottom() -> None:
    view = _skew({0: 100, 3: 50}, 4)
    assert view.min_bytes == 0 and view.histogram[0] == 2 and view.histogram[5] == 1 and view.histogram[-1] == 1


def test_inspect_draws_evenly_spread_state_as_a_full_histogram(tmp_path: Path) -> None:
    count = StateDescriptor("count", StateKind.VALUE, value_type="int")
    path = tmp_path / "even"
    SavepointWriter.new_savepoint(max_parallelism=32).with_operator(
        "counter", {count: [(f"key-{i}", i) for i in range(6000)]}, parallelism=2).write(str(path))
    result = run("inspect", str(path))
    assert result.exit_code == 0, result.output
    row = next(cells(line) for line in result.stdout.splitlines() if line.startswith("│ count "))
    bars, span = row[-1][:HISTOGRAM_BUCKETS], row[-1][HISTOGRAM_BUCKETS + 1:]
    assert len(bars) == HISTOGRAM_BUCKETS and sum(1 for c in bars if c != " ") >= HISTOGRAM_BUCKETS - 2, row
    assert ".." in span and not span.startswith("0 B"), row


def test_identical_key_groups_say_so(tmp_path: Path) -> None:
    view = _skew(dict.fromkeys(range(8), 64), 8)
    assert view.min_bytes == view.max_bytes == 64 and view.histogram[0] == 8
    from statekit.cli.renderers.snapshots import _histogram

    assert _histogram(view) == "every key group 64 B"


# ---------------------------------------------------------------- key groups of operator state


def test_statekit_operator_state_subtasks_show_no_key_groups() -> None:
    result = run("inspect", str(GOLDEN / "statekit-v1" / "statekit-0.1-v1-all-kinds"))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    source = lines.index(next(line for line in lines if line.startswith("Operator 'source'")))
    subtasks = [cells(line) for line in lines[source:] if line.startswith(("│ 0 ", "│ 1 "))]
    assert [row[:2] for row in subtasks] == [["0", "-"], ["1", "-"]]
    counter = [cells(line) for line in lines[:source] if line.startswith(("│ 0 ", "│ 1 "))]
    assert [row[:2] for row in counter] == [["0", "0-1"], ["1", "2-3"]]


def test_flink_operators_without_keyed_state_show_no_key_groups() -> None:
    result = run("inspect", str(FLINK_SAVEPOINT))
    assert result.exit_code == 0, result.output
    rows = {cells(line)[1]: cells(line) for line in result.stdout.splitlines()
            if line.startswith("│ ") and len(cells(line)) == 10}
    assert rows["Source: Collection Source"][4] == "-"
    assert rows["Sink: Print to Std. Out"][4] == "-"
    assert rows["KEYED PROCESS"][4] == "0-127"


# ---------------------------------------------------------------- a text file as _metadata


@pytest.fixture(params=["hi\n", "hello world\n", "a longer text file that is no metadata at all\n"],
                ids=["3-bytes", "12-bytes", "long"])
def text_snapshot(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    folder = tmp_path / "not-a-savepoint"
    folder.mkdir()
    (folder / "_metadata").write_text(request.param)
    return folder


@pytest.mark.parametrize("command", [["verify"], ["inspect"], ["rescale", "-p", "2", "-o", "OUT"],
                                     ["run", "-s"]], ids=lambda c: c[0])
def test_a_text_file_is_named_the_same_by_every_command(text_snapshot: Path, command: list[str],
                                                          tmp_path: Path) -> None:
    job = Path(__file__).resolve().parents[2] / "examples" / "wordcount.py"
    if command[0] == "run":
        args = [*command, str(text_snapshot), str(job), "--input", str(tmp_path), "--output", str(tmp_path / "o")]
    else:
        args = [command[0], str(text_snapshot), *(str(tmp_path / "out") if a == "OUT" else a for a in command[1:])]
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"statekit: error: {text_snapshot / '_metadata'}: {NOT_METADATA}: unknown magic number "
        f"0x{(text_snapshot / '_metadata').read_bytes()[:4].hex()} at byte offset 0"]
