"""``statekit keygroup`` and ``statekit relocate`` (thin: parse, call, render)."""

from __future__ import annotations

import re
from typing import Any

import click

from statekit.cli.errors import catch_exception
from statekit.cli.options import common_options, storage_option
from statekit.cli.output import get_output
from statekit.flink.dispatch import KEY_TYPES
from statekit.statefmt.errors import BadInputError

__all__ = ["keygroup", "relocate"]

_NEGATIVE_NUMBER = re.compile(r"^-(\d+(\.\d*)?|\.\d+|inf|infinity|nan)$", re.IGNORECASE)


class _KeyArgumentCommand(click.Command):
    """A command whose KEY may be a negative number written without ``--`` (``keygroup -1``).

    A token like ``-1`` or ``-2.5`` that is not the value of a preceding option is moved
    behind ``--``, so click reads it as the argument instead of an unknown option.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        valued = {name for p in self.params if isinstance(p, click.Option) and not p.is_flag
                  for name in p.opts + p.secondary_opts}
        head: list[str] = []
        negatives: list[str] = []
        rest: list[str] = []
        for index, token in enumerate(args):
            if token == "--":
                rest = args[index + 1:]
                break
            if _NEGATIVE_NUMBER.match(token) and not (head and head[-1] in valued):
                negatives.append(token)
            else:
                head.append(token)
        if negatives or rest:
            args = [*head, "--", *negatives, *rest]
        return super().parse_args(ctx, args)


@click.command(cls=_KeyArgumentCommand)
@click.argument("key")
@click.option("--flink", is_flag=True,
              help="Flink's key group: Java hashCode of a KEY-TYPE object, then Flink's murmur hash.")
@click.option("--key-type", type=click.Choice(KEY_TYPES), default="string", show_default=True,
              help="How to read KEY (Flink: the Java type of the key, String/Integer/Long...).")
@click.option("--max-parallelism", "-m", type=int,
              help="Number of key groups [default: Flink's default for -p (at least 128), else 128].")
@click.option("--parallelism", "-p", type=int, help="Also show the subtask owning the key at this parallelism.")
@click.option("--key-serializer", default="msgpack", show_default=True,
              help="statekit only: the serializer of the operator's keys.")
@common_options
@catch_exception
def keygroup(key: str, flink: bool, key_type: str, max_parallelism: int | None, parallelism: int | None,
             key_serializer: str, **_: Any) -> None:
    """Key group (and subtask) of KEY, in statekit or, with --flink, in Apache Flink.

    \b
    statekit key group 'user-1' (msgpack string):  statekit keygroup user-1
    Flink key group of Integer -1 at 4 subtasks:    statekit keygroup --flink --key-type int -p 4 -1
    """
    from statekit.flink.dispatch import lookup_key_group

    get_output().show(lookup_key_group(key, key_type=key_type, flink=flink, max_parallelism=max_parallelism,
                                       parallelism=parallelism, key_serializer=key_serializer))


@click.command()
@click.argument("path")
@click.option("--from", "old_prefix", help="The path prefix to replace, as written (e.g. file:/data/ckpt).")
@click.option("--to", "new_prefix", help="Its replacement (e.g. s3://bucket/ckpt).")
@click.option("--auto", is_flag=True,
              help="A copied chk-N: replace the old job directory by the one PATH is in (found from the "
                   "files of the same names in its shared/); instead of --from/--to.")
@click.option("-o", "--output",
              help="The new _metadata: a path ending in _metadata, or a directory to receive it "
                   "(with --auto: default PATH's own _metadata).")
@click.option("--force", is_flag=True, help="Replace an existing output file (also PATH's own _metadata).")
@storage_option
@common_options
@catch_exception
def relocate(path: str, old_prefix: str | None, new_prefix: str | None, auto: bool, output: str | None,
             force: bool, **_: Any) -> None:
    """Rewrite the absolute paths of an Apache Flink _metadata (PATH: snapshot dir or _metadata).

    \b
    By prefix:   statekit relocate CHK --from file:/old/ckpt --to s3://bucket/ckpt -o OUT
    Copied chk:  statekit relocate /new/ckpt/JOB/chk-42 --auto --force

    Exit 2 without writing when no absolute path starts with --from (or, with --auto, when a
    path has no file of the same name in PATH's job directory).
    """
    from statekit.flink.relocation import relocate_flink_snapshot, relocate_moved_snapshot

    if auto:
        if old_prefix or new_prefix:
            raise BadInputError("--auto finds --from and --to itself: give either --auto or both")
        get_output().show(relocate_moved_snapshot(path, output, force=force))
        return
    if not (old_prefix and new_prefix and output):
        raise BadInputError("relocate needs --from, --to and -o (or --auto)")
    get_output().show(relocate_flink_snapshot(path, old_prefix, new_prefix, output, force=force))
