"""``statekit convert``: a savepoint's keyed state between statekit and Apache Flink (thin: parse, call, render)."""

from __future__ import annotations

from typing import Any

import click

from statekit.cli.errors import catch_exception
from statekit.cli.options import common_options, storage_option
from statekit.cli.output import get_output
from statekit.statefmt.errors import BadInputError

__all__ = ["convert"]


def _pairs(option: str, items: tuple[str, ...], *, bare: bool = False) -> dict[str, str]:
    """``NAME=VALUE`` options as a dict; a bare ``VALUE`` (when allowed) applies to every name (key ``""``)."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.rpartition("=") if "=" in item else ("", "", item)
        if not sep and not bare:
            raise BadInputError(f"{option} {item!r}: expected NAME=VALUE")
        name, value = name.strip(), value.strip()
        if not value:
            raise BadInputError(f"{option} {item!r}: the value is empty")
        if name in out:
            raise BadInputError(f"{option}: {name or 'the default'} is given twice")
        out[name] = value
    return out


@click.command()
@click.argument("path")
@click.option("--to", "to", type=click.Choice(["flink", "statekit"]), required=True,
              help="flink: a statekit savepoint's keyed state as an Apache Flink canonical savepoint; "
                   "statekit: a Flink savepoint's decodable keyed state as a statekit savepoint.")
@click.option("-o", "--output", required=True, metavar="OUT", help="The new savepoint directory (must not exist).")
@click.option("--pyflink", is_flag=True, help="--to flink: lay keyed state out as PyFlink does (python-state-NAME, "
                                              "Row keys, PyFlink coder bytes).")
@click.option("--key-type", "key_types", multiple=True, metavar="[UID=]TYPE",
              help="--to flink: the Flink type of an operator's keys (repeatable; default: from the keys).")
@click.option("--value-type", "value_types", multiple=True, metavar="[UID/]STATE=TYPE",
              help="--to flink: the Flink type of a state's values (default: its declared type); --to statekit: "
                   "how a PyFlink state's values decode (as export --value-type).")
@click.option("--state-kind", "state_kinds", multiple=True, metavar="[UID/]STATE=KIND",
              help="--to flink: write a value state as Flink's reducing or aggregating state (repeatable).")
@click.option("--metadata-version", type=click.IntRange(3, 7), default=6, show_default=True, metavar="V",
              help="--to flink: the _metadata version (6: Flink 2.x; 4: Flink 1.16-1.20; 3: 1.15).")
@click.option("--uid", "uids", multiple=True, metavar="NAME",
              help="--to statekit: a uid of the Flink job (metadata v3/v4 records none; repeatable).")
@click.option("--spill-dir", metavar="DIR", help="Temp space for sorting (default: system temp).")
@click.option("--memory-budget", type=click.IntRange(min=8), default=96, show_default=True, metavar="MIB",
              help="MiB of entries held in memory at once (--to flink).")
@storage_option
@common_options
@catch_exception
def convert(path: str, to: str, output: str, pyflink: bool, key_types: tuple[str, ...], value_types: tuple[str, ...],
            state_kinds: tuple[str, ...], metadata_version: int, uids: tuple[str, ...], spill_dir: str | None,
            memory_budget: int, **_: Any) -> None:
    """Move a job's keyed state between statekit and Apache Flink: write PATH's state as a new savepoint OUT.

    \b
    --to flink: every keyed operator under the same uid, window state under Flink's
    TimeWindow namespaces, timers as Flink's timers; operator state (source splits, sink
    transactions) has no Flink meaning and is left out and listed.
      statekit convert /savepoints/sp-1 --to flink --pyflink -o /savepoints/flink-sp
    --to statekit: a Flink savepoint's decodable keyed state, for the mini runtime.
      statekit convert /flink/savepoint-1a2b --to statekit --value-type count=int -o /savepoints/sk
    """
    from statekit.flink.convert import ConvertSpec, convert_to_flink, convert_to_statekit

    spec = ConvertSpec(path, output, to, pyflink=pyflink, key_types=_pairs("--key-type", key_types, bare=True),
                       value_types=_pairs("--value-type", value_types, bare=to == "statekit"),
                       state_kinds=_pairs("--state-kind", state_kinds), metadata_version=metadata_version,
                       uids=uids)
    output_ = get_output()
    if to == "flink":
        output_.show(convert_to_flink(spec, memory_budget=memory_budget << 20, spill_dir=spill_dir,
                                      progress=output_.progress))
    else:
        output_.show(convert_to_statekit(spec, progress=output_.progress))
