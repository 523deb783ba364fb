"""The ``statekit`` command: a flink-like CLI for stream-job state.

Commands load lazily (module imported only when the command runs or its help is shown),
so ``statekit --help`` and ``statekit checkpoints list`` start fast.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

__all__ = ["cli", "main", "COMMANDS"]

# command name -> (module, attribute, one-line help shown by `statekit --help`)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "run": ("statekit.cli.jobs", "run", "Run a job (JOB.py) on the mini runtime."),
    "list": ("statekit.cli.jobs", "list_jobs", "List running jobs."),
    "savepoint": ("statekit.cli.jobs", "savepoint", "Trigger a savepoint of a running job."),
    "stop": ("statekit.cli.jobs", "stop", "Stop a job with a savepoint."),
    "cancel": ("statekit.cli.jobs", "cancel", "Cancel a running job."),
    "checkpoint": ("statekit.cli.operations", "checkpoint", "Trigger a checkpoint of a running job."),
    "ui": ("statekit.cli.operations", "ui", "A live web dashboard of your jobs (127.0.0.1)."),
    "checkpoints": ("statekit.cli.offline", "checkpoints", "Checkpoints and savepoints in a directory."),
    "inspect": ("statekit.cli.offline", "inspect", "Operators, states, sizes and skew of a snapshot."),
    "verify": ("statekit.cli.offline", "verify", "Check every file and checksum of a snapshot."),
    "dispose": ("statekit.cli.offline", "dispose", "Safely delete a checkpoint or savepoint."),
    "rescale": ("statekit.cli.surgery", "rescale", "Rescale a savepoint offline (parallelism, max parallelism)."),
    "modify": ("statekit.cli.surgery", "modify", "Remove operators or states, rename uids."),
    "bootstrap": ("statekit.cli.surgery", "bootstrap", "Create a savepoint from Parquet, CSV or JSON rows."),
    "convert": ("statekit.cli.convert", "convert", "Move keyed state between statekit and Flink savepoints."),
    "export": ("statekit.cli.spark_commands", "export", "Export state to Parquet through Spark."),
    "diff": ("statekit.cli.spark_commands", "diff", "Compare two savepoints."),
    "keygroup": ("statekit.cli.flink_commands", "keygroup", "Key group and subtask of a key (also Flink's)."),
    "relocate": ("statekit.cli.flink_commands", "relocate", "Rewrite absolute paths in a Flink _metadata."),
    "check": ("statekit.cli.check", "check", "Will a job restore from a snapshot? Compatibility, offline."),
    "migrate": ("statekit.cli.migrate", "migrate", "Migrate a state to a new declared value type."),
    "report": ("statekit.cli.report", "report", "One self-contained HTML page about a snapshot."),
    "spark": ("statekit.cli.spark_server", "spark", "A local Spark Connect server that export, diff and bootstrap reuse."),
    "config": ("statekit.cli.config_commands", "config", "The config file: profiles, and what is in effect."),
}


_JSON_ARG = "statekit.json-arg"  # ctx.meta: --json among the arguments (before they are parsed)


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        spec = COMMANDS.get(cmd_name)
        if spec is None:
            return None
        module = importlib.import_module(spec[0])
        command = getattr(module, spec[1])
        assert isinstance(command, click.Command)
        return command

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_JSON_ARG] = "--json" in args
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; with ``--json`` a usage error (bad option, missing argument) is JSON too."""
        from statekit.cli.errors import json_mode, report_usage_error

        try:
            return super().invoke(ctx)
        except click.ClickException as error:
            if not (ctx.meta.get(_JSON_ARG) or json_mode(ctx)):
                raise
            report_usage_error(error)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name][2]) for name in self.list_commands(ctx)])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output for every command.")
@click.option("--plain", is_flag=True, default=None,
              help="Tables without borders for every command (the default when stdout is not a terminal).")
@click.option("--verbose", "-v", is_flag=True, help="Show tracebacks and engine logs.")
@click.option("--profile", metavar="NAME", expose_value=False, callback=lambda ctx, param, value: _use_profile(value),
              help="Settings from this profile of the config file (else $STATEKIT_PROFILE, else the file's "
                   "default_profile); see `statekit config show`.")
@click.version_option(package_name="statekit")
@click.pass_context
def cli(ctx: click.Context, as_json: bool, plain: bool | None, verbose: bool) -> None:
    """statekit: savepoints, checkpoints and state of stream jobs.

    \b
    Exit codes: 0 ok, 1 a failed check (verify damage, diff differences, failed job),
    2 bad input, 3 internal error, 130 interrupted.
    """
    from statekit.statefmt.pandas_probe import answer_pandas_probe_on_import

    answer_pandas_probe_on_import()  # pyarrow's first array would otherwise import pandas (~0.4 s)
    ctx.obj = {"json": as_json, "plain": plain, "verbose": verbose}


def _use_profile(name: str | None) -> None:
    """``--profile NAME``: the profile of this command (over $STATEKIT_PROFILE)."""
    from statekit.cli import config

    config.use_profile(name)


def main() -> Any:
    """The console script: ``cli`` with statekit's exits — a Ctrl-C anywhere (also while the
    arguments are parsed or modules load) is ``statekit: error: interrupted``, exit 130."""
    import sys

    try:
        result = cli.main(prog_name="statekit", standalone_mode=False)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        from statekit.cli.errors import EXIT_INTERRUPTED, exit_now

        click.echo("statekit: error: interrupted", err=True)
        exit_now(EXIT_INTERRUPTED)
    sys.exit(result if isinstance(result, int) else 0)


if __name__ == "__main__":
    main()
