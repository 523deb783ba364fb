"""Windows on keyed streams (Flink's model): assigners, triggers, windows, window functions.

``KeyedStream.window(assigner)`` returns a ``WindowedStream`` (statekit.runtime.dataflow.windowed_stream);
the operator that runs windows lives in statekit.runtime.operators.windows."""

from statekit.runtime.api.windows.assigners import (
    EventTimeSessionWindows,
    GlobalWindows,
    ProcessingTimeSessionWindows,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowAssigner,
)
from statekit.runtime.api.windows.functions import ProcessWindowFunction, WindowContext
from statekit.runtime.api.windows.triggers import (
    CountTrigger,
    EventTimeTrigger,
    NeverTrigger,
    ProcessingTimeTrigger,
    PurgingTrigger,
    Trigger,
    TriggerContext,
    TriggerResult,
)
from statekit.runtime.api.windows.windows import GlobalWindow, TimeWindow, Window, window_of

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
    "TimeWindow",
    "GlobalWindow",
    "Window",
    "window_of",
]
