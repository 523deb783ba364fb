"""Export state to Parquet through Spark (``statekit export``).

Layout of the output directory (Hive partitions, one directory per state)::

    OUT/operator_uid=<uid>/state_name=<state>/part-*.parquet

Columns: ``key``, ``namespace``, ``user_key``, ``value``, ``expiry``, ``key_group``,
``subtask`` — typed as the ``statekit`` data source types them
(:mod:`statekit.readers.typed_columns`); each state directory has its own schema.
Operator state exports with null key, namespace and key group (broadcast state: one copy,
its keys in ``user_key``).

Atomicity: Spark writes every state into a hidden directory beside OUT
(``.<name>.inprogress-<id>``); only when all states are written is it renamed to OUT. A
failed export removes the hidden directory and leaves nothing at OUT. Paths without a
scheme (or ``file://``) are published with an atomic local rename; other Hadoop
filesystems (``hdfs://``, ``s3a://``) through Hadoop's rename.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statekit.readers.diff import Progress, ProgressFactory, hive_partition_dir
from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.errors import BadInputError, StateNotFoundError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["ExportedState", "ExportResult", "export_savepoint", "selected_states", "ProgressFactory"]

FORMATS = ("parquet",)


@dataclass(frozen=True)
class ExportedState:
    operator_uid: str
    state_name: str
    kind: str
    path: str
    rows: int | None
    files: int | None

    def to_json(self) -> dict[str, Any]:
        return {"operator_uid": self.operator_uid, "state_name": self.state_name, "kind": self.kind,
                "path": self.path, "rows": self.rows, "files": self.files}


@dataclass(frozen=True)
class ExportResult:
    source: str
    output: str
    format: str
    master: str
    states: tuple[ExportedState, ...]
    seconds: float
    skipped: tuple[tuple[str, str, str], ...] = ()

    @property
    def rows(self) -> int | None:
        counts = [s.rows for s in self.states]
        return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "output": self.output, "format": self.format, "master": self.master,
                "rows": self.rows, "seconds": round(self.seconds, 3), "states": [s.to_json() for s in self.states],
                "skipped": [{"operator_uid": uid, "state_name": name, "reason": why} for uid, name, why in self.skipped]}


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


def export_savepoint(
    path: str,
    output: str,
    *,
    operator: str | None = None,
    state: str | None = None,
    master: str = "local[*]",
    conf: Mapping[str, str] | None = None,
    fmt: str = "parquet",
    include_expired: bool = False,
    trust_pickle: bool = False,
    storage_options: dict[str, Any] | None = None,
    verbose: bool = False,
    progress: ProgressFactory | None = None,
) -> ExportResult:
    """Export all (or the chosen) states of a savepoint to Parquet through Spark.

    Args:
        path: savepoint/checkpoint path or fsspec URL (read by the executors through fsspec).
        output: new directory (a local path or a Hadoop filesystem URL); must not exist or be empty.
        operator, state: export only this operator and/or state name.
        master, conf: Spark master and extra configuration (embedded ``local[*]`` by default).
        fmt: output format (``parquet``).
        include_expired: keep entries whose TTL has expired.
        trust_pickle: allow decoding pickle-serialized state.
        storage_options: fsspec options for reading ``path`` (driver and executors).
        verbose: show Spark's logs.
        progress: ``Output.progress``-like factory; advanced once per exported state.

    Raises:
        BadInputError: unknown format, existing output, unknown operator or state.
        SparkJobError: the Spark job failed for a reason outside statekit.
    """
    if fmt not in FORMATS:
        raise BadInputError(f"unsupported export format {fmt!r} (supported: {', '.join(FORMATS)})")
    started = time.monotonic()
    from statekit.flink.dispatch import flink_snapshot_path

    flink_path = flink_snapshot_path(path, storage_options=storage_options)
    if flink_path is not None:
        return _export_flink(flink_path, output, operator=operator, state=state, master=master, conf=conf,
                             fmt=fmt, storage_options=storage_options, verbose=verbose, progress=progress,
                             started=started)
    reader = SavepointReader.read(path, trust_pickle=trust_pickle, storage_options=storage_options)
    states = selected_states(reader, operator, state)
    from statekit.spark.session import OutputDir, get_spark, spark_errors

    spark = get_spark(master, conf, verbose)
    target = OutputDir.for_url(spark, output)
    exported: list[ExportedState] = []
    options = {"includeExpired": str(include_expired).lower(), "trustPickle": str(trust_pickle).lower()}
    with spark_errors(verbose), target.staged() as staging, _progress(progress, len(states)) as advance:
        for uid, name, kind in states:
            relative = hive_partition_dir(uid, name)
            _write_state(spark, reader.path, uid, name, target.join(staging, relative), storage_options, options)
            exported.append(ExportedState(uid, name, kind, relative, *target.count(staging, relative)))
            advance(f"{uid}/{name}", 1)
    return ExportResult(reader.path, target.url, fmt, str(spark.sparkContext.master), tuple(exported),
                        time.monotonic() - started)


def _export_flink(path: str, output: str, *, operator: str | None, state: str | None, master: str,
                  conf: Mapping[str, str] | None, fmt: str, storage_options: dict[str, Any] | None, verbose: bool,
                  progress: ProgressFactory | None, started: float) -> ExportResult:
    from statekit.flink.snapshot import open_flink_snapshot
    from statekit.spark.session import OutputDir, get_spark, spark_errors
    from statekit.spark.flink_export import export_flink_states, plan_flink_export

    snapshot = open_flink_snapshot(path, storage_options=storage_options)
    plan = plan_flink_export(snapshot, operator, state)
    spark = get_spark(master, conf, verbose)
    target = OutputDir.for_url(spark, output)
    with spark_errors(verbose), target.staged() as staging, _progress(progress, len(plan.states)) as advance:
        exported = export_flink_states(spark, snapshot, plan, target, staging, storage_options, advance)
    return ExportResult(snapshot.path, target.url, fmt, str(spark.sparkContext.master), tuple(exported),
                        time.monotonic() - started, plan.skipped)


@contextmanager
def _progress(factory: ProgressFactory | None, total: int) -> Iterator[Progress]:
    if factory is None:
        yield lambda _name, _amount: None
        return
    with factory(f"exporting {total} state(s)", total=total, unit="items") as advance:
        yield advance


def _write_state(spark: SparkSession, source: str, uid: str, name: str, target: str,
                 storage_options: dict[str, Any] | None, options: dict[str, str]) -> None:
    from statekit.spark.source import read_state

    frame = read_state(spark, source, uid, name, storage_options=storage_options, options=options)
    frame.write.mode("errorifexists").parquet(target)
