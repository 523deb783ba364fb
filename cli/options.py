"""Options shared by commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["common_options", "storage_option", "trust_pickle_option", "uid_option", "value_type_option"]


def common_options(func: F) -> F:
    """``--json``, ``--plain`` and ``--verbose`` on every command (also accepted before the command)."""
    func = click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")(func)
    func = click.option("--plain", is_flag=True, default=None,
                        help="Tables without borders (the default when stdout is not a terminal).")(func)
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
    """``--value-type [STATE=]TYPE`` (repeatable): decode PyFlink state values, or Kryo classes' fields, by a declared type."""
    return click.option(
        "--value-type", "value_types", multiple=True, metavar="[STATE=]TYPE",
        help="Apache Flink: decode a PyFlink state's values (python-state-*) as TYPE, e.g. count=int, "
             "names=list<string>, totals=map<string,int>, or the fields of a Kryo class, e.g. "
             "reading=struct<sensor:string,count:int> (repeatable; bare TYPE with --state). See docs/FLINK.md.")(func)


def storage_option(func: F) -> F:
    """``--storage-option KEY=VALUE`` (repeatable): fsspec options for object-store paths.

    Merged over ``STATEKIT_STORAGE_OPTIONS`` and written back to it in this process, where
    ``FileIO.for_path`` reads it (and processes the command starts inherit it).
    """
    return click.option(
        "--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE", expose_value=False,
        callback=_install_storage_options,
        help="fsspec option for s3://, gs://, ... paths (repeatable), e.g. anon=true, "
             "client_kwargs.endpoint_url=http://127.0.0.1:9000, client_kwargs.region_name=eu-west-1; "
             "over $STATEKIT_STORAGE_OPTIONS (a JSON object) over the profile's. See docs/CLI.md.")(func)


def _install_storage_options(ctx: click.Context, param: click.Parameter, pairs: tuple[str, ...]) -> None:
    """The options in effect — the profile's, ``$STATEKIT_STORAGE_OPTIONS`` over them, the flags on
    top (key by key) — written to ``$STATEKIT_STORAGE_OPTIONS`` of this process."""
    import os

    from statekit.cli.config import profile_storage_options
    from statekit.cli.errors import BadInputUsage
    from statekit.statefmt.errors import BadInputError
    from statekit.statefmt.storage_options import StorageOptions

    try:
        profile = StorageOptions.of(profile_storage_options())
    except BadInputError as error:
        raise BadInputUsage(error) from None
    try:
        options = profile.merged(StorageOptions.from_env()).merged(StorageOptions.parse(pairs))
    except BadInputError as error:
        raise click.BadParameter(str(error), ctx=ctx, param=param) from None
    if pairs or profile:
        os.environ.update(options.to_env())
