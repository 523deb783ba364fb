"""The SQL view of a Flink snapshot with its compiled plan: each stateful operator's node, accumulator
field names and, for window aggregates, the open windows and their timers (``inspect --compiled-plan``).

A window TVF aggregate (``WindowAggregate[N]``, Flink's ``WindowAggOperator``) keeps one
accumulator per key and *slice* in the value state ``window-aggs``, under the namespace = the
slice's end (epoch ms, ``LongSerializer``), and one event-time timer per key and window in
``_timer_state/event_window-timers`` (namespace = the window's end, timestamp = end - 1). The
plan's window (:class:`~statekit.flink.compiled_plan.PlanWindow`) says what a slice is: the
window itself (TUMBLE), one slide of several windows (HOP), one step or the running accumulator
of the window (CUMULATE).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from statekit.flink.compiled_plan import STATE_LAYOUTS, CompiledPlan, PlanNode, plan_node_of
from statekit.flink.model import FlinkOperatorState
from statekit.flink.storage import FlinkSnapshot

__all__ = ["SqlSlice", "SqlTimer", "SqlOperatorView", "sql_operators", "epoch_ms_text", "WINDOW_STATE",
           "WINDOW_TIMERS"]

WINDOW_STATE = "window-aggs"
WINDOW_TIMERS = "_timer_state/event_window-timers"


def epoch_ms_text(ms: int) -> str:
    """``2023-11-14T22:24:00Z``: an epoch-ms instant in UTC (milliseconds shown when set)."""
    moment = datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=ms)
    return moment.isoformat(timespec="milliseconds" if ms % 1000 else "seconds") + "Z"


@dataclass(frozen=True)
class SqlSlice:
    """The accumulators kept under one slice end (namespace) of a window aggregate.

    Attributes:
        start, end: What the accumulators cover, as epoch ms (``holds`` says what it is).
        keys: How many keys have an accumulator there.
    """

    slice_end: int
    slice_end_time: str
    start: int | None
    end: int | None
    holds: str | None
    keys: int


@dataclass(frozen=True)
class SqlTimer:
    """Event-time timers of one window end: the window fires when the watermark reaches ``timestamp``."""

    window_end: int
    window_end_time: str
    timestamp: int
    keys: int


@dataclass(frozen=True)
class SqlOperatorView:
    """One stateful SQL operator as its compiled plan names it."""

    operator_id: str
    uid: str | None
    name: str | None
    plan_node: int
    node_type: str
    key_type: str | None
    accumulators: tuple[str, ...]
    window: str | None = None
    slices: tuple[SqlSlice, ...] = ()
    event_timers: tuple[SqlTimer, ...] = ()


def _top_level_fields(type_text: str) -> int:
    """How many fields ``RowData<A, B<C, D>, E>`` (or ``Ttl<RowData<...>>``) has: 3."""
    text = type_text.removeprefix("Ttl<").removesuffix(">") if type_text.startswith("Ttl<") else type_text
    if not text.startswith("RowData<"):
        return 0
    inner, depth, count = text[len("RowData<"):-1], 0, 1
    for ch in inner:
        depth += ch in "<("
        depth -= ch in ">)"
        count += ch == "," and depth == 0
    return count if inner.strip() else 0


def _windows(snapshot: FlinkSnapshot, op: FlinkOperatorState, node: PlanNode) -> tuple[tuple[SqlSlice, ...],
                                                                                         tuple[SqlTimer, ...]]:
    from statekit.flink.entries import read_keyed_state

    slices: dict[int, int] = {}
    for entry in read_keyed_state(snapshot, op.operator_id, WINDOW_STATE):
        slices[int(entry.namespace)] = slices.get(int(entry.namespace), 0) + 1
    timers: dict[tuple[int, int], int] = {}
    for entry in read_keyed_state(snapshot, op.operator_id, WINDOW_TIMERS):
        at = (int(entry.namespace), int(entry.value))
        timers[at] = timers.get(at, 0) + 1
    out = []
    for end, keys in sorted(slices.items()):
        start, covered_end, holds = (None, None, None) if node.window is None else node.window.slice_window(end)
        out.append(SqlSlice(end, epoch_ms_text(end), start, covered_end, holds, keys))
    return tuple(out), tuple(SqlTimer(w, epoch_ms_text(w), t, n) for (w, t), n in sorted(timers.items()))


def sql_operators(snapshot: FlinkSnapshot, plan: CompiledPlan) -> tuple[SqlOperatorView, ...]:
    """Every snapshot operator that a stateful node of ``plan`` names, in snapshot order."""
    from statekit.flink.summary import keyed_state_meta

    views = []
    for op in snapshot.metadata.operators:
        node = plan_node_of(plan, op)
        if node is None or not node.stateful:
            continue
        states, _ = keyed_state_meta(snapshot, op)
        layout = STATE_LAYOUTS.get(node.kind, ())
        main = next((s for s in states if layout and s.name == layout[0]), None)
        value = next((s.short_name for s in main.serializers if s.key == "VALUE_SERIALIZER"), "") if main else ""
        names = node.accumulator_names(_top_level_fields(value))
        slices: tuple[SqlSlice, ...] = ()
        timers: tuple[SqlTimer, ...] = ()
        if node.kind == "window-aggregate" and {WINDOW_STATE, WINDOW_TIMERS} <= {s.name for s in states}:
            slices, timers = _windows(snapshot, op, node)
        views.append(SqlOperatorView(op.operator_id, op.uid, op.name, node.id, node.type, node.key_text, names,
                                     node.window.text if node.window else None, slices, timers))
    return tuple(views)
