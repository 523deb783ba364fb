"""The DataStream API: streams, keyed streams, broadcast streams, sinks.

Every operator-producing call returns a stream whose ``uid``, ``name``,
``set_parallelism``, ``set_max_parallelism``, ``disable_chaining`` and
``start_new_chain`` configure that operator and return the stream, as in Flink::

    (env.from_source(FileSource("in"), "files").uid("source")
        .flat_map(tokenize).uid("tokenize")
        .key_by(lambda word: word)
        .process(CountWords()).uid("counter")
        .sink_to(FileSink("out")).uid("sink"))
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from statekit.runtime.api.side_outputs import OutputTag
from statekit.runtime.api.state import MapStateDescriptor
from statekit.runtime.connectors.sinks import PrintSink
from statekit.runtime.dataflow.graph import InputSpec, Transformation
from statekit.runtime.exchange.partitioning import Partitioning
from statekit.runtime.operators.base import StreamOperator
from statekit.runtime.operators.one_input import (
    AggregateOperator,
    FilterOperator,
    FlatMapOperator,
    KeyedProcessOperator,
    MapOperator,
    ProcessOperator,
    ReduceOperator,
    SinkOperator,
)
from statekit.runtime.operators.sources import TimestampsAndWatermarksOperator
from statekit.runtime.operators.two_input import BroadcastProcessOperator
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.serializers import get_serializer

if TYPE_CHECKING:
    from statekit.runtime.api.watermarks import WatermarkStrategy
    from statekit.runtime.dataflow.environment import StreamEnvironment
    from statekit.runtime.dataflow.windowed_stream import WindowedStream

__all__ = [
    "DataStream",
    "KeyedStream",
    "BroadcastStream",
    "BroadcastConnectedStream",
    "DataStreamSink",
    "copy_function",
    "user_function",
]


def copy_function(function: Any) -> Any:
    """A subtask's own copy of a user function (the function itself if it cannot be copied)."""
    try:
        return copy.deepcopy(function)
    except Exception:  # noqa: BLE001 - uncopyable functions (locks, sockets) are shared
        return function


class _OperatorFactory:
    """Makes a subtask's operator around its own copy of the user function (Flink deserializes
    one instance per subtask); ``function`` is the user's own object (never run)."""

    __slots__ = ("function", "operator_type")

    def __init__(self, operator_type: type[StreamOperator], function: Any) -> None:
        self.operator_type = operator_type
        self.function = function

    def __call__(self) -> StreamOperator:
        return self.operator_type(copy_function(self.function))


def _factory(operator_type: type[StreamOperator], function: Any) -> Callable[[], StreamOperator]:
    return _OperatorFactory(operator_type, function)


def user_function(factory: Callable[[], StreamOperator]) -> Any:
    """The user's function object behind an operator factory (None: none, e.g. a source)."""
    return factory.function if isinstance(factory, _OperatorFactory) else None


