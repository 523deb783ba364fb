"""``statekit export --engine local``: the export on this machine, with pyarrow, no JVM.

It writes what the Spark export writes — the same Hive partitions
(``OUT/operator_uid=<uid>/state_name=<state>/``), the same columns with the same types, the
same rows, the same spelling per format (:mod:`statekit.spark.local_formats`) — for statekit
snapshots (read through :mod:`statekit.readers.state_columns`, as the ``statekit`` data
source reads them) and for Apache Flink snapshots (decoded by :mod:`statekit.flink.entries`,
as the Spark tasks decode them). Imports no pyspark: it runs where the ``spark`` extra is
not installed. One state at a time, a batch at a time: memory stays bounded by a batch.

The output is staged beside OUT and published by one rename (a failure leaves nothing);
only local paths (or ``file://``) are written.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statekit.readers.progress import ProgressFactory, no_progress
from statekit.spark.export import ExportedState, ExportResult, ExportSpec, selected_states
from statekit.statefmt.errors import BadInputError, CorruptStateError
from statekit.statefmt.layout import hive_partition_dir

if TYPE_CHECKING:
    import pyarrow as pa

    from statekit.flink.snapshot import FlinkSnapshot
    from statekit.readers.savepoint_reader import SavepointReader

__all__ = ["LOCAL_ENGINE", "LocalTable", "export_statekit_local", "export_flink_local", "local_output_path",
           "statekit_state_bytes", "flink_state_bytes", "ddl_arrow_schema", "window_columns"]

LOCAL_ENGINE = "local"


@dataclass(frozen=True)
class LocalTable:
    """One state to export: its names, its kind, its schema and its batches (read lazily)."""

    uid: str
    name: str
    kind: str
    schema: pa.Schema
    batches: Callable[[], Iterator[pa.RecordBatch]]


def local_output_path(output: str) -> str:
    """The local directory ``output`` names; other URLs are bad input for the local engine."""
    if not output:
        raise BadInputError("empty output path")
    if "://" in output and not output.startswith("file://"):
        raise BadInputError("the local engine writes to a local directory; use --engine spark for "
                            "another filesystem", path=output)
    return output.removeprefix("file://")


# ---------------------------------------------------------------- statekit snapshots


def statekit_state_bytes(reader: SavepointReader, states: Sequence[tuple[str, str, str]]) -> int:
    """The recorded bytes of the chosen states' files (a native subtask counts its store once)."""
    chosen = {(uid, name) for uid, name, _ in states}
    total = 0
    for op in reader.operators:
        if not any(uid == op.uid for uid, _ in chosen):
            continue
        for subtask in op.subtasks:
            total += sum(f.size for f in subtask.files if (op.uid, f.state) in chosen)
            if subtask.native is not None:
                total += subtask.native.size
    return total


def export_statekit_local(spec: ExportSpec, progress: ProgressFactory | None = None) -> ExportResult:
    """Export all (or the chosen) states of a statekit snapshot on this machine.

    Raises:
        BadInputError: Existing output, unknown operator or state, pickle state without trust.
        CorruptStateError: A damaged block, a window state whose namespace is not a window.
    """
    from statekit.readers.savepoint_reader import SavepointReader

    reader = SavepointReader.read(spec.path, trust_pickle=spec.trust_pickle, storage_options=spec.storage_options)
    states = selected_states(reader, spec.operator, spec.state)
    view = reader.canonical()  # a native snapshot is read through its canonical view
    now_ms = int(time.time() * 1000)
    tables = [_statekit_table(reader, view, uid, name, kind, spec.include_expired, now_ms)
              for uid, name, kind in states]
    return write_local_tables(spec, reader.path, tables, progress)


