"""Comparing two tables of entries: row by row when both hold the same identities in the same order, else by a join; the counts they add to."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statekit.readers.diff.rows import DifferenceSink
from statekit.readers.diff.value_form import ValueForm
from statekit.statefmt.entries import hash_sort_indices
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.statefmt.numpy_support import integer_view, numpy_or_none, pooled_empty

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["CHUNK_ROWS", "Counts", "identity", "values_differ", "join_chunk", "Chunks", "compare_rows", "compare_bucket", "tally"]


CHUNK_ROWS = 65536


@dataclass
class Counts:
    only_in_a: int = 0
    only_in_b: int = 0
    changed: int = 0
    unchanged: int = 0
    skipped: int = 0
    compared: int = 0


def identity(descriptor: StateDescriptor) -> list[str]:
    return ["key", "namespace", "user_key"] if descriptor.kind is StateKind.MAP else ["key", "namespace"]


def values_differ(a: Any, b: Any) -> pa.Array:
    """Row by row, whether two value columns of one type differ: stored bytes (serialized
    values), or typed values compared as stored (floats by their bits: NaN equals NaN,
    -0.0 differs from 0.0, as in the serialized form); a null differs from a value."""
    import pyarrow as pa
    import pyarrow.compute as pc

    a = a.combine_chunks() if hasattr(a, "combine_chunks") else a
    b = b.combine_chunks() if hasattr(b, "combine_chunks") else b
    if a.type == pa.float64():
        a, b = a.view(pa.int64()), b.view(pa.int64())
    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    return pc.fill_null(pc.not_equal(a, b), pc.invert(both_null))


def join_chunk(a: pa.Table, b: pa.Table, identity: list[str], counts: Counts, sink: DifferenceSink | None) -> None:
    """Full outer join of two chunks holding the same key groups; adds to ``counts``.

    A row is in A (B) when its key hash from A (B) is set: values may be null. The join's
    own order is not defined: differing rows go to the sink in identity order (key hash,
    key, namespace, user key)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    left = a.select(identity + ["value", "key_hash"]).rename_columns(identity + ["value_a", "hash_a"])
    right = b.select(identity + ["value", "key_hash"]).rename_columns(identity + ["value_b", "hash_b"])
    joined = left.join(right, keys=identity, join_type="full outer")
    in_a, in_b = pc.is_valid(joined.column("hash_a")), pc.is_valid(joined.column("hash_b"))
    both = pc.and_(in_a, in_b)
    changed = pc.and_(both, values_differ(joined.column("value_a"), joined.column("value_b")))
    n_both = pc.sum(both.cast(pa.int64())).as_py() or 0
    n_changed = pc.sum(changed.cast(pa.int64())).as_py() or 0
    counts.only_in_a += joined.num_rows - (pc.sum(in_b.cast(pa.int64())).as_py() or 0)
    counts.only_in_b += joined.num_rows - (pc.sum(in_a.cast(pa.int64())).as_py() or 0)
    counts.changed += n_changed
    counts.unchanged += n_both - n_changed
    if sink is not None and sink.wanted:
        differs = pc.invert(pc.and_(both, pc.invert(changed)))
        rows = joined.filter(differs)
        if rows.num_rows:
            change = pc.if_else(pc.is_null(rows.column("hash_b")), "only_in_a",
                                pc.if_else(pc.is_null(rows.column("hash_a")), "only_in_b", "changed"))
            key_hash = pc.coalesce(rows.column("hash_a"), rows.column("hash_b"))
            if "user_key" not in identity:
                rows = rows.append_column("user_key", pa.nulls(rows.num_rows, pa.binary()))
            rows = rows.append_column("change", change).append_column("key_hash", key_hash)
            sink.add(rows.take(hash_sort_indices(rows, 1, list(_SORT_COLUMNS[1:]))))


class Chunks:
    """Blocks waiting to be compared: aligned pairs (row by row) and the rest (a join)."""

    def __init__(self, identity: list[str], counts: Counts, sink: DifferenceSink | None, form: ValueForm) -> None:
        self.identity, self.counts, self.sink, self.form = identity, counts, sink, form
        self.aligned: tuple[list[pa.RecordBatch], list[pa.RecordBatch]] = ([], [])
        self.joined: tuple[list[pa.RecordBatch], list[pa.RecordBatch]] = ([], [])
        self.rows = 0

    def add_pair(self, a: pa.RecordBatch | pa.Table, b: pa.RecordBatch | pa.Table) -> None:
        if a.num_rows == b.num_rows and all(a.column(n).equals(b.column(n)) for n in self.identity):
            self._append(self.aligned, a, b)
            self._maybe_flush()
        else:
            self.add(a, b)

    def add(self, a: pa.RecordBatch | pa.Table | None, b: pa.RecordBatch | pa.Table | None) -> None:
        self._append(self.joined, a, b)
        self._maybe_flush()

    def _append(self, target: tuple[list[pa.RecordBatch], list[pa.RecordBatch]],
                a: pa.RecordBatch | pa.Table | None, b: pa.RecordBatch | pa.Table | None) -> None:
        for side, index, data in (("a", 0, a), ("b", 1, b)):
            if data is None or not data.num_rows:
                continue
            batches = data.to_batches() if hasattr(data, "to_batches") else [data]
            target[index].extend(self.form.conform(side, batch) for batch in batches)
            self.rows += data.num_rows

    def _maybe_flush(self) -> None:
        if self.rows >= CHUNK_ROWS:
            self.flush()

    def flush(self) -> None:
        if self.aligned[0]:
            compare_rows(self.form.concat(self.aligned[0]), self.form.concat(self.aligned[1]), self.counts, self.sink)
        if self.joined[0] or self.joined[1]:
            join_chunk(self.form.concat(self.joined[0]), self.form.concat(self.joined[1]), self.identity, self.counts,
                       self.sink)
        self.aligned, self.joined, self.rows = ([], []), ([], []), 0


