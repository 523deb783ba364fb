"""Renderer of ``statekit diff`` (statekit and Apache Flink snapshots, either engine)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from statekit.cli.renderers.markup import _e

if TYPE_CHECKING:
    from statekit.readers.diff import SavepointDiff

__all__ = ["savepoint_diff"]


def savepoint_diff(console: Console, r: SavepointDiff) -> None:
    verdict = "[green]EQUAL[/]" if r.equal else "[red]DIFFERENT[/]"
    console.print(f"{verdict} (engine {_e(r.engine)})\nA: {_e(r.a)}\nB: {_e(r.b)}", soft_wrap=True)
    for note in r.notes:
        console.print(f"[yellow]{_e(note)}[/]", soft_wrap=True)
    if r.structural:
        table = Table(title="Structure", title_justify="left")
        for column in ("change", "operator", "state", "field", "A", "B"):
            table.add_column(column)
        for c in r.structural:
            label = f"{c.change} (layout)" if c.layout else c.change
            table.add_row(_e(label), _e(c.operator_uid), _e(c.state_name or "-"), _e(c.field or "-"),
                          "-" if c.a is None else _e(c.a), "-" if c.b is None else _e(c.b))
        console.print(table)
    if r.states:
        table = Table(title="Data", title_justify="left")
        counts = ("only A", "only B", "changed", "same", "skipped kg")
        table.add_column("state", no_wrap=True, min_width=min(40, max(len(f"{s.operator_uid}/{s.state_name}") for s in r.states)))
        table.add_column("kind")
        table.add_column("status", min_width=8)
        for column in counts:
            table.add_column(column, justify="right")
        for s in r.states:
            table.add_row(_e(f"{s.operator_uid}/{s.state_name}"), _e(s.kind), _e(f"{s.status}: {s.reason}" if s.reason else s.status),
                          f"{s.only_in_a:,}", f"{s.only_in_b:,}", f"{s.changed:,}", f"{s.unchanged:,}",
                          f"{s.key_groups_skipped:,}")
        console.print(table)
    for s in r.states:
        if s.examples:
            table = Table(title=_e(f"Differences in {s.operator_uid}/{s.state_name} (first {len(s.examples)})"),
                          title_justify="left")
            for column in ("change", "key", "namespace", "user key", "value in A", "value in B"):
                table.add_column(column)
            for e in s.examples:
                table.add_row(_e(e.change), *(_e(_cell(v)) for v in (e.key, e.namespace, e.user_key, e.value_a, e.value_b)))
            console.print(table)
    if r.output:
        console.print(f"differences written to {_e(r.output)}", soft_wrap=True)


def _cell(value: object) -> str:
    return "-" if value is None else json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
