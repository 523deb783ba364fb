"""``statekit spark start|status|stop``: one local Spark Connect server that export, diff and
bootstrap reuse while it runs (thin: parse, call :mod:`statekit.spark.connect_server`, render)."""

from __future__ import annotations

from typing import Any

import click

from statekit.cli.errors import catch_exception
from statekit.cli.options import common_options
from statekit.cli.output import get_output

__all__ = ["spark"]


@click.group()
def spark() -> None:
    """A local Spark Connect server that export, diff and bootstrap reuse.

    \b
    Started once, it spares each later command the Spark session start: a command that runs
    on Spark and names no other Spark (no --master, --remote, or profile setting) connects to
    it. It listens on 127.0.0.1 only; its state and log live in the user's runtime directory
    ($STATEKIT_RUNTIME_DIR, else $XDG_RUNTIME_DIR/statekit, else /tmp/statekit-UID).
    """


@spark.command()
@click.option("--master", default="local[*]", show_default=True, help="The server's Spark master.")
@click.option("--port", type=click.IntRange(1, 65535), help="Its port on 127.0.0.1 (default: a free one).")
@click.option("--conf", "conf", multiple=True, metavar="KEY=VALUE", help="Spark configuration (repeatable).")
@click.option("--timeout", type=click.FloatRange(min=1), default=180, show_default=True, metavar="SECONDS",
              help="How long to wait for it to listen.")
@common_options
@catch_exception
def start(master: str, port: int | None, conf: tuple[str, ...], timeout: float, **_: Any) -> None:
    """Start the server (or report the one running); return once it listens and has run a
    small export (its Python workers warm for the first command)."""
    from statekit.cli.spark_commands import parse_conf
    from statekit.spark.connect_server import start_server

    get_output().show(start_server(master, parse_conf(conf), port, timeout))


@spark.command()
@common_options
@catch_exception
def status(**_: Any) -> None:
    """Whether the server runs, its address, master and log."""
    from statekit.spark.connect_server import server_status

    get_output().show(server_status())


@spark.command()
@common_options
@catch_exception
def stop(**_: Any) -> None:
    """Stop the server (its JVM and Python workers)."""
    from statekit.spark.connect_server import stop_server

    get_output().show(stop_server())