def _statekit_table(reader: SavepointReader, view: SavepointReader, uid: str, name: str, kind: str,
                    include_expired: bool, now_ms: int) -> LocalTable:
    from statekit.readers.state_columns import resolve_column_types, typed_state_batches
    from statekit.readers.typed_columns import TypedDecoder
    from statekit.readers.window_state import window_state_role

    op = view.operator(uid)
    descriptor = op.state(name)
    types = resolve_column_types(view, op, descriptor)
    schema = TypedDecoder(descriptor, op.key_serializer, types).arrow_schema()
    role = window_state_role(op, name)

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in typed_state_batches(view, uid, name, types, include_expired=include_expired, now_ms=now_ms):
            yield batch if role is None else window_columns(batch, role, reader.path)

    if role is not None:
        schema = window_columns(_empty_batch(schema), role, reader.path).schema
    return LocalTable(uid, name, kind, schema, batches)


def _empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


# ---------------------------------------------------------------- window columns


_WINDOW_STATES = {"contents": "window-contents", "trigger": "window-trigger", "timers": "_window_timers"}


def window_columns(batch: pa.RecordBatch, role: str, path: str | None = None) -> pa.RecordBatch:
    """``batch`` of a window state (``role``: contents, trigger, timers) with its window columns,
    as :func:`statekit.spark.export.with_window_columns` adds them on Spark: ``trigger_state``
    (trigger), ``timer_domain`` and ``timer_timestamp`` (timers), then ``window_start`` and
    ``window_end``.

    Raises:
        CorruptStateError: A namespace that is not a window, a timer that is not
            ``[domain, timestamp]`` (the message Spark's job fails with).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    window = batch.column("namespace")
    start, end, pair = _pairs(window)
    is_window = pc.fill_null(pc.and_kleene(pair, pc.less(start, end)), False)
    valid = pc.or_(is_window, pc.fill_null(pc.equal(pc.list_value_length(window), 0), False))
    if not pc.all(valid).as_py() and batch.num_rows:
        bad = window[pc.index(valid, False).as_py()].as_py()
        raise CorruptStateError(
            f"window state {_WINDOW_STATES[role]!r}: namespace {_json(bad)} is not a window ([start, end] epoch ms "
            "with start < end, or [] for the global window)", path=path)
    names, columns = list(batch.schema.names), list(batch.columns)
    if role == "trigger":
        names.append("trigger_state")
        columns.append(batch.column("user_key"))
    if role == "timers":
        timer = batch.column("user_key")
        domain, stamp, pair = _pairs(timer)
        valid = pc.fill_null(pc.and_kleene(pair, pc.and_kleene(pc.is_in(domain, pa.array([0, 1], pa.int64())),
                                                                pc.is_valid(stamp))), False)
        if not pc.all(valid).as_py() and batch.num_rows:
            bad = timer[pc.index(valid, False).as_py()].as_py()
            raise CorruptStateError(
                f"window state {_WINDOW_STATES['timers']!r}: user key {_json(bad)} is not a timer ([domain, "
                "timestamp], domain 0 event time or 1 processing time)", path=path)
        names += ["timer_domain", "timer_timestamp"]
        columns += [pc.if_else(pc.equal(domain, 0), "event_time", "processing_time").cast(pa.string()),
                    stamp.cast(pa.timestamp("ms", tz="UTC"))]
    nulls = pa.nulls(batch.num_rows, pa.int64())
    names += ["window_start", "window_end"]
    columns += [pc.if_else(is_window, start, nulls).cast(pa.timestamp("ms", tz="UTC")),
                pc.if_else(is_window, end, nulls).cast(pa.timestamp("ms", tz="UTC"))]
    return pa.RecordBatch.from_arrays(columns, names=names)


def _pairs(column: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """(first, second, is a pair) of a list<int64> column: the two elements of each list of
    length 2 (null elsewhere), and whether the list has length 2."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = column.cast(pa.list_(pa.int64()))
    pair = pc.fill_null(pc.equal(pc.list_value_length(column), 2), False)
    flat = pc.list_flatten(column.filter(pair))
    nulls = pa.nulls(len(column), pa.int64())
    first = pc.replace_with_mask(nulls, pair, flat.take(pa.array(range(0, len(flat), 2), pa.int64())))
    second = pc.replace_with_mask(nulls, pair, flat.take(pa.array(range(1, len(flat), 2), pa.int64())))
    return first, second, pair


