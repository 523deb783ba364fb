"""Export state through Spark (``statekit export``), one table per state.

Layout of the output directory (Hive partitions, one directory per state)::

    OUT/operator_uid=<uid>/state_name=<state>/part-*.parquet   (or .csv, .json: --format)

Columns: ``key``, ``namespace``, ``user_key``, ``value``, ``expiry``, ``key_group``,
``subtask`` — typed as the ``statekit`` data source types them
(:mod:`statekit.readers.typed_columns`); each state directory has its own schema.
Operator state exports with null key, namespace and key group (broadcast state: one copy,
its keys in ``user_key``). How each format holds the types: :mod:`statekit.spark.formats`.
A namespaced state's ``namespace`` column has its declared ``namespace_type`` (a window:
``array<bigint>``). The window states of a window operator (:mod:`statekit.readers.window_state`)
also get ``window_start`` and ``window_end`` from their namespace (timestamps, null for the
global window); ``window-trigger`` also ``trigger_state`` (its user key: the trigger value's
name); the timer table ``_window_timers`` also ``timer_domain`` (``event_time``/
``processing_time``) and ``timer_timestamp`` (a timestamp) from its user key. A namespace
or timer user key of another shape fails the export with :class:`CorruptStateError`.

This module exports statekit snapshots (:func:`export_statekit`);
:mod:`statekit.spark.flink_export` exports Apache Flink savepoints; both write through
:func:`export_tables`, and :mod:`statekit.spark.engine` chooses between them.

Atomicity: Spark writes every state into a hidden directory beside OUT
(``.<name>.inprogress-<id>``); only when all states are written is it renamed to OUT. A
failed export removes the hidden directory and leaves nothing at OUT. Paths without a
scheme (or ``file://``) are published with an atomic local rename; other Hadoop
filesystems (``hdfs://``, ``s3a://``) through Hadoop's rename.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

from statekit.readers.progress import ProgressFactory
from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.window_state import (
    WINDOW_CONTENTS_STATE,
    WINDOW_TIMERS_STATE,
    WINDOW_TRIGGER_STATE,
    window_state_role,
)
from statekit.spark.formats import DEFAULT_FORMAT, check_format, write_table
from statekit.spark.progress import spark_start_progress, task_progress
from statekit.spark.session import OutputDir, SparkSettings, spark_errors
from statekit.statefmt.errors import BadInputError, CorruptStateError, StateNotFoundError
from statekit.statefmt.json_contract import JsonShape
from statekit.statefmt.layout import hive_partition_dir

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# how an error raised inside a Spark job names its statekit class (spark.session.spark_errors)
_ERROR_CLASS = f"{CorruptStateError.__module__}.{CorruptStateError.__name__}"
_STATES = {"contents": WINDOW_CONTENTS_STATE, "trigger": WINDOW_TRIGGER_STATE, "timers": WINDOW_TIMERS_STATE}

__all__ = ["ExportSpec", "ExportTable", "ExportedState", "ExportResult", "export_statekit", "export_tables",
           "selected_states"]


@dataclass(frozen=True)
class ExportSpec:
    """One ``statekit export``, validated on construction.

    Attributes:
        path: A snapshot (statekit's, or an Apache Flink canonical savepoint): path or fsspec
            URL, read by the executors through fsspec.
        output: A new directory (a local path or a Hadoop filesystem URL); must not exist or be empty.
        operator, state: Export only this operator and/or state name.
        fmt: The output format (:data:`statekit.spark.formats.FORMATS`).
        include_expired: Keep entries whose TTL has expired (statekit snapshots).
        trust_pickle: Allow decoding pickle-serialized state (statekit snapshots).
        storage_options: fsspec options for reading ``path`` (driver and executors).
        spark: Where Spark runs.

    Raises:
        BadInputError: An unknown format.
    """

    path: str
    output: str
    operator: str | None = None
    state: str | None = None
    fmt: str = DEFAULT_FORMAT
    include_expired: bool = False
    trust_pickle: bool = False
    storage_options: dict[str, Any] | None = None
    spark: SparkSettings = field(default_factory=SparkSettings)

    def __post_init__(self) -> None:
        check_format(self.fmt)


@dataclass(frozen=True)
class ExportTable:
    """One state to export: its names, its kind, and how to read it as a DataFrame."""

    uid: str
    name: str
    kind: str
    frame: Callable[[SparkSession], DataFrame]


@dataclass(frozen=True)
class ExportedState:
    operator_uid: str
    state_name: str
    kind: str
    path: str
    rows: int | None
    files: int | None


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote.

    Attributes:
        source: The snapshot.
        output: The new directory.
        format: Its format.
        master: The Spark master (or Connect URL) it ran on; ``None`` on the local engine.
        states: Every state exported, with its rows and files.
        seconds: Wall time.
        skipped: (uid, state, reason) of states that could not be exported (Flink snapshots).
        engine: ``spark`` or ``local``.
        engine_note: Why ``--engine auto`` chose the engine (``None`` when it was given).
    """

    json_shape: ClassVar[JsonShape] = JsonShape(extra=("rows",), digits={"seconds": 3},
                                                records={"skipped": ("operator_uid", "state_name", "reason")})

    source: str
    output: str
    format: str
    master: str | None
    states: tuple[ExportedState, ...]
    seconds: float
    skipped: tuple[tuple[str, str, str], ...] = ()
    notes: tuple[str, ...] = ()
    engine: str = "spark"
    engine_note: str | None = None

    @property
    def rows(self) -> int | None:
        counts = [s.rows for s in self.states]
        return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)


