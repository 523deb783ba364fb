"""``statekit check SAVEPOINT --compiled-plan plan.json``: will a Flink SQL job from this plan restore?

Offline, every stateful node of the compiled plan (:mod:`statekit.flink.compiled_plan`) is
matched to the snapshot's operator it names (uid ``<id>_<transformation>`` or name ``Kind[id]``)
and compared with the keyed state that operator wrote:

* **missing operator** — a stateful node without state in the snapshot would start empty (a
  changed query renumbers its nodes); a snapshot operator with keyed state that no node names
  is refused by Flink unless ``--allowNonRestoredState``;
* **state names** — the states the node's runtime operator registers (``accState`` of a group
  aggregate, ``window-aggs`` of a window aggregate; distinct aggregates' ``distinctAcc_N``);
* **TTL** — a node with a state TTL keeps its values in Flink's TTL serializer, one without
  does not: switching the TTL on or off is an incompatible serializer change (changing its
  length is not);
* **key type** — the node's grouping fields against the snapshot's key serializer.

Nodes of kinds whose state layout statekit does not know are *unknown*, not passed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from statekit.flink.compiled_plan import STATE_LAYOUTS, PlanNode, load_compiled_plan, plan_node_of
from statekit.flink.model import FlinkOperatorState
from statekit.flink.state_meta import FlinkStateMeta
from statekit.flink.storage import FlinkSnapshot
from statekit.statefmt.json_contract import JsonShape

__all__ = ["PlanOperatorCheck", "CompiledPlanReport", "check_compiled_plan"]

_TTL_WRAPPED = re.compile(r"^Ttl<")


@dataclass(frozen=True)
class PlanOperatorCheck:
    """The verdict for one stateful node or snapshot operator.

    Attributes:
        node: The plan node id (``None``: a snapshot operator no node names).
        node_type: The node's type, e.g. ``stream-exec-group-aggregate_1``.
        operator: The snapshot operator's uid or id (``None``: no operator for the node).
        operator_name: Its name, e.g. ``GroupAggregate[4]``.
        verdict: ``compatible``, ``incompatible`` or ``unknown``.
        reasons: Why (one line each; empty when compatible).
    """

    node: int | None
    node_type: str | None
    operator: str | None
    operator_name: str | None
    verdict: str
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class CompiledPlanReport:
    """The result of ``check --compiled-plan``."""

    json_shape: ClassVar[JsonShape] = JsonShape(extra=("engine", "compatible"))

    path: str
    plan: str
    plan_flink_version: str
    checks: tuple[PlanOperatorCheck, ...]

    @property
    def compatible(self) -> bool:
        """True when no node or operator is known to fail the restore."""
        return not any(c.verdict == "incompatible" for c in self.checks)

    @property
    def engine(self) -> str:
        """``flink``: the snapshot's engine."""
        return "flink"


def _value_serializer(state: FlinkStateMeta) -> str | None:
    return next((s.short_name for s in state.serializers if s.key == "VALUE_SERIALIZER"), None)


def _key_serializer(snapshot: FlinkSnapshot, op: FlinkOperatorState) -> str | None:
    from statekit.flink.sources import keyed_sources
    from statekit.statefmt.errors import StatekitError

    try:
        source = next(iter(keyed_sources(snapshot, op)), None)
    except StatekitError:
        return None
    if source is None or source.meta.key_serializer is None:
        return None
    return source.meta.key_serializer.short_name


