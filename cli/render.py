"""Rich renderers, one per result type (looked up by class name to keep imports lazy)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

__all__ = ["_e", "render", "human_bytes", "human_age"]

_RENDERERS: dict[str, Callable[[Console, Any], None]] = {}


def renderer(name: str) -> Callable[[Callable[[Console, Any], None]], Callable[[Console, Any], None]]:
    def register(func: Callable[[Console, Any], None]) -> Callable[[Console, Any], None]:
        _RENDERERS[name] = func
        return func

    return register


def render(console: Console, result: Any) -> None:
    func = _RENDERERS.get(type(result).__name__)
    if func is None:
        import json

        console.print_json(json.dumps(result.to_json() if hasattr(result, "to_json") else result, default=str))
        return
    func(console, result)


def _e(value: object) -> str:
    """A value shown inside rich markup: its brackets are text, never markup."""
    return escape(str(value))


def human_bytes(n: int | float) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def human_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _timestamp(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


@renderer("CheckpointList")
def _checkpoints(console: Console, result: Any) -> None:
    table = Table(title=f"Snapshots in {_e(result.path)}", title_justify="left")
    for column in ("job", "id", "kind", "status", "format", "size", "age", "path"):
        table.add_column(column, justify="right" if column in ("id", "size", "age") else "left")
    styles = {"complete": "green", "incomplete": "yellow", "damaged": "red", "flink": "cyan"}
    for c in result.listings:
        status = f"[{styles.get(c.status, 'white')}]{c.status}[/]"
        if c.problem and c.status != "complete":
            status += f" ({_e(c.problem)})" if len(c.problem) < 60 else ""
        table.add_row(_e(c.job_id[:12] or "-"), "-" if c.checkpoint_id is None else str(c.checkpoint_id), _e(c.kind),
                      status, _e(c.format or "-"), human_bytes(c.size), human_age(c.age_s), _e(c.path))
    console.print(table)


# Rich lays a table out at ~2 ms a row; above this many rows a table is printed as plain
# aligned text, so inspecting a snapshot of 10,000 operators takes seconds, not minutes.
RICH_TABLE_ROWS = 200
# Above this many operators, inspect prints one table of all states and one of all
# subtasks instead of two tables per operator.
PER_OPERATOR_TABLES = 20


def print_table(console: Console, title: str | None, columns: list[str], rows: list[list[str]]) -> None:
    """A table: rich for up to RICH_TABLE_ROWS rows, plain aligned columns beyond."""
    if len(rows) <= RICH_TABLE_ROWS:
        table = Table(title=None if title is None else _e(title), title_justify="left")
        for column in columns:
            table.add_column(_e(column))
        for row in rows:
            table.add_row(*(_e(cell) for cell in row))
        console.print(table)
        return
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    lines = [title] if title else []
    lines.append("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows)
    console.out("\n".join(lines), highlight=False)


@renderer("SnapshotInspection")
def _inspection(console: Console, r: Any) -> None:
    console.print(f"[bold]{_e(r.kind)}[/] {_e(r.path)}")
    console.print(f"job {_e(r.job_id)} {_e(r.job_name)}  checkpoint {_e(r.checkpoint_id)}  format {_e(r.format)}  "
                  f"created {_e(_timestamp(r.created_at_ms))}  {human_bytes(r.bytes)}, {_e(r.entries)} entries")
    print_table(console, "Operators",
                ["uid", "name", "parallelism", "max parallelism", "key serializer", "states", "bytes", "entries"],
                [[op.uid, op.name, str(op.parallelism), str(op.max_parallelism), op.key_serializer or "-",
                  str(len(op.states)), human_bytes(op.bytes), str(op.entries)] for op in r.operators])
    if len(r.operators) > PER_OPERATOR_TABLES:
        print_table(console, "States", ["uid", *_STATE_COLUMNS],
                    [[op.uid, *_state_row(s)] for op in r.operators for s in op.states])
        print_table(console, "Subtasks", ["uid", "subtask", "key groups", "state", "bytes / entries"],
                    [[op.uid, str(i), _key_groups(op, i), s.name, _subtask_cell(s, i)]
                     for op in r.operators for s in op.states for i in range(len(op.key_group_ranges))])
        return
    for op in r.operators:
        print_table(console, f"Operator {op.uid!r}", _STATE_COLUMNS, [_state_row(s) for s in op.states])
        print_table(console, None, ["subtask", "key groups", *(f"{s.name} bytes / entries" for s in op.states)],
                    [[str(i), _key_groups(op, i), *(_subtask_cell(s, i) for s in op.states)]
                     for i in range(len(op.key_group_ranges))])


_STATE_COLUMNS = ["state", "kind", "serializer", "type", "ttl", "bytes", "entries", "skew (max/mean)", "histogram"]


def _state_row(s: Any) -> list[str]:
    skew = f"{s.skew.ratio:.2f} (kg {s.skew.max_key_group})" if s.skew and s.skew.max_key_group is not None else "-"
    return [s.name, s.kind, s.value_serializer, s.value_type or "-", f"{s.ttl_ms} ms" if s.ttl_ms else "-",
            human_bytes(s.bytes), str(s.entries), skew, _sparkline(s.skew.histogram) if s.skew else "-"]


def _key_groups(op: Any, i: int) -> str:
    kg = op.key_group_ranges[i]
    return f"{kg[0]}-{kg[1]}"


def _subtask_cell(s: Any, i: int) -> str:
    return f"{human_bytes(s.per_subtask[i]['bytes'])} / {s.per_subtask[i]['entries']}"


def _sparkline(histogram: list[int]) -> str:
    bars = " ▁▂▃▄▅▆▇█"
    top = max(histogram) or 1
    return "".join(bars[min(8, (v * 8 + top - 1) // top)] for v in histogram)


@renderer("VerifyReport")
def _verify(console: Console, r: Any) -> None:
    if r.ok:
        console.print(f"[green]OK[/] {_e(r.path)}: {_e(r.files)} files, {human_bytes(r.bytes)}, every checksum matches")
        return
    console.print(f"[red]DAMAGED[/] {_e(r.path)}: {_e(len(r.damage))} problem(s) in {_e(r.files)} files")
    for d in r.damage:
        where = f" key group {d.key_group}" if d.key_group is not None else ""
        console.print(f"  {_e(d.path)}{_e(where)}: {_e(d.message)}")


@renderer("DisposalPlan")
def _dispose(console: Console, r: Any) -> None:
    verb = "would delete" if r.dry_run else "deleted"
    console.print(f"{_e(verb)} {_e(r.path)} ({_e(len(r.files))} files, {human_bytes(r.bytes)})")
    if r.dry_run:
        for f in r.files:
            console.print(f"  {_e(f)}")
