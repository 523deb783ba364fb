"""Run a job script with :class:`RunOptions`, as ``flink run`` runs a jar.

``run_job_file(path, options)`` sets the options, runs the script with ``runpy`` as
``__main__`` with ``sys.argv = [path, *options.job_args]`` and returns the status of the
last job the script executed. ``python -m statekit.runtime.launcher [OPTIONS] JOB.py
[ARGS...]`` does the same from a shell (used by tests that kill the job process).
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from collections.abc import Sequence

from statekit.runtime.backend import state_backend_names
from statekit.runtime.job import JobHandle, JobStatus
from statekit.runtime.run_options import (
    RunOptions,
    add_job_listener,
    remove_job_listener,
    set_run_options,
)
from statekit.runtime.user_code import run_job_script
from statekit.statefmt.errors import BadInputError, PathNotFoundError, StatekitError
from statekit.statefmt.pandas_probe import answer_pandas_probe_on_import

__all__ = ["run_job_file", "main", "parse_duration_ms"]


def run_job_file(path: str, options: RunOptions) -> JobStatus:
    """Run the job script at ``path`` with ``options``.

    Args:
        path: A Python file whose ``__main__`` code builds a job and calls ``execute()``.
        options: What the command line overrides.

    Returns:
        The status of the last job the script executed (FINISHED when it executed none).

    Raises:
        PathNotFoundError: ``path`` is not a file.
        JobScriptError: The script does not compile, or an import in it fails (``file:line``).
        StatekitError: From the job (restore failures, JobFailedError, ...).
    """
    import os

    if not os.path.isfile(path):
        raise PathNotFoundError("job file not found; pass the path of a Python job script", path=path)
    handles: list[JobHandle] = []
    lock = threading.Lock()

    def remember(handle: JobHandle) -> None:
        with lock:
            handles.append(handle)

    saved_argv = sys.argv
    add_job_listener(remember)
    set_run_options(options)
    try:
        sys.argv = [path, *options.job_args]
        run_job_script(path)
    finally:
        sys.argv = saved_argv
        set_run_options(None)
        remove_job_listener(remember)
    with lock:
        return handles[-1].status if handles else JobStatus.FINISHED


def parse_duration_ms(text: str) -> int:
    """Parse ``200ms``, ``1s``, ``2m`` or a bare number of milliseconds."""
    value = text.strip().lower()
    for suffix, factor in (("ms", 1), ("s", 1000), ("m", 60_000), ("min", 60_000)):
        if value.endswith(suffix) and value[: -len(suffix)].strip().replace(".", "", 1).isdigit():
            return int(float(value[: -len(suffix)]) * factor)
    if value.isdigit():
        return int(value)
    raise BadInputError(f"invalid duration {text!r}; use e.g. 200ms, 1s or 2m")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m statekit.runtime.launcher")
    parser.add_argument("-p", "--parallelism", type=int)
    parser.add_argument("--max-parallelism", type=int)
    parser.add_argument("-s", "--from-savepoint", dest="restore_path")
    parser.add_argument("--allow-non-restored-state", action="store_true")
    parser.add_argument("--checkpoint-dir")
    parser.add_argument("--checkpoint-interval", type=parse_duration_ms)
    parser.add_argument("--state-backend", choices=state_backend_names())
    parser.add_argument("--checkpointing-mode", choices=("exactly-once", "at-least-once"))
    parser.add_argument("--unaligned", action="store_true", default=None)
    parser.add_argument("--aligned-checkpoint-timeout", type=parse_duration_ms)
    parser.add_argument("--incremental", action="store_true", default=None)
    parser.add_argument("--retained-checkpoints", type=int)
    parser.add_argument("--externalized-cleanup", choices=("retain", "delete"))
    parser.add_argument("--checkpoint-timeout", type=parse_duration_ms)
    parser.add_argument("--savepoint-on-finish")
    parser.add_argument("--restore-mode", choices=("claim", "no-claim"), default="no-claim")
    parser.add_argument("--job-id")
    parser.add_argument("--trust-pickle", action="store_true")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("job_file")
    parser.add_argument("job_args", nargs=argparse.REMAINDER)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the process exit code."""
    args = _parser().parse_args(argv)
    answer_pandas_probe_on_import()  # a job's first snapshot would otherwise import pandas (~0.4 s)
    options = RunOptions(
        parallelism=args.parallelism,
        max_parallelism=args.max_parallelism,
        restore_path=args.restore_path,
        allow_non_restored_state=args.allow_non_restored_state,
        checkpoint_dir=args.checkpoint_dir,
        checkpoint_interval_ms=args.checkpoint_interval,
        state_backend=args.state_backend,
        savepoint_on_finish=args.savepoint_on_finish,
        job_id=args.job_id,
        job_args=tuple(args.job_args),
        trust_pickle=args.trust_pickle,
        checkpointing_mode=args.checkpointing_mode,
        unaligned=args.unaligned,
        aligned_checkpoint_timeout_ms=args.aligned_checkpoint_timeout,
        incremental=args.incremental,
        retained_checkpoints=args.retained_checkpoints,
        externalized_cleanup=None if args.externalized_cleanup is None else f"{args.externalized_cleanup}_on_cancellation",
        checkpoint_timeout_ms=args.checkpoint_timeout,
        restore_mode=args.restore_mode,
    )
    if args.verbose:
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger("statekit").setLevel(logging.DEBUG)
    try:
        status = run_job_file(args.job_file, options)
    except StatekitError as error:
        print(f"Error: {error}", file=sys.stderr)
        return int(error.exit_code)
    except KeyboardInterrupt:
        print("Interrupted: the job was cancelled", file=sys.stderr)
        return 130
    return 0 if status is JobStatus.FINISHED else 1


if __name__ == "__main__":
    sys.exit(main())
