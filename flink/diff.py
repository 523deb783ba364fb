"""``statekit diff`` of two Apache Flink snapshots: structure and decoded keyed state.

A is "before", B is "after". Operators are matched by uid (or operator id when no uid is
known: name uids with ``--uid`` for metadata v3/v4), states by name. Every keyed state
that decodes on both sides (:func:`statekit.flink.entries.read_keyed_state`) is compared by
entry identity — the decoded (key, namespace, user key) — and decoded value; the TTL
timestamp (``expiry``) is not compared. So a canonical savepoint, a native savepoint and an
incremental checkpoint of the same state compare equal.

Memory stays bounded: with the same max parallelism both sides are read in key-group order
and compared one key group at a time; otherwise entries are spilled into a temporary
SQLite file (removed afterwards, also on failure) and joined there.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from statekit.flink.entries import (
    FlinkKeyedEntry,
    FlinkStateSupport,
    decodable_states,
    read_keyed_state,
    state_value_types,
)
from statekit.flink.model import FlinkOperatorState
from statekit.flink.storage import FlinkSnapshot, load_snapshot, moved_note
from statekit.flink.uids import operator_id_for_uid, unmatched_uids
from statekit.readers.diff import KeyDifference, SavepointDiff, StateDiff, StructuralChange
from statekit.statefmt.errors import BadInputError, StateNotFoundError

__all__ = ["diff_flink_snapshots", "FlinkDiffRequest", "json_safe"]


def json_safe(value: Any) -> Any:
    """``value`` with bytes as base64 text, dates as ISO text and tuples as lists (for identity
    and output)."""
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, (bytes, bytearray)) else base64.b64encode(bytes(k)).decode("ascii"):
                json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def _text(value: Any) -> str:
    return json.dumps(json_safe(value), sort_keys=True, ensure_ascii=False)


def _identity(e: FlinkKeyedEntry) -> str:
    return _text([e.key, e.namespace, e.user_key])


def _timer_identity(e: FlinkKeyedEntry) -> str:
    """A timer is its key, namespace and time: one key may hold several (an interval join's two)."""
    return _text([e.key, e.namespace, e.value])


Identity = Callable[[FlinkKeyedEntry], str]


@dataclass
class _Tally:
    only_a: int = 0
    only_b: int = 0
    changed: int = 0
    same: int = 0
    groups: int = 0
    examples: list[KeyDifference] = field(default_factory=list)

    def add(self, change: str, a: FlinkKeyedEntry | None, b: FlinkKeyedEntry | None, limit: int) -> None:
        if change == "only_in_a":
            self.only_a += 1
        elif change == "only_in_b":
            self.only_b += 1
        elif change == "changed":
            self.changed += 1
        else:
            self.same += 1
            return
        if len(self.examples) < limit:
            e = a or b
            assert e is not None
            self.examples.append(KeyDifference(change, json_safe(e.key), json_safe(e.namespace),
                                               json_safe(e.user_key), json_safe(a.value) if a else None,
                                               json_safe(b.value) if b else None))

    def compare(self, side_a: dict[str, FlinkKeyedEntry], side_b: dict[str, FlinkKeyedEntry], limit: int) -> None:
        for ident, a in side_a.items():
            b = side_b.get(ident)
            if b is None:
                self.add("only_in_a", a, None, limit)
            else:
                self.add("changed" if _text(a.value) != _text(b.value) else "unchanged", a, b, limit)
        for ident, b in side_b.items():
            if ident not in side_a:
                self.add("only_in_b", None, b, limit)


def _by_key_group(entries: Iterator[FlinkKeyedEntry],
                  identity: Identity) -> Iterator[tuple[int, dict[str, FlinkKeyedEntry]]]:
    for key_group, group in groupby(entries, key=lambda e: e.key_group):
        yield key_group, {identity(e): e for e in group}


def _merge_by_key_group(a: Iterator[FlinkKeyedEntry], b: Iterator[FlinkKeyedEntry], tally: _Tally,
                        limit: int, identity: Identity = _identity) -> None:
    """Both sides in key-group order: compare one key group at a time."""
    ga, gb = _by_key_group(a, identity), _by_key_group(b, identity)
    na, nb = next(ga, None), next(gb, None)
    while na is not None or nb is not None:
        if nb is None or (na is not None and na[0] < nb[0]):
            assert na is not None
            tally.compare(na[1], {}, limit)
            na = next(ga, None)
        elif na is None or nb[0] < na[0]:
            tally.compare({}, nb[1], limit)
            nb = next(gb, None)
        else:
            tally.compare(na[1], nb[1], limit)
            na, nb = next(ga, None), next(gb, None)
        tally.groups += 1


def _spilled(a: Iterator[FlinkKeyedEntry], b: Iterator[FlinkKeyedEntry], tally: _Tally, limit: int,
             identity: Identity = _identity) -> None:
    """Different key groups on both sides: join in a temporary SQLite file."""
    handle, path = tempfile.mkstemp(prefix="statekit-flink-diff-", suffix=".sqlite")
    os.close(handle)
    try:
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE e (side TEXT, ident TEXT, value TEXT, entry TEXT)")
            for side, entries in (("a", a), ("b", b)):
                db.executemany("INSERT INTO e VALUES (?, ?, ?, ?)",
                               ((side, identity(e), _text(e.value), _text([e.key, e.namespace, e.user_key, e.value]))
                                for e in entries))
            db.execute("CREATE INDEX i ON e (ident, side)")
            rows = db.execute("SELECT ident, side, value, entry FROM e ORDER BY ident, side")
            for _, group in groupby(rows, key=lambda row: row[0]):
                sides = {side: (value, json.loads(entry)) for _, side, value, entry in group}
                ea, eb = (_entry(sides[s][1]) if s in sides else None for s in ("a", "b"))
                if ea is None or eb is None:
                    tally.add("only_in_a" if eb is None else "only_in_b", ea, eb, limit)
                else:
                    tally.add("changed" if sides["a"][0] != sides["b"][0] else "unchanged", ea, eb, limit)
        tally.groups = -1
    finally:
        os.unlink(path)


def _entry(parts: list[Any]) -> FlinkKeyedEntry:
    key, namespace, user_key, value = parts
    return FlinkKeyedEntry(-1, key, namespace, user_key, value, -1)


@dataclass(frozen=True)
class _Side:
    snapshot: FlinkSnapshot
    ops: dict[str, FlinkOperatorState]


def _open(path: str, uids: tuple[str, ...], storage_options: dict[str, Any] | None) -> _Side:
    snapshot = load_snapshot(path, storage_options=storage_options, uids=uids, strict_uids=False, in_place=True)
    return _Side(snapshot, {op.label: op for op in snapshot.metadata.operators})


def _keyed(op: FlinkOperatorState | None) -> bool:
    return op is not None and any(sub.managed_keyed_state is not None for sub in op.subtasks)


def _layout(label: str, a: FlinkOperatorState, b: FlinkOperatorState) -> list[StructuralChange]:
    return [StructuralChange(change, label, field=name, a=getattr(a, name), b=getattr(b, name))
            for name, change in (("parallelism", "parallelism_changed"),
                                 ("max_parallelism", "max_parallelism_changed"), ("name", "name_changed"))
            if getattr(a, name) != getattr(b, name)]


@dataclass(frozen=True)
class FlinkDiffRequest:
    """What to compare (the CLI's options): restrictions, examples, declared value types."""

    operator: str | None = None
    state: str | None = None
    keys: bool = False
    limit: int = 20
    value_types: dict[str, str] | None = None


def _states(side: _Side, label: str, request: FlinkDiffRequest) -> dict[str, FlinkStateSupport]:
    op = side.ops.get(label)
    if not _keyed(op):
        return {}
    return {s.name: s for s in decodable_states(side.snapshot, label, value_types=request.value_types)}


def _state_diff(sa: _Side, sb: _Side, label: str, name: str, kind: str, request: FlinkDiffRequest) -> StateDiff:
    declared = state_value_types(request.value_types, name)
    a = read_keyed_state(sa.snapshot, label, name, value_type=declared)
    b = read_keyed_state(sb.snapshot, label, name, value_type=declared)
    tally = _Tally()
    limit = request.limit if request.keys else 0
    identity = _timer_identity if kind == "timers" else _identity
    if sa.ops[label].max_parallelism == sb.ops[label].max_parallelism:
        _merge_by_key_group(a, b, tally, limit, identity)
    else:
        _spilled(a, b, tally, limit, identity)
    return StateDiff(label, name, kind, "compared", tally.only_a, tally.only_b, tally.changed, tally.same,
                     0, max(tally.groups, 0), examples=tuple(tally.examples))


def _operator(sa: _Side, sb: _Side, label: str, request: FlinkDiffRequest,
              changes: list[StructuralChange]) -> list[StateDiff]:
    op_a, op_b = sa.ops.get(label), sb.ops.get(label)
    if op_a is None or op_b is None:
        if request.state is None:
            changes.append(StructuralChange("operator_added" if op_a is None else "operator_removed", label))
    elif request.state is None:
        changes.extend(_layout(label, op_a, op_b))
    states_a, states_b = _states(sa, label, request), _states(sb, label, request)
    out = []
    for name in [n for n in list(states_a) + [n for n in states_b if n not in states_a]
                 if request.state in (None, n)]:
        ta, tb = states_a.get(name), states_b.get(name)
        either = ta or tb
        assert either is not None  # name comes from one of the two sides
        kind = either.kind
        if ta is None or tb is None:
            if op_a is not None and op_b is not None:
                changes.append(StructuralChange("state_added" if ta is None else "state_removed", label, name))
            out.append(StateDiff(label, name, kind, "added" if ta is None else "removed"))
        elif ta.decoder is None or tb.decoder is None:
            out.append(StateDiff(label, name, kind, "incomparable", reason=ta.reason or tb.reason))
        elif ta.decoder.spark_schema != tb.decoder.spark_schema:
            out.append(StateDiff(label, name, kind, "incomparable",
                                 reason=f"serializers differ ({ta.decoder.spark_schema} vs {tb.decoder.spark_schema})"))
        else:
            out.append(_state_diff(sa, sb, label, name, kind, request))
    return out


def diff_flink_snapshots(a: str, b: str, request: FlinkDiffRequest | None = None, *, uids: tuple[str, ...] = (),
                         storage_options: dict[str, Any] | None = None) -> SavepointDiff:
    """Diff Flink snapshot ``a`` (before) with ``b`` (after).

    Args:
        a, b: Flink snapshot directories or ``_metadata`` files (local or fsspec URLs).
        request: Restrictions and options (default: everything, no examples).
        uids: Operator uids to label operators with (metadata v3/v4 records none).
        storage_options: fsspec options for both.

    Raises:
        BadInputError: A uid that names no operator of either snapshot.
        StateNotFoundError: An operator or state asked for that neither snapshot has.
    """
    request = request or FlinkDiffRequest()
    sa, sb = _open(a, uids, storage_options), _open(b, uids, storage_options)
    lost = set(unmatched_uids(sa.snapshot.metadata, uids)) & set(unmatched_uids(sb.snapshot.metadata, uids))
    if lost:
        uid = sorted(lost)[0]
        raise BadInputError(f"--uid {uid!r} (operator id {operator_id_for_uid(uid)}) names no operator of "
                            "either snapshot", path=sa.snapshot.path)
    labels = list(sa.ops) + [label for label in sb.ops if label not in sa.ops]
    if request.operator is not None:
        if request.operator not in labels:
            raise StateNotFoundError(f"no operator {request.operator!r} in either snapshot (operators: "
                                     f"{', '.join(labels)})", path=sa.snapshot.path)
        labels = [request.operator]
    changes: list[StructuralChange] = []
    states: list[StateDiff] = []
    for label in labels:
        states += _operator(sa, sb, label, request, changes)
    if request.state is not None and not states:
        raise StateNotFoundError(f"no keyed state named {request.state!r} in either snapshot", path=sa.snapshot.path)
    notes = tuple(note for note in (moved_note(sa.snapshot), moved_note(sb.snapshot)) if note)
    return SavepointDiff(sa.snapshot.path, sb.snapshot.path, "local", tuple(changes), tuple(states), notes=notes)
