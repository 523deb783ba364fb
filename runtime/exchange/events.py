"""Events that travel in a channel's data lane, in order with the records: watermarks and
watermark status (event time), end of input (drained) and end of partition (the channel closes).
Barriers are :mod:`statekit.runtime.checkpoint.barriers`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "EndOfInput",
    "EndOfPartition",
    "END_OF_INPUT",
    "END_OF_PARTITION",
    "Watermark",
    "WatermarkStatus",
]


class EndOfInput:
    """The producer's input ended (drained): flush timers and buffered results downstream."""

    __slots__ = ()


class EndOfPartition:
    """The producer will send nothing more on this channel."""

    __slots__ = ()


END_OF_INPUT = EndOfInput()


END_OF_PARTITION = EndOfPartition()


@dataclass(frozen=True)
class Watermark:
    """Event time has reached ``timestamp`` on the channel it travels in."""

    timestamp: int


@dataclass(frozen=True)
class WatermarkStatus:
    """The channel went idle (``idle``: excluded from the minimum) or active again."""

    idle: bool


