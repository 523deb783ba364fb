"""Every command that draws a table, at 60, 80 and 200 columns, bordered (a terminal) and plain
(a pipe, ``--plain``): no line is wider than the terminal unless it holds an identifier that is
wider itself, every identifier (uid, state name, job id, path) is printed whole on one line, and
nothing is cut with an ellipsis. Piped without ``COLUMNS``, tables are plain and never narrowed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.cells import cell_len

from statekit.cli.main import cli
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
FLINK_SAVEPOINT = GOLDEN / "flink-2.3" / "hashmap" / "savepoints" / "savepoint-962f67-bfc4c25148ed"
WORDCOUNT = ROOT / "examples" / "wordcount.py"
VARIANT = ROOT / "tests" / "runtime" / "jobs" / "wordcount_variant.py"

UID = "checkout-sessions-enriched-with-customer-profile"  # 48 characters: wider than a third of 80
STATE = "running-total-per-customer-and-day"
HUGE_UID = "an-operator-uid-longer-than-any-terminal-this-test-draws-" + "x" * 160
WIDTHS = [60, 80, 200]
STYLES = ["rich", "plain"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Snapshots with long identifiers, a job registry with a finished job, a wordcount savepoint."""
    root = tmp_path_factory.mktemp("widths")
    count = StateDescriptor(STATE, StateKind.VALUE, value_type="int")
    tags = StateDescriptor("tags", StateKind.MAP, value_type="string", user_key_type="string")
    sp = root / "savepoints" / "savepoint-with-a-rather-long-directory-name-for-paths"
    SavepointWriter.new_savepoint(128).with_operator(
        UID, {count: [(f"customer-{i}", i) for i in range(300)], tags: [(i, "k", "v") for i in range(20)]},
        parallelism=3).with_operator(HUGE_UID, {count: [("a", 1)]}, parallelism=1).write(str(sp))
    sp2 = root / "savepoints" / "savepoint-changed"
    SavepointWriter.new_savepoint(128).with_operator(
        UID, {count: [(f"customer-{i}", i + (i % 7 == 0)) for i in range(300)]}, parallelism=2).write(str(sp2))
    home = root / "home"
    env = {**os.environ, "STATEKIT_HOME": str(home)}
    texts = root / "texts"
    texts.mkdir()
    (texts / "a.txt").write_text("apple pear apple\n", encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "statekit.cli.main", "run", "--savepoint-on-finish",
                          str(root / "wordcount"), str(WORDCOUNT), "--input", str(texts), "--output",
                          str(root / "out")], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    (wordcount,) = (root / "wordcount").iterdir()
    job_id = re.search(r"JobID ([0-9a-f]{32})", run.stderr)
    assert job_id is not None
    pq = root / "rows.parquet"
    import pyarrow as pa
    import pyarrow.parquet

    pyarrow.parquet.write_table(pa.table({"customer": [f"c{i}" for i in range(50)], "n": list(range(50))}), pq)
    return {"root": root, "sp": str(sp), "sp2": str(sp2), "home": str(home), "wordcount": str(wordcount),
            "texts": str(texts), "job_id": job_id.group(1), "parquet": str(pq)}


def commands(w: dict[str, Any], tmp: Path) -> dict[str, tuple[list[str], list[str]]]:
    """command name -> (arguments, identifiers it must print whole)."""
    sp, sp2 = w["sp"], w["sp2"]
    return {
        "checkpoints list": (["checkpoints", "list", str(Path(sp).parent)], [sp, sp2, str(Path(sp).parent)]),
        "inspect": (["inspect", sp], [UID, STATE, HUGE_UID, sp]),
        "inspect flink": (["inspect", str(FLINK_SAVEPOINT)], ["running-count", "python-state-count",
                                                                str(FLINK_SAVEPOINT)]),
        "diff": (["diff", sp2, sp, "--keys"], [UID, STATE, HUGE_UID, sp, sp2]),
        "export": (["export", sp, "-o", str(tmp / "export")], [UID, STATE, HUGE_UID, sp, str(tmp / "export")]),
        "rescale": (["rescale", sp, "-p", "4", "--dry-run"], [UID, HUGE_UID, sp]),
        "modify": (["modify", sp, "--rename-uid", f"{HUGE_UID}=short", "--dry-run"], [UID, HUGE_UID, sp]),
        "bootstrap": (["bootstrap", "--input", w["parquet"], "--uid", UID, "--state", STATE, "--key-column",
                       "customer", "--value-column", "n", "-p", "3", "-o", str(tmp / "boot")],
                      [UID, STATE, str(tmp / "boot")]),
        "rescale flink": (["rescale", str(FLINK_SAVEPOINT), "--max-parallelism", "256", "--dry-run"],
                          ["running-count", str(FLINK_SAVEPOINT)]),
        "list": (["list", "--all"], [w["job_id"], "wordcount"]),
        "check": (["check", w["wordcount"], str(VARIANT), "--input", w["texts"], "--output", str(tmp / "o"),
                   "--variant", "float-count"], ["counter/count", w["wordcount"], str(VARIANT)]),
        "config show": (["config", "show"], ["storage_options.client_kwargs", str(tmp / "config.toml")]),
    }


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", ["checkpoints list", "inspect", "inspect flink", "diff", "export", "rescale",
                                  "modify", "bootstrap", "rescale flink", "list", "check", "config show"])
