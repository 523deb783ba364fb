"""Savepoint surgery commands: rescale, modify, bootstrap (thin: parse, call, render)."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.table import Table

from statekit.cli.errors import catch_exception
from statekit.cli.options import common_options
from statekit.cli.output import get_output
from statekit.cli.render import _e, human_bytes, renderer
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
@common_options
@catch_exception
def rescale(path: str, parallelism: int | None, max_parallelism: int | None, operators: tuple[str, ...],
            output: str | None, dry_run: bool, spill_dir: str | None, memory_budget: int, **_: Any) -> None:
    """Rescale the savepoint PATH offline into a new savepoint OUT.

    \b
    Same max parallelism: each new subtask's files are assembled from whole key-group
    blocks copied by byte range (checksums verified), no entry decoded.
    --max-parallelism: every entry's key group is recomputed from its key hash and the
    entries are regrouped and re-sorted, streaming with bounded memory.
    The source is never modified; OUT appears whole (_metadata last) or not at all.
    """
    from statekit.writers.rescale import rescale_savepoint

    output_ = get_output()
    report = rescale_savepoint(
        path, output, parallelism=parallelism, operator_parallelism=_operator_parallelism(operators),
        max_parallelism=max_parallelism, dry_run=dry_run, spill_dir=spill_dir,
        memory_budget=memory_budget << 20, progress=output_.progress,
    )
    output_.show(report)


@renderer("RescaleReport")
def _rescale_report(console: Console, r: Any) -> None:
    if r.dry_run:
        console.print(f"[bold]Rescale plan[/] for {_e(r.source)} (dry run: nothing written)", soft_wrap=True)
    else:
        console.print(f"[green]Rescaled[/] {_e(r.source)} -> {_e(r.output)} in {r.elapsed_s:.2f} s "
                      f"({human_bytes(r.bytes_read)} read, {human_bytes(r.bytes_written)} written)", soft_wrap=True)
    for op in r.operators:
        p_old, p_new = op.old_parallelism, op.parallelism
        m_old, m_new = op.old_max_parallelism, op.max_parallelism
        change = f"parallelism {p_old} -> {p_new}" if p_old != p_new else f"parallelism {p_new}"
        change += f", max parallelism {m_old} -> {m_new}" if m_old != m_new else f", max parallelism {m_new}"
        console.print(f"operator [bold]{_e(op.uid)}[/]: {_e(op.action)}, {_e(change)}", soft_wrap=True)
        if op.keyed_states:
            estimated = " (estimated)" if op.bytes_estimated else ""
            table = Table(show_edge=False, pad_edge=False)
            for column in ("subtask", "key groups", "with state", f"bytes{estimated}", "entries"):
                table.add_column(column, justify="left" if column == "key groups" else "right")
            for s in op.subtasks:
                kg = s.key_group_range
                table.add_row(str(s.index), f"{kg.start}-{kg.end}", str(s.key_groups), human_bytes(s.bytes),
                              str(s.entries))
            console.print(table)
            console.print(f"  keyed states {_e(', '.join(op.keyed_states))}: {human_bytes(op.bytes)}, "
                          f"{_e(op.entries)} entries, skew {op.skew:.2f} (largest subtask / mean)", soft_wrap=True)
        for s in op.operator_states:
            console.print(f"  {_e(s.kind)} state {_e(s.name)}: elements per subtask {_e(list(s.elements))}", soft_wrap=True)


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
@common_options
@catch_exception
def modify(path: str, output: str | None, remove_operators: tuple[str, ...], renames: tuple[str, ...],
           remove_states: tuple[str, ...], dry_run: bool, **_: Any) -> None:
    """Write a copy of the savepoint PATH without some operators or states, or with new uids.

    \b
    The fix for Flink's "Cannot map checkpoint/savepoint state for operator ... to the
    new program": every UID names an operator of PATH; untouched operators are copied
    file by file (checksums verified), never decoded.
    """
    from statekit.writers.savepoint_modification import modify_savepoint, parse_rename, parse_state_ref

    output_ = get_output()
    report = modify_savepoint(
        path, output, remove_operators=remove_operators, rename_uids=[parse_rename(r) for r in renames],
        remove_states=[parse_state_ref(s) for s in remove_states], dry_run=dry_run, progress=output_.progress,
    )
    output_.show(report)


@renderer("ModifyReport")
def _modify_report(console: Console, r: Any) -> None:
    if r.dry_run:
        console.print(f"[bold]Modify plan[/] for {_e(r.source)} (dry run: nothing written)", soft_wrap=True)
    else:
        console.print(f"[green]Wrote[/] {_e(r.output)} from {_e(r.source)} in {r.elapsed_s:.2f} s", soft_wrap=True)
    for uid in r.removed_operators:
        console.print(f"  removed operator {_e(uid)}", soft_wrap=True)
    for uid, state in r.removed_states:
        console.print(f"  removed state {_e(uid)}/{_e(state)}", soft_wrap=True)
    for old, new in r.renamed:
        console.print(f"  renamed {_e(old)} -> {_e(new)}", soft_wrap=True)
    table = Table(show_edge=False, pad_edge=False)
    for column in ("uid", "was", "parallelism", "max parallelism", "states", "files", "bytes"):
        table.add_column(column)
    for op in r.operators:
        table.add_row(_e(op.uid), _e(op.renamed_from or ""), str(op.parallelism), str(op.max_parallelism),
                      _e(", ".join(op.states) or "-"), str(op.files), human_bytes(op.bytes))
    console.print(table)


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
@click.option("--ttl-ms", type=click.IntRange(min=1), help="State TTL recorded in the descriptor.")
@click.option("--from", "from_savepoint", metavar="SAVEPOINT", help="Copy this savepoint's operators and add the new one.")
@click.option("-o", "--output", required=True, metavar="OUT", help="The new savepoint directory (must not exist).")
@click.option("--engine", type=click.Choice(["local", "spark"]), default="local", show_default=True,
              help="local: pyarrow, streaming; spark: the Spark bootstrap (statekit[spark]).")
@click.option("--batch-size", type=click.IntRange(min=1), default=65536, show_default=True, help="Rows per input batch.")
@click.option("--spill-dir", metavar="DIR", help="Temp space for sorting (default: system temp).")
@click.option("--memory-budget", type=click.IntRange(min=8), default=96, show_default=True, metavar="MIB",
              help="MiB of entries held in memory at once.")
@common_options
@catch_exception
def bootstrap(inputs: tuple[str, ...], input_format: str | None, uid: str, state: str, kind: str,
              key_column: str | None, value_columns: tuple[str, ...], user_key_column: str | None,
              namespace_column: str | None, value_type: str | None, user_key_type: str | None,
              key_serializer: str, value_serializer: str, user_key_serializer: str, max_parallelism: int | None,
              parallelism: int, name: str | None, ttl_ms: int | None, from_savepoint: str | None, output: str,
              engine: str, batch_size: int, spill_dir: str | None, memory_budget: int, **_: Any) -> None:
    """Create a savepoint (or add an operator to a copy of one, --from) from rows.

    \b
    Keyed state streams batch by batch with bounded memory; values are encoded with the
    declared serializer and type.
      statekit bootstrap --input counts.parquet --uid counter --state count \\
          --key-column word --value-column n -p 2 -o /savepoints/boot
    """
    from statekit.writers.bootstrap import bootstrap_savepoint

    output_ = get_output()
    report = bootstrap_savepoint(
        inputs=inputs, output=output, uid=uid, state=state, kind=kind, key_column=key_column,
        value_columns=value_columns, user_key_column=user_key_column, namespace_column=namespace_column,
        input_format=input_format, value_type=value_type, user_key_type=user_key_type,
        key_serializer=key_serializer, value_serializer=value_serializer, user_key_serializer=user_key_serializer,
        max_parallelism=max_parallelism, parallelism=parallelism, name=name, ttl_ms=ttl_ms,
        from_savepoint=from_savepoint, engine=engine, batch_size=batch_size, spill_dir=spill_dir,
        memory_budget=memory_budget << 20, progress=output_.progress,
    )
    output_.show(report)


@renderer("BootstrapReport")
def _bootstrap_report(console: Console, r: Any) -> None:
    console.print(f"[green]Bootstrapped[/] {_e(r.uid)}/{_e(r.state)} ({_e(r.kind)}) into {_e(r.output)} in {r.elapsed_s:.2f} s: "
                  f"{_e(r.rows_read)} rows -> {_e(r.entries)} entries, {human_bytes(r.bytes)}", soft_wrap=True)
    console.print(f"  parallelism {_e(r.parallelism)}, max parallelism {_e(r.max_parallelism)}, "
                  f"value type {_e(r.value_type or 'any')} ({_e(r.value_serializer)})", soft_wrap=True)
    if r.copied_operators:
        console.print(f"  copied from {_e(r.from_savepoint)}: {_e(', '.join(r.copied_operators))}", soft_wrap=True)
    table = Table(show_edge=False, pad_edge=False)
    for column in ("subtask", "key groups", "bytes", "entries"):
        table.add_column(column, justify="left" if column == "key groups" else "right")
    for s in r.subtasks:
        kg = s.key_group_range
        table.add_row(str(s.index), f"{kg.start}-{kg.end}", human_bytes(s.bytes), str(s.entries))
    console.print(table)
