"""Stream operators: what runs a user function inside a subtask.

An operator is set up per subtask, initializes (and restores) its state, opens its
function, and then hands every record to :meth:`StreamOperator.element_handler`'s
callable — the hot path, kept to a few attribute lookups and one call. At a barrier
:meth:`StreamOperator.snapshot_state` runs the synchronous part of the snapshot and
returns an :class:`OperatorSnapshot` whose ``write`` is the asynchronous part.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statekit.runtime.api.accumulators import Accumulator
from statekit.runtime.api.functions import (
    CheckpointedFunction,
    CheckpointListener,
    Collector,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    OperatorStateStore,
    RuntimeContext,
)
from statekit.runtime.api.state import (
    AggregatingState,
    AggregatingStateDescriptor,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ReducingState,
    ReducingStateDescriptor,
    ValueState,
    ValueStateDescriptor,
)
from statekit.runtime.api.watermarks import MAX_WATERMARK
from statekit.runtime.checkpoint.barriers import CheckpointOptions
from statekit.runtime.checkpoint.handles import OperatorStateHandle
from statekit.runtime.operators.event_time import ElementTime
from statekit.runtime.operators.timers import _InternalTimerService
from statekit.runtime.state.backend import (
    DEFAULT_STATE_BACKEND,
    KeyedSnapshot,
    KeyedStateBackend,
    NativeKeyedSnapshot,
    SnapshotRequest,
    SubtaskScope,
)
from statekit.runtime.state.operator_state import DefaultOperatorStateStore, OperatorStateSnapshot
from statekit.runtime.state.registry import create_keyed_backend
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.keygroups import compute_key_group_range_for_operator_index
from statekit.statefmt.metadata import StateDescriptor, StateFile
from statekit.statefmt.native_state import NativeKeyedState

if TYPE_CHECKING:
    from statekit.runtime.checkpoint.channel_state import InFlightSnapshot
    from statekit.runtime.checkpoint.restore import SubtaskRestore
    from statekit.runtime.checkpoint.storage import SnapshotOutput

__all__ = [
    "Output",
    "OperatorContext",
    "OperatorSnapshot",
    "SnapshotWriteError",
    "StreamOperator",
    "iter_chain",
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
    source_plan: Any = None  # a source operator's plan for this attempt (Source.plan)
    # the accumulators of the operator's task (shared by the operators of its chain)
    accumulators: dict[str, Accumulator] = field(default_factory=dict)


@dataclass
class OperatorSnapshot:
    """One operator subtask's synchronous snapshot: its descriptors and copies of its state,
    written by :meth:`write` (the asynchronous part, on the task's own writer thread)."""

    uid: str
    descriptors: list[StateDescriptor]
    key_serializer: str | None
    keyed: KeyedSnapshot | None
    operator: OperatorStateSnapshot | None

    def write(self, output: SnapshotOutput, inflight: InFlightSnapshot | None = None) -> OperatorStateHandle:
        """Write the state files into ``output`` (``inflight``: the task's in-flight records, on
        its head operator) and return what the task acknowledges.

        Raises:
            SnapshotWriteError: A write failed; ``new_shared`` names the shared files it had
                uploaded (the coordinator deletes them).
        """
        files: list[StateFile] = []
        native: NativeKeyedState | None = None
        written = 0
        try:
            if isinstance(self.keyed, NativeKeyedSnapshot):
                native = self.keyed.write_native(output)
                written += self.keyed.bytes_written
            elif self.keyed is not None:
                files.extend(self.keyed.write(output))
            if self.operator is not None:
                files.extend(self.operator.write(output))
            channel_file = inflight.write(output) if inflight is not None else None
        except Exception as exc:
            raise SnapshotWriteError(str(exc), self.new_shared()) from exc
        written += channel_file.size if channel_file is not None else 0
        return OperatorStateHandle(
            self.uid, tuple(self.descriptors), self.key_serializer, tuple(files), native, channel_file,
            written + sum(f.size for f in files), tuple(self.new_shared()),
        )

    def new_shared(self) -> list[str]:
        """The files of the job's ``shared/`` this snapshot uploaded so far (relative to it)."""
        return list(self.keyed.new_shared) if isinstance(self.keyed, NativeKeyedSnapshot) else []

    def release(self) -> None:
        """Drop the snapshot's copies."""
        if self.keyed is not None:
            self.keyed.release()


class SnapshotWriteError(Exception):
    """Writing a snapshot failed; ``new_shared``: the shared files it had uploaded."""

    def __init__(self, message: str, new_shared: list[str]) -> None:
        super().__init__(message)
        self.new_shared = new_shared


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

    def add_accumulator(self, name: str, accumulator: Accumulator) -> None:
        accumulators = self._op.ctx.accumulators
        if name in accumulators:
            raise BadInputError(f"operator {self._op.ctx.uid!r}: an accumulator named {name!r} is already "
                                "registered in this task")
        accumulators[name] = accumulator

    def get_accumulator(self, name: str) -> Accumulator | None:
        return self._op.ctx.accumulators.get(name)

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

    @property
    def has_timers(self) -> bool:
        """Whether its task asks it for its next timer (:meth:`next_timer_ms`) and fires them."""
        return self.timers is not None

    def next_timer_ms(self) -> int | None:
        """Wall-clock time (ms) of the earliest processing-time timer, if any."""
        return self.timers.next_processing_time() if self.timers is not None else None

    def fire_timers(self, now_ms: int) -> None:
        """Fire processing-time timers due at ``now_ms``."""
        if self.timers is not None:
            self.timers.advance_processing_time(now_ms)


# ---------------------------------------------------------------- sources


# ---------------------------------------------------------------- one input


# ---------------------------------------------------------------- two inputs


# ---------------------------------------------------------------- timers


def iter_chain(operators: list[StreamOperator]) -> Iterator[StreamOperator]:
    """The operators of a chain, head first."""
    return iter(operators)


