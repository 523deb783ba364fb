"""What a job master and its TaskManagers tell each other, and how subtasks are placed in slots.

A TaskManager is started for one execution attempt with a :class:`TaskManagerSpec` (a file in the
job's private run directory): which job file to import, the run options, its index, the slots,
the restore spec. It connects to the job master's control socket, proves it belongs to the job
with the job's token, and from then on every message is a pickled dataclass of this module in a
``MESSAGE`` frame of :mod:`statekit.runtime.exchange.network`'s framing. Nothing a TaskManager
receives is a live object of the job master: ids, options, barriers and handles only.

Placement (Flink's slot sharing, spread evenly): slot ``i`` runs subtask ``i`` of every vertex
that has one, and lives on TaskManager ``i mod N``. A forward edge never leaves a slot, so it never
leaves a process; the other exchanges cross processes where their subtasks' slots do.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, field
from typing import Any

from statekit.runtime.checkpoint.handles import TaskStateSnapshot
from statekit.runtime.checkpoint.restore import RestoreSpec
from statekit.runtime.dataflow.graph import JobGraph
from statekit.runtime.dataflow.run_options import RunOptions
from statekit.runtime.state.registry import StateBackendEntry
from statekit.runtime.task.metrics import TaskReport
from statekit.statefmt.errors import BadInputError

__all__ = [
    "MESSAGE",
    "HELLO",
    "TaskManagerSpec",
    "Placement",
    "placement",
    "graph_fingerprint",
    "Registered",
    "DeployFailed",
    "Start",
    "MailTask",
    "Cancel",
    "Heartbeat",
    "TaskReady",
    "TaskFailed",
    "TaskFinished",
    "SourceExhausted",
    "Acknowledge",
    "Decline",
    "Metrics",
    "TaskManagerFailure",
]

HELLO = 0  # the first frame of a connection: the job's token
MESSAGE = 7  # a pickled message of this module
HEARTBEAT_INTERVAL_S = 0.3


@dataclass(frozen=True)
class Placement:
    """How many TaskManagers and slots a job runs on."""

    task_managers: int
    slots: int

    def task_manager_of(self, subtask: int) -> int:
        """The TaskManager whose slot runs subtask ``subtask`` of every vertex."""
        return subtask % self.task_managers

    def subtasks_of(self, graph: JobGraph, task_manager: int) -> list[tuple[int, int]]:
        """(vertex id, subtask) of every subtask TaskManager ``task_manager`` runs."""
        return [(v.id, i) for v in graph.vertices for i in range(v.parallelism)
                if self.task_manager_of(i) == task_manager]


def placement(parallelism: int, task_managers: int | None, slots: int | None, cores: int | None = None) -> Placement:
    """The placement of a job whose largest vertex has ``parallelism`` subtasks.

    Defaults fill the machine: one TaskManager per core (no more than the job has subtasks), with
    as many slots as it takes to run every subtask.

    Raises:
        BadInputError: ``task_managers`` times ``slots`` is less than ``parallelism``, or either is < 1.
    """
    if task_managers is not None and task_managers < 1:
        raise BadInputError(f"--task-managers must be at least 1, got {task_managers}")
    if slots is not None and slots < 1:
        raise BadInputError(f"--slots must be at least 1, got {slots}")
    if task_managers is None and slots is None:
        task_managers = max(1, min(cores or os.cpu_count() or 1, parallelism))
    if task_managers is None:
        assert slots is not None
        task_managers = math.ceil(parallelism / slots)
    if slots is None:
        slots = math.ceil(parallelism / task_managers)
    if task_managers * slots < parallelism:
        raise BadInputError(
            f"the job needs {parallelism} slots (its largest parallelism) but {task_managers} TaskManager(s) "
            f"with {slots} slot(s) each have {task_managers * slots}; raise --task-managers or --slots")
    return Placement(task_managers, slots)


def graph_fingerprint(graph: JobGraph) -> tuple[str, str]:
    """(digest, description) of what must be equal in the job master's and a TaskManager's graph:
    every operator's uid, parallelism, max parallelism and key serializer, the chaining into
    vertices, and every edge's partitioning."""
    topology = graph.topology()
    lines = [f"operator {op.uid} p={op.parallelism} M={op.max_parallelism} vertex={op.vertex}"
             for op in topology.operators]
    lines += [f"edge {e.source}->{e.target} {e.partitioning} input={e.input_index} chained={e.chained} "
              f"side={e.side_output}" for e in topology.edges]
    lines += [f"key {node.uid} {node.key_serializer}" for node in graph.operators if node.keyed]
    description = "\n".join(lines)
    return hashlib.sha256(description.encode()).hexdigest(), description