def _json(value: Any) -> str:
    import json

    return "null" if value is None else json.dumps(value, separators=(",", ":"))


# ---------------------------------------------------------------- Apache Flink snapshots


def flink_state_bytes(snapshot: FlinkSnapshot, uids: Sequence[str]) -> int:
    """The bytes Flink recorded for the streams of the operators ``uids`` name."""
    wanted = set(uids)
    return sum(handle.size for op, _, _, handle in snapshot.metadata.stream_handles()
               if (op.uid or op.label) in wanted)


def export_flink_local(spec: ExportSpec, progress: ProgressFactory | None = None, *, uids: tuple[str, ...] = (),
                       value_types: dict[str, str] | None = None) -> ExportResult:
    """Export the decodable keyed states of the Flink snapshot at ``spec.path`` on this machine
    (the rows and columns of :func:`statekit.spark.flink_export.export_flink`).

    Raises:
        StateNotFoundError: Unknown operator or state.
        BadInputError: A state asked for that cannot be decoded, nothing to export, an existing output.
    """
    from dataclasses import replace

    from statekit.flink.entries import state_value_types
    from statekit.flink.snapshot import open_flink_snapshot
    from statekit.flink.storage import moved_note
    from statekit.spark.flink_export import OFFSETS_TABLE, FlinkExportPlan, offsets_rows, plan_flink_export

    snapshot = open_flink_snapshot(spec.path, storage_options=spec.storage_options, uids=uids)
    offsets = [_offsets_table(label, rows) for label, rows in offsets_rows(snapshot, spec.operator, spec.state)]
    plan = plan_flink_export(snapshot, spec.operator, None if spec.state == OFFSETS_TABLE else spec.state,
                             value_types, allow_empty=bool(offsets))
    if spec.state == OFFSETS_TABLE:
        plan = FlinkExportPlan((), plan.skipped)
    tables = [_flink_table(snapshot, uid, name, kind, ddl, state_value_types(value_types, name))
              for uid, name, kind, ddl, _ in plan.states]
    result = write_local_tables(spec, snapshot.path, tables + offsets, progress, plan.skipped)
    note = moved_note(snapshot)
    return replace(result, notes=(note,)) if note else result


def _offsets_table(label: str, rows: list[tuple[Any, ...]]) -> LocalTable:
    """A source operator's ``offsets`` table: the Spark export's columns and rows."""
    import pyarrow as pa

    from statekit.spark.flink_export import OFFSETS_SCHEMA, OFFSETS_TABLE

    schema = ddl_arrow_schema(OFFSETS_SCHEMA)

    def batches() -> Iterator[pa.RecordBatch]:
        columns = list(zip(*rows)) if rows else [() for _ in schema]
        yield pa.record_batch([pa.array(list(column), type=field.type) for column, field in zip(columns, schema)],
                              schema=schema)

    return LocalTable(label, OFFSETS_TABLE, "offsets", schema, batches)


def _flink_table(snapshot: FlinkSnapshot, uid: str, name: str, kind: str, ddl: str,
                 value_type: str | None) -> LocalTable:
    from statekit.flink.entries import key_group_slices
    from statekit.spark.flink_export import SliceDecoder

    schema = ddl_arrow_schema(ddl)
    decode = SliceDecoder(snapshot.path, uid, name, snapshot.storage_options, snapshot.uids, value_type, schema)

    def batches() -> Iterator[pa.RecordBatch]:
        for key_groups in key_group_slices(snapshot, uid, 1):
            yield from decode(tuple(key_groups))

    return LocalTable(uid, name, kind, schema, batches)


