"""The list of commands that read Apache Flink snapshots, which errors name, is the commands'
own: every command whose help speaks of Flink is in it and nothing else; and the error a
statekit-only command gives for a Flink snapshot (``bootstrap --from``) names that list."""

from __future__ import annotations

from pathlib import Path

import click
from click.testing import CliRunner

from statekit.cli.main import COMMANDS, cli
from statekit.statefmt.layout import FLINK_COMMANDS

FLINK_SAVEPOINT = (Path(__file__).resolve().parents[1] / "golden" / "flink-2.3" / "hashmap" / "savepoints"
                   / "savepoint-962f67-bfc4c25148ed")


def _helps() -> dict[str, str]:
    """Every command and subcommand (``checkpoints list``) with its help text."""
    root = click.Context(cli, info_name="statekit")
    helps = {}
    for name in COMMANDS:
        command = cli.get_command(root, name)
        assert command is not None
        if isinstance(command, click.Group):
            group = click.Context(command, info_name=name, parent=root)
            for sub in command.list_commands(group):
                subcommand = command.get_command(group, sub)
                assert subcommand is not None
                helps[f"{name} {sub}"] = subcommand.get_help(click.Context(subcommand, info_name=sub, parent=group))
        else:
            helps[name] = command.get_help(click.Context(command, info_name=name, parent=root))
    return helps


# commands whose help speaks of Apache Flink because they write its savepoints from rows, not
# because they read a Flink snapshot
WRITE_ONLY = {"bootstrap"}


def test_the_flink_command_list_is_every_command_whose_help_speaks_of_flink() -> None:
    speaking = {name for name, text in _helps().items() if "Apache Flink" in " ".join(text.split())}
    listed = {entry.split(" --")[0] for entry in FLINK_COMMANDS}
    assert listed == speaking - WRITE_ONLY


def test_a_flink_savepoint_given_to_bootstrap_from_names_the_commands_that_read_it(tmp_path: Path) -> None:
    rows = tmp_path / "rows.json"
    rows.write_text('{"k": "a", "v": 1}\n')
    result = CliRunner().invoke(cli, ["bootstrap", "--input", str(rows), "--uid", "u", "--state", "s",
                                      "--key-column", "k", "--value-column", "v", "--from", str(FLINK_SAVEPOINT),
                                      "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    (line,) = result.output.splitlines()
    assert "this is an Apache Flink _metadata file, which this command does not read" in line
    assert ", ".join(FLINK_COMMANDS) in line and not (tmp_path / "out").exists()
