"""Renderers of job control: run, list, savepoint, stop, cancel.

Text output is scriptable: ``run --detached`` prints the job id, ``savepoint`` and ``stop``
print the savepoint path, each alone on stdout; Flink's human messages go to stderr.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

import click
from rich.console import Console

from statekit.cli.renderers.markup import _e, human_age

if TYPE_CHECKING:
    from statekit.runtime.control import CancelResult, JobList, RunResult, SavepointResult

__all__ = ["run_result", "savepoint_result", "cancel_result", "job_list"]


def run_result(console: Console, r: RunResult) -> None:
    if r.detached:
        console.print(r.job_id)
    elif r.state == "CANCELED":
        console.print(f"Job with JobID {_e(r.job_id)} was cancelled.")
    else:
        console.print(f"Job with JobID {_e(r.job_id)} has finished.\nJob Runtime: {_e(r.duration_ms)} ms")


def savepoint_result(console: Console, r: SavepointResult) -> None:
    messages = {"savepoint": "Savepoint completed.", "stop": f"Savepoint completed; job {r.job_id} is {r.job_state}.",
                "cancel": f"Savepoint completed; job {r.job_id} is {r.job_state}."}
    click.echo(f"{messages[r.operation]} Path: {r.location}", err=True)
    console.print(_e(r.location), soft_wrap=True)


def cancel_result(console: Console, r: CancelResult) -> None:
    console.print(f"Cancelled job {_e(r.job_id)}." if r.job_state == "CANCELED" else f"Job {_e(r.job_id)} is {_e(r.job_state)}.")


def job_list(console: Console, r: JobList) -> None:
    if not r.jobs:
        console.print("No jobs in the registry." if r.include_all else "No running jobs.")
        return
    from rich import box
    from rich.table import Table

    table = Table(title=None if r.include_all else "Running jobs", title_justify="left", box=box.SIMPLE_HEAD,
                  show_edge=False, pad_edge=False)
    table.add_column("job id", no_wrap=True, min_width=32)
    table.add_column("name")
    table.add_column("state")
    table.add_column("pid", justify="right")
    table.add_column("uptime", justify="right")
    styles = {"RUNNING": "green", "CRASHED": "red", "FAILED": "red", "FINISHED": "cyan", "CANCELED": "yellow"}
    now_ms = dt.datetime.now(tz=dt.timezone.utc).timestamp() * 1000
    for job in r.jobs:
        state = f"[{styles.get(job.status, 'white')}]{job.status}[/]"
        if job.crash_reason:
            state += f" ({_e(job.crash_reason)})"
        elif job.failure:
            state += f" ({_e(job.failure)})"
        end = job.end_time_ms if job.end_time_ms is not None else (None if job.status == "CRASHED" else now_ms)
        uptime = human_age((end - job.start_time_ms) / 1000) if end is not None else "-"
        table.add_row(_e(job.job_id), _e(job.name), state, str(job.pid), uptime)
    console.print(table)
