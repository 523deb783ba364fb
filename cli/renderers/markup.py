"""Shared pieces of the rich renderers: user data escaped in markup, sizes, ages, times, tables."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from statekit.statefmt.units import human_bytes

__all__ = ["_e", "human_bytes", "human_age", "timestamp", "print_table", "RICH_TABLE_ROWS", "Column", "TableLayout",
           "layout_table", "plain_tables", "is_plain"]

# Rich lays a table out at ~2 ms a row; above this many rows a table is printed as plain
# aligned text, so inspecting a snapshot of 10,000 operators takes seconds, not minutes.
RICH_TABLE_ROWS = 200


def _e(value: object) -> str:
    """A value shown inside rich markup: its brackets are text, never markup."""
    return escape(str(value))


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


def print_table(console: Console, title: str | None, columns: Sequence[str | Column], rows: list[list[str]],
                *, markup: bool = False) -> None:
    """A table that fits ``console``'s width without cutting an identifier (:func:`layout_table`).

    Cells are plain text, escaped here (``markup=True``: rich markup, e.g. a coloured status).
    A rich table with borders (on a terminal, unless :func:`plain_tables` says otherwise) and up
    to RICH_TABLE_ROWS rows; else plain aligned columns — a header, a rule of dashes, one line
    per row, no trailing blanks — folded by rich only where a narrow terminal needs it.
    """
    cols = [c if isinstance(c, Column) else Column(c) for c in columns]
    texts = [[_plain(cell) for cell in row] for row in rows] if markup else rows
    layout = layout_table(cols, texts, _width(console), plain=is_plain(console))
    if title is not None:  # a line of its own: a long path in it wraps at the terminal's edge, whole
        console.print(f"[italic]{_e(title)}[/]", soft_wrap=True)
    folded = any(layout.widths[i] < _natural(cols[i], texts, i) for i in layout.kept)
    if layout.vertical:
        _print_vertical(console, cols, rows if markup else [[_e(c) for c in row] for row in rows])
    elif len(rows) > RICH_TABLE_ROWS or (is_plain(console) and not folded):
        keep = layout.kept
        widths = [layout.widths[i] for i in keep]
        lines = ["  ".join(_pad(cols[i].name, w, cols[i].right) for i, w in zip(keep, widths)).rstrip(),
                 "  ".join("-" * w for w in widths)]
        lines.extend("  ".join(_pad(texts[r][i], w, cols[i].right) for i, w in zip(keep, widths)).rstrip()
                     for r in range(len(rows)))
        console.out("\n".join(lines), highlight=False)
    else:
        table = _rich_table(console, cols, layout)
        for row in rows:
            table.add_row(*(row[i] if markup else _e(row[i]) for i in layout.kept))
        console.print(table)
    if layout.dropped:
        hidden = ", ".join(cols[i].name for i in layout.dropped)
        console.print(f"[dim]({_e(hidden)} hidden to fit {_width(console)} columns: a wider terminal or --json shows "
                      "them)[/]")


# ---------------------------------------------------------------- fitting a table to the terminal


@dataclass(frozen=True)
class Column:
    """A table column.

    Attributes:
        name: Its header.
        key: An identifier (uid, state, job id, path): never cut or folded (hidden only when
            ``drop`` says so: a path the other columns spell out).
        right: Right-justified (numbers).
        drop: When the table is too wide, columns with the highest ``drop`` are hidden first
            (0: never hidden; folded into several lines instead when it is not a key).
    """

    name: str
    key: bool = False
    right: bool = False
    drop: int = 0


@dataclass(frozen=True)
class TableLayout:
    """How a table fits: the columns kept (indexes), each one's width (natural, or the folded
    width of a non-key column), the columns hidden, or a vertical layout (one line per cell)."""

    kept: tuple[int, ...]
    widths: tuple[int, ...]
    dropped: tuple[int, ...] = ()
    vertical: bool = False


MIN_FOLDED = 8  # a non-key column folded narrower than this is unreadable: go vertical instead

_PLAIN: ContextVar[bool | None] = ContextVar("statekit_plain_tables", default=None)


@contextmanager
def plain_tables(plain: bool | None) -> Iterator[None]:
    """Tables without borders (True: ``--plain``) or with them (False: the ``rich`` output style)
    inside the block; ``None``: borders on a terminal only."""
    token = _PLAIN.set(plain)
    try:
        yield
    finally:
        _PLAIN.reset(token)


def is_plain(console: Console) -> bool:
    """Whether tables on ``console`` are drawn without borders: as :func:`plain_tables` says,
    else when it is not a terminal."""
    chosen = _PLAIN.get()
    return not console.is_terminal if chosen is None else chosen


def _width(console: Console) -> int:
    return int(console.width)


def layout_table(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int, *, plain: bool) -> TableLayout:
    """Fit ``rows`` (plain text) into ``width`` terminal cells: hide the columns of highest
    ``drop`` first, then fold the other non-key columns, else lay the table out vertically.
    Key columns always keep their whole width."""
    natural = [max([cell_len(c.name)] + [_cell_width(r[i]) for r in rows]) for i, c in enumerate(columns)]
    kept = list(range(len(columns)))
    dropped: list[int] = []

    def total(indexes: Sequence[int], widths: Sequence[int]) -> int:
        return sum(widths[i] for i in indexes) + _overhead(len(indexes), plain)

    droppable = sorted((i for i, c in enumerate(columns) if c.drop > 0), key=lambda i: (-columns[i].drop, -i))
    for index in droppable:
        if total(kept, natural) <= width:
            break
        kept.remove(index)
        dropped.append(index)
    if total(kept, natural) <= width:
        return TableLayout(tuple(kept), tuple(natural), tuple(sorted(dropped)))
    keys = [i for i in kept if columns[i].key]
    folded = [i for i in kept if not columns[i].key]
    room = width - _overhead(len(kept), plain) - sum(natural[i] for i in keys)
    if folded and room >= MIN_FOLDED * len(folded):
        widths = list(natural)
        share = _water_fill([natural[i] for i in folded], room)
        for i, w in zip(folded, share):
            widths[i] = w
        if all(w >= min(MIN_FOLDED, natural[i]) for i, w in zip(folded, share)):
            return TableLayout(tuple(kept), tuple(widths), tuple(sorted(dropped)))
    return TableLayout(tuple(range(len(columns))), tuple(natural), vertical=True)


def _water_fill(wanted: Sequence[int], room: int) -> list[int]:
    """Widths summing to at most ``room``: the narrow columns get what they want, the wide ones share the rest."""
    widths = [0] * len(wanted)
    order = sorted(range(len(wanted)), key=lambda i: wanted[i])
    left = room
    for n, i in enumerate(order):
        fair = left // (len(order) - n)
        widths[i] = min(wanted[i], fair)
        left -= widths[i]
    return widths


def _overhead(columns: int, plain: bool) -> int:
    """Cells a table adds around its columns: padding and borders (rich's heavy-head box) or,
    plain, two spaces between columns."""
    if columns == 0:
        return 0
    return 2 * (columns - 1) if plain else 3 * columns + 1


def _natural(column: Column, rows: Sequence[Sequence[str]], index: int) -> int:
    return max([cell_len(column.name)] + [_cell_width(r[index]) for r in rows])


def _cell_width(text: str) -> int:
    return max((cell_len(line) for line in text.split("\n")), default=0)


def _pad(text: str, width: int, right: bool) -> str:
    """``text`` padded to ``width`` terminal cells (wide characters count twice)."""
    room = max(0, width - cell_len(text))
    return " " * room + text if right else text + " " * room


def _plain(markup_text: str) -> str:
    from rich.text import Text

    return Text.from_markup(markup_text).plain


def _rich_table(console: Console, columns: Sequence[Column], layout: TableLayout) -> Table:
    plain = is_plain(console)
    table = Table(box=None if plain else box.HEAVY_HEAD, show_edge=not plain, pad_edge=not plain,
                  padding=(0, 1), collapse_padding=False)
    for i in layout.kept:
        c = columns[i]
        width = layout.widths[i]
        table.add_column(_e(c.name), justify="right" if c.right else "left", no_wrap=c.key, min_width=width if c.key
                         else None, max_width=None if c.key else width, overflow="fold")
    return table


def _print_vertical(console: Console, columns: Sequence[Column], rows: list[list[str]]) -> None:
    """Each row as ``name: value`` lines (markup cells), rows apart by a blank line: nothing is cut."""
    label = max(cell_len(c.name) for c in columns)
    for n, row in enumerate(rows):
        if n:
            console.print()
        for c, cell in zip(columns, row):
            console.print(f"{_e(c.name.ljust(label))}  {cell}", soft_wrap=True)
