"""Windows on keyed streams (Flink's model): assigners, triggers, window functions, the operator."""

from statekit.runtime.windows.assigners import (
    EventTimeSessionWindows,
    GlobalWindows,
    ProcessingTimeSessionWindows,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowAssigner,
)
from statekit.runtime.windows.functions import ProcessWindowFunction, WindowContext
from statekit.runtime.windows.stream import WindowedStream
from statekit.runtime.windows.triggers import (
    CountTrigger,
    EventTimeTrigger,
    NeverTrigger,
    ProcessingTimeTrigger,
    PurgingTrigger,
    Trigger,
    TriggerContext,
    TriggerResult,
)
from statekit.runtime.windows.windows import GlobalWindow, TimeWindow, Window, window_of

__all__ = [
    "WindowAssigner",
    "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows",
    "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows",
    "EventTimeSessionWindows",
    "ProcessingTimeSessionWindows",
    "GlobalWindows",
    "Trigger",
    "TriggerContext",
    "TriggerResult",
    "EventTimeTrigger",
    "ProcessingTimeTrigger",
    "CountTrigger",
    "PurgingTrigger",
    "NeverTrigger",
    "ProcessWindowFunction",
    "WindowContext",
    "WindowedStream",
    "TimeWindow",
    "GlobalWindow",
    "Window",
    "window_of",
]
