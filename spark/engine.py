"""The one place that chooses how a command runs: on this machine or on Spark, and which
exporter reads a snapshot (statekit's or Apache Flink's).

Each entry takes a frozen spec and returns the command's typed result::

    export(ExportSpec(path, output, fmt="csv"), "auto")             # local below 1 GiB of state
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
from statekit.spark.session import DEFAULT_MASTER, SparkSettings
from statekit.statefmt.errors import BadInputError
from statekit.writers.key_group_sorter import DEFAULT_MEMORY_BUDGET

if TYPE_CHECKING:
    from statekit.flink.rewrite_report import FlinkRescaleReport
    from statekit.flink.savepoint_bootstrap import FlinkBootstrapReport, FlinkBootstrapSpec
    from statekit.spark.export import ExportResult, ExportSpec
    from statekit.writers.bootstrap import BootstrapReport
    from statekit.writers.bootstrap_spec import BootstrapSpec
    from statekit.writers.rescale import RescaleReport

__all__ = ["ENGINES", "AUTO", "AUTO_LOCAL_MAX_BYTES", "bootstrap", "bootstrap_flink", "choose_export_engine", "diff",
           "export", "rescale"]

ENGINES = ("local", "spark")
AUTO = "auto"
# --engine auto exports on this machine below this many bytes of state: the local engine writes
# ~1M rows/s where a Spark session takes 10-60 s to start (docs/SPARK.md, "Engines")
AUTO_LOCAL_MAX_BYTES = 1 << 30


def export(spec: ExportSpec, engine: str = AUTO, progress: ProgressFactory | None = None, *,
           uids: tuple[str, ...] = (), value_types: dict[str, str] | None = None) -> ExportResult:
    """``statekit export`` on ``engine`` (``local``, ``spark`` or ``auto``: :func:`choose_export_engine`):
    an Apache Flink snapshot through the Flink exporter, anything else as a statekit snapshot
    (whose reader names what is wrong with it). ``uids`` and ``value_types`` (``--uid``,
    ``--value-type``) apply to Flink snapshots only.

    Raises:
        BadInputError: ``--uid``/``--value-type`` for a statekit snapshot, ``--engine local``
            with ``--remote`` or an output that is not a local path, no PySpark for Spark.
    """
    from statekit.flink.snapshot_kind import flink_snapshot_path

    flink_path = flink_snapshot_path(spec.path, storage_options=spec.storage_options)
    if (uids or value_types) and flink_path is None:
        raise BadInputError("--uid and --value-type apply to Apache Flink snapshots", path=spec.path)
    if flink_path is not None:
        spec = replace(spec, path=flink_path)
    chosen, note = choose_export_engine(spec, engine, flink=flink_path is not None, uids=uids,
                                        value_types=value_types)
    if chosen == "local":
        from statekit.spark import local_export

        if flink_path is not None:
            result = local_export.export_flink_local(spec, progress, uids=uids, value_types=value_types)
        else:
            result = local_export.export_statekit_local(spec, progress)
        return replace(result, engine_note=note)
    _require_pyspark("statekit export on Spark")
    if flink_path is not None:
        from statekit.spark.flink_export import export_flink

        return replace(export_flink(spec, progress, uids=uids, value_types=value_types), engine_note=note)
    from statekit.spark.export import export_statekit

    return replace(export_statekit(spec, progress), engine_note=note)


def choose_export_engine(spec: ExportSpec, engine: str = AUTO, *, flink: bool = False, uids: tuple[str, ...] = (),
                         value_types: dict[str, str] | None = None) -> tuple[str, str | None]:
    """(engine, why) for an export: ``engine`` when it is ``local`` or ``spark`` (why: ``None``);
    for ``auto``, Spark when the Spark settings name a cluster or a Connect server of the user's
    (``--master`` other than ``local[*]``, ``--remote``), when the output is not a local path, or
    when the chosen states hold :data:`AUTO_LOCAL_MAX_BYTES` or more (recorded sizes) and PySpark
    is installed — else the local engine.

    Raises:
        BadInputError: An unknown engine; ``local`` with ``--remote`` or ``--master``, or with an
            output that is not a local path.
    """
    if engine not in (*ENGINES, AUTO):
        raise BadInputError(f"--engine {engine!r}: expected one of {', '.join((*ENGINES, AUTO))}")
    explicit_spark = spec.spark.remote is not None and not spec.spark.managed
    if engine == "local":
        if explicit_spark:
            raise BadInputError("--remote runs the export on Spark Connect: it excludes --engine local")
        from statekit.spark.local_export import local_output_path

        local_output_path(spec.output)
        return "local", None
    if engine == "spark":
        return "spark", None
    if explicit_spark or spec.spark.master != DEFAULT_MASTER:
        return "spark", f"auto: Spark, for {spec.spark.target}"
    if "://" in spec.output and not spec.output.startswith("file://"):
        return "spark", "auto: Spark, for an output that is not a local path"
    size = _export_bytes(spec, flink, uids, value_types)
    from statekit.statefmt.units import human_bytes

    if size < AUTO_LOCAL_MAX_BYTES:
        return "local", (f"auto: the local engine for {human_bytes(size)} of state "
                         f"(below {human_bytes(AUTO_LOCAL_MAX_BYTES)}; --engine spark to use Spark)")
    if not _has_pyspark():
        return "local", (f"auto: the local engine for {human_bytes(size)} of state (PySpark is not installed: "
                         "pip install 'statekit[spark]' to export large snapshots on Spark)")
    return "spark", (f"auto: Spark for {human_bytes(size)} of state "
                     f"(from {human_bytes(AUTO_LOCAL_MAX_BYTES)}; --engine local to stay on this machine)")


def _export_bytes(spec: ExportSpec, flink: bool, uids: tuple[str, ...], value_types: dict[str, str] | None) -> int:
    """The recorded bytes of the states an export reads."""
    from statekit.spark import local_export

    if flink:
        from statekit.flink.snapshot import open_flink_snapshot
        from statekit.spark.flink_export import plan_flink_export

        snapshot = open_flink_snapshot(spec.path, storage_options=spec.storage_options, uids=uids)
        plan = plan_flink_export(snapshot, spec.operator, spec.state, value_types)
        return local_export.flink_state_bytes(snapshot, [uid for uid, *_ in plan.states])
    from statekit.readers.savepoint_reader import SavepointReader
    from statekit.spark.export import selected_states

    reader = SavepointReader.read(spec.path, trust_pickle=spec.trust_pickle, storage_options=spec.storage_options)
    return local_export.statekit_state_bytes(reader, selected_states(reader, spec.operator, spec.state))


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
    slice of source key groups, then gathers each target subtask's stream from their fragment files
    (the merge path: one task per target key-group range; ``statekit.spark.flink_rewrite``);
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


def _has_pyspark() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyspark") is not None


def _require_pyspark(what: str) -> None:
    if not _has_pyspark():
        raise BadInputError(f"{what} needs PySpark: pip install 'statekit[spark]'")