def compare_rows(a: pa.Table, b: pa.Table, counts: Counts, sink: DifferenceSink | None,
                 order: pa.Array | None = None) -> None:
    """Compare two tables holding the same identities in the same order (no join needed);
    ``order``: the rows' positions in identity order, the order differing rows go out in
    (default: as they are)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    changed = values_differ(a.column("value"), b.column("value"))
    n_changed = pc.sum(changed.cast(pa.int64())).as_py() or 0
    counts.changed += n_changed
    counts.unchanged += a.num_rows - n_changed
    if n_changed and sink is not None and sink.wanted:
        if order is None:
            rows, b_rows = a.filter(changed), b.filter(changed)
        else:
            picked = pc.filter(order, pc.take(changed, order))
            rows, b_rows = a.take(picked), b.take(picked)
        sink.add(pa.table({
            "change": pa.array(["changed"] * n_changed, pa.string()),
            "key": rows.column("key"), "namespace": rows.column("namespace"), "user_key": rows.column("user_key"),
            "value_a": rows.column("value"), "value_b": b_rows.column("value"),
            "key_hash": rows.column("key_hash"),
        }))


def compare_bucket(chunks: Chunks, a: pa.Table, b: pa.Table) -> None:
    """Compare one bucket of both sides, rows in any order: row by row when both hold the
    same identities (side b's rows gathered into side a's order, :func:`_matched_rows`),
    else by a join (:func:`join_chunk`, pending with other joined buckets up to
    :data:`CHUNK_ROWS`). A matched bucket's differing rows go out in identity order, after
    those of every bucket before it."""
    matched = _matched_rows(a, b, chunks.identity)
    if matched is None:
        chunks.add(a, b)
        return
    b_rows, order = matched
    chunks.flush()
    compare_rows(a, b_rows, chunks.counts, chunks.sink, order)


def _matched_rows(a: pa.Table, b: pa.Table, identity: list[str]) -> tuple[pa.Table, pa.Array] | None:
    """``(b's rows in a's row order, a's rows in identity order)`` when ``a`` and ``b`` hold
    the same identities; None otherwise.

    Both sides are put in identity order — (key hash, key, namespace, user key): a sort of
    the key hashes (:func:`~statekit.statefmt.entries.hash_sort_indices`), side b in a
    second thread (the sort releases the GIL) — but only as permutations: when the ordered
    hashes agree, row ``perm_a[j]`` of a and row ``perm_b[j]`` of b hold the same identity,
    so one gather of b's compared columns by ``q`` (``q[perm_a[j]] = perm_b[j]``) aligns
    them. Side a is not gathered at all."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = a.num_rows
    if n != b.num_rows:
        return None
    if n < 2:
        perm_a = perm_b = pa.array(range(n), pa.uint32())
    else:
        ties = list(_SORT_COLUMNS[1:])
        with ThreadPoolExecutor(max_workers=1) as pool:
            other = pool.submit(hash_sort_indices, b, 1, ties)
            perm_a = hash_sort_indices(a, 1, ties)
            perm_b = other.result()
    if not pc.take(a.column("key_hash"), perm_a).equals(pc.take(b.column("key_hash"), perm_b)):
        return None
    q = _compose(perm_a, perm_b)
    b_rows = b.select([*identity, "value"]).take(q)
    if not all(a.column(name).equals(b_rows.column(name)) for name in identity):
        return None
    return b_rows, perm_a


def _compose(perm_a: pa.Array, perm_b: pa.Array) -> pa.Array:
    """``q`` with ``q[perm_a[j]] = perm_b[j]`` for every j (two permutations of one length)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    np = numpy_or_none()
    if np is None:  # the inverse of a permutation is the order that sorts it
        return pc.take(perm_b, pc.sort_indices(perm_a))
    q = pooled_empty(np, len(perm_a), np.uint32)
    q[integer_view(np, perm_a)] = integer_view(np, perm_b)
    return pa.array(q, pa.uint32())


def tally(counts: Counts, change: str) -> None:
    setattr(counts, change, getattr(counts, change) + 1)


_SORT_COLUMNS = ("key_hash", "key", "namespace", "user_key")