def selected_states(reader: SavepointReader, operator: str | None, state: str | None) -> list[tuple[str, str, str]]:
    """(uid, state, kind) of every state to export; unknown names are bad input."""
    ops = [reader.operator(operator)] if operator else list(reader.operators)
    chosen = [(op.uid, d.name, d.kind.value) for op in ops for d in op.states if state in (None, d.name)]
    if state and not chosen:
        where = f"operator {operator!r}" if operator else "any operator"
        raise StateNotFoundError(f"no state named {state!r} in {where}")
    if not chosen:
        raise BadInputError("nothing to export: the savepoint holds no state", path=reader.path)
    for uid, name, _ in chosen:
        reader.codec(uid, name)  # refuses pickle without --trust-pickle before Spark starts
    return chosen


def export_statekit(spec: ExportSpec, progress: ProgressFactory | None = None) -> ExportResult:
    """Export all (or the chosen) states of a statekit snapshot.

    Raises:
        BadInputError: Existing output, unknown operator or state, pickle state without trust.
        SparkJobError: The Spark job failed for a reason outside statekit.
    """
    reader = SavepointReader.read(spec.path, trust_pickle=spec.trust_pickle, storage_options=spec.storage_options)
    options = {"includeExpired": str(spec.include_expired).lower(), "trustPickle": str(spec.trust_pickle).lower()}
    # a native snapshot is read from its canonical view, a directory on the driver's local disk
    # (executors must share it: local mode); the view lives until the export returns
    view = reader.canonical()
    source, read_spec = reader.path, spec
    if view is not reader:
        source, read_spec = view.snapshot.directory, replace(spec, storage_options=None)
    tables = [_statekit_table(read_spec, source, uid, name, kind, options,
                              _WindowColumns.of(reader, uid, name))
              for uid, name, kind in selected_states(reader, spec.operator, spec.state)]
    return export_tables(spec, reader.path, tables, progress)


def _statekit_table(spec: ExportSpec, source: str, uid: str, name: str, kind: str,
                    options: dict[str, str], window: _WindowColumns | None = None) -> ExportTable:
    def frame(spark: SparkSession) -> DataFrame:
        from statekit.spark.source import scan_state

        df = scan_state(spark, source, uid, name, storage_options=spec.storage_options, options=options)
        return df if window is None else with_window_columns(df, window.role, window.path)

    return ExportTable(uid, name, kind, frame)


@dataclass(frozen=True)
class _WindowColumns:
    """A window state to export with its window columns: its role and the snapshot (for errors)."""

    role: str
    path: str

    @classmethod
    def of(cls, reader: SavepointReader, uid: str, name: str) -> _WindowColumns | None:
        role = window_state_role(reader.operator(uid), name)
        return None if role is None else cls(role, reader.path)


