"""Diff of two savepoints: structural (operators, states, descriptors, layout) and data.

A is "before", B is "after": an operator or state only in B is *added*, only in A *removed*.
Data is compared per state by entry identity — (key, namespace, user key) as stored bytes —
and value bytes: an entry is *only in A*, *only in B*, *changed* or *unchanged*. Expiry is
not part of the comparison (it moves on its own). A window state's namespace is its window
(:mod:`statekit.readers.window_state`), so window state compares per (key, window) and each
differing example names its ``window``. Identity does not depend on files or
parallelism, so a savepoint and its rescaled copy compare equal.

A :class:`DiffSpec` says what to compare; :meth:`DiffInputs.open` opens both savepoints and
makes the plan (every input check, shared by both engines). The local engine
(:func:`diff_locally`) streams:

* same max parallelism: both sides' blocks in key-group order; a key group whose blocks
  have equal CRC-32, length and entry count on both sides is counted unchanged without
  being decoded — after both blocks' bytes are read and checked against those CRC-32s (the
  index itself is checked against ``_metadata`` when the file opens), so a damaged copy is
  never "unchanged": it fails naming the file and key group; other key groups are compared in chunks of about
  :data:`CHUNK_ROWS` rows — row by row where both blocks hold the same identities in the
  same order, by a join otherwise;
* different max parallelism: by buckets of ``key_hash % g`` where ``g`` divides both max
  parallelisms (the key groups ``b, b + g, ...`` of each side, read straight from the
  files) when such a bucket is at most :data:`BUCKET_BYTES`; else entries are spilled into
  hash buckets of that size. Both sides of a bucket are put in identity order (key hash,
  key, namespace, user key) as permutations; when they hold the same identities, side b's
  rows are gathered into side a's order and compared row by row, else the bucket is joined.

Values are compared as stored: typed columns of one primitive type directly, anything else
as serialized bytes (:class:`_ValueForm`). Memory stays bounded by a chunk (or a bucket)
plus one block. Operator state is compared as
a multiset of elements (list, union) or by broadcast key. Layout changes (parallelism, max
parallelism, operator name) are listed but do not make the savepoints different.

This module only reads: differing entries go, as rows of :func:`diff_arrow_schema`, to a
:class:`DifferenceOutput` the caller gives (``statekit.writers.diff_output`` writes them as
Parquet for ``diff -o``); the hash join parks rows in process-private scratch files
(:class:`statekit.statefmt.spill.ArrowSpill`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from statekit.readers.progress import Advance, ProgressFactory, no_progress
from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.typed_columns import python_values, to_json_text
from statekit.readers.window_state import window_of_namespace, window_state_role
from statekit.statefmt.encoding import is_serialized, keyed_schema
from statekit.statefmt.entries import StateCodec, hash_sort_indices
from statekit.statefmt.errors import BadInputError, StateNotFoundError
from statekit.statefmt.json_contract import JsonShape
from statekit.statefmt.metadata import OperatorMetadata, StateDescriptor, StateKind
from statekit.statefmt.numpy_support import integer_view, numpy_or_none, pooled_empty
from statekit.statefmt.spill import ArrowSpill
from statekit.statefmt.statefile import IndexEntry

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "DiffSpec",
    "DiffInputs",
    "DifferenceWriter",
    "DifferenceOutput",
    "StructuralChange",
    "KeyDifference",
    "StateDiff",
    "SavepointDiff",
    "DiffPlan",
    "StatePair",
    "diff_locally",
    "plan_diff",
    "diff_operator_state",
    "diff_arrow_schema",
    "DifferenceSink",
    "DIFF_COLUMNS",
]

CHUNK_ROWS = 65536
MEMORY_BUDGET = 128 << 20
# Stored bytes of both sides compared at once when max parallelisms differ: a bucket is
# decoded, sorted and joined, which takes a few times its stored size.
BUCKET_BYTES = MEMORY_BUDGET // 6
LAYOUT_CHANGES = ("parallelism_changed", "max_parallelism_changed", "name_changed")
DIFF_COLUMNS = ("change", "key", "namespace", "user_key", "value_a", "value_b", "key_group")
_DESCRIPTOR_FIELDS = ("kind", "value_serializer", "value_type", "user_key_serializer", "user_key_type",
                      "namespace_serializer", "namespace_type", "ttl_ms")
_SERIALIZER_FIELDS = ("kind", "value_serializer", "user_key_serializer", "namespace_serializer")


# ---------------------------------------------------------------- what to compare


@dataclass(frozen=True)
class DiffSpec:
    """One diff of savepoint ``a`` (before) with ``b`` (after), whichever engine runs it.

    Attributes:
        a, b: Savepoint/checkpoint paths or URLs.
        operator, state: Restrict the diff to one operator and/or state name.
        keys: Decode and return up to ``limit`` differing entries per state.
        limit: How many differing entries per state ``keys`` returns (not negative).
        output: A new directory for every differing entry, Hive-partitioned by
            ``operator_uid`` and ``state_name`` (written by the engine's writer:
            ``statekit.writers.diff_output`` locally, Spark on Spark).
        trust_pickle: Allow decoding pickle state (for ``keys``/``output``).
        storage_options: fsspec options for both savepoints and the output.
    """

    a: str
    b: str
    operator: str | None = None
    state: str | None = None
    keys: bool = False
    limit: int = 20
    output: str | None = None
    trust_pickle: bool = False
    storage_options: dict[str, Any] | None = None


class DifferenceWriter(Protocol):
    """Takes the differing entries of one state, as tables of :func:`diff_arrow_schema`'s columns."""

    def write_table(self, table: pa.Table) -> None: ...


