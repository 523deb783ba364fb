"""Renderer of ``statekit diff`` (statekit and Apache Flink snapshots, either engine)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rich.console import Console

from statekit.cli.renderers.markup import Column, _e, print_table

if TYPE_CHECKING:
    from statekit.readers.diff import SavepointDiff

__all__ = ["savepoint_diff"]


def savepoint_diff(console: Console, r: SavepointDiff) -> None:
    verdict = "[green]EQUAL[/]" if r.equal else "[red]DIFFERENT[/]"
    console.print(f"{verdict} (engine {_e(r.engine)})\nA: {_e(r.a)}\nB: {_e(r.b)}", soft_wrap=True)
    for note in r.notes:
        console.print(f"[yellow]{_e(note)}[/]", soft_wrap=True)
    if r.structural:
        rows = []
        for c in r.structural:
            label = f"{c.change} (layout)" if c.layout else c.change
            rows.append([label, c.operator_uid, c.state_name or "-", c.field or "-",
                         "-" if c.a is None else str(c.a), "-" if c.b is None else str(c.b)])
        print_table(console, "Structure", [Column("change"), Column("operator", key=True), Column("state", key=True),
                                           Column("field"), Column("A"), Column("B")], rows)
    if r.states:
        rows = [[f"{s.operator_uid}/{s.state_name}", s.kind, f"{s.status}: {s.reason}" if s.reason else s.status,
                 f"{s.only_in_a:,}", f"{s.only_in_b:,}", f"{s.changed:,}", f"{s.unchanged:,}", f"{s.key_groups_skipped:,}"]
                for s in r.states]
        print_table(console, "Data", [Column("state", key=True), Column("kind", drop=2), Column("status"),
                                      Column("only A", right=True), Column("only B", right=True),
                                      Column("changed", right=True), Column("same", right=True, drop=1),
                                      Column("skipped kg", right=True, drop=3)], rows)
    for s in r.states:
        if s.examples:
            print_table(console, f"Differences in {s.operator_uid}/{s.state_name} (first {len(s.examples)})",
                        [Column("change"), Column("key"), Column("namespace", drop=2), Column("user key", drop=1),
                         Column("value in A"), Column("value in B")],
                        [[e.change, *(_cell(v) for v in (e.key, e.namespace, e.user_key, e.value_a, e.value_b))]
                         for e in s.examples])
    if r.output:
        console.print(f"differences written to {_e(r.output)}", soft_wrap=True)


def _cell(value: object) -> str:
    return "-" if value is None else json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
