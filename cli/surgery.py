"""Savepoint surgery commands: rescale, modify, bootstrap (thin: parse, call, render)."""

from __future__ import annotations

from typing import Any

import click

from statekit.cli.errors import catch_exception
from statekit.cli.options import common_options, storage_option
from statekit.cli.output import get_output
from statekit.cli.spark_commands import spark_options, spark_settings
from statekit.statefmt.errors import BadInputError

__all__ = ["rescale", "modify", "bootstrap"]

_STATE_KINDS = ["value", "list", "map", "reducing", "aggregating", "operator-list", "union", "broadcast"]
_TIMER_KINDS = ["event-timers", "processing-timers"]
_SERIALIZERS = ["msgpack", "json", "utf8", "int64", "bytes", "pickle"]


def _operator_parallelism(values: tuple[str, ...]) -> dict[str, int]:
    parsed: dict[str, int] = {}
    for text in values:
        uid, sep, number = text.rpartition("=")
        if not sep or not uid:
            raise BadInputError(f"--operator {text!r}: expected UID=N")
        try:
            parsed[uid] = int(number)
        except ValueError:
            raise BadInputError(f"--operator {text!r}: {number!r} is not a parallelism") from None
    return parsed


# ---------------------------------------------------------------- rescale


@click.command()
@click.argument("path")
@click.option("-p", "--parallelism", type=int, help="New parallelism of every keyed operator.")
@click.option("--max-parallelism", type=int, metavar="M",
              help="New max parallelism (key-group count): entries are regrouped by their key hash.")
@click.option("--operator", "operators", multiple=True, metavar="UID=N",
              help="New parallelism of one operator (repeatable; overrides -p for it).")
@click.option("-o", "--output", metavar="OUT", help="The new savepoint directory (must not exist).")
@click.option("--dry-run", is_flag=True,
              help="Print the plan (key-group ranges, bytes and entries per new subtask); write nothing.")
@click.option("--spill-dir", metavar="DIR", help="Temp space for a max-parallelism change (default: system temp).")
@click.option("--memory-budget", type=click.IntRange(min=8), default=96, show_default=True, metavar="MIB",
              help="MiB of entries a max-parallelism change holds in memory at once (per task on Spark).")
@click.option("--exact-plan", is_flag=True,
              help="Flink, with --dry-run: read and hash every key for exact figures (as long as the rescale).")
@click.option("--engine", type=click.Choice(["local", "spark"]), default="local", show_default=True,
              help="local: one process; spark: a max-parallelism change on Spark, tasks per slice of the "
                   "source and per target key-group range (statekit[spark]).")
@spark_options
@storage_option
@common_options
@catch_exception
def rescale(path: str, parallelism: int | None, max_parallelism: int | None, operators: tuple[str, ...],
            output: str | None, dry_run: bool, spill_dir: str | None, memory_budget: int, exact_plan: bool,
            engine: str, master: str, conf: tuple[str, ...], **_: Any) -> None:
    """Rescale the savepoint PATH offline into a new savepoint OUT.

    \b
    Same max parallelism: each new subtask's files are assembled from whole key-group
    blocks copied by byte range (checksums verified), no entry decoded.
    --max-parallelism: every entry's key group is recomputed from its key hash and the
    entries are regrouped and re-sorted, streaming with bounded memory; to a multiple of
    the old max parallelism, each old block is cut into its new key groups, nothing spilled.
    An Apache Flink canonical savepoint takes --max-parallelism only (docs/FLINK.md): each
    key moves to the key group Flink assigns it, entry bytes copied; when the new max
    parallelism divides the old one, key groups merge whole (nothing hashed). --dry-run
    says which path and its estimated cost.
    The source is never modified; OUT appears whole (_metadata last) or not at all.
    """
    from statekit.spark.engine import rescale as run_rescale

    output_ = get_output()
    report = run_rescale(
        path, output, engine=engine, spark=spark_settings(master, conf, bool(_.get("verbose"))),
        parallelism=parallelism, operator_parallelism=_operator_parallelism(operators),
        max_parallelism=max_parallelism, dry_run=dry_run, exact_plan=exact_plan, spill_dir=spill_dir,
        memory_budget=memory_budget << 20, progress=output_.progress,
    )
    output_.show(report)


