"""Regroup keyed entries by key group with bounded memory (``rescale --max-parallelism``, bootstrap).

Entries arrive in any order as Arrow tables of the keyed schema. Two passes:

1. *partition*: each chunk of input is cut by **bucket** — a contiguous range of key groups
   inside one subtask's range — and appended to that bucket's spill file (an Arrow IPC
   stream in a temporary directory). At most about half the memory budget is buffered.
2. *drain* (per subtask, buckets in key-group order): a bucket larger than the budget's
   bucket share is re-partitioned, streaming, into narrower buckets; a bucket that fits is
   loaded, stably sorted by key group, and — only when the rows are not already in
   (key, namespace, user key) order inside each key group — sorted by those too. Equal
   entries are resolved (:class:`DuplicateMode`) and the rows are cut into one block per
   key group.

Invariants: for each subtask, blocks come out in strictly ascending key-group order; a
block holds exactly the entries with ``key_hash % max_parallelism == key_group``, in the
order of the state file version written (version 1: key, namespace, user key; version 2:
key hash first) and unique. Every table added has one schema (the first one's: serialized
or typed values alike). Peak memory is about the budget plus the largest single key group
(a block is one Arrow batch, which every reader of the format holds whole too). Rows that
arrive already sorted per key group (blocks of a source whose max parallelism divides the
new one, read in order, in the same version) skip the full sort.
"""

from __future__ import annotations

import itertools
import math
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from statekit.statefmt.encoding import current_write_format, is_serialized, python_values, typed_column
from statekit.statefmt.entries import hash_sort_indices
from statekit.statefmt.keygroups import check_parallelism, compute_key_group_range_for_operator_index
from statekit.statefmt.serializers import decode_list, encode_list

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["DuplicateMode", "KeyGroupSorter", "DEFAULT_MEMORY_BUDGET", "in_block_order", "sort_key_group_table"]

DEFAULT_MEMORY_BUDGET = 96 << 20
DRAIN_WORKERS = 2
T = TypeVar("T")
_MAX_INITIAL_BUCKETS = 512


class DuplicateMode(str, Enum):
    """What to do with entries of equal (key group, key, namespace, user key)."""

    LAST = "last"
    """Keep the entry that arrived last (an update log; a source's unique entries)."""
    CONCAT_LISTS = "concat-lists"
    """List state: append the elements of equal entries in arrival order."""


@dataclass
class _Bucket:
    subtask: int
    start: int
    end: int
    path: str
    bytes: int = 0
    rows: int = 0
    writer: Any = None
    sink: Any = None
    buffered: list[pa.Table] = field(default_factory=list)

    @property
    def width(self) -> int:
        return self.end - self.start + 1


