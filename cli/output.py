"""Rendering behind one interface: rich tables for people, JSON for machines.

Every result type in ``statekit.cli.render.Result`` is a dataclass. :class:`JsonOutput` prints
its document by the JSON contract (``statekit.statefmt.json_contract``: ``schema_version`` first,
snake_case keys from the fields; the schemas are in ``docs/json/``); :class:`RichOutput` draws
it with the renderer registered for its type in ``statekit.cli.render``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from statekit.readers.progress import Advance

if TYPE_CHECKING:
    from statekit.cli.render import Result
    from statekit.runtime.jobmaster.metrics import LiveStatus

StatusSink = Callable[["LiveStatus"], None]

__all__ = ["Output", "JsonOutput", "RichOutput", "get_output", "console_width", "UNBOUNDED_WIDTH"]

# Off a terminal (a pipe, a file) no screen limits a line: tables keep every value whole.
UNBOUNDED_WIDTH = 1_000_000


def console_width() -> int | None:
    """Width of stdout tables: ``None`` (rich's own: the terminal's, or ``COLUMNS`` when set)
    on a terminal or with ``COLUMNS``; :data:`UNBOUNDED_WIDTH` otherwise, never 80 columns."""
    if os.environ.get("COLUMNS", "").strip().isdigit() or sys.stdout.isatty():
        return None
    return UNBOUNDED_WIDTH


class Output:
    def show(self, result: Result) -> None:
        """Print ``result``: a result type registered in ``statekit.cli.render``."""
        raise NotImplementedError

    def message(self, text: str) -> None:
        raise NotImplementedError

    @contextmanager
    def progress(self, description: str, total: int | None = None, unit: str = "bytes") -> Iterator[Advance]:
        """A :data:`statekit.readers.progress.ProgressFactory`: a bar of ``total`` ``unit``."""
        yield lambda _name, _amount: None

    @contextmanager
    def live(self) -> Iterator[StatusSink | None]:
        """A sink for a running job's live status, or ``None`` where nothing shows it."""
        yield None


class JsonOutput(Output):
    def show(self, result: Result) -> None:
        from statekit.statefmt.json_contract import json_document

        click.echo(json.dumps(json_document(result), indent=2, sort_keys=False))

    def message(self, text: str) -> None:
        click.echo(text, err=True)


def _whole_words_console() -> type:
    from rich.console import Console
    from rich.text import Text

    class WholeWordsConsole(Console):
        """A console on which ``print(..., soft_wrap=True)`` (a line that names a path, a uid)
        never breaks a word: a line whose words all fit the width is word-wrapped to it, one with
        a longer word (an identifier wider than the terminal) is left for the terminal to wrap."""

        def print(self, *objects: Any, soft_wrap: bool | None = None, **kwargs: Any) -> None:
            if soft_wrap and objects and all(isinstance(o, str) for o in objects):
                words = " ".join(Text.from_markup(o).plain for o in objects).split()
                soft_wrap = any(len(word) > self.width for word in words)
            super().print(*objects, soft_wrap=soft_wrap, **kwargs)

    return WholeWordsConsole


class RichOutput(Output):
    """Rich tables for people: ``plain`` True draws them without borders, False with borders,
    ``None`` with borders on a terminal only; every table fits the console's width
    (``statekit.cli.renderers.markup.print_table``)."""

    def __init__(self, plain: bool | None = None) -> None:
        WholeWordsConsole = _whole_words_console()
        self.plain = plain  # None: borders on a terminal only
        self.console = WholeWordsConsole(highlight=False, soft_wrap=False, width=console_width())
        self.err = WholeWordsConsole(stderr=True, highlight=False)

    def show(self, result: Result) -> None:
        from statekit.cli.render import render
        from statekit.cli.renderers.markup import plain_tables

        with plain_tables(self.plain):
            render(self.console, result)

    def message(self, text: str) -> None:
        self.console.print(text)

    @contextmanager
    def live(self) -> Iterator[StatusSink | None]:
        """A status line under the job's own output, on a terminal only (gone when the job ends)."""
        if not self.console.is_terminal:
            yield None
            return
        from rich.live import Live

        from statekit.cli.renderers.jobs import live_status_line

        with Live("", console=self.console, transient=True, refresh_per_second=4) as live:
            yield lambda status: live.update(live_status_line(status, self.console.width - 1))

    @contextmanager
    def progress(self, description: str, total: int | None = None, unit: str = "bytes") -> Iterator[Advance]:
        if not self.err.is_terminal:
            yield lambda _name, _amount: None
            return
        from rich.progress import BarColumn, DownloadColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        columns: list[Any] = [TextColumn("{task.description}"), BarColumn()]
        columns.append(DownloadColumn(binary_units=True) if unit == "bytes" else TextColumn("{task.completed}/{task.total}"))
        columns.append(TimeRemainingColumn())
        with RichProgress(*columns, console=self.err, transient=True) as bar:
            task = bar.add_task(description, total=total)
            yield lambda _name, amount: bar.advance(task, amount)


def get_output() -> Output:
    """The output of the running command: JSON with ``--json``, else rich (plain with ``--plain``),
    before or after the command name, or from the config file's ``[output]`` (statekit.cli.config)."""
    ctx = click.get_current_context()
    as_json = plain = False
    node: click.Context | None = ctx
    while node is not None:
        if node.params.get("as_json") or (isinstance(node.obj, dict) and node.obj.get("json")):
            as_json = True
        if node.params.get("plain") or (isinstance(node.obj, dict) and node.obj.get("plain")):
            plain = True
        node = node.parent
    style: bool | None = True if plain else None
    if not (as_json or plain):
        from statekit.cli.config import output_style

        configured = output_style()
        as_json = configured == "json"
        style = {"plain": True, "rich": False}.get(configured or "")
    return JsonOutput() if as_json else RichOutput(plain=style)


def stdout_is_tty() -> bool:
    return sys.stdout.isatty()
