"""Renderers of operations on jobs: checkpoint, savepoint --detached / --status, checkpoints history.

Scriptable like ``savepoint``: ``checkpoint`` prints the checkpoint path, ``savepoint --detached``
the trigger id and ``savepoint --status`` the savepoint path once COMPLETED, each alone on stdout;
the human message goes to stderr.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from statekit.cli.renderers.markup import _e, human_bytes, print_table, timestamp

if TYPE_CHECKING:
    from statekit.runtime.control.checkpoint_history import CheckpointHistory
    from statekit.runtime.control.results import CheckpointResult, SavepointStatus, SavepointTrigger

__all__ = ["checkpoint_result", "savepoint_trigger", "savepoint_status", "checkpoint_history"]


def checkpoint_result(console: Console, r: CheckpointResult) -> None:
    kind = "Full checkpoint" if r.full else "Checkpoint"
    click.echo(f"{kind} {r.checkpoint_id if r.checkpoint_id is not None else ''} of job {r.job_id} completed."
               .replace("  ", " "), err=True)
    console.print(_e(r.location or "-"), soft_wrap=True)


def savepoint_trigger(console: Console, r: SavepointTrigger) -> None:
    click.echo(f"Savepoint of job {r.job_id} triggered; `statekit savepoint --status {r.trigger_id}` "
               f"shows its outcome.", err=True)
    console.print(_e(r.trigger_id))


def savepoint_status(console: Console, r: SavepointStatus) -> None:
    if r.status == "COMPLETED":
        click.echo(f"Savepoint {r.trigger_id} of job {r.job_id} ({r.operation}) completed.", err=True)
        console.print(_e(r.location), soft_wrap=True)
    elif r.status == "FAILED":
        console.print(f"FAILED: savepoint {_e(r.trigger_id)} of job {_e(r.job_id)}: {_e(r.failure)}", soft_wrap=True)
    else:
        console.print(f"IN_PROGRESS: savepoint {_e(r.trigger_id)} of job {_e(r.job_id)} ({_e(r.operation)})")


_SUMMARY_UNITS = {"end_to_end_duration": "ms", "alignment_duration": "ms", "sync_duration": "ms",
                  "async_duration": "ms", "start_delay": "ms", "state_size": "bytes", "checkpointed_size": "bytes",
                  "persisted_data": "bytes"}


def _figure(value: Any, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "bytes":
        return human_bytes(value)
    return f"{value:,.0f} ms" if isinstance(value, int) or float(value).is_integer() else f"{value:,.1f} ms"


def checkpoint_history(console: Console, r: CheckpointHistory) -> None:
    counts = r.counts
    console.print(f"[bold]Checkpoints of job {_e(r.job_id)}[/] ({_e(r.name)}, {_e(r.state)}): "
                  f"{counts.get('completed', 0)} completed, {counts.get('failed', 0)} failed, "
                  f"{counts.get('savepoints', 0)} savepoint(s)", soft_wrap=True)
    if not r.entries:
        console.print(f"No checkpoint recorded yet ({_e(r.path)}).", soft_wrap=True)
        return
    rows = [[str(e.get("id")), str(e.get("status")), _kind(e), timestamp(e.get("trigger_timestamp")),
             _figure(e.get("end_to_end_duration"), "ms"), _figure(e.get("state_size"), "bytes"),
             _figure(e.get("checkpointed_size"), "bytes"), _figure(e.get("alignment_duration"), "ms"),
             _figure(e.get("persisted_data"), "bytes"), _where(e)] for e in r.entries]
    print_table(console, None, ["id", "status", "type", "triggered", "duration", "state size", "written",
                                "alignment", "in-flight", "path / failure"], rows)
    summary = [[name.replace("_", " "), *(_figure(r.summary[name][k], unit) for k in ("min", "avg", "max"))]
               for name, unit in _SUMMARY_UNITS.items() if name in r.summary]
    print_table(console, "Summary of completed checkpoints", ["figure", "min", "avg", "max"], summary)
    if r.damaged_lines:
        console.print(f"[yellow]{r.damaged_lines} line(s) of {_e(r.path)} could not be read[/]", soft_wrap=True)
    if r.checkpoint is not None:
        _subtasks(console, r.checkpoint)


def _kind(entry: dict[str, Any]) -> str:
    return "savepoint" if entry.get("is_savepoint") else str(entry.get("mode") or "checkpoint")


def _where(entry: dict[str, Any]) -> str:
    if entry.get("status") == "FAILED":
        return str(entry.get("failure_message") or "-")
    return str(entry.get("external_path") or "-")


def _subtasks(console: Console, details: dict[str, Any]) -> None:
    rows = []
    for s in details.get("subtasks") or []:
        if s.get("status") != "completed":
            rows.append([str(s.get("vertex")), str(s.get("subtask")), "pending or failed", *["-"] * 7])
            continue
        rows.append([str(s.get("vertex")), str(s.get("subtask")), timestamp(s.get("ack_timestamp")),
                     _figure(s.get("end_to_end_duration"), "ms"), _figure(s.get("sync_duration"), "ms"),
                     _figure(s.get("async_duration"), "ms"), _figure(s.get("alignment_duration"), "ms"),
                     _figure(s.get("start_delay"), "ms"), _figure(s.get("state_size"), "bytes"),
                     "yes" if s.get("unaligned_checkpoint") else "no"])
    print_table(console, f"Checkpoint {details.get('id')}: subtasks",
                ["vertex", "subtask", "acknowledged", "end to end", "sync", "async", "alignment", "start delay",
                 "state size", "unaligned"], rows)
