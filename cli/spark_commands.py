"""``statekit export`` and ``statekit diff`` (thin: parse, call one library function, render)."""

from __future__ import annotations

import sys
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from statekit.cli.errors import catch_exception
from statekit.cli.options import common_options, trust_pickle_option
from statekit.cli.output import get_output
from statekit.cli.render import _e, renderer
from statekit.statefmt.errors import BadInputError

__all__ = ["export", "diff", "parse_conf"]


def parse_conf(pairs: tuple[str, ...]) -> dict[str, str]:
    """``--conf k=v`` pairs as a dict; a pair without ``=`` is bad input."""
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise BadInputError(f"--conf {pair!r} is not KEY=VALUE")
        conf[key.strip()] = value
    return conf


def _verbose(local: bool) -> bool:
    ctx = click.get_current_context()
    return local or bool(isinstance(ctx.find_root().obj, dict) and ctx.find_root().obj.get("verbose"))


def _spark_options(func: Any) -> Any:
    func = click.option("--conf", "conf", multiple=True, metavar="KEY=VALUE",
                        help="Spark configuration (repeatable).")(func)
    func = click.option("--master", default="local[*]", show_default=True,
                        help="Spark master: embedded local mode by default, or a cluster URL.")(func)
    return func


@click.command()
@click.argument("path")
@click.option("-o", "--output", required=True, help="New directory for the Parquet files.")
@click.option("--operator", help="Export only this operator (uid).")
@click.option("--state", help="Export only this state name.")
@click.option("--format", "fmt", type=click.Choice(["parquet"]), default="parquet", show_default=True)
@click.option("--include-expired", is_flag=True, help="Keep entries whose TTL has expired.")
@_spark_options
@trust_pickle_option
@common_options
@catch_exception
def export(path: str, output: str, operator: str | None, state: str | None, fmt: str, include_expired: bool,
           master: str, conf: tuple[str, ...], trust_pickle: bool, verbose: bool, **_: Any) -> None:
    """Export state to Parquet through Spark, Hive-partitioned by operator_uid and state_name.

    PATH is a statekit snapshot or an Apache Flink canonical savepoint (its keyed state).
    """
    from statekit.spark.export import export_savepoint

    out = get_output()
    result = export_savepoint(path, output, operator=operator, state=state, master=master, conf=parse_conf(conf),
                              fmt=fmt, include_expired=include_expired, trust_pickle=trust_pickle,
                              verbose=_verbose(verbose), progress=out.progress)
    out.show(result)


@click.command()
@click.argument("a")
@click.argument("b")
@click.option("--operator", help="Compare only this operator (uid).")
@click.option("--state", help="Compare only this state name.")
@click.option("--keys", is_flag=True, help="List the differing entries, decoded.")
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True,
              help="Differing entries listed per state with --keys.")
@click.option("--engine", type=click.Choice(["local", "spark"]), default="local", show_default=True,
              help="local: streaming merge on this machine; spark: full outer join on Spark.")
@click.option("-o", "--output", help="Write every differing entry as Parquet to this new directory.")
@_spark_options
@trust_pickle_option
@common_options
@catch_exception
def diff(a: str, b: str, operator: str | None, state: str | None, keys: bool, limit: int, engine: str,
         output: str | None, master: str, conf: tuple[str, ...], trust_pickle: bool, verbose: bool, **_: Any) -> None:
    """Compare savepoint A (before) with B (after): exit 0 when equal, 1 when different."""
    out = get_output()
    options: dict[str, Any] = dict(operator=operator, state=state, keys=keys, limit=limit, output=output,
                                   trust_pickle=trust_pickle)
    if engine == "spark":
        from statekit.spark.diff import diff_savepoints_spark

        result = diff_savepoints_spark(a, b, master=master, conf=parse_conf(conf), verbose=_verbose(verbose),
                                       progress=out.progress, **options)
    else:
        from statekit.readers.diff import diff_savepoints

        parse_conf(conf)
        result = diff_savepoints(a, b, progress=out.progress, **options)
    out.show(result)
    if not result.equal:
        sys.exit(1)


# ---------------------------------------------------------------- renderers


@renderer("ExportResult")
def _export(console: Console, r: Any) -> None:
    rows = "?" if r.rows is None else f"{r.rows:,}"
    console.print(f"[green]exported[/] {_e(len(r.states))} state(s), {_e(rows)} rows in {r.seconds:.1f} s on {_e(r.master)}\n"
                  f"from: {_e(r.source)}\nto:   {_e(r.output)}", soft_wrap=True)
    table = Table(show_header=True)
    for column in ("operator", "state", "kind", "rows", "files", "path"):
        table.add_column(column, justify="right" if column in ("rows", "files") else "left")
    for s in r.states:
        table.add_row(_e(s.operator_uid), _e(s.state_name), _e(s.kind), "?" if s.rows is None else f"{s.rows:,}",
                      "?" if s.files is None else str(s.files), _e(s.path))
    console.print(table)
    for uid, name, why in r.skipped:
        console.print(f"[yellow]skipped[/] {_e(uid)}/{_e(name)}: {_e(why)}", soft_wrap=True)


@renderer("SavepointDiff")
def _diff(console: Console, r: Any) -> None:
    verdict = "[green]EQUAL[/]" if r.equal else "[red]DIFFERENT[/]"
    console.print(f"{verdict} (engine {_e(r.engine)})\nA: {_e(r.a)}\nB: {_e(r.b)}", soft_wrap=True)
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


def _cell(value: Any) -> str:
    import json

    return "-" if value is None else json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
