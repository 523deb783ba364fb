"""Renderer of ``statekit export``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from statekit.cli.renderers.markup import Column, _e, print_table

if TYPE_CHECKING:
    from statekit.spark.export import ExportResult

__all__ = ["export_result"]


def export_result(console: Console, r: ExportResult) -> None:
    rows = "?" if r.rows is None else f"{r.rows:,}"
    where = f"on {r.master}" if r.master else f"on the {r.engine} engine"
    console.print(f"[green]exported[/] {_e(len(r.states))} state(s), {_e(rows)} rows in {r.seconds:.1f} s {_e(where)}\n"
                  f"from: {_e(r.source)}\nto:   {_e(r.output)}", soft_wrap=True)
    if r.engine_note:
        console.print(f"[dim]{_e(r.engine_note)}[/]", soft_wrap=True)
    print_table(console, None, [Column("operator", key=True), Column("state", key=True), Column("kind", drop=1),
                                Column("rows", right=True), Column("files", right=True, drop=2),
                                Column("path", key=True, drop=3)],
                [[s.operator_uid, s.state_name, s.kind, "?" if s.rows is None else f"{s.rows:,}",
                  "?" if s.files is None else str(s.files), s.path] for s in r.states])
    for note in r.notes:
        console.print(f"[yellow]{_e(note)}[/]", soft_wrap=True)
    for uid, name, why in r.skipped:
        console.print(f"[yellow]skipped[/] {_e(uid)}/{_e(name)}: {_e(why)}", soft_wrap=True)