class KeyGroupSorter:
    """Sorts keyed entries into per-subtask, per-key-group blocks for ``(max_parallelism, parallelism)``.

    Usage::

        with KeyGroupSorter(1024, 4, expected_bytes=size) as sorter:
            for table in source:
                sorter.add(table)
            for i in range(4):
                write_keyed_file(..., sorter.subtask_groups(i))

    Args:
        max_parallelism: the key-group count the entries are grouped by.
        parallelism: subtasks; ``subtask_groups(i)`` yields the blocks of subtask ``i``.
        memory_budget: bytes of Arrow data held at once (partition buffers, one bucket).
        expected_bytes: a hint of the total input size, to size the buckets up front
            (too small a hint costs one extra pass over the oversized buckets, never memory).
        duplicates: how equal entries are resolved.
        spill_dir: parent of the temporary spill directory (default: the system temp dir).
        presorted: the rows of each key group arrive in the order of ``version`` (blocks
            of a source whose max parallelism divides ``max_parallelism``, read in order): a
            stable sort by key group suffices. Checked; a violation costs a full sort.
        version: the state file version the blocks are for (its entry order); default the
            current write format's.
    """

    def __init__(
        self,
        max_parallelism: int,
        parallelism: int,
        *,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        expected_bytes: int = 0,
        duplicates: DuplicateMode = DuplicateMode.LAST,
        spill_dir: str | None = None,
        presorted: bool = False,
        version: int | None = None,
    ) -> None:
        check_parallelism(parallelism, max_parallelism)
        self.max_parallelism = max_parallelism
        self.parallelism = parallelism
        self.duplicates = duplicates
        self.presorted = presorted
        self.version = current_write_format().version if version is None else version
        self.schema: pa.Schema | None = None
        # Budget split: partition buffers 1/3; draining holds up to DRAIN_WORKERS buckets of
        # 1/4 each, plus their sorted copies.
        self.bucket_bytes = max(1 << 20, memory_budget // 4)
        self.buffer_bytes = max(1 << 20, memory_budget // 3)
        self.chunk_bytes = max(1 << 20, memory_budget // 12)
        self.directory = tempfile.mkdtemp(prefix="statekit-sort-", dir=spill_dir)
        self._serial = itertools.count(1)
        self._lock = threading.RLock()
        self._pending: list[pa.Table] = []
        self._pending_bytes = 0
        self._buffered_bytes = 0
        self.rows_in = 0
        self.spilled_bytes = 0
        # Half-full buckets up front, so a fair estimate never needs a second pass.
        wanted = max(1, math.ceil(2 * expected_bytes / self.bucket_bytes))
        self._buckets = self._make_buckets(min(wanted, _MAX_INITIAL_BUCKETS, max_parallelism))
        self._lookups: dict[int, tuple[list[_Bucket], pa.Array]] = {}
        self._finished = False
        self._drained: set[int] = set()

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> KeyGroupSorter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close spill files and delete the spill directory."""
        for bucket in self._buckets:
            self._close_writer(bucket)
        shutil.rmtree(self.directory, ignore_errors=True)

    # ------------------------------------------------------------ partition

    def _new_path(self) -> str:
        return os.path.join(self.directory, f"bucket-{next(self._serial):06d}.arrow")

    def _make_buckets(self, count: int) -> list[_Bucket]:
        buckets: list[_Bucket] = []
        for subtask in range(self.parallelism):
            kg_range = compute_key_group_range_for_operator_index(self.max_parallelism, self.parallelism, subtask)
            share = max(1, min(len(kg_range), round(count * len(kg_range) / self.max_parallelism)))
            buckets.extend(self._split_range(subtask, kg_range.start, kg_range.end, share))
        return buckets

    def _split_range(self, subtask: int, start: int, end: int, parts: int) -> list[_Bucket]:
        width = end - start + 1
        parts = max(1, min(parts, width))
        bounds = [start + (i * width) // parts for i in range(parts + 1)]
        return [_Bucket(subtask, bounds[i], bounds[i + 1] - 1, self._new_path()) for i in range(parts)]

    def add(self, data: pa.Table | pa.RecordBatch) -> None:
        """Accept entries of the keyed schema (any order, any key groups)."""
        import pyarrow as pa

        if self._finished:
            raise ValueError("KeyGroupSorter.add after draining started")
        table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
        if table.num_rows == 0:
            return
        if self.schema is None:
            self.schema = table.schema
        elif not table.schema.equals(self.schema):
            raise ValueError(f"KeyGroupSorter.add: schema {table.schema} differs from the first table's {self.schema}")
        self.rows_in += table.num_rows
        self._pending.append(table)
        self._pending_bytes += table.nbytes
        if self._pending_bytes >= self.chunk_bytes:
            self._partition_pending()

    def _partition_pending(self) -> None:
        import pyarrow as pa

        if not self._pending:
            return
        table = pa.concat_tables(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending, self._pending_bytes = [], 0
        self._buffered_bytes += self._partition(table, self._buckets)
        if self._buffered_bytes >= self.buffer_bytes:
            self._flush(self._buckets)
            self._buffered_bytes = 0

    def _partition(self, table: pa.Table, buckets: list[_Bucket]) -> int:
        """Append the rows of ``table`` to the buffers of ``buckets`` (contiguous key-group
        ranges); returns the bytes buffered."""
        import pyarrow as pa
        import pyarrow.compute as pc

        lookup = self._lookup(buckets)
        if lookup is not None:
            groups = pc.remainder(table.column("key_hash"), pa.scalar(self.max_parallelism, pa.uint32()))
            offsets = pc.subtract(groups.cast(pa.int64()), pa.scalar(buckets[0].start, pa.int64()))
            ids = pc.take(lookup, offsets)
            order = pc.sort_indices(ids)
            ids = pc.take(ids, order).combine_chunks()
            table = table.take(order)
            runs = pc.run_end_encode(ids)
            run_ids, run_ends = runs.values.to_pylist(), runs.run_ends.to_pylist()
        else:
            run_ids, run_ends = [0], [table.num_rows]
        start = added = 0
        for bucket_id, end in zip(run_ids, run_ends):
            piece = table.slice(start, end - start)
            bucket = buckets[bucket_id]
            bucket.buffered.append(piece)
            bucket.rows += piece.num_rows
            size = piece.nbytes
            bucket.bytes += size
            added += size
            start = end
        return added

    def _lookup(self, buckets: list[_Bucket]) -> pa.Array | None:
        """key group - first key group -> position in ``buckets`` (None for a single bucket)."""
        import pyarrow as pa

        if len(buckets) < 2:
            return None
        cached = self._lookups.get(id(buckets))
        if cached is None or cached[0] is not buckets:
            array = pa.array([i for i, b in enumerate(buckets) for _ in range(b.width)], pa.int32())
            cached = (buckets, array)
            self._lookups[id(buckets)] = cached
        return cached[1]

    def _flush(self, buckets: list[_Bucket]) -> None:
        import pyarrow as pa

        for bucket in buckets:
            if not bucket.buffered:
                continue
            table = pa.concat_tables(bucket.buffered)
            bucket.buffered = []
            if bucket.writer is None:
                bucket.sink = pa.OSFile(bucket.path, "wb")
                bucket.writer = pa.ipc.new_stream(bucket.sink, self.schema)
            bucket.writer.write_table(table)
            with self._lock:
                self.spilled_bytes += table.nbytes
        _release_unused()

    @staticmethod
    def _close_writer(bucket: _Bucket) -> None:
        if bucket.writer is not None:
            bucket.writer.close()
            bucket.sink.close()
            bucket.writer = bucket.sink = None

    # ------------------------------------------------------------ drain

    def _finish_input(self) -> None:
        with self._lock:
            if not self._finished:
                self._partition_pending()
                self._flush(self._buckets)
                self._buffered_bytes = 0
                for bucket in self._buckets:
                    self._close_writer(bucket)
                self._finished = True

    def subtask_groups(self, index: int) -> Iterator[tuple[int, pa.RecordBatch]]:
        """The blocks of subtask ``index``: ``(key group, sorted unique batch)``, key groups ascending.

        Each subtask is drained once; different subtasks may be drained concurrently (see
        :meth:`drain`). A bucket's spill file is deleted as soon as its blocks are out.
        """
        self._finish_input()
        with self._lock:
            if index in self._drained or not 0 <= index < self.parallelism:
                raise ValueError(f"subtask {index} drained twice or out of range")
            self._drained.add(index)
        for bucket in self._buckets:
            if bucket.subtask == index:
                yield from self._drain(bucket)

    def drain(self, write: Callable[[int, Iterator[tuple[int, pa.RecordBatch]]], T],
              workers: int = DRAIN_WORKERS) -> list[T]:
        """Call ``write(i, blocks of subtask i)`` for every subtask, ``workers`` at a time
        (pyarrow's sort and the file writes release the GIL); results in subtask order."""
        self._finish_input()
        if workers <= 1 or self.parallelism == 1:
            return [write(i, self.subtask_groups(i)) for i in range(self.parallelism)]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(lambda i: write(i, self.subtask_groups(i)), range(self.parallelism)))

    def _drain(self, bucket: _Bucket) -> Iterator[tuple[int, pa.RecordBatch]]:
        if bucket.rows == 0:
            return
        if bucket.bytes > self.bucket_bytes and bucket.width > 1:
            yield from self._resplit(bucket)
            return
        table = self._load(bucket)
        yield from sort_key_group_table(table, self.max_parallelism, self.duplicates, presorted=self.presorted,
                                        version=self.version)
        del table
        _release_unused()

    def _load(self, bucket: _Bucket) -> pa.Table:
        import pyarrow as pa

        with pa.OSFile(bucket.path, "rb") as source:
            table = pa.ipc.open_stream(source).read_all()
        os.unlink(bucket.path)
        return table

    def _resplit(self, bucket: _Bucket) -> Iterator[tuple[int, pa.RecordBatch]]:
        """Re-partition an oversized bucket into narrower ones, streaming, then drain those."""
        import pyarrow as pa

        parts = min(bucket.width, math.ceil(bucket.bytes / self.bucket_bytes) + 1)
        subs = self._split_range(bucket.subtask, bucket.start, bucket.end, parts)
        buffered = 0
        with pa.OSFile(bucket.path, "rb") as source:
            reader = pa.ipc.open_stream(source)
            for batch in reader:
                buffered += self._partition(pa.Table.from_batches([batch]), subs)
                if buffered >= self.bucket_bytes:
                    self._flush(subs)
                    buffered = 0
        self._flush(subs)
        os.unlink(bucket.path)
        for sub in subs:
            self._close_writer(sub)
            yield from self._drain(sub)
        self._lookups.pop(id(subs), None)


def _release_unused() -> None:
    """Hand freed allocator pages back to the OS, so peak RSS tracks the live data."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


def sort_key_group_table(
    table: pa.Table, max_parallelism: int, duplicates: DuplicateMode = DuplicateMode.LAST,
    *, presorted: bool = False, version: int | None = None,
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """Cut a keyed table into ``(key group, batch)`` blocks, key groups ascending, entries
    unique and in the order of format ``version`` (1: key, namespace, user key; 2: key hash,
    key, namespace, user key).

    The sort is stable, so among equal entries arrival order decides (``LAST`` keeps the
    last, ``CONCAT_LISTS`` appends list elements in arrival order). With ``presorted`` the
    rows of each key group are expected in order already and only key groups are sorted.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return
    order_columns = _order_columns(current_write_format().version if version is None else version)
    table = table.combine_chunks()
    groups = pc.remainder(_column(table, "key_hash"), pa.scalar(max_parallelism, pa.uint32()))
    if presorted and not _is_ascending(groups):
        order = pc.sort_indices(groups)
        table = table.take(order).combine_chunks()
        groups = pc.take(groups, order)
    if not (_is_ascending(groups) and _sorted_within_groups(table, groups, order_columns)):
        if order_columns[0] == "key_hash":  # version 2: a radix sort of the key hashes
            order = hash_sort_indices(table, max_parallelism, list(order_columns[1:]))
        else:
            with_group = table.append_column("__kg", groups)
            order = pc.sort_indices(with_group, sort_keys=[("__kg", "ascending")] + [(c, "ascending") for c in order_columns])
        table = table.take(order).combine_chunks()
        groups = pc.take(groups, order)
    table, groups = _resolve_duplicates(table, groups, duplicates)
    batch = table.to_batches()[0] if table.num_rows else None
    if batch is None:
        return
    runs = pc.run_end_encode(groups)
    start = 0
    for key_group, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist()):
        whole = start == 0 and end == batch.num_rows
        yield int(key_group), batch if whole else _compact(batch.slice(start, end - start))
        start = end


def in_block_order(batch: pa.RecordBatch, max_parallelism: int, key_group: int, version: int) -> bool:
    """Whether every entry of ``batch`` is of ``key_group`` and the entries are unique and in
    the order of format ``version``, as far as ``key_hash`` alone tells: True is certain; False
    means the full check (:func:`sort_key_group_table`) decides."""
    import pyarrow as pa
    import pyarrow.compute as pc

    hashes = batch.column("key_hash")
    if version == 1 or batch.num_rows == 0 or hashes.null_count:
        return False
    groups = pc.remainder(hashes, pa.scalar(max_parallelism, hashes.type))
    if not pc.all(pc.equal(groups, pa.scalar(key_group, groups.type))).as_py():
        return False
    left, right = _adjacent(hashes)
    not_increasing = pc.greater_equal(left, right)
    if not pc.any(not_increasing).as_py():
        return True
    if pc.any(pc.greater(left, right)).as_py():
        return False
    # Equal hashes (Java's 32-bit hashCode collides often: ~90 pairs in a block of 80,000
    # strings): each such pair must be strictly ordered by the other order columns.
    first = pc.indices_nonzero(not_increasing)
    second = pc.add(first, pa.scalar(1, first.type))
    before: pa.Array | None = None
    for name in reversed(_order_columns(version)[1:]):
        column = batch.column(name)
        a, b = pc.take(column, first), pc.take(column, second)
        a_null, b_null = pc.is_null(a), pc.is_null(b)
        if pc.any(pc.not_equal(a_null, b_null)).as_py():
            return False  # a null and a value: the full check decides
        less = pc.fill_null(pc.less(a, b), False)
        if before is None:
            before = less
        else:
            equal = pc.or_(pc.fill_null(pc.equal(a, b), False), a_null)
            before = pc.or_(less, pc.and_(equal, before))
    assert before is not None
    return bool(pc.all(before).as_py())


def _order_columns(version: int) -> tuple[str, ...]:
    """The columns entries of a key group are sorted by, in format ``version``."""
    return ("key", "namespace", "user_key") if version == 1 else ("key_hash", "key", "namespace", "user_key")


def _compact(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A slice copied into buffers of its own: the IPC message of a slice may carry the
    parent's buffer bytes, so without this a block's bytes would depend on how the
    entries were bucketed (memory budget, batch size) instead of only on the entries."""
    import pyarrow as pa

    n = batch.num_rows
    columns = [pa.nulls(n, c.type) if c.null_count == n else pa.concat_arrays([c]) for c in batch.columns]
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)


def _is_ascending(values: pa.Array) -> bool:
    import pyarrow.compute as pc

    return len(values) < 2 or not pc.any(pc.greater(*_adjacent(values))).as_py()


def _adjacent(column: Any) -> tuple[Any, Any]:
    n = len(column)
    return column.slice(0, n - 1), column.slice(1)


def _sorted_within_groups(table: pa.Table, groups: pa.Array, order_columns: tuple[str, ...]) -> bool:
    """Whether each row is <= the next by ``order_columns`` wherever both share a key group."""
    import pyarrow.compute as pc

    if table.num_rows < 2:
        return True
    same_group = pc.equal(*_adjacent(groups))
    ordered = None
    for name in reversed(order_columns):
        left, right = _adjacent(_column(table, name))
        if ordered is None:  # the last column: nulls (user keys of non-map state) are equal
            ordered = pc.fill_null(pc.less_equal(left, right), True)
        else:
            ordered = pc.or_(pc.less(left, right), pc.and_(pc.equal(left, right), ordered))
    assert ordered is not None
    return not pc.any(pc.and_(same_group, pc.invert(ordered))).as_py()


def _column(table: pa.Table, name: str) -> pa.Array:
    column = table.column(name)
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _equal_to_next(table: pa.Table, groups: pa.Array) -> pa.Array:
    """Row i equals row i + 1 in (key group, key, namespace, user key); length n - 1."""
    import pyarrow.compute as pc

    same = pc.equal(*_adjacent(groups))
    for name in ("key", "namespace", "user_key"):
        left, right = _adjacent(_column(table, name))
        equal = pc.fill_null(pc.equal(left, right), pc.and_(pc.is_null(left), pc.is_null(right)))
        same = pc.and_(same, equal)
    return same


def _resolve_duplicates(table: pa.Table, groups: pa.Array, mode: DuplicateMode) -> tuple[pa.Table, pa.Array]:
    import pyarrow as pa
    import pyarrow.compute as pc

    if table.num_rows < 2:
        return table, groups
    same = _equal_to_next(table, groups)
    if not pc.any(same).as_py():
        return table, groups
    keep = pa.concat_arrays([pc.invert(same), pa.array([True])])  # the last of each run
    if mode is DuplicateMode.CONCAT_LISTS:
        table = _concat_list_runs(table, same.to_pylist())
    return table.filter(keep), groups.filter(keep)


def _concat_list_runs(table: pa.Table, same: list[bool]) -> pa.Table:
    """Give the last row of each run of equal entries the elements of the whole run
    (serialized list frames, or a typed list column)."""
    import pyarrow as pa

    column = _column(table, "value")
    serialized = is_serialized(column.type)
    values = column.to_pylist() if serialized else python_values(column)
    merged = list(values)
    run: list[Any] = []
    for i, value in enumerate(values):
        run.append(value)
        if i == len(same) or not same[i]:
            if len(run) > 1:
                merged[i] = encode_list([e for frame in run for e in decode_list(frame)]) if serialized \
                    else [e for elements in run for e in (elements or [])]
            run = []
    index = table.schema.get_field_index("value")
    replaced = pa.array(merged, pa.binary()) if serialized else typed_column(merged, column.type)
    return table.set_column(index, table.schema.field(index), replaced)
