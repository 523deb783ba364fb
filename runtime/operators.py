"""Stream operators: what runs a user function inside a subtask.

An operator is set up per subtask, initializes (and restores) its state, opens its
function, and then hands every record to :meth:`StreamOperator.element_handler`'s
callable — the hot path, kept to a few attribute lookups and one call. At a barrier
:meth:`StreamOperator.snapshot_state` runs the synchronous part of the snapshot and
returns an :class:`OperatorSnapshot` whose ``write`` is the asynchronous part.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statekit.runtime.backend import (
    DEFAULT_STATE_BACKEND,
    KeyedSnapshot,
    KeyedStateBackend,
    NativeKeyedSnapshot,
    SnapshotRequest,
    SubtaskScope,
    create_keyed_backend,
)
from statekit.runtime.channels import LIST_HANDLER, CheckpointOptions
from statekit.runtime.functions import (
    AggregateFunction,
    BroadcastProcessFunction,
    CheckpointedFunction,
    CheckpointListener,
    Collector,
    FilterFunction,
    FlatMapFunction,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    MapFunction,
    OperatorStateStore,
    ProcessFunction,
    ReduceFunction,
    RuntimeContext,
    SinkFunction,
    TimerService,
)
from statekit.runtime.operator_state import DefaultOperatorStateStore, OperatorStateSnapshot
from statekit.runtime.sources import Source, SourceReader, SourceReaderContext
from statekit.runtime.state import (
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
    State,
    StateDescriptorBase,
    ValueState,
    ValueStateDescriptor,
)
from statekit.runtime.ttl import record_timed_handler
from statekit.runtime.watermarks import (
    MAX_WATERMARK,
    MIN_WATERMARK,
    ElementTime,
    SourceWatermarks,
    WatermarkStrategy,
)
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.keygroups import compute_key_group_range_for_operator_index
from statekit.statefmt.metadata import StateDescriptor, StateFile
from statekit.statefmt.native_state import NativeKeyedState

if TYPE_CHECKING:
    from statekit.runtime.checkpoint_storage import CheckpointStorageLocation
    from statekit.runtime.restore import SubtaskRestore
    from statekit.runtime.subtask_checkpoint import InFlightSnapshot
    from statekit.statefmt.channel_state import ChannelStateFile

__all__ = [
    "Output",
    "OperatorContext",
    "OperatorSnapshot",
    "StreamOperator",
    "SourceOperator",
    "MapOperator",
    "FlatMapOperator",
    "FilterOperator",
    "ProcessOperator",
    "KeyedProcessOperator",
    "ReduceOperator",
    "SinkOperator",
    "BroadcastProcessOperator",
    "MIN_WATERMARK",
    "MAX_WATERMARK",
]



class Output(Collector):
    """A collector whose ``collect`` is the next step (a chained operator or a writer)."""

    def __init__(self, collect: Callable[[Any], None]) -> None:
        self.collect = collect  # type: ignore[method-assign,assignment]

    def collect(self, value: Any) -> None:  # shadowed per instance by the next step
        raise NotImplementedError


@dataclass
class OperatorContext:
    """Where an operator subtask runs and what it restores from."""

    uid: str
    name: str
    subtask: int
    parallelism: int
    max_parallelism: int
    attempt: int = 0
    state_backend: str = DEFAULT_STATE_BACKEND
    key_selector: Callable[[Any], Any] | None = None
    key_serializer: str = "msgpack"
    restore: SubtaskRestore | None = None
    working_dir: str | None = None
    job_id: str = ""
    incremental: bool = False


@dataclass
class OperatorSnapshot:
    """One operator subtask's snapshot: descriptors now, files when written.

    Attributes:
        files: Canonical state files (after :meth:`write`).
        native: Keyed state as native store files (a native snapshot, after :meth:`write`).
        inflight: In-flight records of the task (only on the head operator of a task that
            took an unaligned checkpoint); ``channel_file`` after :meth:`write`.
        bytes_written: Bytes this snapshot wrote (shared files it reused do not count).
        new_shared: Files it added to the job's ``shared/`` (relative to it).
    """

    uid: str
    descriptors: list[StateDescriptor]
    key_serializer: str | None
    keyed: KeyedSnapshot | None
    operator: OperatorStateSnapshot | None
    files: list[StateFile] = field(default_factory=list)
    native: NativeKeyedState | None = None
    inflight: InFlightSnapshot | None = None
    channel_file: ChannelStateFile | None = None
    bytes_written: int = 0
    new_shared: list[str] = field(default_factory=list)

    def write(self, location: CheckpointStorageLocation) -> list[StateFile]:
        """The asynchronous part: write the state files into ``location``."""
        files: list[StateFile] = []
        written = 0
        if isinstance(self.keyed, NativeKeyedSnapshot):
            try:
                self.native = self.keyed.write_native(location)
            finally:  # the shared files uploaded so far are known even when a later write failed
                self.new_shared = list(self.keyed.new_shared)
            written += self.keyed.bytes_written
        elif self.keyed is not None:
            files.extend(self.keyed.write(location))
        if self.operator is not None:
            files.extend(self.operator.write(location))
        if self.inflight is not None:
            self.channel_file = self.inflight.write(location)
            written += self.channel_file.size if self.channel_file is not None else 0
        self.files = files
        self.bytes_written = written + sum(f.size for f in files)
        return files

    @property
    def full_size(self) -> int:
        """Every byte the snapshot consists of (shared files included)."""
        native = self.native.size if self.native is not None else 0
        channel = self.channel_file.size if self.channel_file is not None else 0
        return sum(f.size for f in self.files) + native + channel

    def release(self) -> None:
        """Drop the snapshot's copies."""
        if self.keyed is not None:
            self.keyed.release()


