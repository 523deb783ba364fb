"""``statekit check``: will JOB.py restore from SNAPSHOT? (thin: parse, call, render)."""

from __future__ import annotations

import sys
from typing import Any

import click

from statekit.cli.errors import catch_exception
from statekit.cli.options import common_options, storage_option
from statekit.cli.output import get_output

__all__ = ["check"]


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-p", "--parallelism", type=int, help="Default parallelism of the job (as for statekit run).")
@click.option("--max-parallelism", type=int, help="Default max parallelism of the job (as for statekit run).")
@click.option("-n", "--allow-non-restored-state", is_flag=True,
              help="Snapshot state of operators the job lacks is skipped, not a reason to refuse.")
@click.option("--uid", "uids", multiple=True, metavar="UID",
              help="Apache Flink snapshot: a uid of the new Flink job (repeatable; instead of JOB.py).")
@click.option("--target-flink", metavar="VERSION",
              help="Apache Flink snapshot: name every state Flink VERSION (2.x) will not restore, with the way out.")
@click.option("--compiled-plan", metavar="PLAN.json",
              help="Apache Flink SQL snapshot: compare its operators with the stateful nodes of a compiled plan "
                   "(COMPILE PLAN output): state names, TTL, key types, missing operators.")
@click.argument("snapshot", metavar="SNAPSHOT")
@click.argument("job_file", metavar="[JOB.py]", required=False)
@click.argument("job_args", nargs=-1, type=click.UNPROCESSED, metavar="[JOB ARGS]...")
@storage_option
@common_options
@catch_exception
def check(snapshot: str, job_file: str | None, job_args: tuple[str, ...], parallelism: int | None,
          max_parallelism: int | None, allow_non_restored_state: bool, uids: tuple[str, ...],
          target_flink: str | None, compiled_plan: str | None, **_: Any) -> None:
    """Whether JOB.py restores from SNAPSHOT, checked offline; options go before SNAPSHOT.

    \b
    The job graph is built without running the job (its script runs up to execute(), each
    operator declares its state, nothing is processed) and compared with the snapshot per
    operator uid (mapped, new, dropped) and per state (same, new, undeclared, migrated,
    incompatible: kind, serializer, declared type, TTL), with parallelism vs max
    parallelism and the redistribution a restore does. statekit run -s runs the same check.
    An Apache Flink snapshot is checked against the new Flink job's uids (--uid, no JOB.py):
    operators mapped / new / dropped, parallelism vs max parallelism. With --target-flink 2.3
    it names every state Flink 2 will not restore (Kryo 2 state of a Flink 1.x snapshot, Scala
    API serializers, legacy serializer snapshots, SourceFunction-era connector state). With
    --compiled-plan PLAN.json it compares a Flink SQL snapshot with the stateful nodes of the
    job's compiled plan (matched by uid <id>_<transformation> or name Kind[id]).
    Exit 0 compatible, 1 incompatible (one line per reason), 2 bad input.
    """
    if compiled_plan is not None:
        from statekit.flink.plan_check import check_compiled_plan

        if job_file is not None or target_flink is not None:
            raise click.UsageError("--compiled-plan checks an Apache Flink snapshot alone (no JOB.py, no --target-flink)")
        plan_report = check_compiled_plan(snapshot, compiled_plan, uids=uids)
        get_output().show(plan_report)
        if not plan_report.compatible:
            sys.exit(1)
        return
    if target_flink is not None:
        from statekit.flink.upgrade import check_flink_upgrade

        if job_file is not None:
            raise click.UsageError("--target-flink checks an Apache Flink snapshot alone (no JOB.py)")
        upgrade = check_flink_upgrade(snapshot, target_flink, uids=uids)
        get_output().show(upgrade)
        if not upgrade.compatible:
            sys.exit(1)
        return
    from statekit.runtime.dataflow.run_options import RunOptions
    from statekit.runtime.jobmaster.compatibility import check_any

    if job_file is not None and job_file.startswith("-"):
        raise click.UsageError(f"No such option: {job_file} (options go before SNAPSHOT)")
    options = RunOptions(parallelism=parallelism, max_parallelism=max_parallelism,
                         allow_non_restored_state=allow_non_restored_state, job_args=job_args)
    report = check_any(snapshot, job_file, options, uids)
    get_output().show(report)
    if not report.compatible:
        sys.exit(1)
