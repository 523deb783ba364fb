"""The one place that chooses how a command runs: on this machine or on Spark, and which
exporter reads a snapshot (statekit's or Apache Flink's).

Each entry takes a frozen spec and returns the command's typed result::

    export(ExportSpec(path, output, fmt="csv"))                     # always on Spark
    diff(DiffSpec(a, b, output=out), "spark", SparkSettings("local[4]"))
    bootstrap(BootstrapSpec(...), "local")

Importing this module loads neither pyspark nor any engine: each is imported by the branch
that runs it, so the local engines never start a JVM.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from statekit.readers.diff import DiffSpec, SavepointDiff
from statekit.readers.progress import ProgressFactory
from statekit.spark.session import SparkSettings
from statekit.statefmt.errors import BadInputError
from statekit.writers.key_group_sorter import DEFAULT_MEMORY_BUDGET

if TYPE_CHECKING:
    from statekit.flink.rewrite_report import FlinkRescaleReport
    from statekit.flink.savepoint_bootstrap import FlinkBootstrapReport, FlinkBootstrapSpec
    from statekit.spark.export import ExportResult, ExportSpec
    from statekit.writers.bootstrap import BootstrapReport
    from statekit.writers.bootstrap_spec import BootstrapSpec
    from statekit.writers.rescale import RescaleReport

__all__ = ["ENGINES", "bootstrap", "bootstrap_flink", "diff", "export", "rescale"]

ENGINES = ("local", "spark")


def export(spec: ExportSpec, progress: ProgressFactory | None = None) -> ExportResult:
    """``statekit export`` (always on Spark): an Apache Flink savepoint through the Flink
    exporter, anything else as a statekit snapshot (whose reader names what is wrong with it)."""
    from statekit.flink.snapshot_kind import flink_snapshot_path

    _require_pyspark("statekit export")
    flink_path = flink_snapshot_path(spec.path, storage_options=spec.storage_options)
    if flink_path is not None:
        from statekit.spark.flink_export import export_flink

        return export_flink(replace(spec, path=flink_path), progress)
    from statekit.spark.export import export_statekit

    return export_statekit(spec, progress)


def diff(spec: DiffSpec, engine: str = "local", spark: SparkSettings | None = None,
         progress: ProgressFactory | None = None) -> SavepointDiff:
    """``statekit diff`` on ``engine`` (``spark`` runs with ``spark``'s settings): the same
    counts and the same ``-o`` rows on both."""
    if _engine(engine) == "spark":
        _require_pyspark("--engine spark")
        from statekit.spark.diff import diff_on_spark

        return diff_on_spark(spec, spark or SparkSettings(), progress)
    from statekit.writers.diff_output import write_diff

    return write_diff(spec, progress)


def bootstrap(spec: BootstrapSpec, engine: str = "local", *, batch_size: int = 65536, spill_dir: str | None = None,
              memory_budget: int = DEFAULT_MEMORY_BUDGET, progress: ProgressFactory | None = None,
              spark: SparkSettings | None = None) -> BootstrapReport:
    """``statekit bootstrap`` on ``engine`` (``spark`` runs with ``spark``'s settings). Operator
    state is small by nature: the local engine writes it whatever the engine (the Spark
    bootstrap writes keyed state only)."""
    if _engine(engine) == "spark":
        _require_pyspark("--engine spark")
        if spec.kind.keyed:
            from statekit.spark.bootstrap import bootstrap_with_spark

            return bootstrap_with_spark(spec, spark, memory_budget=memory_budget)
    from statekit.writers.bootstrap import bootstrap_savepoint

    return bootstrap_savepoint(spec, batch_size=batch_size, spill_dir=spill_dir, memory_budget=memory_budget,
                               progress=progress)


def bootstrap_flink(spec: FlinkBootstrapSpec, engine: str = "local", *, batch_size: int = 65536,
                    spill_dir: str | None = None, memory_budget: int = DEFAULT_MEMORY_BUDGET,
                    progress: ProgressFactory | None = None,
                    spark: SparkSettings | None = None) -> FlinkBootstrapReport:
    """``statekit bootstrap --format flink`` on ``engine``: the same savepoint entries on both
    (Spark keeps one of several rows of a key, in no defined order)."""
    if _engine(engine) == "spark":
        _require_pyspark("--engine spark")
        from statekit.spark.flink_bootstrap import bootstrap_flink_with_spark

        return bootstrap_flink_with_spark(spec, spark, memory_budget=memory_budget)
    from statekit.flink.savepoint_bootstrap import bootstrap_flink_savepoint

    return bootstrap_flink_savepoint(spec, batch_size=batch_size, spill_dir=spill_dir, memory_budget=memory_budget,
                                     progress=progress)


def rescale(path: str, output: str | None, *, engine: str = "local", spark: SparkSettings | None = None,
            parallelism: int | None = None, operator_parallelism: dict[str, int] | None = None,
            max_parallelism: int | None = None, dry_run: bool = False, exact_plan: bool = False,
            spill_dir: str | None = None, memory_budget: int = DEFAULT_MEMORY_BUDGET,
            progress: ProgressFactory | None = None) -> RescaleReport | FlinkRescaleReport:
    """``statekit rescale`` on ``engine``: a Flink savepoint's regrouping on Spark runs one task per
    slice of source key groups and one per target key-group range (``statekit.spark.flink_rewrite``);
    a statekit savepoint's new max parallelism on Spark, one task per target subtask
    (``statekit.spark.rescale``). Both write what the local engine writes."""
    from statekit.flink.dispatch import rescale_any
    from statekit.flink.snapshot_kind import flink_snapshot_path

    options: dict[str, Any] = dict(parallelism=parallelism, operator_parallelism=operator_parallelism,
                                   max_parallelism=max_parallelism, dry_run=dry_run, spill_dir=spill_dir,
                                   memory_budget=memory_budget, progress=progress, exact_plan=exact_plan)
    if _engine(engine) == "local" or dry_run:
        return rescale_any(path, output, **options)
    _require_pyspark("--engine spark")
    if flink_snapshot_path(path, allow_job_dir=False) is not None:
        from statekit.spark.flink_rewrite import SparkRegroup

        return rescale_any(path, output, **options, flink_regroup=SparkRegroup(spark, memory_budget=memory_budget),
                           execution="spark")
    from statekit.spark.rescale import rescale_with_spark

    return rescale_with_spark(path, output, spark, parallelism=parallelism, operator_parallelism=operator_parallelism,
                              max_parallelism=max_parallelism, memory_budget=memory_budget)


def _engine(name: str) -> str:
    if name not in ENGINES:
        raise BadInputError(f"--engine {name!r}: expected one of {', '.join(ENGINES)}")
    return name


def _require_pyspark(what: str) -> None:
    try:
        import pyspark  # noqa: F401 - only whether it is installed
    except ImportError:
        raise BadInputError(f"{what} needs PySpark: pip install 'statekit[spark]'") from None
