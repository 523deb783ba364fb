"""``statekit export`` and ``statekit diff`` (thin: parse, call one library function, render)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from statekit.cli.errors import catch_exception
from statekit.cli.options import common_options, storage_option, trust_pickle_option, uid_option, value_type_option
from statekit.cli.output import get_output
from statekit.spark.formats import DEFAULT_FORMAT, FORMATS
from statekit.statefmt.errors import BadInputError

if TYPE_CHECKING:
    from statekit.spark.session import SparkSettings

__all__ = ["export", "diff", "parse_conf", "remote_option", "spark_options", "spark_settings"]


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


def spark_settings(master: str | None, conf: tuple[str, ...], verbose: bool, remote: str | None = None) -> SparkSettings:
    """Where a command's Spark runs: ``--master`` or ``--remote``, else ``$STATEKIT_SPARK_MASTER`` /
    ``$STATEKIT_SPARK_REMOTE``, else the profile's ``spark.master`` / ``spark.remote``, else the
    server of ``statekit spark start`` when it runs, else embedded ``local[*]``; ``--conf`` over
    the profile's ``spark.conf``. Checked whatever the engine."""
    from statekit.cli.config import resolve
    from statekit.spark.session import DEFAULT_MASTER, SparkSettings

    if remote is not None and master is not None:
        raise BadInputError("--master and --remote exclude each other: give one")
    settings_conf = {**(resolve("spark.conf").value or {}), **parse_conf(conf)}
    verbose = _verbose(verbose)
    if master is not None or remote is not None:
        return SparkSettings(master or DEFAULT_MASTER, settings_conf, verbose, remote=remote)
    configured_master, configured_remote = resolve("spark.master"), resolve("spark.remote")
    if configured_master.value is not None or configured_remote.value is not None:
        # the nearer source wins (env over profile); within one source a remote wins over a master
        rank = {"env": 0, "profile": 1, "default": 2}
        if configured_remote.value is not None and rank[configured_remote.source] <= rank[configured_master.source]:
            return SparkSettings(DEFAULT_MASTER, settings_conf, verbose, remote=configured_remote.value)
        return SparkSettings(configured_master.value, settings_conf, verbose)
    from statekit.spark.connect_server import running_server

    server = running_server()
    if server is not None:
        return SparkSettings(DEFAULT_MASTER, settings_conf, verbose, remote=server.session_url, managed=True)
    return SparkSettings(DEFAULT_MASTER, settings_conf, verbose)


def _given(name: str) -> bool:
    """True when option ``name`` came from the command line, not its default."""
    from click.core import ParameterSource

    source = click.get_current_context().get_parameter_source(name)
    return source not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


def remote_option(func: Any) -> Any:
    """``--remote sc://HOST:PORT``: run on a Spark Connect server (export and diff)."""
    return click.option("--remote", metavar="sc://HOST:PORT", default=None,
                        help="Run on this Spark Connect server instead of a master (excludes --master).")(func)


def spark_options(func: Any) -> Any:
    func = click.option("--conf", "conf", multiple=True, metavar="KEY=VALUE",
                        help="Spark configuration (repeatable).")(func)
    func = click.option("--master", default=None, metavar="URL",
                        help="Spark master: a cluster URL, or local[N] (default: the profile's, the server of "
                             "`statekit spark start` when it runs, else embedded local[*]).")(func)
    return func


@click.command()
@click.argument("path")
@click.option("-o", "--output", required=True, help="New directory for the exported files.")
@click.option("--operator", help="Export only this operator (uid).")
@click.option("--state", help="Export only this state name.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=DEFAULT_FORMAT, show_default=True,
              help="parquet (typed columns), csv (nested values as JSON text) or jsonl (JSON Lines).")
@click.option("--include-expired", is_flag=True, help="Keep entries whose TTL has expired.")
@click.option("--engine", type=click.Choice(["auto", "local", "spark"]), default="auto", show_default=True,
              help="local: pyarrow on this machine, no JVM; spark: on Spark (--master, --remote, or the server of "
                   "`statekit spark start`); auto: local below 1 GiB of state, else Spark (it says which).")
@uid_option
@value_type_option
@spark_options
@remote_option
@trust_pickle_option
@storage_option
@common_options
@catch_exception
def export(path: str, output: str, operator: str | None, state: str | None, fmt: str, include_expired: bool,
           engine: str, uids: tuple[str, ...], value_types: tuple[str, ...], master: str | None,
           conf: tuple[str, ...], remote: str | None, trust_pickle: bool, verbose: bool, **_: Any) -> None:
    """Export state, Hive-partitioned by operator_uid and state_name (the same files on either engine).

    PATH is a statekit snapshot or an Apache Flink snapshot (its keyed state): a canonical
    savepoint, a native RocksDB savepoint, an incremental RocksDB or a heap checkpoint.
    """
    from statekit.flink.pyflink import value_type_options
    from statekit.spark.engine import export as run_export
    from statekit.spark.export import ExportSpec

    out = get_output()
    spec = ExportSpec(path, output, operator=operator, state=state, fmt=fmt, include_expired=include_expired,
                      trust_pickle=trust_pickle, spark=spark_settings(master, conf, verbose, remote))
    out.show(run_export(spec, engine, progress=out.progress, uids=uids,
                        value_types=value_type_options(value_types, state) if value_types else None))


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
@uid_option
@value_type_option
@spark_options
@remote_option
@trust_pickle_option
@storage_option
@common_options
@catch_exception
def diff(a: str, b: str, operator: str | None, state: str | None, keys: bool, limit: int, engine: str,
         output: str | None, uids: tuple[str, ...], value_types: tuple[str, ...], master: str | None,
         conf: tuple[str, ...],
         remote: str | None, trust_pickle: bool, verbose: bool, **_: Any) -> None:
    """Compare savepoint A (before) with B (after): exit 0 when equal, 1 when different.

    Two Apache Flink snapshots (canonical or native savepoints, RocksDB or heap checkpoints)
    are compared by their decoded keyed state, on the local engine.
    """
    from statekit.flink.dispatch import diff_flink
    from statekit.flink.pyflink import value_type_options
    from statekit.readers.diff import DiffSpec
    from statekit.spark.engine import diff as run_diff

    out = get_output()
    settings = spark_settings(master, conf, verbose, remote)
    if remote is not None:  # --remote runs the diff on Spark: it implies --engine spark
        if engine != "spark" and _given("engine"):
            raise BadInputError("--remote runs the diff on Spark Connect: it excludes --engine local")
        engine = "spark"
    result = diff_flink(a, b, operator=operator, state=state, keys=keys, limit=limit, output=output, engine=engine,
                        uids=uids, value_types=value_type_options(value_types, state))
    if result is None:
        spec = DiffSpec(a, b, operator=operator, state=state, keys=keys, limit=limit, output=output,
                        trust_pickle=trust_pickle)
        result = run_diff(spec, engine, settings, progress=out.progress)
    out.show(result)
    if not result.equal:
        sys.exit(1)