class _InitContext(FunctionInitializationContext):
    def __init__(
        self, store: OperatorStateStore, restored: bool, checkpoint_id: int | None, runtime: RuntimeContext
    ) -> None:
        self._store = store
        self._restored = restored
        self._checkpoint_id = checkpoint_id
        self._runtime = runtime

    @property
    def runtime_context(self) -> RuntimeContext:
        return self._runtime

    @property
    def operator_state_store(self) -> OperatorStateStore:
        return self._store

    def is_restored(self) -> bool:
        return self._restored

    @property
    def restored_checkpoint_id(self) -> int | None:
        return self._checkpoint_id


class _SnapshotContext(FunctionSnapshotContext):
    def __init__(self, checkpoint_id: int, is_savepoint: bool) -> None:
        self._id = checkpoint_id
        self._savepoint = is_savepoint

    @property
    def checkpoint_id(self) -> int:
        return self._id

    @property
    def is_savepoint(self) -> bool:
        return self._savepoint


class _RuntimeContext(RuntimeContext):
    def __init__(self, operator: StreamOperator) -> None:
        self._op = operator

    @property
    def task_name(self) -> str:
        return self._op.ctx.name

    @property
    def index_of_this_subtask(self) -> int:
        return self._op.ctx.subtask

    @property
    def number_of_parallel_subtasks(self) -> int:
        return self._op.ctx.parallelism

    @property
    def max_number_of_parallel_subtasks(self) -> int:
        return self._op.ctx.max_parallelism

    @property
    def attempt_number(self) -> int:
        return self._op.ctx.attempt

    @property
    def job_id(self) -> str:
        return self._op.ctx.job_id

    @property
    def operator_uid(self) -> str:
        return self._op.ctx.uid

    def _backend(self) -> KeyedStateBackend[Any]:
        if self._op.keyed_backend is None:
            raise BadInputError(
                f"operator {self._op.ctx.uid!r}: keyed state is only available on a keyed stream "
                "(after key_by); use operator state (CheckpointedFunction) instead"
            )
        return self._op.keyed_backend

    def get_state(self, descriptor: ValueStateDescriptor) -> ValueState[Any]:
        return self._backend().get_state(descriptor)  # type: ignore[return-value]

    def get_list_state(self, descriptor: ListStateDescriptor) -> ListState[Any]:
        return self._backend().get_state(descriptor)  # type: ignore[return-value]

    def get_map_state(self, descriptor: MapStateDescriptor) -> MapState[Any]:
        return self._backend().get_state(descriptor)  # type: ignore[return-value]

    def get_reducing_state(self, descriptor: ReducingStateDescriptor) -> ReducingState[Any]:
        return self._backend().get_state(descriptor)  # type: ignore[return-value]

    def get_aggregating_state(self, descriptor: AggregatingStateDescriptor) -> AggregatingState[Any]:
        return self._backend().get_state(descriptor)  # type: ignore[return-value]


