"""Renderers of Flink savepoints statekit writes: ``bootstrap --format flink`` and ``convert``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from statekit.cli.renderers.markup import _e, human_bytes

if TYPE_CHECKING:
    from statekit.flink.convert import ConvertReport
    from statekit.flink.savepoint_bootstrap import FlinkBootstrapReport, FlinkOperatorReport

__all__ = ["flink_bootstrap_report", "operator_tables", "convert_report"]


def operator_tables(console: Console, op: FlinkOperatorReport) -> None:
    """One operator: its key, states and subtasks."""
    layout = "PyFlink" if op.pyflink else "Java"
    console.print(f"operator [bold]{_e(op.uid)}[/] (id {op.operator_id}, {layout} layout): parallelism "
                  f"{op.parallelism}, max parallelism {op.max_parallelism}, key {_e(op.key_type)}; "
                  f"{op.entries} entries, {human_bytes(op.bytes)}", soft_wrap=True)
    states = Table(show_edge=False, pad_edge=False)
    for column in ("state", "in Flink", "kind", "value", "map key", "rows"):
        states.add_column(column, justify="right" if column == "rows" else "left")
    for s in op.states:
        states.add_row(_e(s.name), _e(s.flink_name), _e(s.kind), _e(s.value_type or "-"), _e(s.user_key_type or "-"),
                       str(s.rows))
    console.print(states)
    subtasks = Table(show_edge=False, pad_edge=False)
    for column in ("subtask", "key groups", "with state", "entries", "bytes"):
        subtasks.add_column(column, justify="left" if column == "key groups" else "right")
    for w in op.subtasks:
        kg = w.subtask.key_groups
        subtasks.add_row(str(w.subtask.index), f"{kg.start}-{kg.end}", str(w.key_groups), str(w.entries),
                         human_bytes(w.subtask.size))
    console.print(subtasks)


def flink_bootstrap_report(console: Console, r: FlinkBootstrapReport) -> None:
    console.print(f"[green]Bootstrapped[/] the Flink savepoint {_e(r.output)} ({r.engine} engine) in "
                  f"{r.elapsed_s:.2f} s: {r.rows_read} rows -> {r.entries} entries, {human_bytes(r.bytes)}; "
                  f"metadata v{r.metadata_version}, checkpoint {r.checkpoint_id}", soft_wrap=True)
    for op in r.operators:
        operator_tables(console, op)


def convert_report(console: Console, r: ConvertReport) -> None:
    target = f"a Flink savepoint (metadata v{r.metadata_version})" if r.to == "flink" else "a statekit savepoint"
    console.print(f"[green]Converted[/] {_e(r.source)} -> {_e(r.output)}, {target}, in {r.elapsed_s:.2f} s: "
                  f"{len(r.states)} states, {r.entries} entries", soft_wrap=True)
    table = Table(show_edge=False, pad_edge=False)
    for column in ("operator", "state", "written as", "kind", "entries"):
        table.add_column(column, justify="right" if column == "entries" else "left")
    for s in r.states:
        table.add_row(_e(s.uid), _e(s.state), _e(s.target), _e(s.kind), str(s.entries))
    console.print(table)
    if r.left_out:
        console.print(f"[yellow]Left out[/] ({len(r.left_out)}):", soft_wrap=True)
        for left in r.left_out:
            console.print(f"  {_e(left.uid)}/{_e(left.state)} ({_e(left.kind)}): {_e(left.reason)}", soft_wrap=True)
