"""Shared pieces of the rich renderers: user data escaped in markup, sizes, ages, times, tables."""

from __future__ import annotations

import datetime as dt

from rich.console import Console
from rich.markup import escape
from rich.table import Table

__all__ = ["_e", "human_bytes", "human_age", "timestamp", "print_table", "RICH_TABLE_ROWS"]

# Rich lays a table out at ~2 ms a row; above this many rows a table is printed as plain
# aligned text, so inspecting a snapshot of 10,000 operators takes seconds, not minutes.
RICH_TABLE_ROWS = 200


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


def timestamp(ms: int | None) -> str:
    """Epoch milliseconds as UTC, ``-`` for none."""
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def print_table(console: Console, title: str | None, columns: list[str], rows: list[list[str]]) -> None:
    """A table: rich for up to RICH_TABLE_ROWS rows, plain aligned columns beyond.

    Cells are plain text: they are escaped here, so callers pass raw values.
    """
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
