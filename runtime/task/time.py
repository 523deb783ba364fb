"""Event time inside a task: the input watermark valve and how records and watermarks leave it.

A task's watermark is the minimum over its live, active input channels
(:class:`WatermarkValve`); it only moves forward. Records travel between tasks as
``(value, timestamp)`` pairs on edges downstream of a timestamp assigner (the consuming task
knows per input channel whether its records carry timestamps); watermarks and idleness travel
as :mod:`statekit.runtime.exchange.events` in the data lane, in order with the records. End of
input sends ``MAX_WATERMARK``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from statekit.runtime.api.watermarks import MAX_WATERMARK, MIN_WATERMARK
from statekit.runtime.exchange.batch_path import timestamped_handler
from statekit.runtime.exchange.events import Watermark, WatermarkStatus
from statekit.runtime.operators.event_time import ElementTime, emit_timestamped

__all__ = [
    "WatermarkValve",
    "TaskTime",
    "configure_task_time",
]


class WatermarkValve:
    """A task's input watermark: the minimum over live, active channels; never decreasing.

    An idle channel is left out; when every live channel is idle the task is idle (its
    status goes downstream). A channel that ended (end of partition) is left out for good.
    """

    def __init__(self, channels: int) -> None:
        self.watermarks = [MIN_WATERMARK] * channels
        self.idle = [False] * channels
        self.ended = [False] * channels
        self.current = MIN_WATERMARK
        self.task_idle = False

    def _active(self) -> list[int]:
        return [c for c in range(len(self.watermarks)) if not self.idle[c] and not self.ended[c]]

    def on_watermark(self, channel: int, watermark: int) -> int | None:
        """A watermark of ``channel``; returns the task's new watermark if it advanced."""
        if watermark > self.watermarks[channel]:
            self.watermarks[channel] = watermark
        if self.idle[channel]:
            self.idle[channel] = False
        return self._advance()

    def on_status(self, channel: int, idle: bool) -> tuple[int | None, bool | None]:
        """An idleness change of ``channel``: (new watermark or None, new task status or None)."""
        self.idle[channel] = idle
        return self._advance(), self._status()

    def on_end(self, channel: int) -> int | None:
        """``channel`` ended: left out of the minimum from now on."""
        self.ended[channel] = True
        return self._advance()

    def _status(self) -> bool | None:
        live = [c for c in range(len(self.watermarks)) if not self.ended[c]]
        idle = bool(live) and all(self.idle[c] for c in live)
        if idle == self.task_idle:
            return None
        self.task_idle = idle
        return idle

    def _advance(self) -> int | None:
        active = self._active()
        if not active:
            return None
        new = min(self.watermarks[c] for c in active)
        if new > self.current:
            self.current = new
            return new
        return None


