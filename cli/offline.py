"""Offline commands on checkpoint and savepoint directories (thin: parse, call, render)."""

from __future__ import annotations

import sys
from typing import Any

import click

import statekit.cli.flink_render  # noqa: F401
from statekit.cli.errors import catch_exception
from statekit.cli.options import common_options
from statekit.cli.output import get_output

__all__ = ["checkpoints", "inspect", "verify", "dispose"]


@click.group()
def checkpoints() -> None:
    """Checkpoints and savepoints in a directory."""


@checkpoints.command("list")
@click.argument("directory")
@common_options
@catch_exception
def checkpoints_list(directory: str, **_: Any) -> None:
    """Every chk-N and savepoint under DIRECTORY: id, complete/incomplete, kind, size, age."""
    from statekit.readers.flink_dispatch import list_any

    get_output().show(list_any(directory))


@click.command()
@click.argument("path")
@click.option("--no-skew", is_flag=True, help="Skip the key-group skew view (reads no state file).")
@common_options
@catch_exception
def inspect(path: str, no_skew: bool, **_: Any) -> None:
    """Operators, states, parallelism, key-group ranges, sizes and skew of a snapshot."""
    from statekit.readers.flink_dispatch import inspect_any

    get_output().show(inspect_any(path, skew=not no_skew))


@click.command()
@click.argument("path")
@common_options
@catch_exception
def verify(path: str, **_: Any) -> None:
    """Check every file, size and checksum; exit 1 naming each damaged file and key group."""
    from statekit.readers.flink_dispatch import verify_any

    output = get_output()
    with output.progress("verifying") as advance:
        report = verify_any(path, on_file=advance)
    output.show(report)
    if not report.ok:
        sys.exit(1)


@click.command()
@click.argument("path")
@click.option("--dry-run", is_flag=True, help="List what would be deleted, delete nothing.")
@common_options
@catch_exception
def dispose(path: str, dry_run: bool, **_: Any) -> None:
    """Delete a checkpoint or savepoint directory (refuses anything else)."""
    from statekit.readers.flink_dispatch import dispose_any

    get_output().show(dispose_any(path, dry_run=dry_run))