@dataclass(frozen=True)
class TaskManagerSpec:
    """Everything a TaskManager process needs to run its slots of one attempt (plain values).

    Attributes:
        job_file: The job script (imported as ``__main__``; it builds the same graph).
        options: The run options the job master resolved the job with.
        index: This TaskManager's number (0..N-1).
        placement: TaskManagers and slots of the attempt.
        attempt: The execution attempt.
        job_id: The job.
        fingerprint: The job master's :func:`graph_fingerprint` digest and description.
        state_backend: The keyed state backend's registry entry (a TaskManager registers it when its
            own registry lacks the name: a backend registered at run time travels with the spec).
        incremental: Checkpoints are native and incremental.
        channel_state_serializer: How in-flight records are stored.
        restore: The snapshot the attempt restores from.
        run_dir: The job's private run directory (sockets, specs).
        token: The job's secret (hex): every connection presents it first.
        control_path: The job master's control socket.
        buffer_timeout_ms: How long a record may wait in a network buffer (0: flushed at once; None: until full).
        buffer_size: Bytes of a network buffer.
        source_plans: The attempt's plan of each source operator, by uid (made by the job master).
    """

    job_file: str
    options: RunOptions
    index: int
    placement: Placement
    attempt: int
    job_id: str
    fingerprint: tuple[str, str]
    state_backend: StateBackendEntry
    incremental: bool
    channel_state_serializer: str
    restore: RestoreSpec | None
    run_dir: str
    token: str
    control_path: str
    buffer_timeout_ms: int | None = 100
    buffer_size: int = 32 * 1024
    source_plans: dict[str, Any] = field(default_factory=dict)

    def endpoint_path(self, task_manager: int) -> str:
        """The network endpoint of TaskManager ``task_manager`` of this attempt."""
        return os.path.join(self.run_dir, f"a{self.attempt}-tm{task_manager}.sock")

    def working_dir_of(self, task_manager: int) -> str:
        """The state backend's working directory of TaskManager ``task_manager`` of this attempt: in
        the job's run directory (which a sweep removes with it when the job master died), removed
        by the job master once the attempt's processes are gone, however they ended."""
        return os.path.join(self.run_dir, f"statekit-{self.state_backend.name}-tm{task_manager}-a{self.attempt}")


# -------------------------------------------------------------------------------- messages


@dataclass(frozen=True)
class Registered:
    """TaskManager -> job master: it runs (pid), built the same graph and deployed its tasks."""

    index: int
    pid: int


@dataclass(frozen=True)
class DeployFailed:
    """TaskManager -> job master: it could not deploy (``bad_input``: the job's fault, e.g. a
    graph that differs from the job master's; else an environment failure)."""

    index: int
    message: str
    bad_input: bool


@dataclass(frozen=True)
class Start:
    """Job master -> TaskManager: every task of the attempt is ready; process input."""


@dataclass(frozen=True)
class MailTask:
    """Job master -> TaskManager: deliver ``mail`` to task ``key`` (checkpoint triggers,
    notifications, terminate, resume, cancel)."""

    key: tuple[int, int]
    mail: Any


@dataclass(frozen=True)
class Cancel:
    """Job master -> TaskManager: cancel every task and exit."""


@dataclass(frozen=True)
class Heartbeat:
    """TaskManager -> job master: it is alive."""


@dataclass(frozen=True)
class TaskReady:
    key: tuple[int, int]


@dataclass(frozen=True)
class TaskFinished:
    key: tuple[int, int]


@dataclass(frozen=True)
class SourceExhausted:
    key: tuple[int, int]


@dataclass(frozen=True)
class TaskFailed:
    """A task failed: the exception itself when it pickles, else its class and message."""

    key: tuple[int, int]
    error: BaseException | None
    error_type: str
    message: str


@dataclass(frozen=True)
class Acknowledge:
    key: tuple[int, int]
    checkpoint_id: int
    snapshot: TaskStateSnapshot


@dataclass(frozen=True)
class Decline:
    key: tuple[int, int]
    checkpoint_id: int
    reason: str
    subsumed: bool
    new_shared: tuple[str, ...]


@dataclass(frozen=True)
class Metrics:
    report: TaskReport


class TaskManagerFailure(Exception):
    """A task of a TaskManager failed with an exception that could not cross the process boundary."""
