"""Options shared by commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["common_options", "trust_pickle_option"]


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
