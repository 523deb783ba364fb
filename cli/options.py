"""Options shared by commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["common_options", "trust_pickle_option", "uid_option", "value_type_option"]


def common_options(func: F) -> F:
    """``--json`` and ``--verbose`` on every command (also accepted before the command)."""
    func = click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")(func)
    func = click.option("--verbose", "-v", is_flag=True, help="Show tracebacks and engine logs.")(func)
    return func


def trust_pickle_option(func: F) -> F:
    return click.option(
        "--trust-pickle",
        is_flag=True,
        help="Allow decoding pickle-serialized state. Pickle runs code: use only on savepoints you trust.",
    )(func)


def uid_option(func: F) -> F:
    """``--uid NAME`` (repeatable): label Flink operators whose id is the hash of a known uid."""
    return click.option(
        "--uid", "uids", multiple=True, metavar="NAME",
        help="Apache Flink: a uid of the job (repeatable); the operator whose id is Flink's hash of it is shown, "
             "matched and exported by that uid (metadata v3/v4 records no uids).")(func)


def value_type_option(func: F) -> F:
    """``--value-type [STATE=]TYPE`` (repeatable): decode PyFlink state values by a declared type."""
    return click.option(
        "--value-type", "value_types", multiple=True, metavar="[STATE=]TYPE",
        help="Apache Flink: decode a PyFlink state's values (python-state-*) as TYPE, e.g. count=int, "
             "names=list<string>, totals=map<string,int> (repeatable; bare TYPE with --state). See docs/FLINK.md.")(func)