class DifferenceOutput(Protocol):
    """Where the differing entries of a diff go: one writer per state, opened by the diff."""

    def state_writer(self, uid: str, state: str) -> AbstractContextManager[DifferenceWriter]: ...


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class StructuralChange:
    """One difference of the savepoints' shape."""

    json_shape: ClassVar[JsonShape] = JsonShape(extra=("layout",))

    change: str
    operator_uid: str
    state_name: str | None = None
    field: str | None = None
    a: Any = None
    b: Any = None

    @property
    def layout(self) -> bool:
        """Parallelism, max parallelism and names: listed, but the state is the same."""
        return self.change in LAYOUT_CHANGES


@dataclass(frozen=True)
class KeyDifference:
    """One differing entry, decoded (values as JSON-compatible Python values)."""

    change: str
    key: Any
    namespace: Any
    user_key: Any
    value_a: Any
    value_b: Any
    window: list[int] | None = None  # [start, end] a window state's namespace holds (readers.window_state)


@dataclass(frozen=True)
class StateDiff:
    """Data diff of one state: counts of entries by outcome."""

    operator_uid: str
    state_name: str
    kind: str
    status: str  # compared | removed | added | incomparable
    only_in_a: int = 0
    only_in_b: int = 0
    changed: int = 0
    unchanged: int = 0
    key_groups_skipped: int = 0
    key_groups_compared: int = 0
    reason: str | None = None
    examples: tuple[KeyDifference, ...] = ()

    @property
    def differs(self) -> bool:
        return self.status == "incomparable" or bool(self.only_in_a or self.only_in_b or self.changed)


@dataclass(frozen=True)
class SavepointDiff:
    """The whole diff; ``equal`` is what the exit code reports."""

    json_shape: ClassVar[JsonShape] = JsonShape(extra=("equal", "totals"))

    a: str
    b: str
    engine: str
    structural: tuple[StructuralChange, ...]
    states: tuple[StateDiff, ...]
    output: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def equal(self) -> bool:
        return not any(not c.layout for c in self.structural) and not any(s.differs for s in self.states)

    def totals(self) -> dict[str, int]:
        return {k: sum(getattr(s, k) for s in self.states) for k in ("only_in_a", "only_in_b", "changed", "unchanged")}


# ---------------------------------------------------------------- structural plan


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


# ---------------------------------------------------------------- difference rows


