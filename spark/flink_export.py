"""Export the keyed state of an Apache Flink snapshot through Spark.

Canonical savepoints, native RocksDB savepoints and incremental RocksDB checkpoints. Same
layout, formats and columns as a statekit export (``OUT/operator_uid=<uid>/state_name=<state>/``;
``key``, ``namespace``, ``user_key``, ``value``, ``expiry``, ``key_group``, ``subtask``), typed
from the Flink serializer snapshots (:mod:`statekit.flink.serializers`): a PyFlink key
``Row<String>`` becomes ``struct<f0:string>``, a list of ``byte[]`` ``array<binary>`` — or
the declared type of ``--value-type`` (:mod:`statekit.flink.pyflink`). ``expiry`` is the TTL
timestamp of state with a time-to-live, else null.

Each Spark task opens the snapshot itself and decodes a slice of key groups (ranged reads
of a canonical stream; a subtask's RocksDB files in a temporary directory), so neither the
driver nor an executor holds more than one key group's bytes. States that cannot be
decoded (unsupported serializers, changelog checkpoints) are skipped with their reason when the
whole snapshot is exported, and are an error when asked for by ``--state``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statekit.readers.progress import ProgressFactory
from statekit.spark.export import ExportResult, ExportSpec, ExportTable, export_tables
from statekit.statefmt.errors import BadInputError, CorruptStateError, StateNotFoundError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from statekit.flink.storage import FlinkSnapshot

__all__ = ["FlinkExportPlan", "SliceDecoder", "export_flink", "export_flink_options", "plan_flink_export",
           "flink_state_frame"]


@dataclass(frozen=True)
class FlinkExportPlan:
    """What to export: (uid, state, kind, Spark schema, max parallelism), and what is skipped why."""

    states: tuple[tuple[str, str, str, str, int], ...]
    skipped: tuple[tuple[str, str, str], ...]


def plan_flink_export(snapshot: FlinkSnapshot, operator: str | None, state: str | None,
                      value_types: dict[str, str] | None = None, *, allow_empty: bool = False) -> FlinkExportPlan:
    """Choose the decodable keyed states (driver side: reads only ``_metadata`` and headers).

    ``value_types`` declares the types of PyFlink ``byte[]`` values by state name.

    Raises:
        StateNotFoundError: Unknown operator or state.
        BadInputError: A state asked for by name cannot be decoded, or nothing can be.
    """
    from statekit.flink.entries import decodable_states

    ops = [snapshot.metadata.operator(operator)] if operator else list(snapshot.metadata.operators)
    chosen: list[tuple[str, str, str, str, int]] = []
    skipped: list[tuple[str, str, str]] = []
    for op in ops:
        label = op.uid or op.label
        if not any(sub.managed_keyed_state is not None for sub in op.subtasks):
            continue
        try:
            states = decodable_states(snapshot, label, value_types=value_types)
        except BadInputError as exc:
            if operator or value_types:  # asked for by name, or a declared type that does not fit
                raise
            skipped.append((label, "*", str(exc)))
            continue
        for support in states:
            if state not in (None, support.name):
                continue
            if support.decoder is None:
                if state:
                    raise BadInputError(f"cannot export {label}/{support.name}: {support.reason}", path=snapshot.path)
                skipped.append((label, support.name, support.reason or "cannot be decoded"))
                continue
            chosen.append((label, support.name, support.kind, support.decoder.spark_schema, op.max_parallelism))
    if state and not chosen and not allow_empty:
        where = f"operator {operator!r}" if operator else "any operator"
        raise StateNotFoundError(f"no keyed state named {state!r} in {where}", path=snapshot.path)
    if not chosen and not allow_empty:
        reasons = "; ".join(f"{uid}/{name}: {why}" for uid, name, why in skipped) or "no keyed state"
        raise BadInputError(f"nothing to export from this Flink savepoint ({reasons})", path=snapshot.path)
    return FlinkExportPlan(tuple(chosen), tuple(skipped))


def _decode_slice(path: str, uid: str, state: str, storage_options: dict[str, Any] | None, uids: tuple[str, ...],
                  value_type: str | None, key_groups: list[int]) -> Iterator[tuple[Any, ...]]:
    """Executor side: the rows of ``key_groups`` of one state."""
    from statekit.flink.entries import read_keyed_state
    from statekit.flink.snapshot import open_flink_snapshot

    snapshot = open_flink_snapshot(path, storage_options=storage_options, uids=uids)
    for e in read_keyed_state(snapshot, uid, state, key_groups=key_groups, value_type=value_type):
        yield (e.key, e.namespace, e.user_key, e.value, e.expiry, e.key_group, e.subtask)


def flink_state_frame(spark: SparkSession, *, snapshot: FlinkSnapshot, uid: str, state: str, schema: str,
                      value_type: str | None = None) -> DataFrame:
    """One state as a DataFrame, decoded on the executors in slices of key groups.

    RocksDB state is sliced by whole subtasks (each slice opens one instance), canonical
    streams key group by key group (:func:`statekit.flink.entries.key_group_slices`). One
    ``mapInArrow`` task per slice over ``spark.range`` returns Arrow batches (classic sessions
    and Spark Connect alike).
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    from statekit.flink.entries import key_group_slices
    from statekit.spark.session import default_parallelism, map_slices

    slices = key_group_slices(snapshot, uid, default_parallelism(spark))
    struct = spark.createDataFrame([], schema).schema  # the DDL as a StructType (no job)
    decode = SliceDecoder(snapshot.path, uid, state, snapshot.storage_options, snapshot.uids, value_type,
                          to_arrow_schema(struct, timezone="UTC"))
    return map_slices(spark, [tuple(s) for s in slices], decode, struct)


