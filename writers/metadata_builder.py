"""Assembling a snapshot's ``_metadata`` model: the one place that builds
:class:`~statekit.statefmt.metadata.CheckpointMetadata` for a snapshot being written.

Used by every writer of snapshots: the runtime's checkpoint coordinator,
:class:`~statekit.writers.savepoint_writer.SavepointWriter` (and ``modify``, which writes
through it), ``rescale`` and both bootstrap engines.

Invariants the builder keeps, so that what it builds parses back
(:func:`~statekit.statefmt.metadata.parse_metadata` checks the same):

* subtask ``i`` of an operator owns the key-group range Flink's
  ``KeyGroupRangeAssignment`` gives it for (max parallelism, parallelism, ``i``), and the
  subtasks are ``0..parallelism-1`` in order;
* an operator records a key serializer only when one of its states is keyed;
* a snapshot continuing another one (:meth:`SnapshotMetadataBuilder.continuing`) keeps its
  job id, job name, checkpoint id and properties; a new one gets a fresh job id.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from statekit.statefmt.channel_state import ChannelStateFile
from statekit.statefmt.job_id import new_job_id
from statekit.statefmt.keygroups import compute_key_group_range_for_operator_index
from statekit.statefmt.metadata import (
    CheckpointMetadata,
    OperatorMetadata,
    SnapshotFormat,
    SnapshotKind,
    StateDescriptor,
    StateFile,
    SubtaskState,
)
from statekit.statefmt.native_state import NativeKeyedState

__all__ = ["SnapshotMetadataBuilder", "operator_metadata", "subtask_states"]


def subtask_states(max_parallelism: int, parallelism: int,
                   files: Sequence[Iterable[StateFile]],
                   channel_state: Sequence[ChannelStateFile | None] | None = None,
                   native: Sequence[NativeKeyedState | None] | None = None) -> tuple[SubtaskState, ...]:
    """Subtasks ``0..parallelism-1``, each with its key-group range and ``files[i]`` (and, when
    given, its in-flight records ``channel_state[i]`` and native keyed state ``native[i]``)."""
    return tuple(
        SubtaskState(i, compute_key_group_range_for_operator_index(max_parallelism, parallelism, i), tuple(files[i]),
                     channel_state=channel_state[i] if channel_state else None,
                     native=native[i] if native else None)
        for i in range(parallelism)
    )


def operator_metadata(
    uid: str,
    *,
    name: str,
    parallelism: int,
    max_parallelism: int,
    key_serializer: str | None,
    states: Iterable[StateDescriptor],
    files: Sequence[Iterable[StateFile]],
    channel_state: Sequence[ChannelStateFile | None] | None = None,
    native: Sequence[NativeKeyedState | None] | None = None,
) -> OperatorMetadata:
    """One operator's metadata; ``files[i]`` are subtask ``i``'s state files (one list per subtask),
    ``channel_state[i]`` its in-flight records and ``native[i]`` its native keyed state, if any."""
    descriptors = tuple(states)
    return OperatorMetadata(
        uid=uid, name=name, parallelism=parallelism, max_parallelism=max_parallelism,
        key_serializer=key_serializer if any(d.keyed for d in descriptors) else None,
        states=descriptors, subtasks=subtask_states(max_parallelism, parallelism, files, channel_state, native),
    )


@dataclass(frozen=True)
class SnapshotMetadataBuilder:
    """What a snapshot says about its job; :meth:`build` adds the operators and the time.

    Examples:
        SnapshotMetadataBuilder(job_id, job_name="wordcount", checkpoint_id=7, kind=SnapshotKind.CHECKPOINT)
        SnapshotMetadataBuilder.new_job()                         # a savepoint of no job yet
        SnapshotMetadataBuilder.continuing(source.metadata, {"statekit.rescaled-from": path})
    """

    job_id: str
    job_name: str = ""
    checkpoint_id: int = 0
    kind: SnapshotKind = SnapshotKind.SAVEPOINT
    format: SnapshotFormat = SnapshotFormat.CANONICAL
    properties: Mapping[str, str] = field(default_factory=dict, hash=False)

    @classmethod
    def new_job(cls, job_name: str = "") -> SnapshotMetadataBuilder:
        """A savepoint under a fresh job id."""
        return cls(new_job_id(), job_name=job_name)

    @classmethod
    def continuing(cls, source: CheckpointMetadata | None,
                   properties: Mapping[str, str] | None = None) -> SnapshotMetadataBuilder:
        """A savepoint derived from ``source`` (its job id, name, checkpoint id and properties,
        plus ``properties``), or of a fresh job when ``source`` is ``None``."""
        if source is None:
            return cls(new_job_id(), properties=dict(properties or {}))
        return cls(source.job_id, job_name=source.job_name, checkpoint_id=source.checkpoint_id,
                   properties={**source.properties, **(properties or {})})

    def build(self, operators: Iterable[OperatorMetadata], *, created_at_ms: int | None = None) -> CheckpointMetadata:
        """The snapshot's metadata with ``operators`` (in order), created now unless pinned."""
        return CheckpointMetadata(
            job_id=self.job_id, job_name=self.job_name, checkpoint_id=self.checkpoint_id,
            kind=self.kind, format=self.format,
            created_at_ms=CheckpointMetadata.now_ms() if created_at_ms is None else created_at_ms,
            operators=tuple(operators), properties=dict(self.properties),
        )
