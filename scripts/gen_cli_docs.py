"""Generate docs/CLI.md from the commands' own help, so the reference never drifts.

    python scripts/gen_cli_docs.py          # rewrite docs/CLI.md
    python scripts/gen_cli_docs.py --check  # exit 1 if docs/CLI.md is out of date
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from statekit.cli.main import COMMANDS, cli

DOC = Path(__file__).resolve().parent.parent / "docs" / "CLI.md"

INTRO = """# statekit command reference

Generated from the commands' help by `scripts/gen_cli_docs.py`; `tests/cli/test_docs.py`
fails when this file and the commands disagree.

Every command takes `--json` (machine-readable output) and `--verbose` (tracebacks and
engine logs), before or after the command name. Paths are local paths or fsspec URLs
(`file://`, `memory://`, `s3://`, ...).

## Exit codes

| code | meaning |
|---|---|
| 0 | success |
| 1 | a failed check: `verify` found damage, `diff` found differences, a job failed |
| 2 | bad input: a missing or malformed path, a bad option, a damaged source; one line on stderr names the path and the cause |
| 3 | internal error (a bug): rerun with `--verbose` for the traceback and report it |
| 130 | interrupted |

Related documents: [FORMAT.md](FORMAT.md) (the snapshot format), [RUNTIME.md](RUNTIME.md),
[JOBS.md](JOBS.md), [RESCALE.md](RESCALE.md), [SPARK.md](SPARK.md), [FLINK.md](FLINK.md).
"""


def _help(name: str, command: click.Command, parent: click.Context) -> str:
    # info_name is the command's own name: click prefixes the parents' names in the usage line
    ctx = click.Context(command, info_name=name, parent=parent, max_content_width=96, terminal_width=96)
    return command.get_help(ctx)


def render() -> str:
    # as cli.make_context would: click caches each command's help option on first use, so a
    # context without the group's settings would render "--help" or "-h, --help" by test order
    root = click.Context(cli, info_name="statekit", max_content_width=96, terminal_width=96,
                         help_option_names=cli.context_settings["help_option_names"])
    parts = [INTRO, "## statekit\n", "```", cli.get_help(root), "```\n"]
    for name in sorted(COMMANDS):
        command = cli.get_command(root, name)
        assert command is not None
        parts += [f"## statekit {name}\n", "```", _help(name, command, root), "```\n"]
        if isinstance(command, click.Group):
            sub_ctx = click.Context(command, info_name=name, parent=root)
            for sub in sorted(command.list_commands(sub_ctx)):
                subcommand = command.get_command(sub_ctx, sub)
                assert subcommand is not None
                parts += [f"### statekit {name} {sub}\n", "```",
                          _help(sub, subcommand, sub_ctx), "```\n"]
    return "\n".join(parts)


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        if not DOC.exists() or DOC.read_text() != text:
            print(f"{DOC} is out of date: run python scripts/gen_cli_docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
