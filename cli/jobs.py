"""Job control commands, flink-like: run, list, savepoint, stop, cancel (thin: parse, call, render).

Text output is scriptable: ``run --detached`` prints the job id, ``savepoint`` and ``stop``
print the savepoint path, each alone on stdout; Flink's human messages go to stderr.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import click

from statekit.cli.checkpointing import checkpointing_options, checkpointing_run_options
from statekit.cli.errors import catch_exception
from statekit.cli.options import common_options, storage_option, trust_pickle_option
from statekit.cli.output import get_output
from statekit.runtime.state.registry import state_backend_names

__all__ = ["run", "list_jobs", "savepoint", "stop", "cancel"]


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-p", "--parallelism", type=int, help="Default parallelism of the job.")
@click.option("--max-parallelism", type=int, help="Max parallelism (number of key groups).")
@click.option("-s", "--from-savepoint", "restore_path", metavar="PATH",
              help="Restore from a savepoint, checkpoint, or job checkpoint dir (its latest complete checkpoint).")
@click.option("-n", "--allow-non-restored-state", is_flag=True, help="Skip snapshot state of operators the job lacks.")
@click.option("--restore-mode", type=click.Choice(["claim", "no-claim"]), default="no-claim", show_default=True,
              help="no-claim: the snapshot of -s is never modified or deleted, the first checkpoint is full; "
                   "claim: the job owns it and retention disposes it once subsumed.")
@click.option("--checkpoint-dir", metavar="URL", help="Checkpoint storage (local path, file://, s3://...).")
@click.option("--checkpoint-interval", metavar="DURATION", help="Enable checkpoints every 200ms, 1s, 2min, ...")
@click.option("--state-backend", type=click.Choice(state_backend_names()), help="Keyed state backend.")
@checkpointing_options
@click.option("--savepoint-on-finish", metavar="DIR", help="Take a savepoint into DIR when a bounded job ends.")
@click.option("--savepoint-dir", metavar="DIR",
              help="The job's default savepoint directory: `statekit savepoint JOB_ID` and `stop` without a "
                   "directory write there.")
@click.option("--metrics-port", type=click.IntRange(1, 65535), metavar="PORT",
              help="Also serve Prometheus metrics on 127.0.0.1:PORT, without a token (a fixed scrape target).")
@click.option("--executor", type=click.Choice(["auto", "processes", "threads"]), default="auto", show_default=True,
              help="processes: subtasks run in TaskManager processes (this process is the JobManager); threads: "
                   "every subtask is a thread of this process; auto: processes when a parallelism is above 1.")
@click.option("--task-managers", type=int, metavar="N",
              help="TaskManager processes (default: one per core, no more than the job's parallelism).")
@click.option("--slots", type=int, metavar="S", help="Slots per TaskManager (default: enough for the job).")
@click.option("--buffer-timeout", metavar="DURATION",
              help="How long a record may wait in a network buffer between processes before it is sent "
                   "(default 100ms; 0: at once, lowest latency).")
@click.option("--buffer-size", type=int, metavar="BYTES", help="Bytes of a network buffer (default 32768).")
@click.option("--restart-attempts", type=int, metavar="N",
              help="Restarts after a failure (default: the job's strategy: 3 with checkpoints, else none).")
@click.option("--restart-delay", metavar="DURATION", help="Delay before each restart (default 1s).")
@click.option("--latency-interval", metavar="DURATION",
              help="How often each source subtask sends a latency marker (default 200ms; 0: never); "
                   "their end-to-end latency is in the metrics (p50, p99).")
@click.option("-d", "--detached", is_flag=True, help="Run in the background: print the job id and return.")
@click.option("--job-id", metavar="ID",
              help="Job id (32 lower-case hex chars; default: new). Reusing a crashed job's id takes over its "
                   "registration and continues its checkpoint ids; a running job's id is refused.")
@trust_pickle_option
@click.option("--log-file", hidden=True)
@click.argument("job_file", metavar="JOB.py")
@click.argument("job_args", nargs=-1, type=click.UNPROCESSED, metavar="[JOB ARGS]...")
@storage_option
@common_options
@catch_exception
def run(job_file: str, job_args: tuple[str, ...], parallelism: int | None, max_parallelism: int | None,
        restore_path: str | None, allow_non_restored_state: bool, restore_mode: str, checkpoint_dir: str | None,
        checkpoint_interval: str | None, state_backend: str | None, savepoint_on_finish: str | None,
        savepoint_dir: str | None, metrics_port: int | None,
        executor: str, task_managers: int | None, slots: int | None, buffer_timeout: str | None,
        buffer_size: int | None, restart_attempts: int | None, restart_delay: str | None,
        latency_interval: str | None, detached: bool, job_id: str | None, trust_pickle: bool, log_file: str | None, verbose: bool,
        **more: Any) -> None:
    """Run JOB.py on the mini runtime; options go before JOB.py, the job's own arguments after it.

    \b
    Attached (default): exits 0 when the job finished (or was cancelled), 1 when it failed.
    The first Ctrl-C / SIGTERM cancels the job (exit 130 / 143).
    --detached: prints the job id once the job runs; its output goes to
    $STATEKIT_HOME/jobs/<id>/job.log.
    --trust-pickle applies to the snapshot given with -s; the job's own checkpoints
    (restarts after a task failure) are always trusted.
    --verbose: engine logs, and a failing task's traceback (else one line per failure).
    On a terminal an attached run shows a live status line: records in/out per second,
    checkpoints completed and failed, the last checkpoint's duration and size, backpressured tasks.
    """
    from statekit.runtime.api.time import parse_duration
    from statekit.runtime.control.submission import run_job, submit_detached
    from statekit.runtime.dataflow.run_options import RunOptions

    if job_file.startswith("-"):
        raise click.UsageError(f"No such option: {job_file} (options go before JOB.py)")
    verbose = _verbose(verbose)
    options = RunOptions(
        parallelism=parallelism, max_parallelism=max_parallelism, restore_path=restore_path,
        allow_non_restored_state=allow_non_restored_state, checkpoint_dir=checkpoint_dir,
        checkpoint_interval_ms=None if checkpoint_interval is None else parse_duration(checkpoint_interval, what="checkpoint interval"),
        state_backend=state_backend, savepoint_on_finish=savepoint_on_finish, job_id=job_id, job_args=job_args,
        savepoint_dir=savepoint_dir, metrics_port=metrics_port,
        trust_pickle=trust_pickle, restore_mode=restore_mode, executor=executor, task_managers=task_managers,
        slots=slots, buffer_size=buffer_size, restart_attempts=restart_attempts,
        buffer_timeout_ms=None if buffer_timeout is None else parse_duration(buffer_timeout, what="buffer timeout",
                                                                              minimum=0),
        restart_delay_ms=None if restart_delay is None else parse_duration(restart_delay, what="restart delay",
                                                                            minimum=0),
        latency_interval_ms=None if latency_interval is None else parse_duration(
            latency_interval, what="latency interval", minimum=0),
        **checkpointing_run_options(more),
    )
    if detached:
        result = submit_detached(job_file, options, verbose=verbose)
        click.echo(f"Job has been submitted with JobID {result.job_id} (log: {result.log_path})", err=True)
    else:
        with _engine_logs(verbose), get_output().live() as on_status:
            result = run_job(job_file, options, log_path=log_file, on_submitted=_submitted, on_status=on_status)
    get_output().show(result)
    if result.signal is not None:
        sys.exit(128 + result.signal)


def _submitted(job_id: str, name: str) -> None:
    click.echo(f"Job has been submitted with JobID {job_id} ({name})", err=True)


def _verbose(local: bool) -> bool:
    """``--verbose`` given after the command or before it (``statekit --verbose run``)."""
    root = click.get_current_context().find_root().obj
    return local or bool(isinstance(root, dict) and root.get("verbose"))


@contextlib.contextmanager
def _engine_logs(verbose: bool) -> Iterator[None]:
    """With ``verbose``: engine logs of ``statekit.*`` (DEBUG and up, tracebacks of failing tasks) on stderr."""
    if not verbose:
        yield
        return
    import logging

    logger = logging.getLogger("statekit")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    saved = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved)


@click.command("list")
@click.option("-a", "--all", "include_all", is_flag=True, help="Also crashed, finished, failed and cancelled jobs.")
@common_options
@catch_exception
def list_jobs(include_all: bool, **_: Any) -> None:
    """Running jobs of this machine (from the registry in $STATEKIT_HOME); a killed job shows as CRASHED.

    Each job's last completed checkpoint (id, age, size) comes from its REST API while it runs,
    else from its checkpoint directory.
    """
    from statekit.runtime.control.client import list_jobs as list_registered

    get_output().show(list_registered(include_all=include_all))


_timeout_option = click.option("--timeout", default="5min", show_default=True, metavar="DURATION",
                               help="How long to wait for the savepoint (and the job's end).")
_format_option = click.option("--format", "fmt", type=click.Choice(["canonical", "native"]), default="canonical",
                              show_default=True,
                              help="canonical: statekit's portable format; native: the state backends' own files "
                                   "(self-contained; RocksDB restores it fastest).")


@click.command()
@click.argument("job_id", required=False)
@click.argument("target_dir", required=False)
@_format_option
@_timeout_option
@click.option("--detached", is_flag=True, help="Return at once with the trigger id (resolve it with --status).")
@click.option("--status", "trigger_id", metavar="TRIGGER_ID",
              help="Where the savepoint of TRIGGER_ID stands (IN_PROGRESS, COMPLETED with its path, or FAILED: exit 1).")
@common_options
@catch_exception
def savepoint(job_id: str | None, target_dir: str | None, fmt: str, timeout: str, detached: bool,
              trigger_id: str | None, **_: Any) -> None:
    """Trigger a savepoint of JOB_ID (id or unique prefix) into TARGET_DIR; print its path.

    \b
    TARGET_DIR defaults to $STATEKIT_SAVEPOINT_DIR, else the profile's savepoint_dir, else the
    job's default savepoint directory (`statekit run --savepoint-dir`).
    --detached prints the trigger id and returns; `statekit savepoint --status TRIGGER_ID` tells
    the outcome later, also after the job ended.
    """
    from statekit.cli.config import resolve
    from statekit.runtime.api.time import parse_duration
    from statekit.runtime.control.client import savepoint_status, trigger_savepoint, trigger_savepoint_detached

    if trigger_id is not None:
        if job_id is not None or detached:
            raise click.UsageError("--status TRIGGER_ID takes no JOB_ID, TARGET_DIR or --detached")
        status = savepoint_status(trigger_id)
        get_output().show(status)
        if status.status == "FAILED":
            sys.exit(1)
        return
    if job_id is None:
        raise click.UsageError("Missing argument 'JOB_ID' (or --status TRIGGER_ID).")
    target_dir = resolve("savepoint_dir", target_dir).value
    if detached:
        get_output().show(trigger_savepoint_detached(job_id, target_dir, native=fmt == "native"))
        return
    wait_s = parse_duration(timeout, what="timeout") / 1000
    get_output().show(trigger_savepoint(job_id, target_dir, timeout=wait_s, native=fmt == "native"))


@click.command()
@click.argument("job_id")
@click.option("-p", "--savepoint-path", metavar="DIR",
              help="Directory for the savepoint (default: $STATEKIT_SAVEPOINT_DIR, the profile's savepoint_dir, "
                   "else the job's).")
@click.option("-d", "--drain", is_flag=True, help="End the sources first (flush timers and windows) as at end of input.")
@_format_option
@_timeout_option
@common_options
@catch_exception
def stop(job_id: str, savepoint_path: str | None, drain: bool, fmt: str, timeout: str, **_: Any) -> None:
    """Stop JOB_ID with a savepoint (stop-with-savepoint); print the savepoint path."""
    from statekit.cli.config import resolve
    from statekit.runtime.api.time import parse_duration
    from statekit.runtime.control.client import stop_job

    wait_s = parse_duration(timeout, what="timeout") / 1000
    savepoint_path = resolve("savepoint_dir", savepoint_path).value
    get_output().show(stop_job(job_id, savepoint_path, drain=drain, timeout=wait_s, native=fmt == "native"))


@click.command()
@click.argument("job_id")
@click.option("-s", "--with-savepoint", metavar="DIR", help="Take a savepoint into DIR first (deprecated in Flink; prefer stop).")
@click.option("--timeout", default="1min", show_default=True, metavar="DURATION", help="How long to wait for the job's end.")
@common_options
@catch_exception
def cancel(job_id: str, with_savepoint: str | None, timeout: str, **_: Any) -> None:
    """Cancel JOB_ID (id or unique prefix) and wait until it ended."""
    from statekit.runtime.api.time import parse_duration
    from statekit.runtime.control.client import cancel_job, trigger_savepoint

    wait_s = parse_duration(timeout, what="timeout") / 1000
    if with_savepoint is not None:
        get_output().show(trigger_savepoint(job_id, with_savepoint, cancel_job=True, timeout=wait_s))
    else:
        get_output().show(cancel_job(job_id, timeout=wait_s))

