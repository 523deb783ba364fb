"""statekit.runtime: the mini stream runtime (docs/RUNTIME.md).

The one import a job script needs::

    from statekit.runtime import StreamEnvironment, KeyedProcessFunction, ValueStateDescriptor, ...

Every name below is loaded on first use (importing this package loads none of the rooms), so
the command line starts fast. The rooms behind it (``api``, ``connectors``, ``checkpoint``,
``exchange``, ``state``, ``operators``, ``task``, ``dataflow``, ``taskmanager``, ``jobmaster``, ``control``;
docs/ARCHITECTURE.md) may move names between modules; this list does not change.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from statekit.runtime.dataflow.executor import Executor, register_executor

if TYPE_CHECKING:
    from statekit.runtime.api.accumulators import Accumulator, IntCounter, ListAccumulator
    from statekit.runtime.api.checkpoint_config import (
        CheckpointConfig,
        CheckpointingMode,
        ExternalizedCheckpointCleanup,
    )
    from statekit.runtime.api.functions import (
        AggregateFunction,
        BroadcastProcessFunction,
        CheckpointedFunction,
        CheckpointListener,
        Collector,
        FilterFunction,
        FlatMapFunction,
        Function,
        FunctionInitializationContext,
        FunctionSnapshotContext,
        KeyedBroadcastProcessFunction,
        KeyedProcessFunction,
        MapFunction,
        OperatorStateStore,
        ProcessFunction,
        ReduceFunction,
        RuntimeContext,
        SinkFunction,
        TimerService,
    )
    from statekit.runtime.api.restart_strategy import RestartStrategy, fixed_delay_restart, no_restart
    from statekit.runtime.api.side_outputs import OutputTag
    from statekit.runtime.api.sources import Source, SourceReader, SourceReaderContext
    from statekit.runtime.api.state import (
        AggregatingState,
        AggregatingStateDescriptor,
        BroadcastState,
        ListState,
        ListStateDescriptor,
        MapState,
        MapStateDescriptor,
        ReadOnlyBroadcastState,
        ReducingState,
        ReducingStateDescriptor,
        ValueState,
        ValueStateDescriptor,
    )
    from statekit.runtime.api.time import Time, parse_duration
    from statekit.runtime.api.ttl import ManualClock, StateTtlConfig, StateVisibility, UpdateType
    from statekit.runtime.api.watermarks import BoundedOutOfOrdernessWatermarks, WatermarkGenerator, WatermarkStrategy
    from statekit.runtime.api.windows import (
        CountTrigger,
        EventTimeSessionWindows,
        EventTimeTrigger,
        GlobalWindow,
        GlobalWindows,
        NeverTrigger,
        ProcessingTimeSessionWindows,
        ProcessingTimeTrigger,
        ProcessWindowFunction,
        PurgingTrigger,
        SlidingEventTimeWindows,
        SlidingProcessingTimeWindows,
        TimeWindow,
        Trigger,
        TriggerContext,
        TriggerResult,
        TumblingEventTimeWindows,
        TumblingProcessingTimeWindows,
        Window,
        WindowAssigner,
        WindowContext,
    )
    from statekit.runtime.connectors.postgres_sink import PostgresSink
    from statekit.runtime.connectors.sinks import CollectSink, DiscardingSink, FileSink, PrintSink
    from statekit.runtime.connectors.sources import CollectionSource, FileSource, NumberSequenceSource
    from statekit.runtime.connectors.two_phase_commit import TwoPhaseCommitSink
    from statekit.runtime.control.launcher import run_job_file
    from statekit.runtime.dataflow.datastream import BroadcastStream, DataStream, KeyedStream
    from statekit.runtime.dataflow.environment import StreamEnvironment, get_execution_environment
    from statekit.runtime.dataflow.job_handle import JobExecutionResult, JobHandle, JobStatus
    from statekit.runtime.dataflow.run_options import RunOptions
    from statekit.runtime.dataflow.windowed_stream import WindowedStream

_PUBLIC: dict[str, str] = {
    # the environment and its streams
    "StreamEnvironment": "dataflow.environment", "get_execution_environment": "dataflow.environment",
    "DataStream": "dataflow.datastream", "KeyedStream": "dataflow.datastream", "BroadcastStream": "dataflow.datastream",
    "WindowedStream": "dataflow.windowed_stream",
    # user functions
    **dict.fromkeys((
        "Function", "MapFunction", "FlatMapFunction", "FilterFunction", "ReduceFunction", "AggregateFunction",
        "ProcessFunction", "KeyedProcessFunction", "BroadcastProcessFunction", "KeyedBroadcastProcessFunction",
        "SinkFunction", "RuntimeContext", "Collector", "TimerService", "CheckpointedFunction", "CheckpointListener",
        "FunctionInitializationContext", "FunctionSnapshotContext", "OperatorStateStore"), "api.functions"),
    # state
    **dict.fromkeys((
        "ValueStateDescriptor", "ListStateDescriptor", "MapStateDescriptor", "ReducingStateDescriptor",
        "AggregatingStateDescriptor", "ValueState", "ListState", "MapState", "ReducingState", "AggregatingState",
        "BroadcastState", "ReadOnlyBroadcastState"), "api.state"),
    **dict.fromkeys(("StateTtlConfig", "UpdateType", "StateVisibility", "ManualClock"), "api.ttl"),
    # time, event time, windows, side outputs
    "Time": "api.time", "parse_duration": "api.time",
    **dict.fromkeys(("WatermarkStrategy", "WatermarkGenerator", "BoundedOutOfOrdernessWatermarks"), "api.watermarks"),
    **dict.fromkeys((
        "WindowAssigner", "TumblingEventTimeWindows", "TumblingProcessingTimeWindows", "SlidingEventTimeWindows",
        "SlidingProcessingTimeWindows", "EventTimeSessionWindows", "ProcessingTimeSessionWindows", "GlobalWindows",
        "Trigger", "TriggerContext", "TriggerResult", "EventTimeTrigger", "ProcessingTimeTrigger", "CountTrigger",
        "PurgingTrigger", "NeverTrigger", "ProcessWindowFunction", "WindowContext", "TimeWindow", "GlobalWindow",
        "Window"), "api.windows"),
    "OutputTag": "api.side_outputs",
    # checkpointing and restarts
    **dict.fromkeys(("CheckpointConfig", "CheckpointingMode", "ExternalizedCheckpointCleanup"), "api.checkpoint_config"),
    **dict.fromkeys(("RestartStrategy", "fixed_delay_restart", "no_restart"), "api.restart_strategy"),
    # connectors
    **dict.fromkeys(("Source", "SourceReader", "SourceReaderContext"), "api.sources"),
    **dict.fromkeys(("FileSource", "NumberSequenceSource", "CollectionSource"), "connectors.sources"),
    **dict.fromkeys(("FileSink", "PrintSink", "DiscardingSink", "CollectSink"), "connectors.sinks"),
    "TwoPhaseCommitSink": "connectors.two_phase_commit", "PostgresSink": "connectors.postgres_sink",
    # accumulators
    **dict.fromkeys(("Accumulator", "IntCounter", "ListAccumulator"), "api.accumulators"),
    # jobs
    "JobStatus": "dataflow.job_handle", "JobHandle": "dataflow.job_handle", "JobExecutionResult": "dataflow.job_handle",
    "RunOptions": "dataflow.run_options", "run_job_file": "control.launcher",
}

__all__ = [
    "Accumulator", "IntCounter", "ListAccumulator",
    "AggregateFunction", "AggregatingState", "AggregatingStateDescriptor", "BoundedOutOfOrdernessWatermarks",
    "BroadcastProcessFunction", "BroadcastState", "BroadcastStream", "CheckpointConfig", "CheckpointListener",
    "CheckpointedFunction", "CheckpointingMode", "CollectSink", "CollectionSource", "Collector", "CountTrigger",
    "DataStream", "DiscardingSink", "EventTimeSessionWindows", "EventTimeTrigger", "ExternalizedCheckpointCleanup",
    "FileSink", "FileSource", "FilterFunction", "FlatMapFunction", "Function", "FunctionInitializationContext",
    "FunctionSnapshotContext", "GlobalWindow", "GlobalWindows", "JobExecutionResult", "JobHandle", "JobStatus",
    "KeyedBroadcastProcessFunction", "KeyedProcessFunction", "KeyedStream", "ListState", "ListStateDescriptor",
    "ManualClock", "MapFunction", "MapState", "MapStateDescriptor", "NeverTrigger", "NumberSequenceSource",
    "OperatorStateStore", "OutputTag", "PostgresSink", "PrintSink", "ProcessFunction", "ProcessWindowFunction",
    "ProcessingTimeSessionWindows", "ProcessingTimeTrigger", "PurgingTrigger", "ReadOnlyBroadcastState",
    "ReduceFunction", "ReducingState", "ReducingStateDescriptor", "RestartStrategy", "RunOptions", "RuntimeContext",
    "SinkFunction", "SlidingEventTimeWindows", "SlidingProcessingTimeWindows", "Source", "SourceReader",
    "SourceReaderContext", "StateTtlConfig", "StateVisibility", "StreamEnvironment", "Time", "TimeWindow",
    "TimerService", "Trigger", "TriggerContext", "TriggerResult", "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows", "TwoPhaseCommitSink", "UpdateType", "ValueState", "ValueStateDescriptor",
    "WatermarkGenerator", "WatermarkStrategy", "Window", "WindowAssigner", "WindowContext", "WindowedStream",
    "fixed_delay_restart", "get_execution_environment", "no_restart", "parse_duration", "run_job_file",
]


def __getattr__(name: str) -> Any:
    room = _PUBLIC.get(name)
    if room is None:
        raise AttributeError(f"module 'statekit.runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"statekit.runtime.{room}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])


def _thread_executor() -> Executor:
    from statekit.runtime.jobmaster.executor import ThreadExecutor

    return ThreadExecutor()


def _process_executor() -> Executor:
    from statekit.runtime.jobmaster.executor import ProcessExecutor

    return ProcessExecutor()


def _auto_executor() -> Executor:
    from statekit.runtime.jobmaster.executor import ProcessExecutor

    return ProcessExecutor(auto=True)


register_executor("threads", _thread_executor)
register_executor("processes", _process_executor)
register_executor("auto", _auto_executor)
