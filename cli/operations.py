"""Operations on running jobs beyond run/stop/cancel (thin: parse, call, render): ``checkpoint``
(Flink 1.19's ``flink checkpoint``), ``checkpoints history``, and ``ui`` (the live dashboard)."""

from __future__ import annotations

from typing import Any

import click

from statekit.cli.errors import catch_exception
from statekit.cli.options import common_options
from statekit.cli.output import get_output

__all__ = ["checkpoint", "checkpoints_history", "ui"]


@click.command()
@click.argument("job_id")
@click.option("--full", is_flag=True,
              help="A full checkpoint: with incremental checkpoints, reuse no file of an earlier one.")
@click.option("--timeout", default="5min", show_default=True, metavar="DURATION",
              help="How long to wait for the checkpoint.")
@common_options
@catch_exception
def checkpoint(job_id: str, full: bool, timeout: str, **_: Any) -> None:
    """Trigger a checkpoint of JOB_ID (id or unique prefix) now; print its path.

    The job needs checkpoint storage (`statekit run --checkpoint-dir` or --checkpoint-interval).
    The checkpoint counts like a periodic one: retention may dispose an older one.
    """
    from statekit.runtime.api.time import parse_duration
    from statekit.runtime.control.client import trigger_checkpoint

    wait_s = parse_duration(timeout, what="timeout") / 1000
    get_output().show(trigger_checkpoint(job_id, full=full, timeout=wait_s))


@click.command("history")
@click.argument("job_id")
@click.option("--checkpoint", "checkpoint_id", type=click.IntRange(min=0), metavar="ID",
              help="Also the per-subtask details of checkpoint ID (ack time, sync/async, alignment, start delay).")
@common_options
@catch_exception
def checkpoints_history(job_id: str, checkpoint_id: int | None, **_: Any) -> None:
    """Every checkpoint JOB_ID took, with min/avg/max: while it runs and after it ended.

    \b
    Read from $STATEKIT_HOME/jobs/<id>/checkpoints.jsonl, which the job's process appends
    to as each checkpoint or savepoint completes or fails (--json adds every figure and,
    with --checkpoint, the subtasks).
    """
    from statekit.runtime.control.checkpoint_history import job_checkpoint_history

    get_output().show(job_checkpoint_history(job_id, checkpoint_id))


@click.command()
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Port on 127.0.0.1 (0: a free one).")
@click.option("--poll", "poll_interval", default="1s", show_default=True, metavar="DURATION",
              help="How often the page refreshes its figures.")
@common_options
@catch_exception
def ui(port: int, poll_interval: str, **_: Any) -> None:
    """A live web dashboard of your jobs (running and ended), on 127.0.0.1.

    \b
    Prints its address with a one-time token (as Jupyter does): open it in a browser on this
    machine; the token becomes a session cookie. Without it every request is refused (401).
    Pages: jobs; a job's graph with records in/out, rates, backpressure and watermarks per
    vertex and subtask; its checkpoints (counts, history, summary, per-subtask details,
    configuration); savepoint, stop-with-savepoint and cancel buttons. Ctrl-C stops it.
    Needs the ui extra: pip install 'statekit[ui]'.
    """
    from statekit.runtime.api.time import parse_duration
    from statekit.runtime.control.dashboard.server import DashboardOptions, serve

    options = DashboardOptions(port=port, poll_ms=parse_duration(poll_interval, what="poll interval", minimum=100))
    serve(options, announce=_announce)


def _announce(url: str) -> None:
    """The address on stdout, alone on its first line (``--json``: ``{"url": ...}``)."""
    import json

    from statekit.cli.errors import json_mode

    if json_mode():
        click.echo(json.dumps({"url": url}))
    else:
        click.echo(f"statekit ui: open {url}\n(Ctrl-C stops it)")