class DifferenceSink:
    """Collects differing entries of one state: the first ``limit`` decoded, all to ``writer``
    (as JSON text columns and the key group, :func:`diff_arrow_schema`)."""

    def __init__(self, pair: StatePair, codec_a: StateCodec | None, codec_b: StateCodec | None, *,
                 limit: int, writer: DifferenceWriter | None, max_parallelism: int) -> None:
        self.pair = pair
        self.codec_a, self.codec_b = codec_a, codec_b
        self.limit = limit
        self.writer = writer
        self.max_parallelism = max_parallelism
        self.examples: list[KeyDifference] = []
        ops = [op for op in (pair.op_a, pair.op_b) if op is not None]
        self.window_state = pair.name if ops and all(window_state_role(op, pair.name) for op in ops) else None

    @property
    def wanted(self) -> bool:
        return self.writer is not None or len(self.examples) < self.limit

    def add(self, rows: pa.Table) -> None:
        """Rows with binary key, namespace, user_key, value_a, value_b, key_hash and a change column."""
        if not rows.num_rows or not self.wanted:
            return
        if self.writer is None:
            rows = rows.slice(0, self.limit - len(self.examples))
        texts = self._json_columns(rows)
        if len(self.examples) < self.limit:
            take = min(self.limit - len(self.examples), rows.num_rows)
            for i in range(take):
                example = KeyDifference(
                    texts["change"][i], *(_loads(texts[c][i]) for c in ("key", "namespace", "user_key", "value_a", "value_b")))
                self.examples.append(self._with_window(example))
        if self.writer is not None:
            import pyarrow as pa
            import pyarrow.compute as pc

            key_group = pc.remainder(rows.column("key_hash"), pa.scalar(self.max_parallelism, rows.column("key_hash").type))
            self.writer.write_table(pa.table(
                {**{c: pa.array(texts[c], pa.string()) for c in DIFF_COLUMNS[:-1]},
                 "key_group": key_group.cast(pa.int32())}))

    def _with_window(self, example: KeyDifference) -> KeyDifference:
        """A window state's entry belongs to one (key, window): name the window its namespace holds."""
        if self.window_state is None:
            return example
        codec = self.codec_a if example.change == "only_in_a" else self.codec_b or self.codec_a
        window = window_of_namespace(self.window_state, example.namespace, codec.source if codec else None)
        return dataclasses.replace(example, window=None if window is None else list(window))

    def _json_columns(self, rows: pa.Table) -> dict[str, list[Any]]:
        codec = self.codec_a or self.codec_b
        assert codec is not None
        out: dict[str, list[Any]] = {"change": rows.column("change").to_pylist()}
        out["key"] = _texts(rows.column("key"), codec.key)
        out["namespace"] = [None if not raw else to_json_text(codec.decode_namespace(raw))
                            for raw in rows.column("namespace").to_pylist()]
        out["user_key"] = _texts(rows.column("user_key"), codec.user_key)
        out["value_a"] = _value_texts(rows.column("value_a"), self.codec_a)
        out["value_b"] = _value_texts(rows.column("value_b"), self.codec_b)
        return out


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _texts(column: Any, serializer: Any) -> list[str | None]:
    column = column.combine_chunks() if hasattr(column, "combine_chunks") else column
    if serializer is None:
        return [None] * len(column)
    return [to_json_text(v) for v in python_values(column, serializer, "entry")]


def _value_texts(column: Any, codec: StateCodec | None) -> list[str | None]:
    if codec is None:
        return [None] * len(column)
    column = column.combine_chunks() if hasattr(column, "combine_chunks") else column
    return [None if v is None else to_json_text(v) for v in codec.decode_values(column)]


# ---------------------------------------------------------------- joining


@dataclass
class _Counts:
    only_in_a: int = 0
    only_in_b: int = 0
    changed: int = 0
    unchanged: int = 0
    skipped: int = 0
    compared: int = 0


def _identity(descriptor: StateDescriptor) -> list[str]:
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


def join_chunk(a: pa.Table, b: pa.Table, identity: list[str], counts: _Counts, sink: DifferenceSink | None) -> None:
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


# ---------------------------------------------------------------- the form values are compared in


_COMPARABLE = ("int64", "double", "string", "bool", "timestamp[ms, tz=UTC]")


