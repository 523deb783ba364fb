"""A Flink SQL compiled plan (``COMPILE PLAN``): its stateful ExecNodes, matched to a savepoint's operators.

A compiled plan is JSON: ``{"flinkVersion", "nodes": [...], "edges": [...]}``; each node has an
``id``, a ``type`` such as ``stream-exec-group-aggregate_1`` (kind and version), its
``outputType`` and, for nodes that keep state with a time-to-live, a ``state`` array of
``{"index", "ttl", "name"}``. The operators a node becomes are named ``GroupAggregate[4]``
(the node id in brackets) and, when the job runs from the plan, carry the uid
``4_group-aggregate`` (``table.exec.uid.format``: ``<id>_<transformation>``): either one
matches an operator of the snapshot to its node.

Invariant: a node's key type is the row of its ``grouping`` fields of its input node's output
type, spelt as statekit spells the key serializer of SQL state (``RowData<STRING NOT NULL>``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from statekit.flink.model import FlinkOperatorState
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.fileio import FileIO

__all__ = ["PlanState", "PlanWindow", "PlanNode", "CompiledPlan", "load_compiled_plan", "plan_node_of",
           "STATE_LAYOUTS"]

# node kind -> the keyed states its runtime operator registers (the first one is required)
STATE_LAYOUTS: dict[str, tuple[str, ...]] = {
    "group-aggregate": ("accState",),
    "window-aggregate": ("window-aggs", "_timer_state/event_window-timers", "_timer_state/processing_window-timers"),
}
# nodes that keep keyed state without a "state" array in the plan
_STATEFUL_WITHOUT_TTL = ("window-aggregate", "window-join", "window-rank", "window-deduplicate",
                         "group-window-aggregate", "over-aggregate", "interval-join", "temporal-sort",
                         "match", "python-group-window-aggregate", "python-over-aggregate")
# aggregate functions whose accumulator is one field of the operator's accumulator row
_ONE_FIELD_AGGS = frozenset({"COUNT", "SUM", "SUM0", "MIN", "MAX", "LAST_VALUE", "FIRST_VALUE"})
_TTL = re.compile(r"^\s*(\d+)\s*(ms|s|min|h|d)\s*$")
_TTL_MS = {"ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")
_NAME_ID = re.compile(r"^(?:Source: )?[A-Za-z]+\[(\d+)\]")
_UID_ID = re.compile(r"^(\d+)_[a-z-]+$")


@dataclass(frozen=True)
class PlanState:
    """One entry of a node's ``state`` array: the state's index, TTL (ms, 0 = none) and name."""

    index: int
    ttl_ms: int
    name: str


@dataclass(frozen=True)
class PlanWindow:
    """A window TVF of a window aggregate: ``tumble``, ``hop`` or ``cumulate`` and its sizes (ms).

    Attributes:
        slice_ms: The slice the operator keeps accumulators for (its state namespace is a
            slice's end): the size (tumble), gcd(size, slide) (hop), the step (cumulate).
    """

    kind: str
    size_ms: int
    slide_ms: int | None = None
    step_ms: int | None = None

    @property
    def slice_ms(self) -> int:
        if self.kind == "hop" and self.slide_ms:
            a, b = self.size_ms, self.slide_ms
            while b:
                a, b = b, a % b
            return a
        return self.step_ms if self.kind == "cumulate" and self.step_ms else self.size_ms

    @property
    def text(self) -> str:
        if self.kind == "hop":
            return f"HOP(size {_ms_text(self.size_ms)}, slide {_ms_text(self.slide_ms or 0)})"
        if self.kind == "cumulate":
            return f"CUMULATE(max size {_ms_text(self.size_ms)}, step {_ms_text(self.step_ms or 0)})"
        return f"{self.kind.upper()}(size {_ms_text(self.size_ms)})"

    def slice_window(self, slice_end: int) -> tuple[int, int, str]:
        """What the accumulator under namespace ``slice_end`` holds: ``(start, end, what)``.

        Tumble: the window itself. Hop: one slice, shared by the windows ending at
        ``slice_end`` .. ``slice_end + size - slice``. Cumulate: the first slice of a window holds
        the running accumulator from the window start on; the others one step each.
        """
        start = slice_end - self.slice_ms
        if self.kind == "tumble":
            return start, slice_end, "window"
        if self.kind == "hop":
            return start, slice_end, (f"slice shared by the windows ending at its end and up to "
                                      f"{_ms_text(self.size_ms - self.slice_ms)} later")
        window_start = (slice_end - 1) - (slice_end - 1) % self.size_ms
        if slice_end == window_start + self.slice_ms:
            return window_start, window_start + self.size_ms, "first slice: the running accumulator of the window"
        return start, slice_end, "step slice"


@dataclass(frozen=True)
class PlanNode:
    """One ExecNode of a compiled plan (the parts statekit compares with a savepoint).

    Attributes:
        key_types: The grouping fields' types in statekit's spelling, ``None`` for no grouping.
        aggregates: ``(name, function)`` of every aggregate call, in order.
    """

    id: int
    type: str
    states: tuple[PlanState, ...]
    key_types: tuple[str, ...] | None
    aggregates: tuple[tuple[str, str, bool], ...]
    need_retraction: bool
    window: PlanWindow | None
    description: str

    @property
    def kind(self) -> str:
        """``group-aggregate`` of ``stream-exec-group-aggregate_1``."""
        return re.sub(r"_\d+$", "", self.type.removeprefix("stream-exec-").removeprefix("batch-exec-"))

    @property
    def label(self) -> str:
        """``4 stream-exec-group-aggregate_1``: the node id and type."""
        return f"{self.id} {self.type}"

    @property
    def stateful(self) -> bool:
        return bool(self.states) or self.kind in _STATEFUL_WITHOUT_TTL or self.kind in STATE_LAYOUTS

    @property
    def key_text(self) -> str | None:
        return None if self.key_types is None else f"RowData<{', '.join(self.key_types)}>"

    def accumulator_names(self, fields: int) -> tuple[str, ...]:
        """The names of the first accumulator fields (one per aggregate call), or ``()``.

        Only when every aggregate keeps one accumulator field in call order (COUNT, SUM, MIN,
        MAX, LAST_VALUE, FIRST_VALUE without retraction): ``AVG`` or retraction lay out more
        fields, which statekit does not guess. Distinct aggregates append their data views
        after these fields.
        """
        if not self.aggregates or self.need_retraction or fields < len(self.aggregates):
            return ()
        if any(function not in _ONE_FIELD_AGGS for _, function, _ in self.aggregates):
            return ()
        return tuple(name for name, _, _ in self.aggregates)


@dataclass(frozen=True)
class CompiledPlan:
    """A compiled plan: its path, Flink version and nodes in plan order."""

    path: str
    flink_version: str
    nodes: tuple[PlanNode, ...]

    @property
    def stateful_nodes(self) -> tuple[PlanNode, ...]:
        return tuple(n for n in self.nodes if n.stateful)

    def node(self, node_id: int) -> PlanNode | None:
        return next((n for n in self.nodes if n.id == node_id), None)


def _ms_text(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size} {unit}"
    return f"{ms} ms"


def _duration_ms(text: Any, where: str, path: str) -> int:
    match = _DURATION.match(str(text))
    if match is None:
        raise BadInputError(f"{where}: {text!r} is not an ISO-8601 duration (PT1M)", path=path)
    days, hours, minutes, seconds = match.groups()
    return round(((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60_000
                 + float(seconds or 0) * 1000)


def _ttl_ms(text: Any, where: str, path: str) -> int:
    match = _TTL.match(str(text))
    if match is None:
        raise BadInputError(f"{where}: state TTL {text!r} is not '<n> ms|s|min|h|d'", path=path)
    return int(match.group(1)) * _TTL_MS[match.group(2)]


def type_text(value: Any) -> str:
    """A plan's logical type (a string, or an object for time attributes) in statekit's spelling."""
    if isinstance(value, dict):
        root = str(value.get("type", "?"))
        names = {"TIMESTAMP_WITHOUT_TIME_ZONE": "TIMESTAMP", "TIMESTAMP_WITH_LOCAL_TIME_ZONE": "TIMESTAMP_LTZ"}
        text = f"{names.get(root, root)}({value['precision']})" if "precision" in value else names.get(root, root)
        return text if value.get("nullable", True) else f"{text} NOT NULL"
    text = str(value)
    text = re.sub(r"\bVARCHAR\(2147483647\)", "STRING", text)
    text = re.sub(r"\bVARBINARY\(2147483647\)", "BYTES", text)
    return re.sub(r"\bTIMESTAMP\((\d+)\) WITH LOCAL TIME ZONE", r"TIMESTAMP_LTZ(\1)", text)


def _row_fields(output_type: Any) -> list[str]:
    """The field types of a node's ``outputType``: an object ``{"type": "ROW", "fields"}`` or ``ROW<...>`` text."""
    if isinstance(output_type, dict):
        return [type_text(f.get("fieldType")) for f in output_type.get("fields", [])]
    text = str(output_type)
    if not text.startswith("ROW<") or not text.endswith(">"):
        return []
    fields, depth, start, inner = [], 0, 0, text[4:-1]
    for i, ch in enumerate(inner + ","):
        depth += ch in "<("
        depth -= ch in ">)"
        if ch == "," and depth == 0:
            field = inner[start:i].strip()
            fields.append(type_text(re.sub(r"^`(?:[^`]|``)*`\s+", "", field)))
            start = i + 1
    return fields


def _window(node: dict[str, Any], path: str) -> PlanWindow | None:
    spec = (node.get("windowing") or {}).get("window")
    if not isinstance(spec, dict):
        return None
    kind = {"TumblingWindow": "tumble", "HoppingWindow": "hop", "CumulativeWindow": "cumulate"}.get(str(spec.get("type")))
    if kind is None:
        return None
    where = f"node {node.get('id')} window"
    if kind == "cumulate":
        return PlanWindow(kind, _duration_ms(spec.get("maxSize"), where, path),
                          step_ms=_duration_ms(spec.get("step"), where, path))
    if kind == "hop":
        return PlanWindow(kind, _duration_ms(spec.get("size"), where, path),
                          slide_ms=_duration_ms(spec.get("slide"), where, path))
    return PlanWindow(kind, _duration_ms(spec.get("size"), where, path))


def _node(raw: dict[str, Any], inputs: dict[int, list[int]], by_id: dict[int, dict[str, Any]], path: str) -> PlanNode:
    node_id = int(raw["id"])
    states = tuple(PlanState(int(s.get("index", i)), _ttl_ms(s.get("ttl", "0 ms"), f"node {node_id}", path),
                             str(s.get("name", "")))
                   for i, s in enumerate(raw.get("state") or []))
    key_types = None
    grouping = raw.get("grouping")
    if grouping is None and isinstance(raw.get("partitionSpec"), dict):
        grouping = raw["partitionSpec"].get("fields")
    sources = inputs.get(node_id, [])
    if isinstance(grouping, list) and len(sources) == 1 and sources[0] in by_id:
        fields = _row_fields(by_id[sources[0]].get("outputType"))
        if all(isinstance(g, int) and 0 <= g < len(fields) for g in grouping):
            key_types = tuple(fields[g] for g in grouping)
    aggregates = tuple((str(a.get("name", f"agg{i}")), str(a.get("internalName", "")).strip("$").split("$")[0],
                        bool(a.get("distinct", False)))
                       for i, a in enumerate(raw.get("aggCalls") or []))
    return PlanNode(node_id, str(raw["type"]), states, key_types, aggregates, bool(raw.get("needRetraction", False)),
                    _window(raw, path), str(raw.get("description", "")))


def load_compiled_plan(url: str) -> CompiledPlan:
    """Read a compiled plan (``COMPILE PLAN`` / ``CompiledPlan.asJsonString()`` output).

    Raises:
        BadInputError: Not readable, not JSON, or not a compiled plan (no ``nodes`` with ids
            and types), naming the path.
    """
    io, path = FileIO.for_path(url)
    try:
        raw = json.loads(io.read_bytes(path).decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInputError(f"cannot read the compiled plan: {exc}", path=url) from None
    nodes = raw.get("nodes") if isinstance(raw, dict) else None
    if not isinstance(nodes, list) or not all(isinstance(n, dict) and "id" in n and "type" in n for n in nodes):
        raise BadInputError("not a Flink compiled plan: no \"nodes\" with an id and a type", path=url)
    by_id = {int(n["id"]): n for n in nodes}
    inputs: dict[int, list[int]] = {}
    for edge in raw.get("edges") or []:
        if isinstance(edge, dict) and "source" in edge and "target" in edge:
            inputs.setdefault(int(edge["target"]), []).append(int(edge["source"]))
    try:
        parsed = tuple(_node(n, inputs, by_id, url) for n in nodes)
    except (TypeError, ValueError, KeyError) as exc:
        raise BadInputError(f"not a Flink compiled plan: {exc}", path=url) from None
    return CompiledPlan(url, str(raw.get("flinkVersion", "?")), parsed)


def plan_node_of(plan: CompiledPlan, op: FlinkOperatorState) -> PlanNode | None:
    """The node an operator came from: by its uid ``<id>_<transformation>`` or name ``Kind[id]``."""
    for text, pattern in ((op.uid, _UID_ID), (op.name, _NAME_ID)):
        match = pattern.match(text or "")
        if match is not None:
            node = plan.node(int(match.group(1)))
            if node is not None:
                return node
    return None
