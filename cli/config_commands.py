"""``statekit config show``: the config file's profile in effect and where each setting comes
from (thin: parse, call :func:`statekit.cli.config.config_report`, render)."""

from __future__ import annotations

from typing import Any

import click

from statekit.cli.errors import catch_exception
from statekit.cli.options import common_options
from statekit.cli.output import get_output

__all__ = ["config"]


@click.group()
def config() -> None:
    """The config file (~/.config/statekit/config.toml, or $STATEKIT_CONFIG): named profiles of
    storage options, Spark master or remote, the default savepoint directory and the output style.

    \b
    A setting comes from the command's flag, else its environment variable, else the profile
    (--profile NAME before the command, $STATEKIT_PROFILE, or the file's default_profile).
    docs/CLI.md shows the file's format.
    """


@config.command()
@common_options
@catch_exception
def show(**_: Any) -> None:
    """Every setting in effect for a command started now, and where it came from."""
    from statekit.cli.config import config_report

    get_output().show(config_report())
