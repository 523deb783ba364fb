"""``statekit migrate``: a savepoint whose state declares a new value type (thin: parse, call, render)."""

from __future__ import annotations

from typing import Any

import click

from statekit.cli.errors import catch_exception
from statekit.cli.options import common_options, storage_option, trust_pickle_option
from statekit.cli.output import get_output

__all__ = ["migrate"]


@click.command()
@click.argument("snapshot", metavar="SNAPSHOT")
@click.option("--state", "state_ref", required=True, metavar="UID/STATE", help="The state to migrate.")
@click.option("--value-type", required=True, metavar="NEWTYPE",
              help="Its new declared type, e.g. float, struct<a:int,b:string>, list<float>.")
@click.option("--default", "defaults", multiple=True, metavar="FIELD=VALUE",
              help="The value of a struct field NEWTYPE adds (JSON; repeatable; default: null).")
@click.option("-o", "--output", required=True, metavar="OUT", help="The new savepoint directory (must not exist).")
@trust_pickle_option
@storage_option
@common_options
@catch_exception
def migrate(snapshot: str, state_ref: str, value_type: str, defaults: tuple[str, ...], output: str,
            trust_pickle: bool, **_: Any) -> None:
    """Write a copy of SNAPSHOT whose state UID/STATE is declared NEWTYPE, its values migrated.

    \b
    Allowed changes (docs/RUNTIME.md, "State schema evolution"): int -> float, struct
    fields added (null, or --default FIELD=VALUE) or removed, list elements / map values / struct fields widened by
    the same rules, any type -> json. Incompatible changes (string -> int, float -> int, a
    map key type) are refused. The output appears whole or not at all; SNAPSHOT is not modified.
    """
    from statekit.writers.migration import migrate_savepoint, parse_default, parse_state_ref

    uid, state = parse_state_ref(state_ref)
    given = dict(parse_default(d) for d in defaults)
    get_output().show(migrate_savepoint(snapshot, output, uid, state, value_type, defaults=given,
                                        trust_pickle=trust_pickle))
