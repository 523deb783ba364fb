"""Capture the job a job script defines, without running it.

``capture_job_file(path, options)`` runs the script as ``statekit run`` would (``runpy`` as
``__main__``, ``sys.argv = [path, *options.job_args]``, the options set), but the script's
first ``env.execute()`` / ``execute_async()`` raises :class:`JobCaptured` instead of starting
a job: no task, no source, no sink runs. The job graph is then resolved from the captured
environment exactly as the job master resolves it.
"""

from __future__ import annotations

import os
import sys
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING

from statekit.runtime.dataflow.executor import executing_with
from statekit.runtime.dataflow.run_options import RunOptions, get_run_options, set_run_options
from statekit.runtime.dataflow.user_code import compile_job_script, run_job_script, with_user_location
from statekit.statefmt.errors import BadInputError, PathNotFoundError, StatekitError

if TYPE_CHECKING:
    from statekit.runtime.dataflow.environment import StreamEnvironment
    from statekit.runtime.dataflow.graph import JobGraph
    from statekit.runtime.dataflow.job_handle import JobExecutionResult, JobHandle

__all__ = [
    "JobCaptured",
    "CapturedJob",
    "capture_job_file",
    "CapturingExecutor",
    "resolve_graph",
]

class JobCaptured(BaseException):
    """Raised by ``execute()`` while a job is captured (a BaseException: a script's
    ``except Exception`` does not swallow it)."""

    def __init__(self, env: StreamEnvironment, job_name: str) -> None:
        super().__init__(job_name)
        self.env = env
        self.job_name = job_name


@dataclass(frozen=True)
class CapturedJob:
    """The environment a script built, its job name, and the options it was captured with."""

    path: str
    env: StreamEnvironment
    job_name: str
    options: RunOptions


class CapturingExecutor:
    """The executor in effect while a script is captured: ``execute()`` raises :class:`JobCaptured`."""

    def execute(self, env: StreamEnvironment, job_name: str) -> JobExecutionResult:
        raise JobCaptured(env, job_name)

    def execute_async(self, env: StreamEnvironment, job_name: str) -> JobHandle:
        raise JobCaptured(env, job_name)


def capture_job_file(path: str, options: RunOptions, *, keep_main: bool = False) -> CapturedJob:
    """The first job the script at ``path`` executes, captured before it starts.

    Args:
        keep_main: The script's module stays ``sys.modules["__main__"]`` and ``sys.argv`` stays
            ``[path, *options.job_args]`` afterwards (a TaskManager process: records of classes the
            script defines pickle and unpickle by that name, and its functions read its arguments).

    Raises:
        PathNotFoundError: ``path`` is not a file.
        JobScriptError: The script does not compile, or an import in it fails (``file:line``).
        BadInputError: The script ended (or exited, or failed) without calling ``execute()``.
    """
    if not os.path.isfile(path):
        raise PathNotFoundError("job file not found; pass the path of a Python job script", path=path)
    saved_argv, saved_options = sys.argv, get_run_options()
    set_run_options(options)
    try:
        sys.argv = [path, *options.job_args]
        with executing_with(CapturingExecutor()):
            if keep_main:
                compile_job_script(path)
                _run_as_main(path)
            else:
                run_job_script(path)
    except JobCaptured as captured:
        return CapturedJob(path, captured.env, captured.job_name, options)
    except SystemExit as exc:
        raise BadInputError(
            f"the job script exited (code {exc.code}) before it called execute(); check the job arguments",
            path=path,
        ) from None
    except StatekitError:
        raise
    except Exception as error:  # the script's own code failed before execute(): it defines no job to check
        raise BadInputError(with_user_location(f"the job script failed before it called execute(): "
                                               f"{type(error).__name__}: {error}", error), path=path) from error
    finally:
        if not keep_main:  # a TaskManager's user functions see the job's arguments, as the job master's do
            sys.argv = saved_argv
        set_run_options(saved_options)
    raise BadInputError("the job script never called env.execute(): it defines no job", path=path)


def _run_as_main(path: str) -> None:
    """Run the script at ``path`` as this process's ``__main__`` module, which it stays."""
    module = types.ModuleType("__main__")
    module.__file__ = path
    sys.modules["__main__"] = module
    with open(path, "rb") as source:
        code = compile(source.read(), path, "exec")
    exec(code, module.__dict__)


def resolve_graph(env: StreamEnvironment, options: RunOptions) -> JobGraph:
    """The job graph the job master would run (uids, parallelism, chaining), restore aside."""
    from statekit.runtime.dataflow.graph import build_job_graph

    env._check_sources()
    return build_job_graph(
        env.transformations,
        default_parallelism=options.parallelism or env.parallelism or 1,
        default_max_parallelism=options.max_parallelism or env.max_parallelism,
        restore=None,
        warn_generated_uids=False,
    )