# ---------------------------------------------------------------- modify


@click.command()
@click.argument("path")
@click.option("-o", "--output", metavar="OUT", help="The new savepoint directory (must not exist).")
@click.option("--remove-operator", "remove_operators", multiple=True, metavar="UID",
              help="Drop an operator and all its state (repeatable).")
@click.option("--rename-uid", "renames", multiple=True, metavar="OLD=NEW",
              help="Give an operator a new uid (repeatable; renames apply together).")
@click.option("--remove-state", "remove_states", multiple=True, metavar="UID/STATE",
              help="Drop one state of an operator (repeatable).")
@click.option("--dry-run", is_flag=True, help="Check the operations and show the result; write nothing.")
@storage_option
@common_options
@catch_exception
def modify(path: str, output: str | None, remove_operators: tuple[str, ...], renames: tuple[str, ...],
           remove_states: tuple[str, ...], dry_run: bool, **_: Any) -> None:
    """Write a copy of the savepoint PATH without some operators or states, or with new uids.

    \b
    The fix for Flink's "Cannot map checkpoint/savepoint state for operator ... to the
    new program": every UID names an operator of PATH; untouched operators are copied
    file by file (checksums verified), never decoded. An Apache Flink savepoint's
    operators are named by uid or hex operator id; a renamed one gets Flink's id of its new uid.
    """
    from statekit.flink.dispatch import modify_any
    from statekit.writers.savepoint_modification import parse_rename, parse_state_ref

    output_ = get_output()
    report = modify_any(
        path, output, remove_operators=remove_operators, rename_uids=tuple(parse_rename(r) for r in renames),
        remove_states=tuple(parse_state_ref(s) for s in remove_states), dry_run=dry_run, progress=output_.progress,
    )
    output_.show(report)


# ---------------------------------------------------------------- bootstrap


@click.command()
@click.option("--input", "inputs", multiple=True, metavar="PATH",
              help="A Parquet, CSV or JSON-lines file, or a directory of them (repeatable; local or URL).")
@click.option("--input-format", type=click.Choice(["parquet", "csv", "json"]),
              help="Input format (default: from the file names).")
@click.option("--uid", help="Operator uid.")
@click.option("--state", help="State name.")
@click.option("--kind", type=click.Choice(_STATE_KINDS + _TIMER_KINDS), default="value", show_default=True,
              help="State kind (timers: --format flink, the value column is the timestamp).")
@click.option("--key-column", metavar="COL", help="The key (keyed kinds).")
@click.option("--value-column", "value_columns", multiple=True, metavar="COL",
              help="The value; repeat for a struct value.")
@click.option("--user-key-column", metavar="COL", help="The map key (map and broadcast state).")
@click.option("--namespace-column", metavar="COL",
              help="The namespace (e.g. a window), if any; --format flink: a (start, end) window per row.")
@click.option("--value-type", metavar="TYPE",
              help="Declared value type, e.g. int, string, struct<a:int> (default: from the schema); "
                   "--format flink: a Flink type, e.g. long, row<a:string,n:int>, list<int>.")
@click.option("--user-key-type", metavar="TYPE", help="Declared map-key type (default: from the schema).")
@click.option("--key-type", metavar="TYPE",
              help="--format flink: the Flink type of the key (string, long, int, ..., row<...>; default: from the schema).")
@click.option("--pyflink", is_flag=True,
              help="--format flink: lay the state out as PyFlink does (python-state-NAME, Row key, coder bytes).")
