"""Control mails a task handles between records, in its own thread."""

from __future__ import annotations

from dataclasses import dataclass

from statekit.runtime.checkpoint.barriers import Barrier

__all__ = [
    "TriggerCheckpoint",
    "NotifyCheckpointComplete",
    "NotifyCheckpointAborted",
    "Terminate",
    "Resume",
    "Cancel",
]


@dataclass(frozen=True)
class TriggerCheckpoint:
    """Source tasks: snapshot and inject ``barrier`` (its options say drain/stop)."""

    barrier: Barrier


@dataclass(frozen=True)
class NotifyCheckpointComplete:
    """Checkpoint ``checkpoint_id`` is complete: sinks commit."""

    checkpoint_id: int


@dataclass(frozen=True)
class NotifyCheckpointAborted:
    """Checkpoint ``checkpoint_id`` was aborted."""

    checkpoint_id: int


@dataclass(frozen=True)
class Terminate:
    """Source tasks: send end-of-partition and finish (after the final snapshot)."""


@dataclass(frozen=True)
class Resume:
    """Source tasks stopped for a stop-with-savepoint whose savepoint failed: go on."""


@dataclass(frozen=True)
class Cancel:
    """Stop now, without end-of-input."""
