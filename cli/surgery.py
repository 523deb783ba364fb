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
              help="MiB of entries a max-parallelism change holds in memory at once.")
@storage_option
@common_options
@catch_exception
def rescale(path: str, parallelism: int | None, max_parallelism: int | None, operators: tuple[str, ...],
            output: str | None, dry_run: bool, spill_dir: str | None, memory_budget: int, **_: Any) -> None:
    """Rescale the savepoint PATH offline into a new savepoint OUT.

    \b
    Same max parallelism: each new subtask's files are assembled from whole key-group
    blocks copied by byte range (checksums verified), no entry decoded.
    --max-parallelism: every entry's key group is recomputed from its key hash and the
    entries are regrouped and re-sorted, streaming with bounded memory; to a multiple of
    the old max parallelism, each old block is cut into its new key groups, nothing spilled.
    An Apache Flink canonical savepoint takes --max-parallelism only (docs/FLINK.md): each
    key moves to the key group Flink assigns it, entry bytes copied.
    The source is never modified; OUT appears whole (_metadata last) or not at all.
    """
    from statekit.flink.dispatch import rescale_any

    output_ = get_output()
    report = rescale_any(
        path, output, parallelism=parallelism, operator_parallelism=_operator_parallelism(operators),
        max_parallelism=max_parallelism, dry_run=dry_run, spill_dir=spill_dir,
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
@click.option("--input", "inputs", multiple=True, required=True, metavar="PATH",
              help="A Parquet, CSV or JSON-lines file, or a directory of them (repeatable; local or URL).")
@click.option("--input-format", type=click.Choice(["parquet", "csv", "json"]),
              help="Input format (default: from the file names).")
@click.option("--uid", required=True, help="Operator uid.")
@click.option("--state", required=True, help="State name.")
@click.option("--kind", type=click.Choice(_STATE_KINDS), default="value", show_default=True, help="State kind.")
@click.option("--key-column", metavar="COL", help="The key (keyed kinds).")
@click.option("--value-column", "value_columns", multiple=True, required=True, metavar="COL",
              help="The value; repeat for a struct value.")
@click.option("--user-key-column", metavar="COL", help="The map key (map and broadcast state).")
@click.option("--namespace-column", metavar="COL", help="The namespace (e.g. a window), if any.")
@click.option("--value-type", metavar="TYPE", help="Declared value type, e.g. int, string, struct<a:int> (default: from the schema).")
@click.option("--user-key-type", metavar="TYPE", help="Declared map-key type (default: from the schema).")
@click.option("--key-serializer", type=click.Choice(_SERIALIZERS), default="msgpack", show_default=True)
@click.option("--value-serializer", type=click.Choice(_SERIALIZERS), default="msgpack", show_default=True)
@click.option("--user-key-serializer", type=click.Choice(_SERIALIZERS), default="msgpack", show_default=True)
@click.option("--max-parallelism", type=int, metavar="M", help="Key groups (default: --from's, or the default for -p).")
@click.option("-p", "--parallelism", type=int, default=1, show_default=True, help="Subtasks of the operator.")
@click.option("--name", help="Operator name (default: the uid).")
@click.option("--ttl-ms", type=click.IntRange(min=1),
              help="State TTL (keyed state): recorded in the descriptor; every entry expires at the reference time + TTL.")
@click.option("--ttl-reference-time", "ttl_reference_time", type=click.IntRange(min=0), metavar="EPOCH_MS",
              help="The time entries count as written at, for --ttl-ms (default: now).")
@click.option("--from", "from_savepoint", metavar="SAVEPOINT", help="Copy this savepoint's operators and add the new one.")
@click.option("-o", "--output", required=True, metavar="OUT", help="The new savepoint directory (must not exist).")
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
def bootstrap(inputs: tuple[str, ...], input_format: str | None, uid: str, state: str, kind: str,
              key_column: str | None, value_columns: tuple[str, ...], user_key_column: str | None,
              namespace_column: str | None, value_type: str | None, user_key_type: str | None,
              key_serializer: str, value_serializer: str, user_key_serializer: str, max_parallelism: int | None,
              parallelism: int, name: str | None, ttl_ms: int | None, ttl_reference_time: int | None,
              from_savepoint: str | None, output: str,
              engine: str, batch_size: int, spill_dir: str | None, memory_budget: int, master: str | None,
              conf: tuple[str, ...], **_: Any) -> None:
    """Create a savepoint (or add an operator to a copy of one, --from) from rows.

    \b
    Keyed state streams batch by batch with bounded memory; values are encoded with the
    declared serializer and type.
      statekit bootstrap --input counts.parquet --uid counter --state count \\
          --key-column word --value-column n -p 2 -o /savepoints/boot
    """
    from statekit.spark.engine import bootstrap as run_bootstrap
    from statekit.statefmt.metadata import StateKind
    from statekit.writers.bootstrap_spec import BootstrapSpec

    spec = BootstrapSpec(
        inputs=inputs, output=output, uid=uid, state=state, kind=StateKind(kind), key_column=key_column,
        value_columns=value_columns, user_key_column=user_key_column, namespace_column=namespace_column,
        input_format=input_format, value_type=value_type, user_key_type=user_key_type,
        key_serializer=key_serializer, value_serializer=value_serializer, user_key_serializer=user_key_serializer,
        max_parallelism=max_parallelism, parallelism=parallelism, name=name, ttl_ms=ttl_ms,
        ttl_reference_time_ms=ttl_reference_time, from_savepoint=from_savepoint,
    )
    output_ = get_output()
    output_.show(run_bootstrap(spec, engine, batch_size=batch_size, spill_dir=spill_dir,
                               memory_budget=memory_budget << 20, progress=output_.progress,
                               spark=spark_settings(master, conf, bool(_.get("verbose")))))
