"""Renderers of Apache Flink savepoint rewrites: rescale (max parallelism) and modify."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from statekit.cli.renderers.markup import _e, human_bytes

if TYPE_CHECKING:
    from statekit.flink.rewrite_report import FlinkModifyReport, FlinkOperatorPlan, FlinkRescaleReport

__all__ = ["flink_rescale_report", "flink_modify_report"]

_ACTIONS = {
    "regroup": "keyed state regrouped into the new key groups:",
    "max parallelism": "no keyed state",
    "kept": "carried over as it is",
}


_PATHS = {
    "merge": "the new max parallelism divides the old one, each key group goes whole to g mod M (no key hashed)",
    "split": "the old max parallelism divides the new one, each key group splits (every key hashed)",
    "rehash": "every key hashed into its new key group",
}


def _subtasks(console: Console, op: FlinkOperatorPlan) -> None:
    table = Table(show_edge=False, pad_edge=False)
    for column in ("subtask", "key groups", "with state", "entries", "bytes"):
        table.add_column(column, justify="left" if column == "key groups" else "right")
    for s in op.subtasks:
        kg = s.key_group_range
        table.add_row(str(s.index), f"{kg.start}-{kg.end}", str(s.key_groups), str(s.entries), human_bytes(s.bytes))
    console.print(table)
    console.print(f"  keys {_e(op.key_type)}, states {_e(', '.join(op.states))}: {op.entries} entries, "
                  f"{human_bytes(op.bytes)}, skew {op.skew:.2f} (largest subtask / mean)", soft_wrap=True)


def flink_rescale_report(console: Console, r: FlinkRescaleReport) -> None:
    if r.dry_run:
        console.print(f"[bold]Rescale plan[/] for the Flink savepoint {_e(r.source)} (dry run: nothing written; "
                      f"{human_bytes(r.bytes_read)} of key-group streams read)", soft_wrap=True)
    else:
        console.print(f"[green]Rescaled[/] the Flink savepoint {_e(r.source)} -> {_e(r.output)} in "
                      f"{r.elapsed_s:.2f} s ({human_bytes(r.bytes_read)} read, {human_bytes(r.bytes_written)} "
                      f"written, {r.files_copied} files carried over; metadata v{r.metadata_version})", soft_wrap=True)
    for op in r.operators:
        change = (f"max parallelism {op.old_max_parallelism} -> {op.max_parallelism}"
                  if op.old_max_parallelism != op.max_parallelism else f"max parallelism {op.max_parallelism} kept")
        console.print(f"operator [bold]{_e(op.label)}[/] (parallelism {op.parallelism}): {change}, "
                      f"{_ACTIONS.get(op.action, _e(op.action))}", soft_wrap=True)
        if op.path is not None:
            seconds = op.estimated_seconds or 0.0
            console.print(f"  path [bold]{_e(op.path)}[/]: {_PATHS[op.path]}; {human_bytes(op.source_bytes)} of "
                          f"key-group streams, about {seconds:.1f} CPU s on the local engine"
                          + (" (estimated plan: entries from a sample)" if op.estimated else ""), soft_wrap=True)
        if op.subtasks:
            _subtasks(console, op)


def flink_modify_report(console: Console, r: FlinkModifyReport) -> None:
    if r.dry_run:
        console.print(f"[bold]Modify plan[/] for the Flink savepoint {_e(r.source)} (dry run: nothing written)",
                      soft_wrap=True)
    else:
        console.print(f"[green]Wrote[/] {_e(r.output)} from the Flink savepoint {_e(r.source)} in {r.elapsed_s:.2f} s "
                      f"(metadata v{r.metadata_version})", soft_wrap=True)
    for label, op_id in r.removed:
        console.print(f"  removed operator {_e(label)} (id {_e(op_id)})", soft_wrap=True)
    for old, new, op_id in r.renamed:
        console.print(f"  renamed {_e(old)} -> {_e(new)} (operator id {_e(op_id)})", soft_wrap=True)
    table = Table(show_edge=False, pad_edge=False)
    for column in ("uid / id", "operator id", "was", "parallelism", "max parallelism", "files", "bytes"):
        table.add_column(column)
    for op in r.operators:
        table.add_row(_e(op.label), _e(op.operator_id), _e(op.renamed_from or ""), str(op.parallelism),
                      str(op.max_parallelism), str(op.files), human_bytes(op.bytes))
    console.print(table)