def _node_reasons(node: PlanNode, states: tuple[FlinkStateMeta, ...], key: str | None) -> tuple[list[str], bool]:
    """The incompatibilities of a matched node, and whether statekit knows its layout."""
    layout = STATE_LAYOUTS.get(node.kind)
    if layout is None:
        return [f"statekit knows no state layout of {node.type}: check it by restoring in a test cluster"], False
    reasons = []
    names = {s.name: s for s in states}
    main = names.get(layout[0])
    if main is None:
        found = ", ".join(sorted(names)) or "none"
        reasons.append(f"state names: {node.type} keeps its accumulators in {layout[0]!r}; the snapshot's "
                       f"operator has {found}")
    distinct_plan = any(distinct for _, _, distinct in node.aggregates)
    distinct_snapshot = any(re.fullmatch(r"distinctAcc_\d+", n) for n in names)
    if node.kind == "group-aggregate" and distinct_plan != distinct_snapshot:
        reasons.append("state names: the plan " + ("has" if distinct_plan else "has no")
                       + " DISTINCT aggregates, the snapshot " + ("has" if distinct_snapshot else "has no")
                       + " distinctAcc_N map states")
    ttl = max((s.ttl_ms for s in node.states), default=0)
    if main is not None:
        value = _value_serializer(main) or ""
        wrapped = bool(_TTL_WRAPPED.match(value))
        if ttl > 0 and not wrapped:
            reasons.append(f"TTL: the plan keeps {layout[0]!r} with a TTL of {ttl} ms, the snapshot's values have "
                           "none (Flink's TTL serializer is incompatible with the state's)")
        elif ttl == 0 and wrapped:
            reasons.append(f"TTL: the snapshot's {layout[0]!r} values carry a TTL, the plan has none "
                           "(table.exec.state.ttl or a STATE_TTL hint)")
    if node.key_text is not None and key is not None and node.key_text != key:
        reasons.append(f"key type: the plan groups by {node.key_text}, the snapshot's key is {key}")
    return reasons, True


def check_compiled_plan(path: str, plan_path: str, *, uids: tuple[str, ...] = ()) -> CompiledPlanReport:
    """Compare a compiled plan's stateful nodes with a Flink snapshot's operators.

    Raises:
        BadInputError: The plan cannot be read.
        StatekitError: The snapshot cannot be opened.
    """
    from statekit.flink.snapshot import open_flink_snapshot
    from statekit.flink.summary import keyed_state_meta

    plan = load_compiled_plan(plan_path)
    snapshot = open_flink_snapshot(path, uids=uids)
    matched: dict[int, FlinkOperatorState] = {}
    checks: list[PlanOperatorCheck] = []
    for op in snapshot.metadata.operators:
        node = plan_node_of(plan, op)
        if node is not None:
            matched.setdefault(node.id, op)
    for node in plan.stateful_nodes:
        found = matched.get(node.id)
        if found is None:
            checks.append(PlanOperatorCheck(node.id, node.type, None, None, "incompatible", (
                f"missing operator: the snapshot has no state of node {node.id} ({node.type}); it would start "
                "empty (a changed query renumbers the nodes)",)))
            continue
        states, problem = keyed_state_meta(snapshot, found)
        if problem and not states:
            checks.append(PlanOperatorCheck(node.id, node.type, found.label, found.name, "unknown", (problem,)))
            continue
        reasons, known = _node_reasons(node, states, _key_serializer(snapshot, found))
        verdict = "unknown" if not known else "incompatible" if reasons else "compatible"
        checks.append(PlanOperatorCheck(node.id, node.type, found.label, found.name, verdict, tuple(reasons)))
    stateful_ids = {n.id for n in plan.stateful_nodes}
    for op in snapshot.metadata.operators:
        node = plan_node_of(plan, op)
        if node is not None and node.id in stateful_ids:
            continue
        states, _ = keyed_state_meta(snapshot, op)
        if not states:
            continue
        why = (f"node {node.id} ({node.type}) keeps no state" if node is not None
               else "no node of the plan names it")
        checks.append(PlanOperatorCheck(node.id if node else None, node.type if node else None, op.label, op.name,
                                        "incompatible", (f"missing operator: the snapshot has keyed state of "
                                                         f"{op.name or op.label} but {why}: Flink refuses the restore "
                                                         "unless --allowNonRestoredState",)))
    return CompiledPlanReport(snapshot.path, plan.path, plan.flink_version, tuple(checks))
