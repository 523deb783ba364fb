"""The executors of the job master: subtasks as threads of this process, or in TaskManager processes."""

from __future__ import annotations

from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.dataflow.job_handle import JobExecutionResult, JobHandle
from statekit.runtime.dataflow.run_options import get_run_options
from statekit.runtime.jobmaster.job_master import execute, execute_async
from statekit.runtime.jobmaster.task_managers import ProcessDeployer
from statekit.statefmt.errors import BadInputError

__all__ = ["ThreadExecutor", "ProcessExecutor"]


class ThreadExecutor:
    """Runs a job in this process: the job master and one thread per subtask."""

    def execute(self, env: StreamEnvironment, job_name: str) -> JobExecutionResult:
        return execute(env, job_name)

    def execute_async(self, env: StreamEnvironment, job_name: str) -> JobHandle:
        return execute_async(env, job_name)


class ProcessExecutor:
    """Runs a job's subtasks in TaskManager processes; this process is the job master.

    The TaskManagers import the job file the launcher runs (``RunOptions.job_file``) to build the
    same graph, so a job defined elsewhere (a function in a test, a notebook) runs on threads.

    Args:
        auto: Jobs whose vertices all have one subtask run in threads of this process.
    """

    def __init__(self, *, auto: bool = False) -> None:
        self.auto = auto

    def _deployer(self) -> ProcessDeployer:
        options = get_run_options()
        if options is None or not options.job_file:
            raise BadInputError("the processes executor runs a job file (TaskManagers import it): run the job with "
                                "`statekit run JOB.py`, or use the threads executor (--executor threads)")
        return ProcessDeployer(options.job_file, auto=self.auto)

    def execute(self, env: StreamEnvironment, job_name: str) -> JobExecutionResult:
        return execute(env, job_name, self._deployer())

    def execute_async(self, env: StreamEnvironment, job_name: str) -> JobHandle:
        return execute_async(env, job_name, self._deployer())
