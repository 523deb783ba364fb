"""The executor seam: what runs a job an environment defines (Flink's ``PipelineExecutor``).

``StreamEnvironment.execute`` / ``execute_async`` hand the environment to the executor in
effect: the one this thread overrides with (``statekit run``/``statekit check`` capture a job
this way without running it), else the one named by the launcher's
:class:`~statekit.runtime.dataflow.run_options.RunOptions` (``executor``), else the default.
Executors are registered by name (``statekit.runtime`` registers the built-in ones when it is
first imported); this room never imports the rooms that implement them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

from statekit.statefmt.errors import BadInputError

if TYPE_CHECKING:
    from statekit.runtime.dataflow.environment import StreamEnvironment
    from statekit.runtime.dataflow.job_handle import JobExecutionResult, JobHandle

__all__ = [
    "Executor",
    "register_executor",
    "executor_names",
    "executor",
    "current_executor",
    "executing_with",
    "DEFAULT_EXECUTOR",
]

DEFAULT_EXECUTOR = "threads"


class Executor(Protocol):
    """Runs the job ``env`` defines."""

    def execute(self, env: StreamEnvironment, job_name: str) -> JobExecutionResult:
        """Run the job and block until it ends."""
        ...

    def execute_async(self, env: StreamEnvironment, job_name: str) -> JobHandle:
        """Start the job and return its handle at once."""
        ...


_FACTORIES: dict[str, Callable[[], Executor]] = {}
_override = threading.local()


def register_executor(name: str, factory: Callable[[], Executor]) -> None:
    """Make ``factory`` the executor called ``name`` (called at most once per job)."""
    _FACTORIES[name] = factory


def executor_names() -> tuple[str, ...]:
    """The registered executors, the default first."""
    return tuple(sorted(_FACTORIES, key=lambda n: (n != DEFAULT_EXECUTOR, n)))


def executor(name: str) -> Executor:
    """A new executor of the registered ``name``.

    Raises:
        BadInputError: No executor of that name.
    """
    factory = _FACTORIES.get(name)
    if factory is None:
        raise BadInputError(f"unknown executor {name!r}; use one of {', '.join(executor_names()) or 'none'}")
    return factory()


def current_executor() -> Executor:
    """The executor a job started now on this thread runs on (see the module docstring)."""
    override: Executor | None = getattr(_override, "executor", None)
    if override is not None:
        return override
    from statekit.runtime.dataflow.run_options import get_run_options

    options = get_run_options()
    return executor(options.executor if options is not None and options.executor else DEFAULT_EXECUTOR)


@contextmanager
def executing_with(override: Executor) -> Iterator[None]:
    """Jobs started on this thread inside the block run on ``override``."""
    previous = getattr(_override, "executor", None)
    _override.executor = override
    try:
        yield
    finally:
        _override.executor = previous
