"""The thread executor: every subtask of a job is a thread of this process."""

from __future__ import annotations

from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.dataflow.job_handle import JobExecutionResult, JobHandle
from statekit.runtime.jobmaster.job_master import execute, execute_async

__all__ = [
    "ThreadExecutor",
]


class ThreadExecutor:
    """Runs a job in this process: the job master and one thread per subtask."""

    def execute(self, env: StreamEnvironment, job_name: str) -> JobExecutionResult:
        return execute(env, job_name)

    def execute_async(self, env: StreamEnvironment, job_name: str) -> JobHandle:
        return execute_async(env, job_name)