@click.option("--key-serializer", type=click.Choice(_SERIALIZERS), default="msgpack", show_default=True)
@click.option("--value-serializer", type=click.Choice(_SERIALIZERS), default="msgpack", show_default=True)
@click.option("--user-key-serializer", type=click.Choice(_SERIALIZERS), default="msgpack", show_default=True)
@click.option("--max-parallelism", type=int, metavar="M", help="Key groups (default: --from's, or the default for -p).")
@click.option("-p", "--parallelism", type=int, default=1, show_default=True, help="Subtasks of the operator.")
@click.option("--name", help="Operator name (default: the uid).")
@click.option("--ttl-ms", type=click.IntRange(min=1),
              help="State TTL (keyed state): recorded in the descriptor; every entry expires at the reference time + TTL.")
@click.option("--ttl-reference-time", "ttl_reference_time", type=click.IntRange(min=0), metavar="EPOCH_MS",
              help="The time entries count as written at, for --ttl-ms (default: now); --format flink: the "
                   "last-access time stored with every value of state with a TTL.")
@click.option("--from", "from_savepoint", metavar="SAVEPOINT", help="Copy this savepoint's operators and add the new one.")
@click.option("--format", "fmt", type=click.Choice(["statekit", "flink"]), default="statekit", show_default=True,
              help="statekit: a statekit savepoint; flink: an Apache Flink canonical savepoint (docs/FLINK.md).")
@click.option("--spec", "spec_file", metavar="FILE",
              help="--format flink: several operators and states from a JSON or TOML spec file (docs/FLINK.md).")
@click.option("--metadata-version", type=click.IntRange(3, 7), metavar="V",
              help="--format flink: the _metadata version (default 6, Flink 2.x; 4: Flink 1.16-1.20; 3: 1.15).")
@click.option("-o", "--output", metavar="OUT", help="The new savepoint directory (must not exist).")
@click.option("--engine", type=click.Choice(["local", "spark"]), default="local", show_default=True,
              help="local: pyarrow, streaming; spark: the Spark bootstrap (statekit[spark]).")
@click.option("--batch-size", type=click.IntRange(min=1), default=65536, show_default=True, help="Rows per input batch.")
@click.option("--spill-dir", metavar="DIR", help="Temp space for sorting (default: system temp).")
@click.option("--memory-budget", type=click.IntRange(min=8), default=96, show_default=True, metavar="MIB",
              help="MiB of entries held in memory at once.")
