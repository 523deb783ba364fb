"""Renderers of job control: run, list, savepoint, stop, cancel.

Text output is scriptable: ``run --detached`` prints the job id, ``savepoint`` and ``stop``
print the savepoint path, each alone on stdout; Flink's human messages go to stderr.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

import click
from rich.console import Console

from statekit.cli.renderers.markup import _e, human_age, human_bytes

if TYPE_CHECKING:
    from statekit.runtime.control.results import CancelResult, JobList, LastCheckpoint, RunResult, SavepointResult
    from statekit.runtime.jobmaster.metrics import LiveStatus

__all__ = ["run_result", "savepoint_result", "cancel_result", "job_list", "live_status_line"]


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
    table.add_column("last checkpoint", justify="right")
    table.add_column("age", justify="right")
    table.add_column("size", justify="right")
    styles = {"RUNNING": "green", "CRASHED": "red", "FAILED": "red", "FINISHED": "cyan", "CANCELED": "yellow"}
    now_ms = dt.datetime.now(tz=dt.timezone.utc).timestamp() * 1000
    for index, job in enumerate(r.jobs):
        state = f"[{styles.get(job.status, 'white')}]{job.status}[/]"
        if job.crash_reason:
            state += f" ({_e(job.crash_reason)})"
        elif job.failure:
            state += f" ({_e(job.failure)})"
        end = job.end_time_ms if job.end_time_ms is not None else (None if job.status == "CRASHED" else now_ms)
        uptime = human_age((end - job.start_time_ms) / 1000) if end is not None else "-"
        table.add_row(_e(job.job_id), _e(job.name), state, str(job.pid), uptime,
                      *_last_checkpoint_cells(r.last_checkpoint(index), now_ms))
    console.print(table)


def _last_checkpoint_cells(last: LastCheckpoint | None, now_ms: float) -> list[str]:
    """``id``, ``age``, ``size`` of a job's last completed checkpoint (``-`` when unknown)."""
    if last is None:
        return ["-", "-", "-"]
    age = "-" if last.completed_ms is None else human_age(max(0.0, (now_ms - last.completed_ms) / 1000))
    return [f"chk-{last.checkpoint_id}", age, "-" if last.size is None else human_bytes(last.size)]


def live_status_line(s: LiveStatus) -> str:
    """One line (rich markup) of a running job: rates, checkpoints, last checkpoint, backpressure."""
    last = "-"
    if s.last_checkpoint_id is not None:
        duration = "-" if s.last_checkpoint_duration_ms is None else f"{s.last_checkpoint_duration_ms} ms"
        size = "-" if s.last_checkpoint_size is None else human_bytes(s.last_checkpoint_size)
        last = f"chk-{s.last_checkpoint_id} {duration}, {size}"
    failed = f"[red]{s.checkpoints_failed} failed[/]" if s.checkpoints_failed else "0 failed"
    pressure = f"[yellow]{s.backpressured_tasks}[/]" if s.backpressured_tasks else "0"
    return (f"[bold]{_e(s.state)}[/]  in {s.records_in_per_s:,.0f} rec/s  out {s.records_out_per_s:,.0f} rec/s  "
            f"checkpoints {s.checkpoints_completed} done, {failed}  last {_e(last)}  "
            f"backpressured {pressure}/{s.tasks} tasks{_watermark(s.low_watermark)}")


def _watermark(low: int | None) -> str:
    """``  watermark 12:00:03 (-1.2 s)``: how far event time came through the whole job (none: no event time)."""
    from statekit.runtime.api.watermarks import MAX_WATERMARK

    if low is None:
        return ""
    if low >= MAX_WATERMARK:
        return "  watermark end of input"
    lag = dt.datetime.now(tz=dt.timezone.utc).timestamp() - low / 1000
    clock = dt.datetime.fromtimestamp(low / 1000, tz=dt.timezone.utc).strftime("%H:%M:%S")
    return f"  watermark {clock} (-{max(0.0, lag):.1f} s)"
