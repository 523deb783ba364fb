"""Export the keyed state of an Apache Flink canonical savepoint to Parquet through Spark.

Same layout and columns as a statekit export (``OUT/operator_uid=<uid>/state_name=<state>/``;
``key``, ``namespace``, ``user_key``, ``value``, ``key_group``, ``subtask``), typed from
the Flink serializer snapshots (:mod:`statekit.flink.serializers`): a PyFlink key
``Row<String>`` becomes ``struct<f0:string>``, a list of ``byte[]`` ``array<binary>``.

Each Spark task opens the savepoint itself and decodes a slice of key groups with ranged
reads, so neither the driver nor an executor holds more than one key group's bytes. States
that cannot be decoded (timers, unsupported serializers, operators without keyed state in
canonical form) are skipped with their reason when the whole savepoint is exported, and
are an error when asked for by ``--state``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statekit.readers.diff import hive_partition_dir
from statekit.statefmt.errors import BadInputError, StateNotFoundError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from statekit.flink.storage import FlinkSnapshot
    from statekit.spark.export import ExportedState

__all__ = ["FlinkExportPlan", "plan_flink_export", "write_flink_state", "export_flink_states"]


@dataclass(frozen=True)
class FlinkExportPlan:
    """What to export: (uid, state, kind, Spark schema, max parallelism), and what is skipped why."""

    states: tuple[tuple[str, str, str, str, int], ...]
    skipped: tuple[tuple[str, str, str], ...]


def plan_flink_export(snapshot: FlinkSnapshot, operator: str | None, state: str | None) -> FlinkExportPlan:
    """Choose the decodable keyed states (driver side: reads only ``_metadata`` and headers).

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
            states = decodable_states(snapshot, label)
        except BadInputError as exc:
            if operator:
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
    if state and not chosen:
        where = f"operator {operator!r}" if operator else "any operator"
        raise StateNotFoundError(f"no keyed state named {state!r} in {where}", path=snapshot.path)
    if not chosen:
        reasons = "; ".join(f"{uid}/{name}: {why}" for uid, name, why in skipped) or "no keyed state"
        raise BadInputError(f"nothing to export from this Flink savepoint ({reasons})", path=snapshot.path)
    return FlinkExportPlan(tuple(chosen), tuple(skipped))


def _decode_slice(path: str, uid: str, state: str, storage_options: dict[str, Any] | None,
                  key_groups: list[int]) -> Iterator[tuple[Any, ...]]:
    """Executor side: the rows of ``key_groups`` of one state."""
    from statekit.flink.entries import read_savepoint_entries
    from statekit.flink.snapshot import open_flink_snapshot

    snapshot = open_flink_snapshot(path, storage_options=storage_options)
    for e in read_savepoint_entries(snapshot, uid, state, key_groups=key_groups):
        yield (e.key, e.namespace, e.user_key, e.value, e.key_group, e.subtask)


def write_flink_state(spark: SparkSession, path: str, storage_options: dict[str, Any] | None,
                      uid: str, state: str, schema: str, max_parallelism: int, target: str) -> None:
    """Decode one state on the executors and write it as Parquet to ``target``."""
    tasks = max(1, min(max_parallelism, spark.sparkContext.defaultParallelism))
    slices = [list(range(i, max_parallelism, tasks)) for i in range(tasks)]  # spread: hot ranges share out
    rows = spark.sparkContext.parallelize(slices, tasks).flatMap(
        functools.partial(_decode_slice, path, uid, state, storage_options))
    spark.createDataFrame(rows, schema=schema).write.mode("errorifexists").parquet(target)


def export_flink_states(spark: SparkSession, snapshot: FlinkSnapshot, plan: FlinkExportPlan, target: Any,
                        staging: str, storage_options: dict[str, Any] | None,
                        advance: Any) -> list[ExportedState]:
    """Write every planned state under ``staging``; the caller publishes it."""
    from statekit.spark.export import ExportedState

    exported: list[ExportedState] = []
    for uid, name, kind, schema, max_parallelism in plan.states:
        relative = hive_partition_dir(uid, name)
        write_flink_state(spark, snapshot.path, storage_options, uid, name, schema, max_parallelism,
                          target.join(staging, relative))
        exported.append(ExportedState(uid, name, kind, relative, *target.count(staging, relative)))
        advance(f"{uid}/{name}", 1)
    return exported