class DataStream:
    """A stream of records produced by one operator (or a union of several)."""

    def __init__(self, env: StreamEnvironment, ports: list[InputSpec], transformation: Transformation | None = None) -> None:
        self.env = env
        self._ports = ports
        self._transformation = transformation

    # ------------------------------------------------------------ operator settings

    def _own(self, what: str) -> Transformation:
        if self._transformation is None:
            raise BadInputError(f"{what} applies to an operator, not to a union or keyed/broadcast view of streams")
        return self._transformation

    def uid(self, uid: str) -> DataStream:
        """Set the operator's stable id (how its state is found on restore)."""
        if not uid or not isinstance(uid, str):
            raise BadInputError("an operator uid must be a non-empty string")
        self._own("uid()").uid = uid
        return self

    def name(self, name: str) -> DataStream:
        """Set the operator's display name."""
        self._own("name()").name = name
        return self

    def set_parallelism(self, parallelism: int) -> DataStream:
        """Set the operator's parallelism (overrides the job default and ``-p``)."""
        if parallelism < 1:
            raise BadInputError(f"parallelism must be at least 1, got {parallelism}")
        self._own("set_parallelism()").parallelism = parallelism
        return self

    def set_max_parallelism(self, max_parallelism: int) -> DataStream:
        """Set the operator's max parallelism (number of key groups)."""
        self._own("set_max_parallelism()").max_parallelism = max_parallelism
        return self

    def disable_chaining(self) -> DataStream:
        """Run the operator in its own task (no direct calls from or to neighbours)."""
        self._own("disable_chaining()").chaining = False
        return self

    def start_new_chain(self) -> DataStream:
        """Start a new chain at this operator."""
        self._own("start_new_chain()").new_chain = True
        return self

    def get_uid(self) -> str | None:
        return self._own("get_uid()").uid

    # ------------------------------------------------------------ transformations

    def _add(
        self, kind: str, name: str, factory: Callable[[], StreamOperator], second: list[InputSpec] | None = None
    ) -> DataStream:
        inputs = list(self._ports) + [replace(p, input_index=2) for p in (second or [])]
        t = self.env.add_transformation(kind, name, factory, inputs)
        return DataStream(self.env, [InputSpec(t)], t)

    def map(self, function: Any, name: str = "Map") -> DataStream:
        """One record out per record in: ``function(value)`` or ``MapFunction.map``."""
        return self._add("map", name, _factory(MapOperator, function))

    def flat_map(self, function: Any, name: str = "FlatMap") -> DataStream:
        """Any number of records per record: ``function(value)`` returns or yields them."""
        return self._add("flat_map", name, _factory(FlatMapOperator, function))

    def filter(self, function: Any, name: str = "Filter") -> DataStream:
        """Keep the records for which ``function(value)`` is true."""
        return self._add("filter", name, _factory(FilterOperator, function))

    def process(self, function: Any, name: str = "Process") -> DataStream:
        """A ProcessFunction over a non-keyed stream (operator state via CheckpointedFunction)."""
        return self._add("process", name, _factory(ProcessOperator, function))

    def key_by(self, key_selector: Callable[[Any], Any], key_serializer: str = "msgpack") -> KeyedStream:
        """Partition by key: records with equal keys go to the same subtask (by key group)."""
        get_serializer(key_serializer, for_write=True)
        ports = [replace(p, partitioning=Partitioning.HASH, key_selector=key_selector, key_serializer=key_serializer)
                 for p in self._ports]
        return KeyedStream(self.env, ports, key_selector, key_serializer)

    def rebalance(self) -> DataStream:
        """Distribute records round-robin over the next operator's subtasks."""
        return DataStream(self.env, [replace(p, partitioning=Partitioning.REBALANCE) for p in self._ports])

    def union(self, *streams: DataStream) -> DataStream:
        """One stream of the records of this and ``streams``."""
        ports = list(self._ports)
        for stream in streams:
            ports.extend(stream._ports)
        return DataStream(self.env, ports)

    def broadcast(self, *descriptors: MapStateDescriptor) -> BroadcastStream:
        """Send every record to every subtask of the connected operator (broadcast state)."""
        return BroadcastStream(self.env, [replace(p, partitioning=Partitioning.BROADCAST) for p in self._ports],
                               descriptors)

    def connect(self, broadcast_stream: BroadcastStream) -> BroadcastConnectedStream:
        """Connect with a broadcast stream; ``.process`` takes a (Keyed)BroadcastProcessFunction."""
        return BroadcastConnectedStream(self, broadcast_stream)

    def assign_timestamps_and_watermarks(self, strategy: WatermarkStrategy, name: str = "Timestamps/Watermarks") -> DataStream:
        """Give records event timestamps and emit watermarks with ``strategy`` (periodically,
        checked per record). Prefer ``env.from_source(..., watermark_strategy)``: its watermark
        state is part of the source's snapshot."""
        stream = self._add("timestamps", name, _factory(TimestampsAndWatermarksOperator, strategy))
        stream._own("assign_timestamps_and_watermarks()").timestamped = True
        return stream

    def get_side_output(self, tag: OutputTag) -> DataStream:
        """The records this operator emitted with ``ctx.output(tag, value)``."""
        if not isinstance(tag, OutputTag):
            raise BadInputError(f"get_side_output needs an OutputTag, got {tag!r}")
        t = self._own("get_side_output()")
        return DataStream(self.env, [InputSpec(t, side_output=tag.name)])

    def sink_to(self, sink: Any, name: str = "Sink") -> DataStreamSink:
        """End the stream in ``sink`` (a SinkFunction or a callable)."""
        stream = self._add("sink", name, _factory(SinkOperator, sink))
        return DataStreamSink(stream.env, stream._ports, stream._transformation)

    add_sink = sink_to

    def print(self, prefix: str | None = None) -> DataStreamSink:
        """Print records to stdout."""
        return self.sink_to(PrintSink(prefix), name="Print")