def ddl_arrow_schema(ddl: str) -> pa.Schema:
    """The Arrow schema Spark gives the DDL ``ddl`` (``key string, value array<bigint>, ...``):
    the schema of the Flink export's rows, without pyspark.

    Raises:
        BadInputError: A type this parser does not know (a bug: the Flink decoders name it).
    """
    import pyarrow as pa

    return pa.schema([pa.field(name, _DdlParser(text).type()) for name, text in _split_fields(ddl, " ")])


_SIMPLE_TYPES = {
    "string": "string", "binary": "binary", "boolean": "bool_", "tinyint": "int8", "smallint": "int16",
    "int": "int32", "integer": "int32", "bigint": "int64", "float": "float32", "double": "float64",
}


def _split_fields(text: str, separator: str) -> list[tuple[str, str]]:
    """``name<separator>type`` pairs of a comma-separated list at nesting depth 0."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch in "<("
        depth -= ch in ">)"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    pairs = []
    for part in parts:
        name, sep, type_text = part.strip().partition(separator)
        if not sep:
            raise BadInputError(f"Spark DDL field {part.strip()!r} has no type")
        pairs.append((name.strip().strip("`"), type_text.strip()))
    return pairs


class _DdlParser:
    def __init__(self, text: str) -> None:
        self.text = text.strip()

    def type(self) -> pa.DataType:
        import pyarrow as pa

        text = self.text
        lower = text.lower()
        if lower in _SIMPLE_TYPES:
            return getattr(pa, _SIMPLE_TYPES[lower])()
        if lower == "timestamp":
            return pa.timestamp("us", tz="UTC")
        if lower == "timestamp_ntz":  # wall-clock time, no zone (Flink SQL TIMESTAMP, LocalDateTime)
            return pa.timestamp("us")
        if lower == "date":
            return pa.date32()
        head, _, rest = text.partition("<")
        if not rest.endswith(">"):
            raise BadInputError(f"unsupported Spark type {text!r}")
        inner, kind = rest[:-1], head.strip().lower()
        if kind == "array":
            return pa.list_(_DdlParser(inner).type())
        if kind == "map":
            key, value = _split_top(inner)
            return pa.map_(_DdlParser(key).type(), _DdlParser(value).type())
        if kind == "struct":
            return pa.struct([pa.field(n, _DdlParser(t).type()) for n, t in _split_fields(inner, ":")])
        raise BadInputError(f"unsupported Spark type {text!r}")


def _split_top(text: str) -> tuple[str, str]:
    depth = 0
    for i, ch in enumerate(text):
        depth += ch in "<("
        depth -= ch in ">)"
        if ch == "," and depth == 0:
            return text[:i], text[i + 1:]
    raise BadInputError(f"map<{text}> needs a key and a value type")


# ---------------------------------------------------------------- writing


def write_local_tables(spec: ExportSpec, source: str, tables: Sequence[LocalTable], progress: ProgressFactory | None,
                       skipped: tuple[tuple[str, str, str], ...] = ()) -> ExportResult:
    """Write every table to its Hive partition of a staged ``spec.output`` in ``spec.fmt``.

    Progress: one bar per state counting its rows."""
    from statekit.spark.local_formats import TableFiles
    from statekit.writers.staging import staged_output_dir

    started = time.monotonic()
    output = local_output_path(spec.output)
    exported: list[ExportedState] = []
    with staged_output_dir(output, parent_must_exist=True) as (_, staging):
        for table in tables:
            relative = hive_partition_dir(table.uid, table.name)
            with (progress or no_progress)(f"{table.uid}/{table.name}", total=None, unit="rows") as advance, \
                    TableFiles(f"{staging}/{relative}", table.schema, spec.fmt) as files:
                for batch in table.batches():
                    files.write(batch)
                    advance(table.name, batch.num_rows)
                rows, count = files.close()
            exported.append(ExportedState(table.uid, table.name, table.kind, relative, rows, count))
    return ExportResult(source, os.path.abspath(output), spec.fmt, None, tuple(exported), time.monotonic() - started, skipped,
                        engine=LOCAL_ENGINE)
