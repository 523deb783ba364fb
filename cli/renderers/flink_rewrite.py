"""Renderers of Apache Flink savepoint rewrites: rescale (max parallelism) and modify."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from statekit.cli.renderers.markup import Column, _e, human_bytes, print_table

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
    print_table(console, None, [Column("subtask", key=True, right=True), Column("key groups"),
                                Column("with state", right=True, drop=1), Column("entries", right=True),
                                Column("bytes", right=True)],
                [[str(s.index), f"{s.key_group_range.start}-{s.key_group_range.end}", str(s.key_groups),
                  str(s.entries), human_bytes(s.bytes)] for s in op.subtasks])
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
    print_table(console, None, [Column("uid / id", key=True), Column("operator id", key=True, drop=3),
                                Column("was", key=True), Column("parallelism", right=True),
                                Column("max parallelism", right=True, drop=2), Column("files", right=True, drop=1),
                                Column("bytes", right=True)],
                [[op.label, op.operator_id, op.renamed_from or "", str(op.parallelism), str(op.max_parallelism),
                  str(op.files), human_bytes(op.bytes)] for op in r.operators])
