"""User function interfaces, Flink's in Python spelling.

Plain callables work wherever a simple function is expected (``map``, ``filter``,
``flat_map``, ``key_by``, ``reduce``); classes add ``open``/``close`` and state.
A function that also implements :class:`CheckpointedFunction` gets operator state;
one that implements :class:`CheckpointListener` hears about completed checkpoints.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from statekit.runtime.api.accumulators import Accumulator

if TYPE_CHECKING:
    from statekit.runtime.api.state import (
        AggregatingState,
        AggregatingStateDescriptor,
        BroadcastState,
        ListState,
        ListStateDescriptor,
        MapState,
        MapStateDescriptor,
        ReducingState,
        ReducingStateDescriptor,
        ValueState,
        ValueStateDescriptor,
    )

__all__ = [
    "Collector",
    "RuntimeContext",
    "TimerService",
    "Function",
    "MapFunction",
    "FlatMapFunction",
    "FilterFunction",
    "ReduceFunction",
    "AggregateFunction",
    "ProcessFunction",
    "KeyedProcessFunction",
    "BroadcastProcessFunction",
    "KeyedBroadcastProcessFunction",
    "SinkFunction",
    "CheckpointedFunction",
    "CheckpointListener",
    "OperatorStateStore",
    "FunctionInitializationContext",
    "FunctionSnapshotContext",
]


class Collector(ABC):
    """Where a function emits its output records."""

    @abstractmethod
    def collect(self, value: Any) -> None:
        """Emit one record downstream."""


class TimerService(ABC):
    """Timers of a keyed operator, scoped to the current key."""

    @abstractmethod
    def current_processing_time(self) -> int:
        """Wall-clock time in epoch milliseconds."""

    @abstractmethod
    def current_watermark(self) -> int:
        """The event-time watermark (the minimum until end of input, then the maximum)."""

    @abstractmethod
    def register_processing_time_timer(self, timestamp: int) -> None:
        """Call ``on_timer`` for the current key once wall-clock time reaches ``timestamp``."""

    @abstractmethod
    def register_event_time_timer(self, timestamp: int) -> None:
        """Call ``on_timer`` for the current key once the watermark reaches ``timestamp``."""

    @abstractmethod
    def delete_processing_time_timer(self, timestamp: int) -> None:
        """Remove a processing-time timer of the current key."""

    @abstractmethod
    def delete_event_time_timer(self, timestamp: int) -> None:
        """Remove an event-time timer of the current key."""


class RuntimeContext(ABC):
    """What a function sees of its subtask: index, parallelism and keyed state."""

    @property
    @abstractmethod
    def task_name(self) -> str:
        """The operator name."""

    @property
    @abstractmethod
    def index_of_this_subtask(self) -> int:
        """0-based subtask index."""

    @property
    @abstractmethod
    def number_of_parallel_subtasks(self) -> int:
        """The operator's parallelism."""

    @property
    @abstractmethod
    def max_number_of_parallel_subtasks(self) -> int:
        """The operator's max parallelism (number of key groups)."""

    @property
    @abstractmethod
    def attempt_number(self) -> int:
        """0 on the first run, +1 per restart."""

    @property
    def job_id(self) -> str:
        """The id of the running job (32 lower-case hex characters)."""
        raise NotImplementedError

    @property
    def operator_uid(self) -> str:
        """The uid of the operator the function runs in."""
        raise NotImplementedError

    def add_accumulator(self, name: str, accumulator: Accumulator) -> None:
        """Register ``accumulator`` under ``name``: the job master merges every subtask's
        (:mod:`statekit.runtime.api.accumulators`)."""
        raise NotImplementedError(f"{type(self).__name__} has no accumulators")

    def get_accumulator(self, name: str) -> Accumulator | None:
        """This subtask's accumulator registered under ``name``, if any."""
        raise NotImplementedError(f"{type(self).__name__} has no accumulators")

    @abstractmethod
    def get_state(self, descriptor: ValueStateDescriptor) -> ValueState[Any]:
        """Keyed value state (keyed operators only)."""

    @abstractmethod
    def get_list_state(self, descriptor: ListStateDescriptor) -> ListState[Any]:
        """Keyed list state (keyed operators only)."""

    @abstractmethod
    def get_map_state(self, descriptor: MapStateDescriptor) -> MapState[Any]:
        """Keyed map state (keyed operators only)."""

    @abstractmethod
    def get_reducing_state(self, descriptor: ReducingStateDescriptor) -> ReducingState[Any]:
        """Keyed reducing state (keyed operators only)."""

    @abstractmethod
    def get_aggregating_state(self, descriptor: AggregatingStateDescriptor) -> AggregatingState[Any]:
        """Keyed aggregating state (keyed operators only)."""


class Function:
    """Base of user functions: lifecycle hooks, both optional."""

    def open(self, ctx: RuntimeContext) -> None:
        """Called once per subtask before the first record (get keyed state here)."""

    def close(self) -> None:
        """Called once when the subtask ends."""


class MapFunction(Function):
    """One record in, one record out."""

    @abstractmethod
    def map(self, value: Any) -> Any:
        """Transform ``value``."""


