"""Clickstream sessions: keyed list and map state.

A deterministic stream of ``(user, page)`` clicks is keyed by user. For every user the
job keeps the last five pages in ListState ``recent-pages`` and the views per page in
MapState ``page-views``, and emits ``user<TAB>page<TAB>views of that page<TAB>recent pages``
through the exactly-once file sink (or prints when no ``--output`` is given).

Operator uids: ``clicks``, ``sessions``, ``sink``.

Run it::

    statekit run -p 2 --checkpoint-dir /tmp/chk examples/clickstream.py --events 20000 --output /tmp/clicks
"""

from __future__ import annotations

import argparse
from typing import Any

from statekit.runtime import (
    FileSink,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    PrintSink,
    RuntimeContext,
    get_execution_environment,
)

PAGES = ("home", "search", "product", "cart", "checkout", "help")
RECENT = 5


def click(index: int) -> tuple[str, str]:
    """The ``index``-th click of the synthetic stream (deterministic)."""
    user = f"user-{(index * 7919) % 97:02d}"
    page = PAGES[(index * 31 + index // 7) % len(PAGES)]
    return user, page


class Sessions(KeyedProcessFunction):
    """Per user: the last pages (list state) and views per page (map state)."""

    def open(self, ctx: RuntimeContext) -> None:
        self.recent = ctx.get_list_state(ListStateDescriptor("recent-pages", "string"))
        self.views = ctx.get_map_state(MapStateDescriptor("page-views", "int", key_type="string"))

    def process_element(self, value: tuple[str, str], ctx: Any, out: Any) -> None:
        user, page = value
        views = (self.views.get(page) or 0) + 1
        self.views.put(page, views)
        recent = (self.recent.get() + [page])[-RECENT:]
        self.recent.update(recent)
        out.collect(f"{user}\t{page}\t{views}\t{','.join(recent)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000, help="number of clicks")
    parser.add_argument("--output", help="directory for the part files (default: print)")
    args = parser.parse_args(argv)

    env = get_execution_environment()
    sessions = (
        env.from_sequence(0, args.events - 1, "click ids").uid("clicks")
        .map(click, "click").uid("click")
        .key_by(lambda c: c[0])
        .process(Sessions(), "sessions").uid("sessions")
    )
    sink = FileSink(args.output) if args.output else PrintSink()
    sessions.sink_to(sink, "session updates").uid("sink")
    env.execute("clickstream")


if __name__ == "__main__":
    main()
