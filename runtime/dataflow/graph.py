"""From transformations (what the API records) to the job graph (what runs).

Resolution fixes each operator's uid (generated deterministically when not set),
parallelism, max parallelism and key, decides each edge's partitioning (forward when
parallelism matches, rebalance otherwise; hash after ``key_by``; broadcast), and chains
operators into job vertices: an operator joins its producer's vertex when it has exactly
that one input, the edge is forward, and chaining is not disabled — records then pass by
a direct call instead of a channel.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statekit.runtime.exchange.batch_path import with_value_key_selector
from statekit.runtime.exchange.partitioning import Partitioning
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.keygroups import check_parallelism, compute_default_max_parallelism

if TYPE_CHECKING:
    from statekit.runtime.api.sources import Source
    from statekit.runtime.checkpoint.restore import RestorePlan
    from statekit.runtime.operators.base import StreamOperator

__all__ = [
    "JobTopology",
    "OperatorDescription",
    "VertexDescription",
    "EdgeDescription",
    "Transformation",
    "InputSpec",
    "OperatorNode",
    "Edge",
    "JobVertex",
    "JobGraph",
    "build_job_graph",
    "edge_key_selector",
]

log = logging.getLogger("statekit.runtime")


@dataclass(frozen=True)
class InputSpec:
    """One input of a transformation: its producer and how records are distributed."""

    upstream: Transformation
    partitioning: Partitioning | None = None
    key_selector: Callable[[Any], Any] | None = None
    key_serializer: str = "msgpack"
    input_index: int = 1
    side_output: str | None = None  # the side-output tag taken from the upstream operator


@dataclass(eq=False)
class Transformation:
    """An operator as the API recorded it (before parallelism and uids are resolved)."""

    id: int
    kind: str
    name: str
    factory: Callable[[], StreamOperator]
    inputs: list[InputSpec] = field(default_factory=list)
    uid: str | None = None
    parallelism: int | None = None
    max_parallelism: int | None = None
    chaining: bool = True
    new_chain: bool = False
    bounded: bool = True
    timestamped: bool = False  # its records carry event timestamps (a timestamp assigner upstream)
    source: Source | None = None  # a source operator's Source (the job master asks it for its plan)

    @property
    def is_source(self) -> bool:
        return not self.inputs


@dataclass(eq=False)
class OperatorNode:
    """A resolved operator."""

    transformation: Transformation
    uid: str
    name: str
    parallelism: int
    max_parallelism: int
    key_selector: Callable[[Any], Any] | None
    key_serializer: str
    generated_uid: bool
    vertex: JobVertex | None = None
    outputs: list[Edge] = field(default_factory=list)

    @property
    def keyed(self) -> bool:
        return self.key_selector is not None


@dataclass(eq=False)
class Edge:
    """A resolved edge between two operators (chained: a direct call inside one vertex)."""

    source: OperatorNode
    target: OperatorNode
    partitioning: Partitioning
    key_selector: Callable[[Any], Any] | None
    key_serializer: str
    input_index: int
    chained: bool = False
    side_output: str | None = None


@dataclass(eq=False)
class JobVertex:
    """A chain of operators run by one task per subtask."""

    id: int
    operators: list[OperatorNode]
    parallelism: int
    inputs: list[Edge] = field(default_factory=list)

    @property
    def head(self) -> OperatorNode:
        return self.operators[0]

    @property
    def is_source(self) -> bool:
        return self.head.transformation.is_source

    @property
    def name(self) -> str:
        return " -> ".join(op.name for op in self.operators)


@dataclass(frozen=True)
class OperatorDescription:
    """One operator as job control shows it."""

    uid: str
    name: str
    parallelism: int
    max_parallelism: int = 128
    vertex: int = 0

    def to_json(self) -> dict[str, Any]:
        """Flink-like vertex of the REST API: ``{"id", "name", "parallelism"}`` (id is the uid)."""
        return {"id": self.uid, "name": self.name, "parallelism": self.parallelism}


@dataclass(frozen=True)
class EdgeDescription:
    """One edge between operators (``chained``: inside one vertex, a direct call)."""

    source: str
    target: str
    partitioning: str
    input_index: int = 1
    chained: bool = False
    side_output: str | None = None


@dataclass(frozen=True)
class VertexDescription:
    """One job vertex: a chain of operators run by one task per subtask."""

    id: int
    name: str
    parallelism: int
    operators: tuple[str, ...]


@dataclass(frozen=True)
class JobTopology:
    """The job graph described in plain values (job control, REST, the dashboard): its operators,
    the vertices they are chained into, and the edges between them."""

    operators: tuple[OperatorDescription, ...]
    vertices: tuple[VertexDescription, ...] = ()
    edges: tuple[EdgeDescription, ...] = ()

    def plan(self) -> dict[str, Any]:
        """The job graph as the REST API and the dashboard show it: ``{"nodes": [{"id", "name",
        "parallelism", "operators": [{"uid", "name"}]}], "edges": [{"source", "target",
        "partitioning", "side_output"}]}`` — vertices (chains) and the exchanges between them."""
        vertex_of = {op.uid: op.vertex for op in self.operators}
        names = {op.uid: op.name for op in self.operators}
        nodes = [{"id": v.id, "name": v.name, "parallelism": v.parallelism,
                  "operators": [{"uid": uid, "name": names.get(uid, uid)} for uid in v.operators]}
                 for v in self.vertices]
        edges = [{"source": vertex_of[e.source], "target": vertex_of[e.target], "partitioning": e.partitioning,
                  "side_output": e.side_output}
                 for e in self.edges if not e.chained and e.source in vertex_of and e.target in vertex_of]
        return {"nodes": nodes, "edges": edges}

    @staticmethod
    def of(*operators: OperatorDescription) -> JobTopology:
        """A topology of unconnected operators, each its own vertex (tests, stand-ins)."""
        vertices = tuple(VertexDescription(i, op.name, op.parallelism, (op.uid,)) for i, op in enumerate(operators))
        return JobTopology(tuple(OperatorDescription(op.uid, op.name, op.parallelism, op.max_parallelism, i)
                                 for i, op in enumerate(operators)), vertices)


@dataclass
class JobGraph:
    operators: list[OperatorNode]
    vertices: list[JobVertex]

    def topology(self) -> JobTopology:
        """This graph in plain values."""
        return JobTopology(
            tuple(OperatorDescription(op.uid, op.name, op.parallelism, op.max_parallelism,
                                      op.vertex.id if op.vertex is not None else -1) for op in self.operators),
            tuple(VertexDescription(v.id, v.name, v.parallelism, tuple(op.uid for op in v.operators))
                  for v in self.vertices),
            tuple(EdgeDescription(e.source.uid, e.target.uid, e.partitioning.value, e.input_index, e.chained,
                                  e.side_output) for op in self.operators for e in op.outputs),
        )

    @property
    def bounded(self) -> bool:
        """Whether every source ends."""
        return all(v.head.transformation.bounded for v in self.vertices if v.is_source)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:24] or "op"


def build_job_graph(
    transformations: list[Transformation],
    *,
    default_parallelism: int,
    default_max_parallelism: int | None,
    restore: RestorePlan | None = None,
    warn_generated_uids: bool = True,
) -> JobGraph:
    """Resolve transformations into a job graph.

    Raises:
        BadInputError: duplicate uids, invalid parallelism, a max parallelism that differs
            from the restored keyed state's.
    """
    nodes: dict[int, OperatorNode] = {}
    seen_signatures: dict[str, int] = {}
    uids: set[str] = set()
    for t in transformations:
        node = _resolve(t, nodes, seen_signatures, default_parallelism, default_max_parallelism, restore)
        if node.uid in uids:
            raise BadInputError(f"duplicate operator uid {node.uid!r}: every operator needs its own uid")
        uids.add(node.uid)
        nodes[t.id] = node
    ordered = [nodes[t.id] for t in transformations]
    if warn_generated_uids:
        for node in ordered:
            if node.generated_uid:
                log.warning(
                    "operator %r has no uid; using generated uid %r. Set .uid(...) so that its state "
                    "can be restored after the job changes.", node.name, node.uid,
                )
    vertices = _chain(ordered, nodes)
    return JobGraph(ordered, vertices)


def _resolve(
    t: Transformation,
    nodes: dict[int, OperatorNode],
    seen: dict[str, int],
    default_parallelism: int,
    default_max_parallelism: int | None,
    restore: RestorePlan | None,
) -> OperatorNode:
    inputs = [nodes[i.upstream.id] for i in t.inputs]
    generated = t.uid is None
    if t.uid is not None:
        uid = t.uid
    else:
        signature = f"{t.kind}|{t.name}|{','.join(n.uid for n in inputs)}"
        ordinal = seen.get(signature, 0)
        seen[signature] = ordinal + 1
        digest = hashlib.sha1(f"{signature}|{ordinal}".encode()).hexdigest()[:8]
        uid = f"auto-{_slug(t.name or t.kind)}-{digest}"
    parallelism = t.parallelism or default_parallelism
    keyed = next((i for i in t.inputs if i.partitioning is Partitioning.HASH and i.input_index == 1), None)
    restored_max = restore.max_parallelism(uid) if restore is not None else None
    if t.max_parallelism is not None:
        max_parallelism = t.max_parallelism
    elif restored_max is not None:
        max_parallelism = restored_max
    elif default_max_parallelism is not None:
        max_parallelism = default_max_parallelism
    else:
        max_parallelism = compute_default_max_parallelism(parallelism)
    if restored_max is not None and max_parallelism != restored_max:
        raise BadInputError(
            f"operator {uid!r}: max parallelism {max_parallelism} differs from {restored_max}, the max "
            f"parallelism its keyed state in {restore.path if restore else '?'} was written with; keep "
            f"{restored_max} or change it offline with `statekit rescale --max-parallelism`"
        )
    try:
        check_parallelism(parallelism, max_parallelism)
    except BadInputError as exc:
        raise BadInputError(f"operator {uid!r}: {exc}") from None
    return OperatorNode(
        transformation=t,
        uid=uid,
        name=t.name,
        parallelism=parallelism,
        max_parallelism=max_parallelism,
        key_selector=keyed.key_selector if keyed else None,
        key_serializer=keyed.key_serializer if keyed else "msgpack",
        generated_uid=generated,
    )


def _chain(ordered: list[OperatorNode], nodes: dict[int, OperatorNode]) -> list[JobVertex]:
    vertices: list[JobVertex] = []
    for node in ordered:
        t = node.transformation
        edges = []
        for spec in t.inputs:
            upstream = nodes[spec.upstream.id]
            partitioning = spec.partitioning or (
                Partitioning.FORWARD if upstream.parallelism == node.parallelism else Partitioning.REBALANCE
            )
            if partitioning is Partitioning.FORWARD and upstream.parallelism != node.parallelism:
                partitioning = Partitioning.REBALANCE
            edge = Edge(upstream, node, partitioning, spec.key_selector, spec.key_serializer, spec.input_index,
                        side_output=spec.side_output)
            upstream.outputs.append(edge)
            edges.append(edge)
        chainable = (
            len(edges) == 1
            and edges[0].partitioning is Partitioning.FORWARD
            and edges[0].side_output is None
            and t.chaining
            and not t.new_chain
            and edges[0].source.transformation.chaining
        )
        if chainable:
            edges[0].chained = True
            vertex = edges[0].source.vertex
            assert vertex is not None
            vertex.operators.append(node)
            node.vertex = vertex
        else:
            vertex = JobVertex(len(vertices), [node], node.parallelism, inputs=edges)
            node.vertex = vertex
            vertices.append(vertex)
    return vertices


def edge_key_selector(edge: Any) -> Callable[[Any], Any] | None:
    """The key selector of an edge's writer (it sees ``(value, timestamp)`` records on timestamped edges)."""
    selector = edge.key_selector
    if selector is None or not edge.source.transformation.timestamped:
        return selector  # type: ignore[no-any-return]

    def record_key(record: tuple[Any, Any]) -> Any:
        return selector(record[0])

    with_value_key_selector(record_key, selector)  # a writer keys (value, timestamp) pairs by it
    return record_key