class KeyedStream(DataStream):
    """A stream partitioned by key; operators on it get keyed state."""

    def __init__(self, env: StreamEnvironment, ports: list[InputSpec], key_selector: Callable[[Any], Any],
                 key_serializer: str) -> None:
        super().__init__(env, ports)
        self.key_selector = key_selector
        self.key_serializer = key_serializer

    def process(self, function: Any, name: str = "KeyedProcess") -> DataStream:
        """A KeyedProcessFunction: keyed state and timers for each record's key."""
        return self._add("keyed_process", name, _factory(KeyedProcessOperator, function))

    def reduce(self, function: Any, name: str = "Reduce") -> DataStream:
        """Running reduce per key (state ``reduce``); emits the reduced value per record."""
        return self._add("reduce", name, _factory(ReduceOperator, function))

    def aggregate(self, function: Any, name: str = "Aggregate") -> DataStream:
        """Running aggregate per key with an AggregateFunction (state ``aggregate``)."""
        return self._add("aggregate", name, _factory(AggregateOperator, function))

    def window(self, assigner: Any) -> WindowedStream:
        """Cut the keyed stream into windows (TumblingEventTimeWindows.of(ms), ...)."""
        from statekit.runtime.dataflow.windowed_stream import WindowedStream

        return WindowedStream(self, assigner)

    def count_window(self, size: int) -> WindowedStream:
        """Windows of ``size`` records per key (GlobalWindows with a purging CountTrigger)."""
        from statekit.runtime.api.windows.assigners import GlobalWindows
        from statekit.runtime.api.windows.triggers import CountTrigger, PurgingTrigger

        return self.window(GlobalWindows.create()).trigger(PurgingTrigger.of(CountTrigger.of(size)))

    def sum(self, field: int | str | None = None, name: str = "Sum") -> DataStream:
        """Running sum per key of the records (``field``: tuple index or dict key)."""
        return self.reduce(_Summer(field), name=name)


class _Summer:
    def __init__(self, field: int | str | None) -> None:
        self.field = field

    def __call__(self, a: Any, b: Any) -> Any:
        field = self.field
        if field is None:
            return a + b
        if isinstance(a, dict):
            return {**a, field: a[field] + b[field]}
        assert isinstance(field, int)
        items = list(a)
        items[field] = a[field] + b[field]
        return tuple(items) if isinstance(a, tuple) else items


class BroadcastStream:
    """A stream whose records reach every subtask of the operator it is connected to."""

    def __init__(self, env: StreamEnvironment, ports: list[InputSpec], descriptors: tuple[MapStateDescriptor, ...]) -> None:
        self.env = env
        self.ports = ports
        self.descriptors = descriptors


class BroadcastConnectedStream:
    """A (keyed or non-keyed) stream connected with a broadcast stream."""

    def __init__(self, stream: DataStream, broadcast: BroadcastStream) -> None:
        self.stream = stream
        self.broadcast = broadcast

    def process(self, function: Any, name: str = "BroadcastProcess") -> DataStream:
        """Run a BroadcastProcessFunction or KeyedBroadcastProcessFunction."""
        return self.stream._add("broadcast_process", name, _factory(BroadcastProcessOperator, function),
                                second=self.broadcast.ports)


class DataStreamSink(DataStream):
    """The end of a stream (uid/name/parallelism apply to the sink operator)."""