@dataclass(frozen=True)
class SliceDecoder:
    """Reads one slice of key groups of a state (a Spark task, or the local engine), as Arrow
    batches of the state's schema ``target`` (Spark's Arrow form of its DDL schema)."""

    path: str
    uid: str
    state: str
    storage_options: dict[str, Any] | None
    uids: tuple[str, ...]
    value_type: str | None
    target: pa.Schema

    def __call__(self, key_groups: tuple[int, ...]) -> Iterator[pa.RecordBatch]:
        import itertools

        target = self.target
        given = epoch_ms_schema(target)
        rows = _decode_slice(self.path, self.uid, self.state, self.storage_options, self.uids, self.value_type,
                             list(key_groups))
        while chunk := list(itertools.islice(rows, _BATCH_ROWS)):
            try:
                yield rows_to_batch(chunk, given, target)
            except _UNFIT as exc:
                row, reason = _first_unfit(chunk, given, target, exc)
                raise CorruptStateError(
                    f"state {self.state!r} of operator {self.uid!r}, key group "
                    f"{row[target.get_field_index('key_group')]}: a value does not fit its Spark column "
                    f"({reason}); is the declared type right?", path=self.path) from None


_BATCH_ROWS = 16384


_UNFIT: tuple[type[BaseException], ...] = (ValueError, TypeError, OverflowError)  # Arrow's errors derive from these


def _first_unfit(rows: list[tuple[Any, ...]], given: pa.Schema, target: pa.Schema,
                 error: BaseException) -> tuple[tuple[Any, ...], str]:
    """The first row of a batch that failed :func:`rows_to_batch` which fails alone, and why."""
    for row in rows:
        try:
            rows_to_batch([row], given, target)
        except _UNFIT as exc:
            return row, _first_line(exc)
    return rows[0], _first_line(error)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def epoch_ms_schema(target: pa.Schema) -> pa.Schema:
    """``target`` with every timestamp (also inside lists, maps and structs) as epoch
    milliseconds: the form in which the Flink decoders give timestamps (ints)."""
    import pyarrow as pa

    def of(t: pa.DataType) -> pa.DataType:
        if pa.types.is_timestamp(t):
            return pa.timestamp("ms", tz=t.tz)
        if pa.types.is_map(t):
            return pa.map_(of(t.key_type), of(t.item_type))
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return pa.list_(t.value_field.with_type(of(t.value_type)))
        if pa.types.is_struct(t):
            return pa.struct([t.field(i).with_type(of(t.field(i).type)) for i in range(t.num_fields)])
        return t

    return pa.schema([f.with_type(of(f.type)) for f in target], metadata=target.metadata)


