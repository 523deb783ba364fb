"""Deploying subtasks: the tasks of the job graph that one host runs, wired to each other.

:func:`deploy_tasks` builds, for the subtasks a host runs (all of them for the thread executor;
a TaskManager's slots otherwise), their operators (each with its own copy of the user function
and its own restore slice), their input gates and their record writers. A channel to a consumer
subtask the same host runs goes straight into that subtask's :class:`InputGate`; a channel to
one another host runs goes to the :class:`RemoteChannels` the caller gives (the network stack).
The wiring is computed from the job graph alone, so every host that builds the same graph numbers
the channels the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from statekit.runtime.api.accumulators import Accumulator
from statekit.runtime.checkpoint.channel_state import ChannelSpec
from statekit.runtime.checkpoint.restore import ExchangeEdge, RestorePlan
from statekit.runtime.dataflow.graph import Edge, JobGraph, JobVertex, edge_key_selector
from statekit.runtime.exchange.input_gate import InputGate
from statekit.runtime.exchange.partitioning import Partitioning
from statekit.runtime.exchange.record_writer import BUFFER_SIZE, ChannelTarget, RecordWriter
from statekit.runtime.operators.base import OperatorContext, Output, StreamOperator
from statekit.runtime.task.task import Task, TaskHost
from statekit.runtime.task.time import configure_task_time

__all__ = [
    "SubtaskKey",
    "DeploymentContext",
    "RemoteChannels",
    "DeployedTasks",
    "deploy_tasks",
    "source_plans",
    "exchange_edges",
    "channel_spec",
    "gate_width",
]

log = logging.getLogger("statekit.runtime")

SubtaskKey = tuple[int, int]  # (vertex id, subtask index)


@dataclass(frozen=True)
class DeploymentContext:
    """What every deployed subtask of one execution attempt shares (plain values, the restore
    plan aside: each host opens its own).

    Attributes:
        job_id: The job.
        attempt: The execution attempt (0 first).
        state_backend: The keyed state backend's registered name.
        working_dir: The backend's local scratch directory on this host (None: it needs none).
        incremental: Checkpoints write keyed state natively and incrementally.
        channel_state_serializer: How in-flight records are stored (``records`` or ``pickle``).
        storage_options: The job's fsspec options.
        restore: The snapshot the attempt restores from, opened on this host (None: none).
        exchanges: Every exchange of the job (in-flight records are replayed into them).
        buffer_records: Records a writer's buffer holds before it is handed over (at first, when
            ``buffer_bytes`` is set).
        buffer_bytes: Bytes of a network buffer: a writer with remote channels fits the records its
            buffers hold to the bytes its records take on the wire (None: ``buffer_records``, fixed).
        buffer_timeout_ms: How long records may wait in a writer's buffer (None: until the task
            runs out of input; 0: not at all).
        latency_interval_ms: How often a source task sends a latency marker (None: never).
        source_plans: The attempt's plan of each source operator (by uid; :func:`source_plans`).
    """

    job_id: str
    attempt: int
    state_backend: str
    working_dir: str | None
    incremental: bool
    channel_state_serializer: str
    storage_options: dict[str, Any] | None
    restore: RestorePlan | None
    exchanges: list[ExchangeEdge] = field(default_factory=list)
    buffer_records: int = BUFFER_SIZE
    buffer_bytes: int | None = None
    buffer_timeout_ms: int | None = None
    latency_interval_ms: int | None = None
    source_plans: dict[str, Any] = field(default_factory=dict)


def source_plans(graph: JobGraph) -> dict[str, Any]:
    """Each source operator's plan for a new attempt (:meth:`Source.plan`; made in the job master,
    once per attempt, and handed to every host), by uid; sources without a plan are left out."""
    plans: dict[str, Any] = {}
    for vertex in graph.vertices:
        for node in vertex.operators:
            source = node.transformation.source
            if source is not None:
                plan = source.plan(node.parallelism)
                if plan is not None:
                    plans[node.uid] = plan
    return plans


class RemoteChannels(Protocol):
    """The channels to consumer subtasks another host runs (the network stack's sending side)."""

    def target(self, vertex: int, subtask: int, channel: int) -> ChannelTarget:
        """The output channel into channel ``channel`` of the gate of subtask ``subtask`` of
        vertex ``vertex``."""
        ...


@dataclass
class DeployedTasks:
    """The tasks a host runs, their gates (by subtask), and which of them are sources."""

    tasks: list[Task]
    source_tasks: list[Task]
    gates: dict[SubtaskKey, InputGate]


def exchange_edges(graph: JobGraph) -> list[ExchangeEdge]:
    """Every edge between two operators, as in-flight records of a restore see it."""
    return [
        ExchangeEdge(edge.source.uid, edge.target.uid, edge.input_index, edge.partitioning.value,
                     edge.source.parallelism, edge.target.parallelism, edge.target.max_parallelism,
                     edge.key_selector, edge.key_serializer)
        for node in graph.operators for edge in node.outputs
    ]


def channel_spec(edge: Edge, producer: int, consumer: int) -> ChannelSpec:
    """The channel of ``edge`` from producer subtask ``producer`` to consumer subtask ``consumer``."""
    return ChannelSpec(edge.source.uid, edge.target.uid, edge.input_index, edge.partitioning.value,
                       producer, edge.source.parallelism, consumer, edge.target.parallelism)


def gate_width(vertex: JobVertex) -> tuple[int, dict[int, int]]:
    """The number of input channels of a subtask of ``vertex`` and, per input edge (by ``id``),
    the number of its first channel: an edge's channels are one per producer subtask (forward: one)."""
    width = 0
    offsets: dict[int, int] = {}
    for edge in vertex.inputs:
        offsets[id(edge)] = width
        width += 1 if edge.partitioning is Partitioning.FORWARD else edge.source.parallelism
    return width, offsets


def gate_capacity(width: int) -> int:
    """Data-lane items an input gate of ``width`` channels holds before it refuses local data."""
    return max(4, 2 * width + 2)


def deploy_tasks(graph: JobGraph, subtasks: Iterable[SubtaskKey], host: TaskHost, context: DeploymentContext,
                 remote: RemoteChannels | None = None) -> DeployedTasks:
    """The tasks of ``subtasks``, wired: local channels into local gates, the others to ``remote``.

    Raises:
        ValueError: A channel leads to a subtask not in ``subtasks`` and ``remote`` is None.
    """
    local = set(subtasks)
    vertices = {vertex.id: vertex for vertex in graph.vertices}
    offsets: dict[int, int] = {}
    gates: dict[SubtaskKey, InputGate] = {}
    input_specs: dict[SubtaskKey, list[ChannelSpec]] = {}
    for vertex in graph.vertices:
        width, edge_offsets = gate_width(vertex)
        offsets.update(edge_offsets)
        for i in range(vertex.parallelism):
            if (vertex.id, i) not in local:
                continue
            gates[(vertex.id, i)] = InputGate(gate_capacity(width), width)
            input_specs[(vertex.id, i)] = [
                channel_spec(edge, producer, i) for edge in vertex.inputs
                for producer in ([i] if edge.partitioning is Partitioning.FORWARD else range(edge.source.parallelism))
            ]
    restore = context.restore
    inflight = restore.inflight(context.exchanges) if restore is not None else {}

    def target(consumer: int, subtask: int, channel: int) -> ChannelTarget:
        gate = gates.get((consumer, subtask))
        if gate is not None:
            return ChannelTarget(gate, channel)
        if remote is None:
            raise ValueError(f"subtask {subtask} of vertex {consumer} is not deployed here and there is no network")
        return remote.target(consumer, subtask, channel)

    deployed = DeployedTasks([], [], gates)
    for vertex_id, i in sorted(local):
        vertex = vertices[vertex_id]
        operators: list[StreamOperator] = []
        chained_next: list[list[int]] = []
        writers: list[list[RecordWriter]] = []
        output_specs: list[list[ChannelSpec]] = []
        replay: list[tuple[int, int, list[Any]]] = []
        accumulators: dict[str, Accumulator] = {}  # the task's, shared by its chain
        for position, node in enumerate(vertex.operators):
            replay.extend((position, index, records) for index, records in inflight.get((node.uid, i), ()))
            op = node.transformation.factory()
            op.setup(OperatorContext(
                uid=node.uid, name=node.name, subtask=i, parallelism=node.parallelism,
                max_parallelism=node.max_parallelism, attempt=context.attempt, state_backend=context.state_backend,
                key_selector=node.key_selector, key_serializer=node.key_serializer,
                restore=restore.subtask(node.uid, i, node.parallelism, node.max_parallelism) if restore else None,
                working_dir=context.working_dir, job_id=context.job_id, incremental=context.incremental,
                source_plan=context.source_plans.get(node.uid), accumulators=accumulators,
            ), Output(lambda value: None))
            operators.append(op)
            chained_next.append([vertex.operators.index(e.target) for e in node.outputs if e.chained])
            node_writers = []
            for edge in node.outputs:
                if edge.chained:
                    continue
                consumer = edge.target.vertex
                assert consumer is not None
                base = offsets[id(edge)]
                if edge.partitioning is Partitioning.FORWARD:
                    targets = [target(consumer.id, i, base)]
                    output_specs.append([channel_spec(edge, i, i)])
                else:
                    targets = [target(consumer.id, k, base + i) for k in range(consumer.parallelism)]
                    output_specs.append([channel_spec(edge, i, k) for k in range(consumer.parallelism)])
                writer = RecordWriter(
                    targets, edge.partitioning, key_selector=edge_key_selector(edge),
                    key_serializer=edge.key_serializer, max_parallelism=edge.target.max_parallelism,
                    start_channel=i, buffer_size=context.buffer_records, buffer_bytes=context.buffer_bytes,
                )
                writer.side_output = edge.side_output
                writer.timestamped = edge.source.transformation.timestamped
                node_writers.append(writer)
            writers.append(node_writers)
        task = Task(host, vertex.id, vertex.name, i, vertex.parallelism, operators, chained_next, writers,
                    gates[(vertex.id, i)], input_specs[(vertex.id, i)], output_specs=output_specs,
                    replay=replay, channel_state_serializer=context.channel_state_serializer,
                    storage_options=context.storage_options, buffer_timeout_ms=context.buffer_timeout_ms,
                    latency_interval_ms=context.latency_interval_ms)
        configure_task_time(task, graph, vertex)
        deployed.tasks.append(task)
        if vertex.is_source:
            deployed.source_tasks.append(task)
    return deployed
