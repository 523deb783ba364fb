"""Side outputs: records an operator emits besides its main output, selected by tag.

A function emits with ``ctx.output(tag, value)``; ``stream.get_side_output(tag)`` is the
stream of those records. Side-output edges are never chained: each goes through its own
writer, which only the records of its tag reach (watermarks reach every output).
"""

from __future__ import annotations

from dataclasses import dataclass

from statekit.statefmt.errors import BadInputError

__all__ = [
    "OutputTag",
]


@dataclass(frozen=True)
class OutputTag:
    """Names a side output (Flink's ``OutputTag``); equal names are the same output."""

    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise BadInputError("an OutputTag needs a non-empty name")
