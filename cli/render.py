"""Rich renderers, one per result type (looked up by class name to keep imports lazy)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["render", "human_bytes", "human_age"]

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
    table = Table(title=f"Snapshots in {result.path}", title_justify="left")
    for column in ("job", "id", "kind", "status", "format", "size", "age", "path"):
        table.add_column(column, justify="right" if column in ("id", "size", "age") else "left")
    styles = {"complete": "green", "incomplete": "yellow", "damaged": "red", "flink": "cyan"}
    for c in result.listings:
        status = f"[{styles.get(c.status, 'white')}]{c.status}[/]"
        if c.problem and c.status != "complete":
            status += f" ({c.problem})" if len(c.problem) < 60 else ""
        table.add_row(c.job_id[:12] or "-", "-" if c.checkpoint_id is None else str(c.checkpoint_id), c.kind,
                      status, c.format or "-", human_bytes(c.size), human_age(c.age_s), c.path)
    console.print(table)


@renderer("SnapshotInspection")
def _inspection(console: Console, r: Any) -> None:
    console.print(f"[bold]{r.kind}[/] {r.path}")
    console.print(f"job {r.job_id} {r.job_name!s}  checkpoint {r.checkpoint_id}  format {r.format}  "
                  f"created {_timestamp(r.created_at_ms)}  {human_bytes(r.bytes)}, {r.entries} entries")
    ops = Table(title="Operators", title_justify="left")
    for column in ("uid", "name", "parallelism", "max parallelism", "key serializer", "states", "bytes", "entries"):
        ops.add_column(column)
    for op in r.operators:
        ops.add_row(op.uid, op.name, str(op.parallelism), str(op.max_parallelism), op.key_serializer or "-",
                    str(len(op.states)), human_bytes(op.bytes), str(op.entries))
    console.print(ops)
    for op in r.operators:
        states = Table(title=f"Operator {op.uid!r}", title_justify="left")
        for column in ("state", "kind", "serializer", "type", "ttl", "bytes", "entries", "skew (max/mean)", "histogram"):
            states.add_column(column)
        for s in op.states:
            skew = f"{s.skew.ratio:.2f} (kg {s.skew.max_key_group})" if s.skew and s.skew.max_key_group is not None else "-"
            states.add_row(s.name, s.kind, s.value_serializer, s.value_type or "-",
                           f"{s.ttl_ms} ms" if s.ttl_ms else "-", human_bytes(s.bytes), str(s.entries), skew,
                           _sparkline(s.skew.histogram) if s.skew else "-")
        console.print(states)
        subtasks = Table(show_header=True, title_justify="left")
        subtasks.add_column("subtask")
        subtasks.add_column("key groups")
        for s in op.states:
            subtasks.add_column(f"{s.name} bytes / entries")
        for i, kg in enumerate(op.key_group_ranges):
            cells = [f"{human_bytes(s.per_subtask[i]['bytes'])} / {s.per_subtask[i]['entries']}" for s in op.states]
            subtasks.add_row(str(i), f"{kg[0]}-{kg[1]}", *cells)
        console.print(subtasks)


def _sparkline(histogram: list[int]) -> str:
    bars = " ▁▂▃▄▅▆▇█"
    top = max(histogram) or 1
    return "".join(bars[min(8, (v * 8 + top - 1) // top)] for v in histogram)


@renderer("VerifyReport")
def _verify(console: Console, r: Any) -> None:
    if r.ok:
        console.print(f"[green]OK[/] {r.path}: {r.files} files, {human_bytes(r.bytes)}, every checksum matches")
        return
    console.print(f"[red]DAMAGED[/] {r.path}: {len(r.damage)} problem(s) in {r.files} files")
    for d in r.damage:
        where = f" key group {d.key_group}" if d.key_group is not None else ""
        console.print(f"  {d.path}{where}: {d.message}")


@renderer("DisposalPlan")
def _dispose(console: Console, r: Any) -> None:
    verb = "would delete" if r.dry_run else "deleted"
    console.print(f"{verb} {r.path} ({len(r.files)} files, {human_bytes(r.bytes)})")
    if r.dry_run:
        for f in r.files:
            console.print(f"  {f}")
