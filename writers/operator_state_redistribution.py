"""Operator state (not keyed) redistributed over a new parallelism, by its mode.

* ``operator-list`` (even split): the elements of all old subtasks, concatenated in subtask
  order, are cut into contiguous slices whose sizes differ by at most one — what Flink's
  round-robin-free even split gives on restore.
* ``union``: on restore every subtask receives the union (the concatenation, in subtask
  order) of what all subtasks stored. A rescaled savepoint keeps every element exactly once
  and in the same concatenated order, split evenly over the new subtasks; so the union a
  restored subtask receives (and :meth:`SavepointReader.read_union_state`) is identical
  before and after, element for element.
* ``broadcast``: every subtask holds the same map; subtask 0's file is copied, byte for
  byte with its checksum verified, to every new subtask.

List and union elements move as Arrow rows: their bytes are never deserialized, so any
serializer (pickle included) is redistributed without trust.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from statekit.statefmt import layout
from statekit.statefmt.errors import CorruptStateError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.metadata import OperatorMetadata, StateDescriptor, StateFile, StateKind
from statekit.writers.state_writer import copy_state_file, write_operator_file

if TYPE_CHECKING:
    from statekit.readers.progress import Advance
    from statekit.readers.savepoint_reader import SavepointReader

__all__ = ["redistribute_operator_state", "planned_operator_elements", "split_counts"]


def split_counts(total: int, parts: int) -> list[int]:
    """Sizes of the contiguous even split of ``total`` elements over ``parts`` subtasks."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def planned_operator_elements(op: OperatorMetadata, descriptor: StateDescriptor, parallelism: int) -> list[int]:
    """Elements (broadcast: entries) each new subtask will hold, from ``_metadata`` alone."""
    files = [f for st in op.subtasks for f in st.files if f.state == descriptor.name]
    if descriptor.kind is StateKind.BROADCAST:
        return [files[0].entries if files else 0] * parallelism
    return split_counts(sum(f.entries for f in files), parallelism)


def redistribute_operator_state(
    reader: SavepointReader,
    op: OperatorMetadata,
    descriptor: StateDescriptor,
    parallelism: int,
    io: FileIO,
    directory: str,
    *,
    uid: str | None = None,
    on_bytes: Advance | None = None,
) -> list[StateFile]:
    """Write one operator state for ``parallelism`` new subtasks; returns one file per subtask.

    Args:
        reader: the source savepoint.
        op: the source operator.
        descriptor: one of its non-keyed states.
        parallelism: the new parallelism.
        io, directory: where the new savepoint is being built.
        uid: the operator's uid in the output (default: unchanged).
        on_bytes: progress callback ``(path, bytes read)``.
    """
    uid = uid or op.uid
    relative = [layout.state_file_path(uid, descriptor.name, i, parallelism) for i in range(parallelism)]
    files = [(st.index, f) for st in op.subtasks for f in st.files if f.state == descriptor.name]
    if descriptor.kind is StateKind.BROADCAST:
        return _copy_broadcast(reader, descriptor, files, io, directory, relative, on_bytes)
    import pyarrow as pa

    from statekit.statefmt.statefile import operator_schema

    batches: list[pa.RecordBatch] = []
    for _, file in files:
        with reader.open_file(file) as source:
            if source.kind != layout.FILE_KIND_OPERATOR:
                raise CorruptStateError("expected an operator-state file, found a keyed one", path=source.path)
            batches.extend(batch for _, batch in source.iter_blocks())
        if on_bytes:
            on_bytes(file.path, file.size)
    table = pa.Table.from_batches(batches, schema=operator_schema()).combine_chunks()
    out, start = [], 0
    for i, count in enumerate(split_counts(table.num_rows, parallelism)):
        part = table.slice(start, count)
        batch = part.to_batches()[0] if count else pa.record_batch(
            [pa.array([], pa.binary()), pa.array([], pa.binary())], schema=operator_schema()
        )
        out.append(write_operator_file(io, directory, relative[i], descriptor.name, batch))
        start += count
    assert start == table.num_rows
    return out


def _copy_broadcast(
    reader: SavepointReader,
    descriptor: StateDescriptor,
    files: list[tuple[int, StateFile]],
    io: FileIO,
    directory: str,
    relative: list[str],
    on_bytes: Advance | None,
) -> list[StateFile]:
    import pyarrow as pa

    from statekit.statefmt.statefile import operator_schema

    if not files:
        empty = pa.record_batch([pa.array([], pa.binary()), pa.array([], pa.binary())], schema=operator_schema())
        return [write_operator_file(io, directory, path, descriptor.name, empty) for path in relative]
    _, first = files[0]
    snapshot = reader.snapshot
    source_path = snapshot.file_path(first.path)
    out = []
    for path in relative:
        out.append(copy_state_file(snapshot.io, source_path, io, directory, path, first))
        if on_bytes:
            on_bytes(first.path, first.size)
    return out