def _method(function: Any, cls: type, name: str) -> Callable[..., Any]:
    if isinstance(function, cls):
        return getattr(function, name)  # type: ignore[no-any-return]
    if callable(function):
        return function  # type: ignore[no-any-return]
    bound = getattr(function, name, None)
    if callable(bound):
        return bound  # type: ignore[no-any-return]
    raise BadInputError(f"{function!r} is neither callable nor has a {name}() method")


class StreamOperator:
    """Base of every operator: state lifecycle, snapshot, notifications."""

    keyed_backend: KeyedStateBackend[Any] | None = None

    def __init__(self, function: Any = None) -> None:
        self.function = function
        self.timers: _InternalTimerService | None = None
        self.element_time = ElementTime()
        self.side_outputs: dict[str, Callable[[Any], None]] = {}
        self.emit_watermark: Callable[[Any], None] = lambda event: None

    # ------------------------------------------------------------ lifecycle

    def setup(self, ctx: OperatorContext, output: Output) -> None:
        """Bind to a subtask and the next step of the chain."""
        self.ctx = ctx
        self.output = output
        self.operator_state = DefaultOperatorStateStore(ctx.uid, ctx.subtask, ctx.parallelism)
        self.runtime_context = _RuntimeContext(self)

    def initialize_state(self) -> None:
        """Create the keyed backend, restore keyed and operator state, init the function."""
        ctx = self.ctx
        restore = ctx.restore
        if ctx.key_selector is not None:
            scope = SubtaskScope(
                ctx.uid, ctx.subtask, ctx.parallelism, ctx.max_parallelism, ctx.key_serializer,
                compute_key_group_range_for_operator_index(ctx.max_parallelism, ctx.parallelism, ctx.subtask),
            )
            self.keyed_backend = create_keyed_backend(ctx.state_backend, scope, working_dir=ctx.working_dir)
        if restore is not None:
            self._restore_keyed(restore)
            for descriptor, elements in restore.operator_states():
                self.operator_state.restore_state(descriptor, elements)
        self.initialize_function()

    def _restore_keyed(self, restore: SubtaskRestore) -> None:
        """Keyed state: natively when the snapshot and the backend allow it, else canonical entries."""
        backend, uid = self.keyed_backend, self.ctx.uid
        keyed = [d for d in restore.op.states if d.keyed]
        if keyed and backend is None:
            raise BadInputError(
                f"operator {uid!r} has keyed state {keyed[0].name!r} in the snapshot but is "
                "not keyed in the job; key the stream (key_by) or drop the state offline"
            )
        if backend is None or not keyed:
            return
        sources = restore.native_sources()
        if sources is not None and backend.restore_native(sources):
            return
        for descriptor, entries in restore.keyed_states():
            backend.restore_state(descriptor, entries)

    def initialize_function(self) -> None:
        """Let a :class:`CheckpointedFunction` register its operator state."""
        if isinstance(self.function, CheckpointedFunction):
            self.function.initialize_state(self.init_context())

    def init_context(self) -> FunctionInitializationContext:
        restore = self.ctx.restore
        return _InitContext(
            self.operator_state, restore is not None, restore.checkpoint_id if restore else None,
            self.runtime_context,
        )

    def open(self) -> None:
        """Open the user function."""
        opener = getattr(self.function, "open", None)
        if callable(opener) and not isinstance(self.function, type):
            opener(self.runtime_context)

    def close(self) -> None:
        """Close the user function and the backend."""
        closer = getattr(self.function, "close", None)
        try:
            if callable(closer):
                closer()
        finally:
            if self.keyed_backend is not None:
                self.keyed_backend.close()

    # ------------------------------------------------------------ records

    def element_handler(self) -> Callable[[Any], None]:
        """The callable that processes one record of input 1."""
        raise NotImplementedError

    def element_handler2(self) -> Callable[[Any], None]:
        """The callable that processes one record of input 2 (two-input operators)."""
        raise BadInputError(f"operator {self.ctx.uid!r} has one input")

    def end_input(self) -> None:
        """End of input: fire event-time timers, flush what is buffered."""
        self.process_watermark(MAX_WATERMARK)

    def process_watermark(self, watermark: int) -> None:
        """Event time reached ``watermark``: fire the event-time timers due."""
        if self.timers is not None:
            self.timers.advance_watermark(watermark)

    def side_output(self, tag: Any, value: Any) -> None:
        """Emit ``value`` to the side output ``tag`` (dropped when no stream takes it)."""
        emit = self.side_outputs.get(tag.name)
        if emit is not None:
            emit(value)

    # ------------------------------------------------------------ checkpoints

    def snapshot_state(self, checkpoint_id: int, options: CheckpointOptions) -> OperatorSnapshot:
        """Synchronous part of a snapshot (the task thread, at the barrier)."""
        if isinstance(self.function, CheckpointedFunction):
            self.function.snapshot_state(_SnapshotContext(checkpoint_id, options.is_savepoint))
        return self._snapshot_stores(checkpoint_id, options)

    def _snapshot_stores(self, checkpoint_id: int, options: CheckpointOptions) -> OperatorSnapshot:
        backend = self.keyed_backend
        descriptors = backend.descriptors() if backend is not None else []
        key_serializer = self.ctx.key_serializer if descriptors else None
        keyed: KeyedSnapshot | None = None
        if backend is not None and descriptors:
            request = SnapshotRequest(checkpoint_id, native=options.native, incremental=options.incremental,
                                      base_checkpoint_id=options.base_checkpoint_id)
            keyed = (backend.native_snapshot(request) if options.native else None) or backend.snapshot()
        operator_descriptors = self.operator_state.descriptors()
        operator = self.operator_state.snapshot() if operator_descriptors else None
        return OperatorSnapshot(self.ctx.uid, descriptors + operator_descriptors, key_serializer, keyed, operator)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """A checkpoint including this operator's snapshot is complete."""
        if isinstance(self.function, CheckpointListener):
            self.function.notify_checkpoint_complete(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """A checkpoint was aborted."""
        if isinstance(self.function, CheckpointListener):
            self.function.notify_checkpoint_aborted(checkpoint_id)

    # ------------------------------------------------------------ timers

    def next_timer_ms(self) -> int | None:
        """Wall-clock time (ms) of the earliest processing-time timer, if any."""
        return self.timers.next_processing_time() if self.timers is not None else None

    def fire_timers(self, now_ms: int) -> None:
        """Fire processing-time timers due at ``now_ms``."""
        if self.timers is not None:
            self.timers.advance_processing_time(now_ms)


# ---------------------------------------------------------------- sources


class SourceOperator(StreamOperator):
    """The head of a source task: owns the source reader."""

    def __init__(self, source: Source, watermark_strategy: WatermarkStrategy | None = None) -> None:
        super().__init__(source)
        self.source = source
        self.reader: SourceReader | None = None
        self.watermark_strategy = watermark_strategy
        self.watermarks: SourceWatermarks | None = None

    def initialize_function(self) -> None:
        self.reader = self.source.create_reader(SourceReaderContext(self.ctx.subtask, self.ctx.parallelism))
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


# ---------------------------------------------------------------- one input


class TimestampsAndWatermarksOperator(StreamOperator):
    """``assign_timestamps_and_watermarks``: timestamps records and emits watermarks (periodically,
    checked per record) with a :class:`WatermarkStrategy`."""

    stops_watermarks = True

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


class MapOperator(StreamOperator):
    def element_handler(self) -> Callable[[Any], None]:
        fn = _method(self.function, MapFunction, "map")
        collect = self.output.collect

        def handle(value: Any) -> None:
            collect(fn(value))

        return handle


class FlatMapOperator(StreamOperator):
    def element_handler(self) -> Callable[[Any], None]:
        fn = _method(self.function, FlatMapFunction, "flat_map")
        collect = self.output.collect

        def handle(value: Any) -> None:
            produced = fn(value)
            if produced is not None:
                for item in produced:
                    collect(item)

        return handle


class FilterOperator(StreamOperator):
    def element_handler(self) -> Callable[[Any], None]:
        fn = _method(self.function, FilterFunction, "filter")
        collect = self.output.collect

        def handle(value: Any) -> None:
            if fn(value):
                collect(value)

        return handle


class _ProcessContext:
    """The ``ctx`` of process functions: current key, timers, broadcast state."""

    __slots__ = ("_op", "_timestamp", "_writable")

    def __init__(self, op: StreamOperator, writable_broadcast: bool = False) -> None:
        self._op = op
        self._timestamp: int | None = None
        self._writable = writable_broadcast

    def get_current_key(self) -> Any:
        backend = self._op.keyed_backend
        return None if backend is None else backend.current_key

    @property
    def current_key(self) -> Any:
        return self.get_current_key()

    def timestamp(self) -> int | None:
        """The timer's timestamp in ``on_timer``, else the current record's event timestamp."""
        return self._timestamp if self._timestamp is not None else self._op.element_time.timestamp

    def output(self, tag: Any, value: Any) -> None:
        """Emit ``value`` to the side output ``tag`` (an :class:`OutputTag`)."""
        self._op.side_output(tag, value)

    def timer_service(self) -> TimerService:
        op = self._op
        if op.timers is None:
            raise BadInputError(f"operator {op.ctx.uid!r}: timers are only available on a keyed stream")
        return op.timers

    def get_broadcast_state(self, descriptor: MapStateDescriptor) -> ReadOnlyBroadcastState:
        state = self._op.operator_state.get_broadcast_state(descriptor)
        return state if self._writable else _ReadOnly(state)

    def apply_to_keyed_state(self, descriptor: StateDescriptorBase, function: Callable[[Any, State], None]) -> None:
        """Call ``function(key, state)`` for every key of this subtask that has ``descriptor`` state.

        Only on the broadcast side of a keyed stream (Flink's ``applyToKeyedState``); the
        state handle is scoped to each key in turn and the current key is restored after.
        """
        op = self._op
        backend = op.keyed_backend
        if not self._writable or backend is None:
            raise BadInputError(f"operator {op.ctx.uid!r}: apply_to_keyed_state needs the broadcast side of a keyed stream")
        state = backend.get_state(descriptor)
        previous = backend.current_key
        try:
            for key in backend.keys(descriptor.name):
                backend.current_key = key
                function(key, state)
        finally:
            backend.current_key = previous


class _ReadOnly(ReadOnlyBroadcastState):
    def __init__(self, state: BroadcastState) -> None:
        self._state = state

    def get(self, key: Any) -> Any:
        return self._state.get(key)

    def contains(self, key: Any) -> bool:
        return self._state.contains(key)

    def items(self) -> list[tuple[Any, Any]]:
        return self._state.items()


class ProcessOperator(StreamOperator):
    """Non-keyed ProcessFunction."""

    def element_handler(self) -> Callable[[Any], None]:
        fn = _method(self.function, ProcessFunction, "process_element")
        ctx, out = _ProcessContext(self), self.output

        def handle(value: Any) -> None:
            fn(value, ctx, out)

        return handle


class KeyedProcessOperator(StreamOperator):
    """KeyedProcessFunction: keyed state and timers, scoped to each record's key."""

    def initialize_state(self) -> None:
        super().initialize_state()
        assert self.keyed_backend is not None
        self.timers = _InternalTimerService(self.keyed_backend, self._on_timer)
        self.timers.restore()

    def _on_timer(self, timestamp: int) -> None:
        on_timer = getattr(self.function, "on_timer", None)
        if callable(on_timer):
            ctx = _ProcessContext(self)
            ctx._timestamp = timestamp
            self.element_time.timestamp = timestamp  # what the timer emits carries its time
            on_timer(timestamp, ctx, self.output)

    def element_handler(self) -> Callable[[Any], None]:
        fn = _method(self.function, KeyedProcessFunction, "process_element")
        selector = self.ctx.key_selector
        assert selector is not None and self.keyed_backend is not None
        backend, ctx, out = self.keyed_backend, _ProcessContext(self), self.output
        timed = record_timed_handler(backend, selector, fn, ctx, out)  # one TTL clock reading per record
        if timed is not None:
            return timed

        def handle(value: Any) -> None:
            backend.current_key = selector(value)
            fn(value, ctx, out)

        def handle_all(values: list[Any]) -> None:
            """``handle`` of every record of a buffer in order, the body inlined."""
            for value in values:
                backend.current_key = selector(value)
                fn(value, ctx, out)

        setattr(handle, LIST_HANDLER, handle_all)
        return handle


REDUCE_STATE = "reduce"


class ReduceOperator(StreamOperator):
    """Keyed running reduce; emits the reduced value after every record."""

    def open(self) -> None:
        self.state = self.runtime_context.get_state(ValueStateDescriptor(REDUCE_STATE))
        super().open()

    def element_handler(self) -> Callable[[Any], None]:
        reduce = _method(self.function, ReduceFunction, "reduce")
        selector = self.ctx.key_selector
        assert selector is not None and self.keyed_backend is not None
        backend, collect, state = self.keyed_backend, self.output.collect, self.state

        def handle(value: Any) -> None:
            backend.current_key = selector(value)
            current = state.value()
            result = value if current is None else reduce(current, value)
            state.update(result)
            collect(result)

        return handle


class AggregateOperator(StreamOperator):
    """Keyed running aggregate over AggregatingState; emits the result after every record."""

    def open(self) -> None:
        function = self.function
        assert isinstance(function, AggregateFunction)
        self.state = self.runtime_context.get_aggregating_state(
            AggregatingStateDescriptor("aggregate", aggregate_function=function)
        )
        super().open()

    def element_handler(self) -> Callable[[Any], None]:
        selector = self.ctx.key_selector
        assert selector is not None and self.keyed_backend is not None
        backend, collect, state = self.keyed_backend, self.output.collect, self.state

        def handle(value: Any) -> None:
            backend.current_key = selector(value)
            state.add(value)
            collect(state.get())

        return handle


class SinkOperator(StreamOperator):
    """Hands records to a SinkFunction (or a plain callable)."""

    def element_handler(self) -> Callable[[Any], None]:
        return _method(self.function, SinkFunction, "invoke")

    def end_input(self) -> None:
        super().end_input()
        finish = getattr(self.function, "finish", None)
        if callable(finish):
            finish()


# ---------------------------------------------------------------- two inputs


class BroadcastProcessOperator(StreamOperator):
    """Input 1: the (keyed or not) stream; input 2: the broadcast stream."""

    def initialize_state(self) -> None:
        super().initialize_state()
        if self.keyed_backend is not None:
            self.timers = _InternalTimerService(self.keyed_backend, self._on_timer)
            self.timers.restore()

    def _on_timer(self, timestamp: int) -> None:
        on_timer = getattr(self.function, "on_timer", None)
        if callable(on_timer):
            ctx = _ProcessContext(self)
            ctx._timestamp = timestamp
            self.element_time.timestamp = timestamp  # what the timer emits carries its time
            on_timer(timestamp, ctx, self.output)

    def element_handler(self) -> Callable[[Any], None]:
        if not isinstance(self.function, BroadcastProcessFunction):
            raise BadInputError(f"operator {self.ctx.uid!r} needs a (Keyed)BroadcastProcessFunction")
        fn = self.function.process_element
        ctx, out = _ProcessContext(self), self.output
        selector, backend = self.ctx.key_selector, self.keyed_backend
        if selector is None or backend is None:
            return lambda value: fn(value, ctx, out)

        def handle(value: Any) -> None:
            backend.current_key = selector(value)
            fn(value, ctx, out)

        return handle

    def element_handler2(self) -> Callable[[Any], None]:
        assert isinstance(self.function, BroadcastProcessFunction)
        fn = self.function.process_broadcast_element
        ctx, out = _ProcessContext(self, writable_broadcast=True), self.output
        return lambda value: fn(value, ctx, out)


# ---------------------------------------------------------------- timers


TIMERS = MapStateDescriptor("_timers", value_type="bool", key_type="string")


class _InternalTimerService(TimerService):
    """Timers per key, persisted as keyed map state ``_timers`` (user key ``p:<ts>``/``e:<ts>``)."""

    def __init__(self, backend: KeyedStateBackend[Any], fire: Callable[[int], None]) -> None:
        self.backend = backend
        self.fire = fire
        self.state: MapState[Any] | None = None
        self.processing: list[tuple[int, int, Any]] = []
        self.event: list[tuple[int, int, Any]] = []
        self.watermark = MIN_WATERMARK
        self.sequence = itertools.count()

    def _state(self) -> MapState[Any]:
        if self.state is None:
            self.state = self.backend.get_state(TIMERS)  # type: ignore[assignment]
        assert self.state is not None
        return self.state

    def restore(self) -> None:
        if not any(d.name == TIMERS.name for d in self.backend.descriptors()):
            return
        state = self._state()
        for key in list(self.backend.keys(TIMERS.name)):
            self.backend.current_key = key
            for name in state.keys():  # noqa: SIM118 (MapState, not a dict)
                domain, _, ts = str(name).partition(":")
                heap = self.processing if domain == "p" else self.event
                heapq.heappush(heap, (int(ts), next(self.sequence), key))

    def current_processing_time(self) -> int:
        return int(time.time() * 1000)

    def current_watermark(self) -> int:
        return self.watermark

    def _register(self, domain: str, heap: list[tuple[int, int, Any]], timestamp: int) -> None:
        name = f"{domain}:{int(timestamp)}"
        state = self._state()
        if not state.contains(name):
            state.put(name, True)
            heapq.heappush(heap, (int(timestamp), next(self.sequence), self.backend.current_key))

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._register("p", self.processing, timestamp)

    def register_event_time_timer(self, timestamp: int) -> None:
        self._register("e", self.event, timestamp)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._state().remove(f"p:{int(timestamp)}")

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._state().remove(f"e:{int(timestamp)}")

    def next_processing_time(self) -> int | None:
        return self.processing[0][0] if self.processing else None

    def _advance(self, domain: str, heap: list[tuple[int, int, Any]], until: int) -> None:
        state = self._state() if heap else None
        while heap and heap[0][0] <= until:
            timestamp, _, key = heapq.heappop(heap)
            self.backend.current_key = key
            name = f"{domain}:{timestamp}"
            assert state is not None
            if state.contains(name):
                state.remove(name)
                self.fire(timestamp)

    def advance_processing_time(self, now_ms: int) -> None:
        self._advance("p", self.processing, now_ms)

    def advance_watermark(self, watermark: int) -> None:
        self.watermark = max(self.watermark, watermark)
        self._advance("e", self.event, self.watermark)


def iter_chain(operators: list[StreamOperator]) -> Iterator[StreamOperator]:
    """The operators of a chain, head first."""
    return iter(operators)


__all__ += ["AggregateOperator", "iter_chain"]