@spark_options
@storage_option
@common_options
@catch_exception
def bootstrap(inputs: tuple[str, ...], input_format: str | None, uid: str | None, state: str | None, kind: str,
              key_column: str | None, value_columns: tuple[str, ...], user_key_column: str | None,
              namespace_column: str | None, value_type: str | None, user_key_type: str | None,
              key_type: str | None, pyflink: bool,
              key_serializer: str, value_serializer: str, user_key_serializer: str, max_parallelism: int | None,
              parallelism: int, name: str | None, ttl_ms: int | None, ttl_reference_time: int | None,
              from_savepoint: str | None, fmt: str, spec_file: str | None, metadata_version: int | None,
              output: str | None, engine: str, batch_size: int, spill_dir: str | None, memory_budget: int,
              master: str | None, conf: tuple[str, ...], **_: Any) -> None:
    """Create a savepoint (or add an operator to a copy of one, --from) from rows.

    \b
    Keyed state streams batch by batch with bounded memory; values are encoded with the
    declared serializer and type.
      statekit bootstrap --input counts.parquet --uid counter --state count \\
          --key-column word --value-column n -p 2 -o /savepoints/boot
    --format flink writes an Apache Flink canonical savepoint that a Java or PyFlink job
    restores (Flink types of key and value; --pyflink for a Python function's state):
      statekit bootstrap --format flink --input counts.parquet --uid counter --state count \\
          --key-column word --value-column n --key-type string --value-type long -o /savepoints/flink
      statekit bootstrap --format flink --spec job-state.json -o /savepoints/flink
    """
    from statekit.spark.engine import bootstrap as run_bootstrap
    from statekit.statefmt.metadata import StateKind
    from statekit.writers.bootstrap_spec import BootstrapSpec

    output_ = get_output()
    settings = spark_settings(master, conf, bool(_.get("verbose")))
    options = dict(batch_size=batch_size, spill_dir=spill_dir, memory_budget=memory_budget << 20,
                   progress=output_.progress, spark=settings)
    if fmt == "flink":
        from statekit.spark.engine import bootstrap_flink

        flink = _flink_spec(click.get_current_context().params)
        output_.show(bootstrap_flink(flink, engine, **options))  # type: ignore[arg-type]
        return
    if spec_file or key_type or pyflink or metadata_version is not None:
        raise BadInputError("--spec, --key-type, --pyflink and --metadata-version are for --format flink")
    if kind in _TIMER_KINDS:
        raise BadInputError(f"--kind {kind} is for --format flink (a statekit savepoint keeps timers with its job)")
    spec = BootstrapSpec(
        inputs=inputs, output=output or "", uid=uid or "", state=state or "", kind=StateKind(kind),
        key_column=key_column, value_columns=value_columns, user_key_column=user_key_column,
        namespace_column=namespace_column, input_format=input_format, value_type=value_type,
        user_key_type=user_key_type, key_serializer=key_serializer, value_serializer=value_serializer,
        user_key_serializer=user_key_serializer, max_parallelism=max_parallelism, parallelism=parallelism, name=name,
        ttl_ms=ttl_ms, ttl_reference_time_ms=ttl_reference_time, from_savepoint=from_savepoint,
    )
    output_.show(run_bootstrap(spec, engine, **options))  # type: ignore[arg-type]


def _flink_spec(p: dict[str, Any]) -> Any:
    """The Flink bootstrap spec of the options: a spec file, or one operator with one state."""
    from statekit.flink.savepoint_bootstrap import (
        FlinkBootstrapSpec,
        FlinkOperatorSpec,
        FlinkStateSpec,
        load_spec_file,
    )

    if p["from_savepoint"]:
        raise BadInputError("--from adds to a statekit savepoint; a Flink savepoint gets operators with "
                            "--format flink --spec (several operators at once) or `statekit modify`")
    if p["ttl_ms"] is not None:
        raise BadInputError("--ttl-ms: a Flink savepoint records no TTL (the job's StateTtlConfig does); give the "
                            "last-access time with --ttl-reference-time")
    if {p["key_serializer"], p["value_serializer"], p["user_key_serializer"]} != {"msgpack"}:
        raise BadInputError("--key-serializer/--value-serializer/--user-key-serializer name statekit serializers; "
                            "--format flink writes Flink's serializers of --key-type and --value-type")
    if p["spec_file"]:
        given = [f"--{name.replace('_', '-')}" for name in ("inputs", "uid", "state", "value_columns", "key_column",
                                                             "user_key_column", "key_type", "value_type") if p[name]]
        if given:
            raise BadInputError(f"--spec describes every operator and state; drop {', '.join(given)}")
        return load_spec_file(p["spec_file"], output=p["output"], metadata_version=p["metadata_version"])
    state = FlinkStateSpec(
        name=p["state"] or "", kind=p["kind"], value_columns=p["value_columns"], inputs=p["inputs"],
        input_format=p["input_format"], key_column=p["key_column"], user_key_column=p["user_key_column"],
        namespace_column=p["namespace_column"], value_type=p["value_type"], user_key_type=p["user_key_type"],
        ttl_timestamp=p["ttl_reference_time"])
    operator = FlinkOperatorSpec(uid=p["uid"] or "", states=(state,), key_type=p["key_type"], pyflink=p["pyflink"],
                                 parallelism=p["parallelism"], max_parallelism=p["max_parallelism"], name=p["name"])
    return FlinkBootstrapSpec((operator,), p["output"] or "", p["metadata_version"] or 6)
