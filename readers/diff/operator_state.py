"""Operator state: a multiset of elements (list, union) or by broadcast key."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from statekit.readers.diff.join import Counts, tally
from statekit.readers.diff.plan import StatePair
from statekit.readers.diff.rows import DifferenceSink
from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.metadata import OperatorMetadata, StateDescriptor, StateKind

if TYPE_CHECKING:
    pass

__all__ = ["diff_operator_state"]


def _operator_elements(reader: SavepointReader | None, op: OperatorMetadata | None, descriptor: StateDescriptor) -> list[tuple[bytes | None, bytes]]:
    if reader is None or op is None:
        return []
    out: list[tuple[bytes | None, bytes]] = []
    for subtask in op.subtasks:
        file = subtask.file_of(descriptor.name)
        if file is None:
            continue
        with reader.open_subtask_file(op, subtask, file) as state_file:
            for _, batch in state_file.iter_blocks():
                out.extend(zip(batch.column("key").to_pylist(), batch.column("value").to_pylist()))
        if descriptor.kind is StateKind.BROADCAST:
            break  # every subtask holds the same copy
    return out


def diff_operator_state(ra: SavepointReader | None, rb: SavepointReader | None, pair: StatePair,
                        sink: DifferenceSink | None) -> Counts:
    """Operator list/union state as multisets of elements; broadcast state by key."""
    import pyarrow as pa

    counts = Counts()
    elements_a = _operator_elements(ra, pair.op_a, pair.descriptor)
    elements_b = _operator_elements(rb, pair.op_b, pair.descriptor)
    rows: list[tuple[str, bytes | None, bytes | None, bytes | None]] = []
    if pair.descriptor.kind is StateKind.BROADCAST:
        map_a, map_b = dict(elements_a), dict(elements_b)
        for key in list(map_a) + [k for k in map_b if k not in map_a]:
            va, vb = map_a.get(key), map_b.get(key)
            change = "only_in_b" if va is None else "only_in_a" if vb is None else "changed" if va != vb else "unchanged"
            tally(counts, change)
            if change != "unchanged":
                rows.append((change, key, va, vb))
    else:
        bag_a, bag_b = Counter(v for _, v in elements_a), Counter(v for _, v in elements_b)
        for value in list(bag_a) + [v for v in bag_b if v not in bag_a]:
            common = min(bag_a[value], bag_b[value])
            counts.unchanged += common
            counts.only_in_a += bag_a[value] - common
            counts.only_in_b += bag_b[value] - common
            rows += [("only_in_a", None, value, None)] * (bag_a[value] - common)
            rows += [("only_in_b", None, None, value)] * (bag_b[value] - common)
    if sink is not None and rows:
        sink.add(pa.table({
            "change": pa.array([r[0] for r in rows], pa.string()),
            "key": pa.nulls(len(rows), pa.binary()), "namespace": pa.nulls(len(rows), pa.binary()),
            "user_key": pa.array([r[1] for r in rows], pa.binary()),
            "value_a": pa.array([r[2] for r in rows], pa.binary()),
            "value_b": pa.array([r[3] for r in rows], pa.binary()),
            "key_hash": pa.nulls(len(rows), pa.uint32()),
        }))
    return counts
