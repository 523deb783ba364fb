"""Renderer of ``statekit export``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from statekit.cli.renderers.markup import _e

if TYPE_CHECKING:
    from statekit.spark.export import ExportResult

__all__ = ["export_result"]


def export_result(console: Console, r: ExportResult) -> None:
    rows = "?" if r.rows is None else f"{r.rows:,}"
    console.print(f"[green]exported[/] {_e(len(r.states))} state(s), {_e(rows)} rows in {r.seconds:.1f} s on {_e(r.master)}\n"
                  f"from: {_e(r.source)}\nto:   {_e(r.output)}", soft_wrap=True)
    table = Table(show_header=True)
    for column in ("operator", "state", "kind", "rows", "files", "path"):
        table.add_column(column, justify="right" if column in ("rows", "files") else "left")
    for s in r.states:
        table.add_row(_e(s.operator_uid), _e(s.state_name), _e(s.kind), "?" if s.rows is None else f"{s.rows:,}",
                      "?" if s.files is None else str(s.files), _e(s.path))
    console.print(table)
    for note in r.notes:
        console.print(f"[yellow]{_e(note)}[/]", soft_wrap=True)
    for uid, name, why in r.skipped:
        console.print(f"[yellow]skipped[/] {_e(uid)}/{_e(name)}: {_e(why)}", soft_wrap=True)
