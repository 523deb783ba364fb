"""The operators at the head of a stream's time: the source operator (owns the source reader, and
with a watermark strategy assigns timestamps and emits watermarks) and
``assign_timestamps_and_watermarks``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from statekit.runtime.api.sources import Source, SourceReader, SourceReaderContext
from statekit.runtime.api.state import ListStateDescriptor
from statekit.runtime.api.watermarks import MAX_WATERMARK, WatermarkStrategy
from statekit.runtime.checkpoint.barriers import CheckpointOptions
from statekit.runtime.operators.base import OperatorSnapshot, StreamOperator, _SnapshotContext
from statekit.runtime.operators.event_time import ElementTime, SourceWatermarks
from statekit.statefmt.errors import BadInputError

if TYPE_CHECKING:
    pass

__all__ = [
    "SourceOperator",
    "SOURCE_WATERMARK",
    "TimestampsAndWatermarksOperator",
]


class SourceOperator(StreamOperator):
    """The head of a source task: owns the source reader."""

    def __init__(self, source: Source, watermark_strategy: WatermarkStrategy | None = None) -> None:
        super().__init__(source)
        self.source = source
        self.reader: SourceReader | None = None
        self.watermark_strategy = watermark_strategy
        self.watermarks: SourceWatermarks | None = None

    def initialize_function(self) -> None:
        self.reader = self.source.create_reader(SourceReaderContext(self.ctx.subtask, self.ctx.parallelism,
                                                                       self.ctx.source_plan))
        self.reader.initialize_state(self.init_context())
        if self.watermark_strategy is not None:
            self.watermarks = SourceWatermarks(self.watermark_strategy)
            restored = self.operator_state.get_union_list_state(SOURCE_WATERMARK).get()
            if restored:
                # the least advanced subtask's (of those that had read records): never later than
                # the watermark any of them had reached
                self.watermarks.restore(min(int(t) for t in restored))

    def emitter(self, element: ElementTime) -> Callable[[Any], None]:
        """What the task calls per record read (assigns timestamps when event time is on)."""
        if self.watermarks is None:
            return self.output.collect
        return self.watermarks.assigning(self.output.collect, element, self.emit_watermark)

    def open(self) -> None:
        pass

    def element_handler(self) -> Callable[[Any], None]:
        raise BadInputError("a source has no input")

    def snapshot_state(self, checkpoint_id: int, options: CheckpointOptions) -> OperatorSnapshot:
        assert self.reader is not None
        self.reader.snapshot_state(_SnapshotContext(checkpoint_id, options.is_savepoint))
        if self.watermarks is not None:
            self.operator_state.get_union_list_state(SOURCE_WATERMARK).update(self.watermarks.snapshot())
        return self._snapshot_stores(checkpoint_id, options)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if self.reader is not None:
            self.reader.notify_checkpoint_complete(checkpoint_id)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()


SOURCE_WATERMARK = ListStateDescriptor("_watermark", value_type="int")


class TimestampsAndWatermarksOperator(StreamOperator):
    """``assign_timestamps_and_watermarks``: timestamps records and emits watermarks with a
    :class:`WatermarkStrategy`, checked per record and on a wall-clock timer (Flink's periodic
    emission): a subtask that receives no record still emits its watermark every interval and,
    with ``with_idleness``, turns idle, so it never holds event time back downstream.

    Its task fires the timer (:meth:`fire_timers`) when :meth:`next_timer_ms` is due; a chained
    one in a source task is ticked with the source (``periodic_watermarks``).
    """

    stops_watermarks = True
    periodic_watermarks = True

    @property
    def has_timers(self) -> bool:
        return True

    def next_timer_ms(self) -> int | None:
        return self.watermarks.next_tick_ms()

    def fire_timers(self, now_ms: int) -> None:
        for event in self.watermarks.tick():
            self.emit_watermark(event)

    def open(self) -> None:
        self.watermarks = SourceWatermarks(self.function)

    def element_handler(self) -> Callable[[Any], None]:
        emit = self.watermarks.assigning(self.output.collect, self.element_time)
        tick, forward = self.watermarks.tick, self.emit_watermark

        def handle(value: Any) -> None:
            emit(value)
            for event in tick():
                forward(event)

        return handle

    def process_watermark(self, watermark: int) -> None:
        """Upstream watermarks stop here (this operator makes its own), except the final one."""
        if watermark == MAX_WATERMARK:
            for event in self.watermarks.tick():
                self.emit_watermark(event)


