"""Offline commands on checkpoint and savepoint directories (thin: parse, call, render)."""

from __future__ import annotations

import sys
from typing import Any

import click

from statekit.cli.errors import catch_exception
from statekit.cli.operations import checkpoints_history
from statekit.cli.options import common_options, storage_option, uid_option
from statekit.cli.output import get_output

__all__ = ["checkpoints", "inspect", "verify", "dispose"]


@click.group()
def checkpoints() -> None:
    """Checkpoints and savepoints in a directory."""


checkpoints.add_command(checkpoints_history)


@checkpoints.command("list")
@click.argument("directory")
@storage_option
@common_options
@catch_exception
def checkpoints_list(directory: str, **_: Any) -> None:
    """Every chk-N and savepoint under DIRECTORY (statekit's and Apache Flink's): id,
    complete/incomplete, kind, size, age."""
    from statekit.flink.dispatch import list_any

    get_output().show(list_any(directory))


@click.command()
@click.argument("path")
@click.option("--no-skew", is_flag=True, help="Skip the key-group skew view (reads no state file).")
@click.option("--compiled-plan", metavar="PLAN.json",
              help="Apache Flink SQL snapshot: label operators with their plan node (id, type), name accumulator "
                   "fields, list window aggregates' open windows and timers (reads their state).")
@uid_option
@storage_option
@common_options
@catch_exception
def inspect(path: str, no_skew: bool, uids: tuple[str, ...], compiled_plan: str | None, **_: Any) -> None:
    """Operators, states, parallelism, key-group ranges, sizes and skew of a snapshot."""
    from statekit.flink.dispatch import inspect_any

    get_output().show(inspect_any(path, skew=not no_skew, uids=uids, compiled_plan=compiled_plan))


@click.command()
@click.argument("path")
@uid_option
@storage_option
@common_options
@catch_exception
def verify(path: str, uids: tuple[str, ...], **_: Any) -> None:
    """Check every file, size and checksum; exit 1 naming each damaged file and key group."""
    from statekit.flink.dispatch import verify_any

    output = get_output()
    with output.progress("verifying") as advance:
        report = verify_any(path, on_file=advance, uids=uids)
    output.show(report)
    if not report.ok:
        sys.exit(1)


@click.command()
@click.argument("path")
@click.option("--dry-run", is_flag=True, help="List exactly the files a real run would delete; delete nothing.")
@click.option("--force", is_flag=True,
              help="Also dispose a staging folder that changed in the last 10 minutes (only when no savepoint "
                   "or command is still writing it), or a checkpoint of a running job (its shared files are "
                   "kept).")
@storage_option
@common_options
@catch_exception
def dispose(path: str, dry_run: bool, force: bool, **_: Any) -> None:
    """Delete a checkpoint or savepoint directory, and nothing it cannot account for.

    PATH is a statekit or Apache Flink snapshot directory or its _metadata, an incomplete
    chk-N, or the hidden staging folder a killed savepoint left behind
    (.savepoint-*.inprogress-*, listed as incomplete by `checkpoints list`). A job directory
    is refused.

    Deleted: _metadata first, then the files it names inside the directory and the engine's
    own temp files (statekit .NAME.HEX.tmp, Flink ._metadata.inprogress.UUID), then the
    folders left empty, one by one (never a recursive delete). Without _metadata only statekit
    state and temp files qualify. A checkpoint's files in the job's shared/ go only when no
    other checkpoint of the job references them, and no newer checkpoint of it is still being
    taken; files outside the snapshot and shared/ are never deleted, nor anything reached
    through a symbolic link (a shared/ linked elsewhere is refused).

    Refused with exit 2, deleting nothing: a directory holding any other file (the message
    names the first and the count), a symbolic link or special file inside it, a PATH that
    is a symbolic link (give the real path), or a shared file reached through a link.

    A checkpoint of a statekit job that is running (its lock file in the job directory, or
    the job registry, says so) is refused unless --force; with --force its shared files are
    kept (the job builds its next checkpoints on them). A staging folder that changed in the
    last 10 minutes may still be written by a running savepoint or command: it is refused
    unless --force.
    """
    from statekit.flink.dispatch import dispose_any
    from statekit.runtime.control.registry import running_job_of

    get_output().show(dispose_any(path, dry_run=dry_run, force=force, running=running_job_of))
