"""The one table of rich renderers: every result type a command shows, and the function that
draws it (``--json`` prints the result's document by ``statekit.statefmt.json_contract``
instead, see ``statekit.cli.output``).

Both sides are dotted paths, resolved when a result is drawn, so nothing is imported ahead:
``statekit --help`` loads no reader and ``checkpoints list`` loads one renderer module.
:data:`Result` is the union of the registered classes: ``Output.show`` accepts nothing else,
so mypy proves that every command shows a result that has a renderer.
``tests/cli/test_renderers.py`` proves the rest: :data:`Result` and :data:`RENDERERS` name the
same classes, each class exists and its renderer is annotated with it, and every result class
returned by a library function a command calls is registered (and nothing else is).

Adding a result type: its class path and renderer here, the class in :data:`Result`, the
function in the ``statekit.cli.renderers`` module of its area.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from rich.console import Console

    from statekit.cli.config import ConfigReport
    from statekit.flink.convert import ConvertReport
    from statekit.flink.key_group_lookup import KeyGroupLookup
    from statekit.flink.offline_results import FlinkDisposal, FlinkInspection, FlinkVerifyReport, SnapshotList
    from statekit.flink.plan_check import CompiledPlanReport
    from statekit.flink.relocation import FlinkRelocation
    from statekit.flink.rewrite_report import FlinkModifyReport, FlinkRescaleReport
    from statekit.flink.savepoint_bootstrap import FlinkBootstrapReport
    from statekit.flink.upgrade import FlinkUpgradeReport
    from statekit.readers.diff.results import SavepointDiff
    from statekit.readers.inspection import SnapshotInspection
    from statekit.readers.listing import CheckpointList
    from statekit.readers.verification import VerifyReport
    from statekit.runtime.control.checkpoint_history import CheckpointHistory
    from statekit.runtime.control.results import (
        CancelResult,
        CheckpointResult,
        JobList,
        RunResult,
        SavepointResult,
        SavepointStatus,
        SavepointTrigger,
    )
    from statekit.runtime.jobmaster.compatibility import CompatibilityReport
    from statekit.spark.connect_server import SparkServerStatus
    from statekit.spark.export import ExportResult
    from statekit.writers.bootstrap import BootstrapReport
    from statekit.writers.disposal import DisposalPlan
    from statekit.writers.migration import MigrationReport
    from statekit.writers.report import ReportResult
    from statekit.writers.rescale import RescaleReport
    from statekit.writers.savepoint_modification import ModifyReport

    Result: TypeAlias = (
        CheckpointList | SnapshotInspection | VerifyReport | DisposalPlan
        | SnapshotList | FlinkInspection | FlinkVerifyReport | FlinkDisposal | FlinkRelocation | KeyGroupLookup
        | SavepointDiff | ExportResult
        | RescaleReport | ModifyReport | BootstrapReport | FlinkRescaleReport | FlinkModifyReport
        | FlinkBootstrapReport | ConvertReport
        | RunResult | JobList | SavepointResult | CancelResult
        | CheckpointResult | SavepointTrigger | SavepointStatus | CheckpointHistory
        | CompatibilityReport | MigrationReport | ReportResult | FlinkUpgradeReport | CompiledPlanReport
        | ConfigReport | SparkServerStatus
    )

# Result is a name for annotations only (defined under TYPE_CHECKING)
__all__ = ["COMMAND_RESULTS", "RENDERERS", "RENDERER_PACKAGE", "Renderer", "class_path", "command_results", "render",
           "renderer_for"]

Renderer: TypeAlias = "Callable[[Console, Any], None]"

RENDERER_PACKAGE = "statekit.cli.renderers"

# result class (the module that defines it, its name) -> renderer (module of RENDERER_PACKAGE, function)
RENDERERS: dict[str, str] = {
    # statekit snapshots: checkpoints list, inspect, verify, dispose
    "statekit.readers.listing.CheckpointList": "snapshots.checkpoint_list",
    "statekit.readers.inspection.SnapshotInspection": "snapshots.snapshot_inspection",
    "statekit.readers.verification.VerifyReport": "snapshots.verify_report",
    "statekit.writers.disposal.DisposalPlan": "snapshots.disposal_plan",
    # Apache Flink snapshots (and listings mixing both engines), relocate, keygroup
    "statekit.flink.offline_results.SnapshotList": "flink.snapshot_list",
    "statekit.flink.offline_results.FlinkInspection": "flink.flink_inspection",
    "statekit.flink.offline_results.FlinkVerifyReport": "flink.flink_verify_report",
    "statekit.flink.upgrade.FlinkUpgradeReport": "flink.flink_upgrade_report",
    "statekit.flink.plan_check.CompiledPlanReport": "flink.compiled_plan_report",
    "statekit.flink.offline_results.FlinkDisposal": "flink.flink_disposal",
    "statekit.flink.relocation.FlinkRelocation": "flink.flink_relocation",
    "statekit.flink.key_group_lookup.KeyGroupLookup": "flink.key_group_lookup",
    # diff (either engine, either snapshot format), export
    "statekit.readers.diff.results.SavepointDiff": "diff.savepoint_diff",
    "statekit.spark.export.ExportResult": "export.export_result",
    # surgery: rescale, modify, bootstrap
    "statekit.writers.rescale.RescaleReport": "surgery.rescale_report",
    "statekit.writers.savepoint_modification.ModifyReport": "surgery.modify_report",
    "statekit.writers.bootstrap.BootstrapReport": "surgery.bootstrap_report",
    "statekit.flink.rewrite_report.FlinkRescaleReport": "flink_rewrite.flink_rescale_report",
    "statekit.flink.rewrite_report.FlinkModifyReport": "flink_rewrite.flink_modify_report",
    "statekit.flink.savepoint_bootstrap.FlinkBootstrapReport": "flink_write.flink_bootstrap_report",
    "statekit.flink.convert.ConvertReport": "flink_write.convert_report",
    # job control: run, list, savepoint, stop, cancel
    "statekit.runtime.control.results.RunResult": "jobs.run_result",
    "statekit.runtime.control.results.JobList": "jobs.job_list",
    "statekit.runtime.control.results.SavepointResult": "jobs.savepoint_result",
    "statekit.runtime.control.results.CancelResult": "jobs.cancel_result",
    # operations: checkpoint, savepoint --detached / --status, checkpoints history
    "statekit.runtime.control.results.CheckpointResult": "operations.checkpoint_result",
    "statekit.runtime.control.results.SavepointTrigger": "operations.savepoint_trigger",
    "statekit.runtime.control.results.SavepointStatus": "operations.savepoint_status",
    "statekit.runtime.control.checkpoint_history.CheckpointHistory": "operations.checkpoint_history",
    # restore compatibility: check, migrate
    "statekit.runtime.jobmaster.compatibility.CompatibilityReport": "compatibility.compatibility_report",
    "statekit.writers.migration.MigrationReport": "compatibility.migration_report",
    "statekit.writers.report.ReportResult": "report.report_result",  # statekit report
    # settings: config show, spark start|status|stop
    "statekit.cli.config.ConfigReport": "settings.config_report",
    "statekit.spark.connect_server.SparkServerStatus": "settings.spark_server_status",
}


# command (its words after ``statekit``) -> the result classes its ``--json`` prints (keys of
# RENDERERS): the JSON Schema of ``docs/json/<command words joined by ->.schema.json`` accepts any
# of them (scripts/gen_json_schemas.py); tests/cli/test_json_contract.py checks both directions.
COMMAND_RESULTS: dict[str, tuple[str, ...]] = {
    "run": ("statekit.runtime.control.results.RunResult",),
    "list": ("statekit.runtime.control.results.JobList",),
    "savepoint": ("statekit.runtime.control.results.SavepointResult",
                  "statekit.runtime.control.results.SavepointTrigger",
                  "statekit.runtime.control.results.SavepointStatus"),
    "stop": ("statekit.runtime.control.results.SavepointResult",),
    "cancel": ("statekit.runtime.control.results.CancelResult", "statekit.runtime.control.results.SavepointResult"),
    "checkpoint": ("statekit.runtime.control.results.CheckpointResult",),
    "checkpoints list": ("statekit.readers.listing.CheckpointList", "statekit.flink.offline_results.SnapshotList"),
    "checkpoints history": ("statekit.runtime.control.checkpoint_history.CheckpointHistory",),
    "inspect": ("statekit.readers.inspection.SnapshotInspection", "statekit.flink.offline_results.FlinkInspection"),
    "verify": ("statekit.readers.verification.VerifyReport", "statekit.flink.offline_results.FlinkVerifyReport"),
    "dispose": ("statekit.writers.disposal.DisposalPlan", "statekit.flink.offline_results.FlinkDisposal"),
    "rescale": ("statekit.writers.rescale.RescaleReport", "statekit.flink.rewrite_report.FlinkRescaleReport"),
    "modify": ("statekit.writers.savepoint_modification.ModifyReport",
               "statekit.flink.rewrite_report.FlinkModifyReport"),
    "bootstrap": ("statekit.writers.bootstrap.BootstrapReport",
                  "statekit.flink.savepoint_bootstrap.FlinkBootstrapReport"),
    "convert": ("statekit.flink.convert.ConvertReport",),
    "export": ("statekit.spark.export.ExportResult",),
    "diff": ("statekit.readers.diff.results.SavepointDiff",),
    "keygroup": ("statekit.flink.key_group_lookup.KeyGroupLookup",),
    "relocate": ("statekit.flink.relocation.FlinkRelocation",),
    "check": ("statekit.runtime.jobmaster.compatibility.CompatibilityReport",
              "statekit.flink.upgrade.FlinkUpgradeReport", "statekit.flink.plan_check.CompiledPlanReport"),
    "migrate": ("statekit.writers.migration.MigrationReport",),
    "report": ("statekit.writers.report.ReportResult",),
    "spark start": ("statekit.spark.connect_server.SparkServerStatus",),
    "spark status": ("statekit.spark.connect_server.SparkServerStatus",),
    "spark stop": ("statekit.spark.connect_server.SparkServerStatus",),
    "config show": ("statekit.cli.config.ConfigReport",),
}


def command_results(command: str) -> tuple[type, ...]:
    """The result classes of ``command`` (a key of :data:`COMMAND_RESULTS`), imported now."""
    classes = []
    for path in COMMAND_RESULTS[command]:
        module, _, name = path.rpartition(".")
        classes.append(getattr(importlib.import_module(module), name))
    return tuple(classes)


def class_path(cls: type) -> str:
    """``module.QualName`` of ``cls``: its key in :data:`RENDERERS`."""
    return f"{cls.__module__}.{cls.__qualname__}"


def renderer_for(cls: type) -> Renderer:
    """The renderer registered for ``cls`` (or the nearest base class), its module imported now.

    Raises:
        TypeError: Nothing is registered: a bug (the CLI showed an unregistered result).
    """
    for klass in cls.__mro__:
        target = RENDERERS.get(class_path(klass))
        if target is not None:
            module, _, name = target.rpartition(".")
            func: Renderer = getattr(importlib.import_module(f"{RENDERER_PACKAGE}.{module}"), name)
            return func
    raise TypeError(f"no rich renderer for {class_path(cls)} in statekit.cli.render.RENDERERS")


def render(console: Console, result: Result) -> None:
    """Draw ``result`` on ``console`` with the renderer of its type."""
    renderer_for(type(result))(console, result)