def with_window_columns(df: DataFrame, role: str, path: str | None = None) -> DataFrame:
    """``df`` of a window state (``role``: contents, trigger, timers) with its typed window columns.

    The ``namespace`` column (``array<bigint>``) is the window: ``[start, end]`` epoch ms, ``[]``
    the global window; the trigger state's ``user_key`` is the trigger value's name, the timer
    state's ``[domain, timestamp]``. A row of another shape fails the Spark job with a
    :class:`CorruptStateError` naming ``path`` (:func:`statekit.spark.session.spark_errors`)."""
    from pyspark.sql import functions as F

    window = F.col("namespace")
    is_window = F.coalesce((F.size(window) == 2) & (F.get(window, 0) < F.get(window, 1)), F.lit(False))
    checked = F.when(is_window | (F.size(window) == 0), window).otherwise(
        _corrupt(path, F.format_string("window state %s: namespace %s is not a window ([start, end] epoch ms "
                                       "with start < end, or [] for the global window)", F.lit(repr(_STATES[role])),
                                       F.coalesce(F.to_json(window), F.lit("null")))))
    df = df.withColumn("namespace", checked)
    if role == "trigger":
        df = df.withColumn("trigger_state", F.col("user_key"))
    if role == "timers":
        timer = F.col("user_key")
        domain, stamp = F.get(timer, 0), F.get(timer, 1)
        valid = F.coalesce((F.size(timer) == 2) & domain.isin(0, 1) & stamp.isNotNull(), F.lit(False))
        named = F.when(domain == 0, "event_time").otherwise("processing_time")
        df = (df.withColumn("timer_domain", F.when(valid, named).otherwise(_corrupt(path, F.format_string(
                  f"window state {WINDOW_TIMERS_STATE!r}: user key %s is not a timer ([domain, timestamp], domain 0 "
                  "event time or 1 processing time)", F.coalesce(F.to_json(timer), F.lit("null"))))))
                .withColumn("timer_timestamp", F.timestamp_millis(stamp)))
    return (df.withColumn("window_start", F.when(is_window, F.timestamp_millis(F.get(window, 0))))
              .withColumn("window_end", F.when(is_window, F.timestamp_millis(F.get(window, 1)))))


def _corrupt(path: str | None, message: Any) -> Any:
    """A Spark expression that fails the job as ``CorruptStateError(message)`` naming ``path``.

    The error line ends at a newline so that :func:`~statekit.spark.session.spark_errors`
    reads back exactly the message (Spark appends its SQLSTATE after it)."""
    from pyspark.sql import functions as F

    prefix = f"{_ERROR_CLASS}: {path}: " if path else f"{_ERROR_CLASS}: "
    return F.raise_error(F.concat(F.lit(prefix), message, F.lit("\n")))


def export_tables(spec: ExportSpec, source: str, tables: Sequence[ExportTable], progress: ProgressFactory | None,
                  skipped: tuple[tuple[str, str, str], ...] = ()) -> ExportResult:
    """Write every table to its Hive partition of a staged ``spec.output`` in ``spec.fmt``.

    Progress: the Spark start, then one bar per state counting its write's tasks
    (:mod:`statekit.spark.progress`)."""
    started = time.monotonic()
    spark = spark_start_progress(spec.spark, progress)
    target = OutputDir.for_url(spark, spec.output, [source])
    exported: list[ExportedState] = []
    with spark_errors(spec.spark.verbose), target.staged() as staging:
        for table in tables:
            relative = hive_partition_dir(table.uid, table.name)
            with task_progress(spark, progress, f"{table.uid}/{table.name}"):
                write_table(table.frame(spark), target.join(staging, relative), spec.fmt)
            exported.append(ExportedState(table.uid, table.name, table.kind, relative,
                                          *target.count(staging, relative, spec.fmt)))
    return ExportResult(source, target.url, spec.fmt, spec.spark.master_of(spark), tuple(exported),
                        time.monotonic() - started, skipped)