class TaskTime:
    """Event time of one task: the record timestamp its operators see, its input valve, and
    how records and watermarks leave it. Owned by the task thread (nothing is shared).

    Attributes:
        timestamped_channels: Per input channel, whether its records are ``(value, timestamp)`` pairs.
        enabled: The job uses event time (the task forwards watermarks and, at end of input,
            ``MAX_WATERMARK``).
    """

    def __init__(self, channels: int) -> None:
        self.element = ElementTime()
        self.valve = WatermarkValve(channels)
        self.timestamped_channels: list[bool] = [False] * channels
        self.enabled = False
        self.operators: list[Any] = []
        self.writers: list[Any] = []
        self.sent_watermark = MIN_WATERMARK  # the last watermark past the end of the chain
        self._periodic: list[Any] = []

    def input_watermark(self) -> int | None:
        """The task's input watermark (None: none yet, or a task without inputs)."""
        current = self.valve.current
        return None if current == MIN_WATERMARK else current

    def output_watermark(self) -> int | None:
        """The last watermark the task sent on (None: none yet)."""
        return None if self.sent_watermark == MIN_WATERMARK else self.sent_watermark

    def bind(self, operators: list[Any], writers: list[Any]) -> None:
        """Give every operator of the chain this task's element time."""
        self.operators = operators
        self.writers = writers
        for op in operators:
            op.element_time = self.element
            op.emit_watermark = self._forwarder(operators.index(op) + 1)
        self._periodic = [op for op in operators[1:] if getattr(op, "periodic_watermarks", False)]

    def _forwarder(self, start: int) -> Callable[[Any], None]:
        return lambda event: self.forward(event, start)

    def emitter(self, writer: Any) -> Callable[[Any], None]:
        """What an operator calls to hand a record to ``writer`` (timestamped when its edge is:
        ``partial(emit_timestamped, writer.emit, element)``, see :func:`timestamped_writer_emit`)."""
        emit: Callable[[Any], None] = writer.emit
        if not getattr(writer, "timestamped", False):
            return emit
        return partial(emit_timestamped, emit, self.element)

    def channel_handlers(self, inputs: list[int], first: Callable[[Any], None],
                         second: Callable[[Any], None] | None) -> list[Callable[[Any], None] | None]:
        """Per input channel (``inputs``: its input index, 1 or 2), the record handler: ``first``
        or ``second``, taking the ``(value, timestamp)`` pairs of a channel that carries them (and,
        in a task with such channels, clearing the element time for a record of one that does not)."""
        plain = {1: first, 2: second}
        if not any(self.timestamped_channels):
            return [plain[index] for index in inputs]
        paired = {index: self.unwrapping(handle) for index, handle in plain.items() if handle is not None}
        untimed = {index: self._untimed(handle) for index, handle in plain.items() if handle is not None}
        return [(paired if timestamped else untimed).get(index)
                for index, timestamped in zip(inputs, self.timestamped_channels, strict=True)]

    def _untimed(self, handle: Callable[[Any], None]) -> Callable[[Any], None]:
        element = self.element

        def untimed(record: Any) -> None:
            element.timestamp = None
            handle(record)

        return untimed

    def unwrapping(self, handle: Callable[[Any], None]) -> Callable[[Any], None]:
        """``handle`` for ``(value, timestamp)`` records: its own variant for them (see
        :func:`with_timestamped_handler`), else one that sets the task's element time first."""
        own = timestamped_handler(handle)
        if own is not None:
            return own
        element = self.element

        def unwrap(record: Any) -> None:
            element.timestamp = record[1]
            handle(record[0])

        return unwrap

    def forward(self, event: Any, start: int = 0) -> None:
        """Advance operators ``start..`` to a watermark (firing their timers), then send ``event`` on."""
        if event.__class__ is Watermark:
            for op in self.operators[start:]:
                op.process_watermark(event.timestamp)
                if getattr(op, "stops_watermarks", False) and event.timestamp != MAX_WATERMARK:
                    return  # an assigner downstream in the chain makes its own watermarks
            if event.timestamp > self.sent_watermark:
                self.sent_watermark = event.timestamp
        for writer in self.writers:
            writer.broadcast_event(event)

    def on_input_event(self, channel: int, event: Any) -> None:
        """A watermark or status arrived on ``channel``."""
        if event.__class__ is Watermark:
            advanced = self.valve.on_watermark(channel, event.timestamp)
            if advanced is not None:
                self.forward(Watermark(advanced))
            return
        advanced, status = self.valve.on_status(channel, event.idle)
        if status is not None:
            self.forward(WatermarkStatus(status))
        if advanced is not None:
            self.forward(Watermark(advanced))

    def on_channel_end(self, channel: int) -> None:
        advanced = self.valve.on_end(channel)
        if advanced is not None and self.enabled:
            self.forward(Watermark(advanced))

    def source_tick(self, head: Any, *, final: bool = False) -> None:
        """Emit the watermark events a source's strategy has due (``final``: its current
        watermark whatever the interval, before end of input)."""
        watermarks = getattr(head, "watermarks", None)
        if watermarks is not None:
            for event in watermarks.tick(force=final):
                self.forward(event, 1)
        if self._periodic and not final:
            now_ms = int(time.time() * 1000)
            for op in self._periodic:  # chained assigners: periodic emission and idleness
                op.fire_timers(now_ms)

    def end_of_input(self) -> None:
        """The maximum watermark goes downstream before end of input."""
        if self.enabled:
            self.sent_watermark = MAX_WATERMARK
            for writer in self.writers:
                writer.broadcast_event(Watermark(MAX_WATERMARK))


def configure_task_time(task: Any, graph: Any, vertex: Any) -> None:
    """Which input channels of ``task`` carry timestamps, and whether the job uses event time."""
    flags: list[bool] = []
    for edge in vertex.inputs:
        width = 1 if edge.partitioning.value == "forward" else edge.source.parallelism
        flags.extend([bool(edge.source.transformation.timestamped)] * width)
    task.time.timestamped_channels = flags
    task.time.enabled = any(op.transformation.timestamped for op in graph.operators)


