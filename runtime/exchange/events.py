"""Events that travel in a channel's data lane, in order with the records: watermarks and
watermark status (event time), end of input (drained), end of partition (the channel closes),
and latency markers.
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
    "LatencyMarker",
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


@dataclass(frozen=True)
class LatencyMarker:
    """Flink's latency marker: made by a source task at ``created_ms`` (wall clock), it travels
    behind the records of the buffer it was emitted with — through the same buffers, timeouts and
    queues, never through user code — to the tasks without outputs, which measure how long it took.
    It is not state: a barrier may overtake it, and it is never stored."""

    created_ms: int
    vertex: int
    subtask: int
