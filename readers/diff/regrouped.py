"""Keyed state at different max parallelisms: buckets of ``key_hash % g`` read straight from the files, or spilled hash buckets."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from statekit.readers.diff.join import Chunks, Counts, compare_bucket, identity
from statekit.readers.diff.plan import StatePair
from statekit.readers.diff.rows import DifferenceSink
from statekit.readers.diff.value_form import value_form
from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.metadata import OperatorMetadata
from statekit.statefmt.spill import ArrowSpill

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["MEMORY_BUDGET", "BUCKET_BYTES", "diff_by_hash"]


MEMORY_BUDGET = 128 << 20


# Stored bytes of both sides compared at once when max parallelisms differ: a bucket is
# decoded, sorted and joined, which takes a few times its stored size.
BUCKET_BYTES = MEMORY_BUDGET // 6


def _diff_regrouped(ra: SavepointReader, rb: SavepointReader, pair: StatePair, counts: Counts,
                    sink: DifferenceSink | None, buckets: int) -> None:
    """Different max parallelism, compared by bucket ``key_hash % buckets`` where ``buckets``
    divides both max parallelisms: a bucket is the key groups ``b, b + buckets, ...`` of
    each side, read straight from the files (no spill), and compared by
    :func:`compare_bucket`. Memory: one bucket of both sides."""
    assert pair.op_a is not None and pair.op_b is not None
    form = value_form(ra, rb, pair)
    chunks = Chunks(identity(pair.descriptor), counts, sink, form)
    with _GroupSource(ra, pair.op_a, pair.name) as side_a, _GroupSource(rb, pair.op_b, pair.name) as side_b:
        def load(bucket: int) -> tuple[pa.Table, pa.Table]:
            return (form.concat([form.conform("a", x) for x in side_a.bucket(bucket, buckets)]),
                    form.concat([form.conform("b", x) for x in side_b.bucket(bucket, buckets)]))

        for bucket in range(buckets):  # no bucket is held while the next one loads
            compare_bucket(chunks, *load(bucket))
    chunks.flush()
    counts.compared += pair.op_a.max_parallelism


class _GroupSource:
    """The blocks of one side's state by key group, its files kept open for random access."""

    def __init__(self, reader: SavepointReader, op: OperatorMetadata, state: str) -> None:
        self.reader, self.op, self.state = reader, op, state
        self._stack = ExitStack()
        self._owner: dict[int, Any] = {}

    def __enter__(self) -> _GroupSource:
        for subtask in self.op.subtasks:
            file = subtask.file_of(self.state)
            if file is not None:
                state_file = self._stack.enter_context(self.reader.open_subtask_file(self.op, subtask, file))
                self._owner.update((g, state_file) for g in state_file.key_groups)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def bucket(self, bucket: int, buckets: int) -> Iterator[pa.RecordBatch]:
        for key_group in range(bucket, self.op.max_parallelism, buckets):
            state_file = self._owner.get(key_group)
            if state_file is not None:
                yield state_file.read_block(key_group)


def _spill(spill: ArrowSpill, side: str, batch: pa.RecordBatch, buckets: int) -> None:
    """Cut ``batch`` by ``key_hash % buckets`` into the spill's ``<side>-<bucket>`` buckets."""
    import pyarrow as pa
    import pyarrow.compute as pc

    bucket = pc.remainder(batch.column("key_hash"), pa.scalar(buckets, pa.uint32()))
    order = pc.sort_indices(bucket)
    ordered, bucket = batch.take(order), bucket.take(order)
    runs = pc.run_end_encode(bucket)
    start = 0
    for value, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist()):
        spill.append(f"{side}-{value}", ordered.slice(start, end - start))
        start = end


def _state_bytes(pair: StatePair) -> int:
    return sum(_side_bytes(op, pair.name) for op in (pair.op_a, pair.op_b) if op is not None)


def diff_by_hash(ra: SavepointReader, rb: SavepointReader, pair: StatePair, counts: Counts,
                  sink: DifferenceSink | None) -> None:
    """Different max parallelism: by buckets of key groups both sides share when they are
    small enough (:func:`_diff_regrouped`), else by hash buckets sized to
    :data:`MEMORY_BUDGET` and compared bucket by bucket. When one side's max parallelism
    has a divisor fit for the bucket count, that side's buckets are whole key groups read
    straight from its files and only the other side is spilled (:func:`_direct_side`)."""
    assert pair.op_a is not None and pair.op_b is not None
    total = _state_bytes(pair)
    shared = math.gcd(pair.op_a.max_parallelism, pair.op_b.max_parallelism)
    if total <= shared * BUCKET_BYTES:
        _diff_regrouped(ra, rb, pair, counts, sink, shared)
        return
    form = value_form(ra, rb, pair)
    needed = max(1, math.ceil(total / BUCKET_BYTES))
    direct = _direct_side(pair, needed)
    buckets = needed if direct is None else direct[1]
    chunks = Chunks(identity(pair.descriptor), counts, sink, form)
    sides = {"a": (ra, pair.op_a), "b": (rb, pair.op_b)}
    with ArrowSpill(form.schema(), prefix="statekit-diff-") as spill, ExitStack() as stack:
        source = None
        if direct is not None:
            reader, op = sides[direct[0]]
            source = stack.enter_context(_GroupSource(reader, op, pair.name))
        for side, (reader, _) in sides.items():
            if direct is None or side != direct[0]:
                for _, _, batch in reader.read_keyed_batches(pair.uid, pair.name):
                    _spill(spill, side, form.conform(side, batch), buckets)
        spill.finish()

        def load(bucket: int) -> tuple[pa.Table, pa.Table]:
            rows = {side: spill.load(f"{side}-{bucket}") for side in sides}
            if direct is not None and source is not None:
                rows[direct[0]] = form.concat([form.conform(direct[0], x) for x in source.bucket(bucket, buckets)])
            return rows["a"], rows["b"]

        for bucket in range(buckets):  # no bucket is held while the next one loads
            compare_bucket(chunks, *load(bucket))
            chunks.flush()
    counts.compared += pair.op_a.max_parallelism


def _direct_side(pair: StatePair, needed: int) -> tuple[str, int] | None:
    """``(side, buckets)``: the side (the larger in stored bytes first) whose max parallelism
    has a divisor ``buckets`` in ``[needed, 4 * needed]`` — with ``key_hash % buckets`` as the
    bucket, each of its buckets is the key groups ``b, b + buckets, ...``; None if neither has."""
    assert pair.op_a is not None and pair.op_b is not None
    sides = sorted((("a", pair.op_a), ("b", pair.op_b)), key=lambda s: -_side_bytes(s[1], pair.name))
    for side, op in sides:
        for buckets in range(needed, min(op.max_parallelism, 4 * needed) + 1):
            if op.max_parallelism % buckets == 0:
                return side, buckets
    return None


def _side_bytes(op: OperatorMetadata, state: str) -> int:
    return sum(f.size for st in op.subtasks for f in st.files if f.state == state)
