"""Route offline commands to the statekit or the Apache Flink reader by the magic bytes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statekit.readers.inspection import inspect_snapshot
from statekit.readers.listing import list_checkpoints
from statekit.readers.verification import verify_snapshot

__all__ = ["list_any", "inspect_any", "verify_any", "dispose_any"]


def list_any(url: str) -> Any:
    return list_checkpoints(url)


def inspect_any(url: str, *, skew: bool = True) -> Any:
    return inspect_snapshot(url, skew=skew)


def verify_any(url: str, *, on_file: Callable[[str, int], None] | None = None) -> Any:
    return verify_snapshot(url, on_file=on_file)


def dispose_any(url: str, *, dry_run: bool = False) -> Any:
    from statekit.writers.disposal import dispose_snapshot

    return dispose_snapshot(url, dry_run=dry_run)
