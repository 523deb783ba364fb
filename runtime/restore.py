"""Restore: map a snapshot's operators onto a new job and hand each subtask its share.

Rules (Flink's):
    * Every operator uid with state in the snapshot must exist in the job, unless
      ``allow_non_restored_state`` (then its state is skipped).
    * Keyed state is redistributed by key-group ranges: subtask ``i`` of the new
      parallelism reads exactly the key groups of
      ``compute_key_group_range_for_operator_index(M, p, i)`` (M cannot change on restore).
    * Operator list state: unchanged parallelism keeps each subtask's list; otherwise all
      elements are split evenly in contiguous parts. Union list state: every subtask gets
      all elements. Broadcast state: every subtask gets a copy.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.keygroups import compute_key_group_range_for_operator_index
from statekit.statefmt.metadata import CheckpointMetadata, OperatorMetadata, StateDescriptor, StateKind
from statekit.statefmt.serializers import get_serializer
from statekit.writers.savepoint_writer import split_evenly

__all__ = ["RestorePlan", "SubtaskRestore", "missing_operator_message"]

log = logging.getLogger(__name__)


def missing_operator_message(path: str, uid: str) -> str:
    """Flink's message for snapshot state whose operator is not in the new job."""
    return (
        f"Failed to rollback to checkpoint/savepoint {path}. Cannot map checkpoint/savepoint state "
        f"for operator {uid} to the new program, because the operator is not available in the new "
        "program. If you want to allow to skip this, you can set the --allow-non-restored-state "
        "option on the CLI."
    )


class RestorePlan:
    """An opened snapshot and how its operators map onto the job."""

    def __init__(self, reader: SavepointReader, allow_non_restored_state: bool = False) -> None:
        self.reader = reader
        self.allow_non_restored_state = allow_non_restored_state
        self._operator_cache: dict[tuple[str, str], list[list[Any]]] = {}
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls, path: str, *, allow_non_restored_state: bool = False, trust_pickle: bool = False,
        storage_options: dict[str, Any] | None = None,
    ) -> RestorePlan:
        """Open ``path`` (savepoint, ``chk-N``, or a job checkpoint dir = its latest complete one)."""
        reader = SavepointReader.read(path, trust_pickle=trust_pickle, storage_options=storage_options)
        return cls(reader, allow_non_restored_state)

    @property
    def path(self) -> str:
        """The snapshot directory restored from."""
        return self.reader.path

    @property
    def metadata(self) -> CheckpointMetadata:
        return self.reader.metadata

    @property
    def checkpoint_id(self) -> int:
        return self.metadata.checkpoint_id

    def check_operators(self, job_uids: set[str]) -> None:
        """Fail before the job starts for state it cannot restore.

        Raises:
            BadInputError: Snapshot state whose uid is not in the job (Flink's message),
                unless ``allow_non_restored_state``.
            UntrustedSerializerError: State the job restores is pickle-serialized and the
                snapshot is not trusted (``--trust-pickle``).
        """
        for op in self.metadata.operators:
            if not op.states:
                continue
            if op.uid in job_uids:
                self._check_trusted(op)
                continue
            if not self.allow_non_restored_state:
                raise BadInputError(missing_operator_message(self.path, op.uid))
            log.warning("skipping state of operator %s from %s: it is not in the job", op.uid, self.path)

    def _check_trusted(self, op: OperatorMetadata) -> None:
        trusted = self.reader.trust_pickle
        if op.key_serializer is not None and op.keyed:
            get_serializer(op.key_serializer, trust_pickle=trusted, what=f"the keys of operator {op.uid}",
                           source=self.path)
        for d in op.states:
            for name in (d.value_serializer, d.user_key_serializer, d.namespace_serializer):
                if name is not None:
                    get_serializer(name, trust_pickle=trusted, what=f"state {op.uid}/{d.name}", source=self.path)

    def operator(self, uid: str) -> OperatorMetadata | None:
        """The snapshot's operator ``uid``, if any."""
        return next((op for op in self.metadata.operators if op.uid == uid), None)

    def max_parallelism(self, uid: str) -> int | None:
        """The max parallelism keyed state of ``uid`` was written with (None: no keyed state)."""
        op = self.operator(uid)
        return op.max_parallelism if op is not None and op.keyed else None

    def subtask(self, uid: str, subtask: int, parallelism: int, max_parallelism: int) -> SubtaskRestore | None:
        """What subtask ``subtask`` of ``parallelism`` restores of ``uid`` (None: nothing)."""
        op = self.operator(uid)
        if op is None:
            return None
        return SubtaskRestore(self, op, subtask, parallelism, max_parallelism)

    def operator_elements(self, uid: str, state: str) -> list[list[Any]]:
        """Per old subtask, the elements of one operator state (read once, cached)."""
        with self._lock:
            key = (uid, state)
            if key not in self._operator_cache:
                self._operator_cache[key] = self.reader.read_operator_state_per_subtask(uid, state)
            return self._operator_cache[key]


class SubtaskRestore:
    """The state one new subtask restores from one snapshot operator."""

    def __init__(self, plan: RestorePlan, op: OperatorMetadata, subtask: int, parallelism: int, max_parallelism: int) -> None:
        self.plan = plan
        self.op = op
        self.subtask = subtask
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism

    @property
    def checkpoint_id(self) -> int:
        return self.plan.checkpoint_id

    def keyed_states(self) -> Iterator[tuple[StateDescriptor, Iterator[Any]]]:
        """(descriptor, decoded entries of this subtask's key groups) per keyed state."""
        key_groups = compute_key_group_range_for_operator_index(self.max_parallelism, self.parallelism, self.subtask)
        for descriptor in self.op.states:
            if descriptor.keyed:
                yield descriptor, self.plan.reader.read_keyed_state(self.op.uid, descriptor.name, key_groups)

    def operator_states(self) -> Iterator[tuple[StateDescriptor, list[Any]]]:
        """(descriptor, this subtask's elements) per operator state, redistributed by mode."""
        for descriptor in self.op.states:
            if descriptor.keyed:
                continue
            parts = self.plan.operator_elements(self.op.uid, descriptor.name)
            yield descriptor, self._share(descriptor.kind, parts)

    def _share(self, kind: StateKind, parts: list[list[Any]]) -> list[Any]:
        if kind is StateKind.UNION:
            return [e for part in parts for e in part]
        if kind is StateKind.BROADCAST:
            return list(parts[self.subtask % len(parts)]) if parts else []
        if len(parts) == self.parallelism:
            return list(parts[self.subtask])
        return split_evenly([e for part in parts for e in part], self.parallelism)[self.subtask]