def rows_to_batch(rows: list[tuple[Any, ...]], given: pa.Schema, target: pa.Schema) -> pa.RecordBatch:
    """Rows of Python values (timestamps as epoch ms, :func:`epoch_ms_schema`) as a batch of ``target``."""
    import pyarrow as pa

    columns = list(zip(*rows))
    arrays = [pa.array(column, type=g.type).cast(t.type) for column, g, t in zip(columns, given, target)]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def export_flink(spec: ExportSpec, progress: ProgressFactory | None = None, *, uids: tuple[str, ...] = (),
                 value_types: dict[str, str] | None = None) -> ExportResult:
    """Export the decodable keyed states of the Flink snapshot at ``spec.path``.

    Args:
        spec: The export.
        progress: The Spark start, then the tasks of each state's write (:mod:`statekit.spark.progress`).
        uids: Operator uids to label operators with (``--uid``; metadata v3/v4 has none).
        value_types: Declared types of PyFlink state values by state name (``--value-type``).

    Raises:
        StateNotFoundError: Unknown operator or state.
        BadInputError: Not a canonical savepoint, a state asked for that cannot be decoded,
            nothing to export, an existing output.
    """
    from statekit.flink.entries import state_value_types
    from statekit.flink.snapshot import open_flink_snapshot

    snapshot = open_flink_snapshot(spec.path, storage_options=spec.storage_options, uids=uids)
    offsets = offsets_tables(snapshot, spec.operator, spec.state)
    plan = plan_flink_export(snapshot, spec.operator, None if spec.state == OFFSETS_TABLE else spec.state,
                             value_types, allow_empty=bool(offsets))
    if spec.state == OFFSETS_TABLE:
        plan = FlinkExportPlan((), plan.skipped)
    tables = [ExportTable(uid, name, kind, functools.partial(
        flink_state_frame, snapshot=snapshot, uid=uid, state=name, schema=schema,
        value_type=state_value_types(value_types, name))) for uid, name, kind, schema, _ in plan.states]
    from dataclasses import replace

    from statekit.flink.storage import moved_note

    result = export_tables(spec, snapshot.path, tables + offsets, progress, plan.skipped)
    note = moved_note(snapshot)
    return replace(result, notes=(note,)) if note else result


OFFSETS_TABLE = "offsets"
OFFSETS_SCHEMA = ("subtask int, connector string, version int, split_id string, topic string, partition int, "
                  "starting_offset bigint, stopping_offset bigint, path string, offset bigint, length bigint, "
                  "position bigint, records_to_skip bigint, next_number bigint, last_number bigint, raw string")


def offsets_rows(snapshot: FlinkSnapshot, operator: str | None, state: str | None) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """(operator label, rows of :data:`OFFSETS_SCHEMA`) of every source operator whose readers
    held splits, one row per split (the source positions of :mod:`statekit.flink.source_splits`);
    only with no ``--state`` or ``--state offsets``. Both engines export them as
    ``OUT/operator_uid=<uid>/state_name=offsets/``.

    Raises:
        StateNotFoundError: ``--state offsets`` and no source operator with splits.
    """
    from statekit.flink.source_splits import source_splits

    if state not in (None, OFFSETS_TABLE):
        return []
    ops = [snapshot.metadata.operator(operator)] if operator else list(snapshot.metadata.operators)
    found = []
    columns = [part.split()[0] for part in OFFSETS_SCHEMA.split(", ")]
    for op in ops:
        splits = source_splits(snapshot, op)
        if splits:
            found.append((op.uid or op.label, [tuple(getattr(split, column) for column in columns) for split in splits]))
    if state == OFFSETS_TABLE and not found:
        raise StateNotFoundError("no source operator with splits (nothing for --state offsets)", path=snapshot.path)
    return found


def offsets_tables(snapshot: FlinkSnapshot, operator: str | None, state: str | None) -> list[ExportTable]:
    """The ``offsets`` tables (:func:`offsets_rows`) as Spark export tables."""
    return [ExportTable(label, OFFSETS_TABLE, "offsets", functools.partial(_offsets_frame, rows=rows))
            for label, rows in offsets_rows(snapshot, operator, state)]


def _offsets_frame(spark: SparkSession, *, rows: list[tuple[Any, ...]]) -> DataFrame:
    return spark.createDataFrame(rows, OFFSETS_SCHEMA)


def export_flink_options(spec: ExportSpec, progress: ProgressFactory | None = None, *, uids: tuple[str, ...] = (),
                         value_types: dict[str, str] | None = None) -> ExportResult:
    """``export --uid/--value-type``: :func:`export_flink` on the Flink snapshot ``spec.path`` names.

    Raises:
        BadInputError: ``spec.path`` is not an Apache Flink snapshot (the options are Flink's).
    """
    from dataclasses import replace

    from statekit.flink.snapshot_kind import flink_snapshot_path

    flink_path = flink_snapshot_path(spec.path, storage_options=spec.storage_options)
    if flink_path is None:
        raise BadInputError("--uid and --value-type apply to Apache Flink snapshots", path=spec.path)
    return export_flink(replace(spec, path=flink_path), progress, uids=uids, value_types=value_types)