class FlatMapFunction(Function):
    """One record in, any number out (return or yield them)."""

    @abstractmethod
    def flat_map(self, value: Any) -> Iterable[Any] | None:
        """The records ``value`` becomes."""


class FilterFunction(Function):
    """Keep the records for which ``filter`` is true."""

    @abstractmethod
    def filter(self, value: Any) -> bool:
        """Whether to keep ``value``."""


class ReduceFunction(Function):
    """Fold two values of the same key into one."""

    @abstractmethod
    def reduce(self, value1: Any, value2: Any) -> Any:
        """The combination of ``value1`` (accumulated) and ``value2`` (new)."""


class AggregateFunction(Function):
    """Accumulate values into an accumulator, then produce a result."""

    @abstractmethod
    def create_accumulator(self) -> Any:
        """A new, empty accumulator."""

    @abstractmethod
    def add(self, value: Any, accumulator: Any) -> Any:
        """Add ``value`` and return the (new or updated) accumulator."""

    @abstractmethod
    def get_result(self, accumulator: Any) -> Any:
        """The result an accumulator stands for."""

    def merge(self, a: Any, b: Any) -> Any:
        """Merge two accumulators (not needed by this runtime)."""
        raise NotImplementedError


class ProcessFunction(Function):
    """Low-level processing of a non-keyed stream."""

    @abstractmethod
    def process_element(self, value: Any, ctx: Any, out: Collector) -> None:
        """Handle one record; emit with ``out.collect``."""


class KeyedProcessFunction(Function):
    """Low-level processing of a keyed stream with keyed state and timers.

    ``ctx.get_current_key()`` is the key of the record; ``ctx.timer_service()`` registers
    timers, which call :meth:`on_timer` with the key in scope.
    """

    @abstractmethod
    def process_element(self, value: Any, ctx: Any, out: Collector) -> None:
        """Handle one record of the current key."""

    def on_timer(self, timestamp: int, ctx: Any, out: Collector) -> None:
        """A timer of the current key fired."""


class BroadcastProcessFunction(Function):
    """Processes a non-keyed stream connected with a broadcast stream."""

    @abstractmethod
    def process_element(self, value: Any, ctx: Any, out: Collector) -> None:
        """A record of the non-broadcast side; ``ctx.get_broadcast_state(d)`` is read-only."""

    @abstractmethod
    def process_broadcast_element(self, value: Any, ctx: Any, out: Collector) -> None:
        """A record of the broadcast side; ``ctx.get_broadcast_state(d)`` is writable."""


class KeyedBroadcastProcessFunction(BroadcastProcessFunction):
    """Processes a keyed stream connected with a broadcast stream (keyed state available)."""

    def on_timer(self, timestamp: int, ctx: Any, out: Collector) -> None:
        """A timer of the current key fired."""


class SinkFunction(Function):
    """Consumes records at the end of a pipeline."""

    @abstractmethod
    def invoke(self, value: Any) -> None:
        """Write one record."""

    def finish(self) -> None:
        """End of input: flush what is buffered (before the final checkpoint)."""


class OperatorStateStore(ABC):
    """Operator (non-keyed) state of one subtask."""

    @abstractmethod
    def get_list_state(self, descriptor: ListStateDescriptor) -> ListState[Any]:
        """Even-split list state: redistributed in contiguous even parts on rescale."""

    @abstractmethod
    def get_union_list_state(self, descriptor: ListStateDescriptor) -> ListState[Any]:
        """Union list state: on restore every subtask gets all elements of all subtasks."""

    @abstractmethod
    def get_broadcast_state(self, descriptor: MapStateDescriptor) -> BroadcastState:
        """Broadcast state: a map every subtask holds a copy of."""


class FunctionInitializationContext(ABC):
    """Given to :meth:`CheckpointedFunction.initialize_state`."""

    @property
    @abstractmethod
    def operator_state_store(self) -> OperatorStateStore:
        """The subtask's operator state."""

    @property
    @abstractmethod
    def runtime_context(self) -> RuntimeContext:
        """The subtask (index, parallelism) the function runs in."""

    @abstractmethod
    def is_restored(self) -> bool:
        """Whether this operator's state was restored from a checkpoint or savepoint."""

    @property
    @abstractmethod
    def restored_checkpoint_id(self) -> int | None:
        """The id of the snapshot restored from, if any."""


class FunctionSnapshotContext(ABC):
    """Given to :meth:`CheckpointedFunction.snapshot_state`."""

    @property
    @abstractmethod
    def checkpoint_id(self) -> int:
        """The id of the checkpoint or savepoint being taken."""

    @property
    @abstractmethod
    def is_savepoint(self) -> bool:
        """Whether it is a savepoint."""


class CheckpointedFunction(ABC):
    """A function with operator state: initialize it, and bring it up to date at barriers."""

    @abstractmethod
    def initialize_state(self, ctx: FunctionInitializationContext) -> None:
        """Register operator state (restored when the job restores)."""

    @abstractmethod
    def snapshot_state(self, ctx: FunctionSnapshotContext) -> None:
        """Called at the barrier, before the state is copied: write pending data into state."""


class CheckpointListener(ABC):
    """Hears about completed (and aborted) checkpoints, in the subtask's thread."""

    @abstractmethod
    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` (and all before it) is complete and durable."""

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` was aborted."""
