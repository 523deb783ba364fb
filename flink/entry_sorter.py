"""Sort Flink keyed entries into key-group streams with bounded memory (bootstrap, convert).

Entries arrive in any order as Arrow tables ``(key_group int32, state int32, key binary,
value binary)``: the key is the composite key without its key-group prefix (key, namespace,
user key, or a timer), the value the bytes stored for it. Two passes:

1. *partition*: rows go to the *bucket* of their key group — a contiguous range of key groups
   inside one subtask's range, sized from ``expected_bytes`` so a bucket fits in a quarter of
   the memory budget — buffered, and appended to the bucket's spill file (Arrow IPC) once
   the buffers hold half the budget;
2. *drain* (per subtask, buckets in key-group order): a bucket is loaded, stably sorted by
   (key group, state, key) and duplicates resolved — the last row wins, except for the
   states in ``concat_states`` (list state given one element per row), whose values are
   joined with Flink's list delimiter ``,`` in arrival order. A bucket larger than its share
   is split by key group and loaded part by part.

Invariant: :meth:`EntrySorter.groups` yields, for one subtask, every (key group, state) of
its range that holds entries, ascending, each with unique keys in byte order — the order a
RocksDB-backed canonical savepoint has them in.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

from statekit.statefmt.keygroups import check_parallelism, compute_key_group_range_for_operator_index

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["EntrySorter", "ENTRY_SCHEMA_FIELDS", "entries_table", "LIST_DELIMITER"]

ENTRY_SCHEMA_FIELDS = ("key_group", "state", "key", "value")
LIST_DELIMITER = b","
DEFAULT_MEMORY_BUDGET = 96 << 20
_MAX_BUCKETS = 4096


def entries_table(key_groups: list[int], states: list[int], keys: list[bytes], values: list[bytes]) -> pa.Table:
    """An entries table from columns."""
    import pyarrow as pa

    return pa.table({"key_group": pa.array(key_groups, pa.int32()), "state": pa.array(states, pa.int32()),
                     "key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())})


@dataclass
class _Bucket:
    start: int
    end: int
    path: str
    buffered: list[pa.Table] = field(default_factory=list)
    buffered_bytes: int = 0
    spilled_bytes: int = 0
    writer: Any = None
    sink: Any = None


class EntrySorter:
    """Groups Flink entries by subtask, key group and state, sorted by key, with bounded memory.

    Args:
        max_parallelism: Key groups.
        parallelism: Subtasks; :meth:`groups` drains one at a time.
        concat_states: States whose equal keys are joined (list elements), not replaced.
        memory_budget: Bytes of entries held in memory at once (about).
        expected_bytes: A hint of the total size of the entries, to size the buckets.
        spill_dir: Parent of the temporary directory (removed on exit, also on failure).
    """

    def __init__(self, max_parallelism: int, parallelism: int, *, concat_states: frozenset[int] = frozenset(),
                 memory_budget: int = DEFAULT_MEMORY_BUDGET, expected_bytes: int = 0,
                 spill_dir: str | None = None) -> None:
        check_parallelism(parallelism, max_parallelism)
        self.max_parallelism, self.parallelism = max_parallelism, parallelism
        self.concat_states = concat_states
        self.memory_budget = max(1 << 20, memory_budget)
        self.directory = tempfile.mkdtemp(prefix="statekit-flink-sort-", dir=spill_dir)
        self._serial = itertools.count()
        share = max(1, self.memory_budget // 4)
        wanted = min(_MAX_BUCKETS, max(1, -(-2 * expected_bytes // share)))
        self._buckets = self._make_buckets(wanted)
        self._starts = [b.start for b in self._buckets]
        self._buffered = 0
        self.rows_in = 0
        self.spilled_bytes = 0

    def _make_buckets(self, wanted: int) -> list[_Bucket]:
        buckets: list[_Bucket] = []
        per_subtask = max(1, -(-wanted // self.parallelism))
        for index in range(self.parallelism):
            kgs = compute_key_group_range_for_operator_index(self.max_parallelism, self.parallelism, index)
            width = len(kgs)
            parts = min(width, per_subtask)
            for part in range(parts):
                start = kgs.start + part * width // parts
                end = kgs.start + (part + 1) * width // parts - 1
                buckets.append(_Bucket(start, end, os.path.join(self.directory, f"bucket-{len(buckets)}.arrow")))
        return buckets

    def __enter__(self) -> EntrySorter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close the spill files and remove the temporary directory."""
        for bucket in self._buckets:
            self._close_writer(bucket)
        shutil.rmtree(self.directory, ignore_errors=True)

    # ------------------------------------------------------------------ partition

    def add(self, table: pa.Table) -> None:
        """Add entries (columns ``key_group``, ``state``, ``key``, ``value``; any order)."""
        import numpy as np
        import pyarrow as pa

        if not table.num_rows:
            return
        table = table.select(list(ENTRY_SCHEMA_FIELDS)).append_column(
            "seq", pa.array(np.arange(self.rows_in, self.rows_in + table.num_rows, dtype=np.int64)))
        self.rows_in += table.num_rows
        groups = table.column("key_group").to_numpy()
        index = np.searchsorted(np.asarray(self._starts), groups, side="right") - 1
        order = np.argsort(index, kind="stable")
        sorted_index = index[order]
        table = table.take(pa.array(order))
        bounds = np.flatnonzero(np.diff(sorted_index)) + 1
        for start, end in zip(np.concatenate(([0], bounds)), np.concatenate((bounds, [len(order)]))):
            part = table.slice(int(start), int(end - start))
            bucket = self._buckets[int(sorted_index[start])]
            bucket.buffered.append(part)
            bucket.buffered_bytes += part.nbytes
            self._buffered += part.nbytes
        if self._buffered > self.memory_budget // 2:
            self._spill()

    def _spill(self) -> None:
        for bucket in self._buckets:
            if bucket.buffered:
                self._spill_bucket(bucket)
        self._buffered = 0

    # ------------------------------------------------------------------ drain

    def _close_writer(self, bucket: _Bucket) -> None:
        if bucket.writer is not None:
            bucket.writer.close()
            bucket.sink.close()
            bucket.writer = None

    def _batches(self, bucket: _Bucket) -> Iterator[pa.Table]:
        """The bucket's rows, spilled batches first (arrival order), then the buffered ones; emptied."""
        import pyarrow as pa

        self._close_writer(bucket)
        if bucket.spilled_bytes:
            with pa.memory_map(bucket.path) as source:
                for batch in pa.ipc.open_stream(source):
                    yield pa.Table.from_batches([batch])
            os.unlink(bucket.path)
        buffered, bucket.buffered, bucket.buffered_bytes, bucket.spilled_bytes = bucket.buffered, [], 0, 0
        yield from buffered

    def _split(self, bucket: _Bucket) -> list[_Bucket]:
        """``bucket`` cut in two by key group, streaming (each half spilled as it fills)."""
        import pyarrow.compute as pc

        middle = (bucket.start + bucket.end + 1) // 2
        halves = [_Bucket(bucket.start, middle - 1, bucket.path + f".{next(self._serial)}"),
                  _Bucket(middle, bucket.end, bucket.path + f".{next(self._serial)}")]
        for table in self._batches(bucket):
            below = pc.less(table.column("key_group"), middle)
            for half, part in zip(halves, (table.filter(below), table.filter(pc.invert(below)))):
                if part.num_rows:
                    half.buffered.append(part)
                    half.buffered_bytes += part.nbytes
            for half in halves:
                if half.buffered_bytes > self.memory_budget // 4:
                    self._spill_bucket(half)
        return halves

    def _spill_bucket(self, bucket: _Bucket) -> None:
        import pyarrow as pa

        data = pa.concat_tables(bucket.buffered)
        if bucket.writer is None:
            bucket.sink = pa.OSFile(bucket.path, "wb")
            bucket.writer = pa.ipc.new_stream(bucket.sink, data.schema)
        bucket.writer.write_table(data)
        bucket.spilled_bytes += data.nbytes
        self.spilled_bytes += data.nbytes
        bucket.buffered, bucket.buffered_bytes = [], 0

    def _drained(self, bucket: _Bucket) -> Iterator[tuple[int, int, list[bytes], list[bytes]]]:
        import pyarrow as pa

        if bucket.spilled_bytes + bucket.buffered_bytes > self.memory_budget // 2 and bucket.end > bucket.start:
            for half in self._split(bucket):
                yield from self._drained(half)
            return
        parts = list(self._batches(bucket))
        if parts:
            yield from self._sorted_groups(pa.concat_tables(parts))

    def groups(self, subtask: int) -> Iterator[tuple[int, int, list[bytes], list[bytes]]]:
        """``(key group, state, keys, values)`` of every non-empty group of subtask ``subtask``, in order."""
        kgs = compute_key_group_range_for_operator_index(self.max_parallelism, self.parallelism, subtask)
        for bucket in self._buckets:
            if kgs.start <= bucket.start <= kgs.end:
                yield from self._drained(bucket)

    def _sorted_groups(self, table: pa.Table) -> Iterator[tuple[int, int, list[bytes], list[bytes]]]:
        import pyarrow.compute as pc

        order = pc.sort_indices(table, sort_keys=[("key_group", "ascending"), ("state", "ascending"),
                                                  ("key", "ascending"), ("seq", "ascending")])
        table = table.take(order)
        kg_col = table.column("key_group").to_pylist()
        st_col = table.column("state").to_pylist()
        keys = table.column("key").to_pylist()
        values = table.column("value").to_pylist()
        rows = len(keys)
        start = 0
        while start < rows:
            kg, st = kg_col[start], st_col[start]
            end = start + 1
            while end < rows and kg_col[end] == kg and st_col[end] == st:
                end += 1
            yield kg, st, *self._unique(st, keys[start:end], values[start:end])
            start = end

    def _unique(self, state: int, keys: list[bytes], values: list[bytes]) -> tuple[list[bytes], list[bytes]]:
        """Equal keys (adjacent, in arrival order) resolved: the last wins, or list values joined."""
        out_keys: list[bytes] = []
        out_values: list[bytes] = []
        concat = state in self.concat_states
        for key, value in zip(keys, values):
            if out_keys and out_keys[-1] == key:
                out_values[-1] = out_values[-1] + LIST_DELIMITER + value if concat else value
            else:
                out_keys.append(key)
                out_values.append(value)
        return out_keys, out_values
