"""``statekit run``'s checkpointing options: mode, unaligned, incremental, retention, timeouts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["checkpointing_options", "checkpointing_run_options"]


def checkpointing_options(func: F) -> F:
    """The checkpointing options of ``statekit run`` (contradictions exit 2, checked by the runtime)."""
    options = [
        click.option("--checkpointing-mode", type=click.Choice(["exactly-once", "at-least-once"]),
                     help="exactly-once (default): aligned or unaligned barriers; at-least-once: channels are "
                          "never blocked, records may count twice after a restore, never lost."),
        click.option("--unaligned", is_flag=True, default=None,
                     help="Unaligned checkpoints: barriers overtake in-flight records, stored with the checkpoint."),
        click.option("--aligned-checkpoint-timeout", metavar="DURATION",
                     help="With --unaligned: start aligned, turn unaligned once alignment takes longer."),
        click.option("--incremental", is_flag=True, default=None,
                     help="Incremental checkpoints (a backend that supports them: rocksdb); SST files are "
                          "shared between checkpoints in <checkpoint-dir>/<job-id>/shared/."),
        click.option("--retained-checkpoints", type=int, metavar="N", help="Completed checkpoints kept (default 1)."),
        click.option("--externalized-cleanup", type=click.Choice(["retain", "delete"]),
                     help="On cancellation keep (retain, default) or delete the retained checkpoints."),
        click.option("--checkpoint-timeout", metavar="DURATION",
                     help="A checkpoint not complete after this long is aborted (default 10min)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def checkpointing_run_options(values: dict[str, Any]) -> dict[str, Any]:
    """RunOptions fields from the parsed options of :func:`checkpointing_options`."""
    from statekit.runtime.api.time import parse_duration

    def duration(name: str, what: str) -> int | None:
        value = values.get(name)
        return None if value is None else parse_duration(value, what=what)

    cleanup = values.get("externalized_cleanup")
    return {
        "checkpointing_mode": values.get("checkpointing_mode"),
        "unaligned": values.get("unaligned"),
        "aligned_checkpoint_timeout_ms": duration("aligned_checkpoint_timeout", "aligned checkpoint timeout"),
        "incremental": values.get("incremental"),
        "retained_checkpoints": values.get("retained_checkpoints"),
        "externalized_cleanup": None if cleanup is None else f"{cleanup}_on_cancellation",
        "checkpoint_timeout_ms": duration("checkpoint_timeout", "checkpoint timeout"),
    }