class _ValueForm:
    """The one value column type both sides of a state are compared in.

    Every file of both sides holds typed values of one primitive type: that type (compared
    without decoding). Otherwise — serialized values anywhere, nested types, a version 1
    file on one side — serialized bytes: typed columns are serialized with the side's value
    serializer, giving the bytes a version 1 file holds for the same values.
    """

    def __init__(self, value_types: set[Any], codec_a: StateCodec | None, codec_b: StateCodec | None) -> None:
        import pyarrow as pa

        only = next(iter(value_types)) if len(value_types) == 1 else None
        self.type = only if only is not None and str(only) in _COMPARABLE else pa.binary()
        self.codecs = {"a": codec_a, "b": codec_b}

    def schema(self) -> pa.Schema:
        return keyed_schema(None if is_serialized(self.type) else self.type)

    def conform(self, side: str, batch: pa.RecordBatch) -> pa.RecordBatch:
        import pyarrow as pa

        value = batch.column("value")
        if value.type == self.type:
            return batch
        codec = self.codecs[side]
        assert codec is not None and is_serialized(self.type)
        index = batch.schema.get_field_index("value")
        columns = list(batch.columns)
        columns[index] = codec.serialized_values(value)
        return pa.RecordBatch.from_arrays(columns, schema=keyed_schema())

    def empty(self) -> pa.Table:
        return self.schema().empty_table()

    def concat(self, batches: list[pa.RecordBatch]) -> pa.Table:
        import pyarrow as pa

        return pa.Table.from_batches(batches, schema=self.schema()) if batches else self.empty()


def _value_form(ra: SavepointReader | None, rb: SavepointReader | None, pair: StatePair) -> _ValueForm:
    """The form of ``pair``'s values, from the headers of every file of both sides."""
    types = set()
    for reader, op in ((ra, pair.op_a), (rb, pair.op_b)):
        if reader is None or op is None:
            continue
        for subtask in op.subtasks:
            file = subtask.file_of(pair.name)
            if file is not None and file.entries:
                with reader.open_subtask_file(op, subtask, file) as state_file:
                    types.add(state_file.codec.schema.field("value").type)
    return _ValueForm(types, _serializing_codec(pair.a, pair.op_a), _serializing_codec(pair.b, pair.op_b))


def _serializing_codec(descriptor: StateDescriptor | None, op: OperatorMetadata | None) -> StateCodec | None:
    """A codec that only serializes values (safe for every serializer: nothing is decoded)."""
    if descriptor is None or op is None:
        return None
    return StateCodec(descriptor, op.key_serializer, for_write=True)


# ---------------------------------------------------------------- keyed state, same max parallelism


@dataclass
class _Block:
    key_group: int
    entry: IndexEntry
    read: Callable[[], pa.RecordBatch]
    check: Callable[[], None]  # its bytes against the CRC-32 of its index entry, nothing decoded
    header: bytes  # its file's header: the same block bytes mean the same entries only under equal headers


def _blocks(reader: SavepointReader | None, op: OperatorMetadata | None, state: str) -> Iterator[_Block]:
    """Blocks of one state in key-group order; ``read`` works until the next block is drawn."""
    if reader is None or op is None:
        return
    for subtask in op.subtasks:
        file = subtask.file_of(state)
        if file is None:
            continue
        with reader.open_subtask_file(op, subtask, file) as state_file:
            for entry in state_file.index:
                def read(kg: int = entry.key_group, f: Any = state_file) -> pa.RecordBatch:
                    batch: pa.RecordBatch = f.read_block(kg)
                    return batch

                def check(kg: int = entry.key_group, f: Any = state_file) -> None:
                    f.read_block_bytes(kg)

                yield _Block(entry.key_group, entry, read, check, state_file.codec.header)


def _same_block(x: _Block, y: _Block) -> bool:
    """Equal entries without decoding: equal block bytes (CRC-32, length, count) under equal
    headers (a typed float 0.0 and int 0 are the same bytes in files of other schemas) — once both
    blocks' bytes are checked against those CRC-32s (``_Block.check``)."""
    return bool(x.entry.checksum == y.entry.checksum and x.entry.length == y.entry.length
                and x.entry.entries == y.entry.entries and x.header == y.header)


def _diff_aligned(ra: SavepointReader | None, rb: SavepointReader | None, pair: StatePair,
                  counts: _Counts, sink: DifferenceSink | None) -> None:
    """Merge both sides by key group; equal checksums skip the key group.

    A key group whose blocks hold the same identities on both sides (only values changed)
    goes to the *aligned* chunk, compared row by row; any other goes to the *join* chunk.
    Blocks are equal byte for byte only between files of one encoding; a version 1 and a
    version 2 file of the same entries are compared entry by entry.
    """
    form = _value_form(ra, rb, pair)
    side_a, side_b = _blocks(ra, pair.op_a, pair.name), _blocks(rb, pair.op_b, pair.name)
    x, y = next(side_a, None), next(side_b, None)
    chunks = _Chunks(_identity(pair.descriptor), counts, sink, form)
    while x is not None or y is not None:
        if x is not None and y is not None and x.key_group == y.key_group:
            if _same_block(x, y):
                x.check()  # equal index entries say equal blocks only for blocks that match them
                y.check()
                counts.unchanged += x.entry.entries
                counts.skipped += 1
            else:
                counts.compared += 1
                chunks.add_pair(x.read(), y.read())
            x, y = next(side_a, None), next(side_b, None)
        elif y is None or (x is not None and x.key_group < y.key_group):
            assert x is not None
            counts.compared += 1
            chunks.add(x.read(), None)
            x = next(side_a, None)
        else:
            counts.compared += 1
            chunks.add(None, y.read())
            y = next(side_b, None)
    chunks.flush()


