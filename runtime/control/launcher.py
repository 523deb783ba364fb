"""Run a job script with :class:`RunOptions`, as ``flink run`` runs a jar.

``run_job_file(path, options)`` sets the options, runs the script (:func:`run_job_script`) as
``__main__`` with ``sys.argv = [path, *options.job_args]`` and returns the status of the
last job the script executed. From a shell, ``statekit run [OPTIONS] JOB.py [ARGS...]`` does
the same (through :mod:`statekit.runtime.control.submission`, which also registers the job
and serves its REST API).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading

from statekit.runtime.dataflow.job_handle import JobHandle, JobStatus
from statekit.runtime.dataflow.run_options import RunOptions, add_job_listener, remove_job_listener, set_run_options
from statekit.runtime.dataflow.user_code import run_job_script
from statekit.statefmt.errors import PathNotFoundError

__all__ = ["run_job_file"]


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
    if not os.path.isfile(path):
        raise PathNotFoundError("job file not found; pass the path of a Python job script", path=path)
    if options.job_file is None:
        options = dataclasses.replace(options, job_file=os.path.abspath(path))
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
