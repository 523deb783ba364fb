"""Renderers of restore compatibility: check, migrate."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from statekit.cli.renderers.markup import Column, _e, print_table

if TYPE_CHECKING:
    from statekit.runtime.jobmaster.compatibility import CompatibilityReport
    from statekit.writers.migration import MigrationReport

__all__ = ["compatibility_report", "migration_report"]


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def compatibility_report(console: Console, r: CompatibilityReport) -> None:
    console.print(f"[bold]Restore check[/] of {_e(r.job)} from {_e(r.snapshot)}", soft_wrap=True)
    print_table(console, "operators", [Column("uid", key=True), Column("mapping"), Column("parallelism"),
                                       Column("max parallelism", right=True, drop=1), Column("notes")], [
        [o.uid, o.mapping.value, f"{_count(o.old_parallelism)} -> {_count(o.new_parallelism)}",
         _count(o.max_parallelism), "; ".join(o.notes)] for o in r.operators
    ])
    if r.states:
        print_table(console, "states", [Column("uid/state", key=True), Column("status"), Column("kind", drop=2),
                                        Column("declared type", drop=1), Column("changes")], [
            [f"{s.uid}/{s.state}", s.status.value,
             _pair(s.old.kind.value if s.old else None, s.new.kind.value if s.new else None),
             _pair(_type(s.old.value_type) if s.old else None, _type(s.new.value_type) if s.new else None),
             "; ".join(s.changes)] for s in r.states
        ])
    if r.compatible:
        console.print("[green]compatible[/]: the job restores from this snapshot")
        return
    console.print(f"[red]incompatible[/] ({len(r.reasons)} reason{'s' if len(r.reasons) != 1 else ''}):")
    for reason in r.reasons:
        console.print(_e(reason), soft_wrap=True)


def _type(value_type: str | None) -> str:
    return value_type or "json"


def _pair(old: str | None, new: str | None) -> str:
    if old == new:
        return old or "-"
    return f"{old or '-'} -> {new or '-'}"


def migration_report(console: Console, r: MigrationReport) -> None:
    console.print(f"[green]Migrated[/] {_e(r.uid)}/{_e(r.state)}: {_e(r.old_type)} -> {_e(r.new_type)} "
                  f"({_e(r.compatibility)}, {r.entries} entries) into {_e(r.output)} in {r.elapsed_s:.2f} s",
                  soft_wrap=True)