_SORT_COLUMNS = ("key_hash", "key", "namespace", "user_key")


class _Chunks:
    """Blocks waiting to be compared: aligned pairs (row by row) and the rest (a join)."""

    def __init__(self, identity: list[str], counts: _Counts, sink: DifferenceSink | None, form: _ValueForm) -> None:
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


def compare_rows(a: pa.Table, b: pa.Table, counts: _Counts, sink: DifferenceSink | None,
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


def _compare_bucket(chunks: _Chunks, a: pa.Table, b: pa.Table) -> None:
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


# ---------------------------------------------------------------- keyed state, different max parallelism


def _diff_regrouped(ra: SavepointReader, rb: SavepointReader, pair: StatePair, counts: _Counts,
                    sink: DifferenceSink | None, buckets: int) -> None:
    """Different max parallelism, compared by bucket ``key_hash % buckets`` where ``buckets``
    divides both max parallelisms: a bucket is the key groups ``b, b + buckets, ...`` of
    each side, read straight from the files (no spill), and compared by
    :func:`_compare_bucket`. Memory: one bucket of both sides."""
    assert pair.op_a is not None and pair.op_b is not None
    form = _value_form(ra, rb, pair)
    chunks = _Chunks(_identity(pair.descriptor), counts, sink, form)
    with _GroupSource(ra, pair.op_a, pair.name) as side_a, _GroupSource(rb, pair.op_b, pair.name) as side_b:
        def load(bucket: int) -> tuple[pa.Table, pa.Table]:
            return (form.concat([form.conform("a", x) for x in side_a.bucket(bucket, buckets)]),
                    form.concat([form.conform("b", x) for x in side_b.bucket(bucket, buckets)]))

        for bucket in range(buckets):  # no bucket is held while the next one loads
            _compare_bucket(chunks, *load(bucket))
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


def _diff_by_hash(ra: SavepointReader, rb: SavepointReader, pair: StatePair, counts: _Counts,
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
    form = _value_form(ra, rb, pair)
    needed = max(1, math.ceil(total / BUCKET_BYTES))
    direct = _direct_side(pair, needed)
    buckets = needed if direct is None else direct[1]
    chunks = _Chunks(_identity(pair.descriptor), counts, sink, form)
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
            _compare_bucket(chunks, *load(bucket))
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


# ---------------------------------------------------------------- operator state


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
                        sink: DifferenceSink | None) -> _Counts:
    """Operator list/union state as multisets of elements; broadcast state by key."""
    import pyarrow as pa

    counts = _Counts()
    elements_a = _operator_elements(ra, pair.op_a, pair.descriptor)
    elements_b = _operator_elements(rb, pair.op_b, pair.descriptor)
    rows: list[tuple[str, bytes | None, bytes | None, bytes | None]] = []
    if pair.descriptor.kind is StateKind.BROADCAST:
        map_a, map_b = dict(elements_a), dict(elements_b)
        for key in list(map_a) + [k for k in map_b if k not in map_a]:
            va, vb = map_a.get(key), map_b.get(key)
            change = "only_in_b" if va is None else "only_in_a" if vb is None else "changed" if va != vb else "unchanged"
            _tally(counts, change)
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


def _tally(counts: _Counts, change: str) -> None:
    setattr(counts, change, getattr(counts, change) + 1)


# ---------------------------------------------------------------- the local engine


@dataclass(frozen=True)
class DiffInputs:
    """Both savepoints of a :class:`DiffSpec` opened and the plan made: every input check,
    done before any engine starts (any failure is bad input: exit 2)."""

    spec: DiffSpec
    a: SavepointReader
    b: SavepointReader
    plan: DiffPlan

    @classmethod
    def open(cls, spec: DiffSpec) -> DiffInputs:
        if spec.limit < 0:
            raise BadInputError(f"--limit must not be negative, got {spec.limit}")
        # a native snapshot is compared through its canonical view (statekit.readers.native_view)
        a = SavepointReader.read(spec.a, trust_pickle=spec.trust_pickle, storage_options=spec.storage_options).canonical()
        b = SavepointReader.read(spec.b, trust_pickle=spec.trust_pickle, storage_options=spec.storage_options).canonical()
        return cls(spec, a, b, plan_diff(a, b, spec.operator, spec.state))

    def codecs(self, pair: StatePair) -> tuple[StateCodec | None, StateCodec | None]:
        """The codec of ``pair`` on each side (None where the state does not exist)."""
        return (self.a.codec(pair.uid, pair.name) if pair.a is not None else None,
                self.b.codec(pair.uid, pair.name) if pair.b is not None else None)


def diff_locally(inputs: DiffInputs, differences: DifferenceOutput | None = None,
                 progress: ProgressFactory | None = None) -> SavepointDiff:
    """Diff on this machine, streaming with bounded memory.

    Args:
        inputs: The opened savepoints and the plan.
        differences: Where every differing entry goes (``spec.output``'s writer), or None.
        progress: ``Output.progress``-like factory, advanced once per state.
    """
    total = len(inputs.plan.pairs)
    with (progress or no_progress)(f"comparing {total} state(s)", total=total, unit="items") as advance:
        states = tuple(_diff_state(inputs, pair, differences, advance) for pair in inputs.plan.pairs)
    return SavepointDiff(inputs.a.path, inputs.b.path, "local", inputs.plan.structural, states)


def _diff_state(inputs: DiffInputs, pair: StatePair, differences: DifferenceOutput | None,
                advance: Advance) -> StateDiff:
    reason = pair.incomparable_reason()
    if reason is not None:
        result = StateDiff(pair.uid, pair.name, pair.descriptor.kind.value, "incomparable", reason=reason)
    else:
        result = _compare(inputs, pair, differences)
    advance(f"{pair.uid}/{pair.name}", 1)
    return result


def status_of(pair: StatePair) -> str:
    return "added" if pair.a is None else "removed" if pair.b is None else "compared"


def _compare(inputs: DiffInputs, pair: StatePair, differences: DifferenceOutput | None) -> StateDiff:
    ra, rb, keys = inputs.a, inputs.b, inputs.spec.keys
    status = status_of(pair)
    kind = pair.descriptor.kind.value
    decode = keys or differences is not None
    if status != "compared" and not decode:
        return StateDiff(pair.uid, pair.name, kind, status, only_in_a=state_entries(ra, pair.op_a, pair.a),
                         only_in_b=state_entries(rb, pair.op_b, pair.b))
    counts = _Counts()
    max_p = (pair.op_a or pair.op_b).max_parallelism  # type: ignore[union-attr]
    opened = differences.state_writer(pair.uid, pair.name) if differences is not None else nullcontext(None)
    with opened as writer:
        sink = None
        if decode:
            codec_a, codec_b = inputs.codecs(pair)
            sink = DifferenceSink(pair, codec_a, codec_b, limit=inputs.spec.limit if keys else 0, writer=writer,
                                  max_parallelism=max_p)
        if not pair.keyed:
            counts = diff_operator_state(ra if pair.a else None, rb if pair.b else None, pair, sink)
        elif status == "compared" and pair.op_a is not None and pair.op_b is not None \
                and pair.op_a.max_parallelism != pair.op_b.max_parallelism:
            _diff_by_hash(ra, rb, pair, counts, sink)
        else:
            _diff_aligned(ra if pair.a else None, rb if pair.b else None, pair, counts, sink)
    return StateDiff(pair.uid, pair.name, kind, status, counts.only_in_a, counts.only_in_b, counts.changed,
                     counts.unchanged, counts.skipped, counts.compared,
                     examples=tuple(sink.examples) if sink is not None else ())


# ---------------------------------------------------------------- difference rows, as written


def diff_arrow_schema() -> pa.Schema:
    """The columns of the differing entries handed to a :class:`DifferenceWriter`."""
    import pyarrow as pa

    return pa.schema([(c, pa.string()) for c in DIFF_COLUMNS[:-1]] + [("key_group", pa.int32())])
