"""Contexts to drive a sink function by hand, as the runtime would: initialize it with (restored)
operator state, snapshot it at a checkpoint id, read back the state it wrote."""

from __future__ import annotations

from typing import Any

from statekit.runtime.api.functions import (
    CheckpointedFunction,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    OperatorStateStore,
    RuntimeContext,
)
from statekit.runtime.api.state import ListStateDescriptor
from statekit.runtime.state.operator_state import DefaultOperatorStateStore
from statekit.statefmt.metadata import StateKind

__all__ = ["FakeRuntime", "Snapshot", "initialize", "union_state"]


class FakeRuntime(RuntimeContext):
    """A subtask of operator ``uid`` in job ``job``."""

    def __init__(self, subtask: int = 0, parallelism: int = 1, *, job: str = "0" * 32, uid: str = "sink",
                 attempt: int = 0) -> None:
        self.subtask, self.parallelism, self.job, self.uid, self.attempt = subtask, parallelism, job, uid, attempt

    @property
    def task_name(self) -> str:
        return self.uid

    @property
    def index_of_this_subtask(self) -> int:
        return self.subtask

    @property
    def number_of_parallel_subtasks(self) -> int:
        return self.parallelism

    @property
    def max_number_of_parallel_subtasks(self) -> int:
        return 128

    @property
    def attempt_number(self) -> int:
        return self.attempt

    @property
    def job_id(self) -> str:
        return self.job

    @property
    def operator_uid(self) -> str:
        return self.uid

    def get_state(self, descriptor: Any) -> Any:
        raise NotImplementedError("no keyed state in a sink")

    get_list_state = get_map_state = get_reducing_state = get_aggregating_state = get_state


class _Init(FunctionInitializationContext):
    def __init__(self, store: DefaultOperatorStateStore, runtime: RuntimeContext, restored: bool) -> None:
        self.store, self.runtime, self.restored = store, runtime, restored

    @property
    def operator_state_store(self) -> OperatorStateStore:
        return self.store

    @property
    def runtime_context(self) -> RuntimeContext:
        return self.runtime

    def is_restored(self) -> bool:
        return self.restored

    @property
    def restored_checkpoint_id(self) -> int | None:
        return None


class Snapshot(FunctionSnapshotContext):
    """The context of checkpoint ``checkpoint_id``."""

    def __init__(self, checkpoint_id: int) -> None:
        self._id = checkpoint_id

    @property
    def checkpoint_id(self) -> int:
        return self._id

    @property
    def is_savepoint(self) -> bool:
        return False


def initialize(function: CheckpointedFunction, descriptor: ListStateDescriptor, *, subtask: int = 0,
               parallelism: int = 1, restored: list[Any] | None = None, runtime: FakeRuntime | None = None,
               ) -> DefaultOperatorStateStore:
    """``initialize_state`` of ``function``, its union list state ``descriptor`` restored from ``restored``."""
    runtime = runtime or FakeRuntime(subtask, parallelism)
    store = DefaultOperatorStateStore(runtime.uid, runtime.subtask, runtime.parallelism)
    if restored is not None:
        store.restore_state(descriptor.to_metadata(StateKind.UNION), restored)
    function.initialize_state(_Init(store, runtime, restored is not None))
    return store


def union_state(store: DefaultOperatorStateStore) -> list[Any]:
    """The elements the operator state holds now (what the next snapshot writes)."""
    (copy,) = store.snapshot().copies
    return list(copy[1])