def test_tables_fit_the_terminal_and_never_cut_an_identifier(world: dict[str, Any], tmp_path: Path, name: str,
                                                             width: int, style: str) -> None:
    args, identifiers = commands(world, tmp_path)[name]
    config = tmp_path / "config.toml"
    config.write_text('[profiles.default]\nstorage_options = { client_kwargs = { endpoint_url = "http://h:9" } }\n')
    env = {"COLUMNS": str(width), "STATEKIT_OUTPUT": style, "STATEKIT_HOME": world["home"],
           "STATEKIT_CONFIG": str(config)}
    result = CliRunner(env=env).invoke(cli, args)
    assert result.exit_code in (0, 1), result.output
    text = result.stdout
    lines = text.splitlines()
    assert "…" not in text
    for identifier in identifiers:
        assert any(identifier in line for line in lines), f"{identifier!r} is not whole on a line:\n{text}"
    for line in lines:
        if cell_len(line) > width:
            assert any(identifier in line for identifier in identifiers if len(identifier) > width // 3), \
                f"a line of {cell_len(line)} cells at {width} columns holds no long identifier: {line!r}"
    if style == "plain":
        assert not re.search("[│┃━┏┗]", text)


def test_a_narrow_terminal_hides_secondary_columns_and_says_which() -> None:
    golden = str(GOLDEN / "statekit-v1" / "statekit-0.1-v1-all-kinds")
    wide = CliRunner(env={"COLUMNS": "200", "STATEKIT_OUTPUT": "rich"}).invoke(cli, ["inspect", golden])
    narrow = CliRunner(env={"COLUMNS": "80", "STATEKIT_OUTPUT": "rich"}).invoke(cli, ["inspect", golden])
    assert "key serializer" in wide.stdout and "hidden to fit" not in wide.stdout
    lines = narrow.stdout.splitlines()
    header = next(line for line in lines if line.startswith("┃ uid"))
    assert "key serializer" not in header and "parallelism" in header
    note = next(line for line in lines if "hidden to fit 80 columns" in line)
    assert note.startswith("(") and "key serializer" in note
    assert any(line.startswith("│ counter ") for line in lines)


def test_an_identifier_wider_than_the_terminal_turns_the_table_vertical(world: dict[str, Any]) -> None:
    result = CliRunner(env={"COLUMNS": "60", "STATEKIT_OUTPUT": "rich"}).invoke(cli, ["inspect", world["sp"]])
    lines = result.stdout.splitlines()
    assert f"uid              {HUGE_UID}" in lines or any(line.startswith("uid") and line.endswith(HUGE_UID)
                                                          for line in lines)


def test_piped_output_without_columns_is_plain_and_whole(world: dict[str, Any]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "STATEKIT_OUTPUT")}
    result = subprocess.run([sys.executable, "-m", "statekit.cli.main", "inspect", world["sp"]], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert not re.search("[│┃━]", result.stdout) and "hidden to fit" not in result.stdout
    row = next(line for line in result.stdout.splitlines() if line.startswith(HUGE_UID))
    assert row.split()[0] == HUGE_UID and all(not line.endswith(" ") for line in result.stdout.splitlines())


def test_plain_flag_drops_the_borders_on_a_terminal(world: dict[str, Any]) -> None:
    bordered = CliRunner(env={"COLUMNS": "200", "TTY_COMPATIBLE": "1", "NO_COLOR": "1"}).invoke(
        cli, ["checkpoints", "list", str(Path(world["sp"]).parent)])
    plain = CliRunner(env={"COLUMNS": "200", "TTY_COMPATIBLE": "1", "NO_COLOR": "1"}).invoke(
        cli, ["--plain", "checkpoints", "list", str(Path(world["sp"]).parent)])
    assert "┃" in bordered.stdout and "┃" not in plain.stdout
    assert world["sp"] in plain.stdout


@pytest.mark.parametrize("width", WIDTHS)
def test_the_live_status_line_fits_the_terminal(width: int) -> None:
    from rich.text import Text

    from statekit.cli.renderers.jobs import live_status_line
    from statekit.runtime.jobmaster.metrics import LiveStatus

    fields = dict.fromkeys(LiveStatus.__dataclass_fields__, 0)
    status = LiveStatus(**{**fields, "state": "RUNNING", "records_in_per_s": 1_234_567.0,
                           "records_out_per_s": 1_234_000.0, "checkpoints_completed": 1234, "checkpoints_failed": 3,
                           "last_checkpoint_id": 1234, "last_checkpoint_duration_ms": 4321,
                           "last_checkpoint_size": 123_456_789, "backpressured_tasks": 2, "tasks": 16})
    line = Text.from_markup(live_status_line(status, width - 1)).plain
    assert cell_len(line) <= width - 1 and line.startswith("RUNNING")
    if width >= 200:
        assert "backpressured 2/16 tasks" in line and "chk-1234 4321 ms, 117.7 MiB" in line
