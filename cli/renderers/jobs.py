"""Renderers of job control: run, list, savepoint, stop, cancel.

Text output is scriptable: ``run --detached`` prints the job id, ``savepoint`` and ``stop``
print the savepoint path, each alone on stdout; Flink's human messages go to stderr.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

import click
from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from statekit.cli.renderers.markup import Column, _e, human_age, human_bytes, print_table

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
    styles = {"RUNNING": "green", "CRASHED": "red", "FAILED": "red", "FINISHED": "cyan", "CANCELED": "yellow"}
    now_ms = dt.datetime.now(tz=dt.timezone.utc).timestamp() * 1000
    rows = []
    for index, job in enumerate(r.jobs):
        end = job.end_time_ms if job.end_time_ms is not None else (None if job.status == "CRASHED" else now_ms)
        uptime = human_age((end - job.start_time_ms) / 1000) if end is not None else "-"
        rows.append([_e(job.job_id), _e(job.name), f"[{styles.get(job.status, 'white')}]{job.status}[/]",
                     str(job.pid), uptime, *_last_checkpoint_cells(r.last_checkpoint(index), now_ms),
                     _e(job.crash_reason or job.failure or "")])
    columns = [Column("job id", key=True), Column("name", key=True), Column("state", key=True),
               Column("pid", right=True, drop=3), Column("uptime", right=True, drop=2),
               Column("last checkpoint", right=True), Column("age", right=True, drop=1),
               Column("size", right=True, drop=4), Column("reason", drop=5)]
    if not any(row[-1] for row in rows):
        columns, rows = columns[:-1], [row[:-1] for row in rows]
    print_table(console, None if r.include_all else "Running jobs", columns, rows, markup=True)


def _last_checkpoint_cells(last: LastCheckpoint | None, now_ms: float) -> list[str]:
    """``id``, ``age``, ``size`` of a job's last completed checkpoint (``-`` when unknown)."""
    if last is None:
        return ["-", "-", "-"]
    age = "-" if last.completed_ms is None else human_age(max(0.0, (now_ms - last.completed_ms) / 1000))
    return [f"chk-{last.checkpoint_id}", age, "-" if last.size is None else human_bytes(last.size)]


def live_status_line(s: LiveStatus, width: int | None = None) -> str:
    """One line (rich markup) of a running job: rates, checkpoints, last checkpoint, backpressure;
    within ``width`` cells, the parts of least interest (backpressure, the last checkpoint, the
    rates) left out first."""
    last = "-"
    if s.last_checkpoint_id is not None:
        duration = "-" if s.last_checkpoint_duration_ms is None else f"{s.last_checkpoint_duration_ms} ms"
        size = "-" if s.last_checkpoint_size is None else human_bytes(s.last_checkpoint_size)
        last = f"chk-{s.last_checkpoint_id} {duration}, {size}"
    failed = f"[red]{s.checkpoints_failed} failed[/]" if s.checkpoints_failed else "0 failed"
    pressure = f"[yellow]{s.backpressured_tasks}[/]" if s.backpressured_tasks else "0"
    parts = [f"[bold]{_e(s.state)}[/]", f"in {s.records_in_per_s:,.0f} rec/s", f"out {s.records_out_per_s:,.0f} rec/s",
             f"checkpoints {s.checkpoints_completed} done, {failed}", f"last {_e(last)}",
             f"backpressured {pressure}/{s.tasks} tasks", _watermark(s.low_watermark)]
    # the order parts are given up in when the line is too wide (the state always stays)
    for drop in (6, 5, 4, 2, 1, 3):
        line = "  ".join(p for p in parts if p)
        if width is None or cell_len(Text.from_markup(line).plain) <= width:
            return line
        parts[drop] = ""
    return parts[0]


def _watermark(low: int | None) -> str:
    """``watermark 12:00:03 (-1.2 s)``: how far event time came through the whole job (none: no event time)."""
    from statekit.runtime.api.watermarks import MAX_WATERMARK

    if low is None:
        return ""
    if low >= MAX_WATERMARK:
        return "watermark end of input"
    lag = dt.datetime.now(tz=dt.timezone.utc).timestamp() - low / 1000
    clock = dt.datetime.fromtimestamp(low / 1000, tz=dt.timezone.utc).strftime("%H:%M:%S")
    return f"watermark {clock} (-{max(0.0, lag):.1f} s)"
