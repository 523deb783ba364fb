"""The structural plan of a diff: operators and states paired by uid and name, with their structural changes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from statekit.readers.diff.results import StructuralChange
from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.errors import StateNotFoundError
from statekit.statefmt.metadata import OperatorMetadata, StateDescriptor, StateKind

if TYPE_CHECKING:
    pass

__all__ = ["StatePair", "DiffPlan", "plan_diff", "state_entries"]


_DESCRIPTOR_FIELDS = ("kind", "value_serializer", "value_type", "user_key_serializer", "user_key_type",
                      "namespace_serializer", "namespace_type", "ttl_ms")


_SERIALIZER_FIELDS = ("kind", "value_serializer", "user_key_serializer", "namespace_serializer")


@dataclass(frozen=True)
class StatePair:
    """A state to diff: its descriptor on each side (None where it does not exist)."""

    uid: str
    name: str
    a: StateDescriptor | None
    b: StateDescriptor | None
    op_a: OperatorMetadata | None
    op_b: OperatorMetadata | None

    @property
    def descriptor(self) -> StateDescriptor:
        found = self.a or self.b
        assert found is not None
        return found

    @property
    def keyed(self) -> bool:
        return bool(self.descriptor.keyed)

    def incomparable_reason(self) -> str | None:
        """Why entries of A and B cannot be compared byte for byte, or None."""
        if self.a is None or self.b is None:
            return None
        for name in _SERIALIZER_FIELDS:
            if getattr(self.a, name) != getattr(self.b, name):
                return f"{name} differs ({getattr(self.a, name)} vs {getattr(self.b, name)})"
        assert self.op_a is not None and self.op_b is not None
        if self.a.keyed and self.op_a.key_serializer != self.op_b.key_serializer:
            return f"key serializer differs ({self.op_a.key_serializer} vs {self.op_b.key_serializer})"
        return None


@dataclass(frozen=True)
class DiffPlan:
    structural: tuple[StructuralChange, ...]
    pairs: tuple[StatePair, ...]


def plan_diff(a: SavepointReader, b: SavepointReader, operator: str | None = None, state: str | None = None) -> DiffPlan:
    """Structural changes and the states to compare, restricted to ``operator``/``state``."""
    ops_a = {op.uid: op for op in a.operators}
    ops_b = {op.uid: op for op in b.operators}
    if operator and operator not in ops_a and operator not in ops_b:
        known = ", ".join(sorted(set(ops_a) | set(ops_b))) or "none"
        raise StateNotFoundError(f"no operator with uid {operator!r} in either savepoint (operators: {known})")
    uids = [u for u in list(ops_a) + [u for u in ops_b if u not in ops_a] if operator in (None, u)]
    changes: list[StructuralChange] = []
    pairs: list[StatePair] = []
    for uid in uids:
        op_a, op_b = ops_a.get(uid), ops_b.get(uid)
        if op_a is None or op_b is None:
            if state is None:
                changes.append(StructuralChange("operator_added" if op_a is None else "operator_removed", uid))
        else:
            changes.extend(_operator_changes(op_a, op_b) if state is None else [])
        pairs.extend(_state_pairs(uid, op_a, op_b, state, changes))
    if state and not pairs:
        raise StateNotFoundError(f"no state named {state!r} in either savepoint" + (f" (operator {operator!r})" if operator else ""))
    return DiffPlan(tuple(changes), tuple(pairs))


def _operator_changes(op_a: OperatorMetadata, op_b: OperatorMetadata) -> list[StructuralChange]:
    out = []
    for name, change in (("parallelism", "parallelism_changed"), ("max_parallelism", "max_parallelism_changed"),
                         ("name", "name_changed"), ("key_serializer", "key_serializer_changed")):
        if getattr(op_a, name) != getattr(op_b, name):
            out.append(StructuralChange(change, op_a.uid, field=name, a=getattr(op_a, name), b=getattr(op_b, name)))
    return out


def _state_pairs(uid: str, op_a: OperatorMetadata | None, op_b: OperatorMetadata | None, state: str | None,
                 changes: list[StructuralChange]) -> list[StatePair]:
    states_a = {d.name: d for d in (op_a.states if op_a else ())}
    states_b = {d.name: d for d in (op_b.states if op_b else ())}
    names = [n for n in list(states_a) + [n for n in states_b if n not in states_a] if state in (None, n)]
    pairs = []
    for name in names:
        da, db = states_a.get(name), states_b.get(name)
        if da is None or db is None:
            if op_a is not None and op_b is not None:  # a new or dropped operator is listed once
                changes.append(StructuralChange("state_added" if da is None else "state_removed", uid, name))
        else:
            for f in _DESCRIPTOR_FIELDS:
                va, vb = getattr(da, f), getattr(db, f)
                if va != vb:
                    changes.append(StructuralChange("descriptor_changed", uid, name, f,
                                                    getattr(va, "value", va), getattr(vb, "value", vb)))
        pairs.append(StatePair(uid, name, da, db, op_a, op_b))
    return pairs


def state_entries(reader: SavepointReader | None, op: OperatorMetadata | None,
                  descriptor: StateDescriptor | None) -> int:
    """Entries of a state counted from its files' indexes, each checked against the count
    ``_metadata`` records (broadcast state: one subtask's copy)."""
    if reader is None or op is None or descriptor is None:
        return 0
    counts = []
    for subtask in op.subtasks:
        file = subtask.file_of(descriptor.name)
        if file is not None:
            with reader.open_subtask_file(op, subtask, file) as state_file:
                counts.append(state_file.entries)
    if descriptor.kind is StateKind.BROADCAST:
        return counts[0] if counts else 0
    return sum(counts)
