"""What a task acknowledges a checkpoint with: handles to the files it wrote, never its state.

Every value here is plain data (paths, sizes, checksums, descriptors), so an acknowledgement can
cross a process boundary as it is; the coordinator builds ``_metadata`` from the handles alone
(Flink's ``acknowledgeCheckpoint(TaskStateSnapshot)``).
"""

from __future__ import annotations

from dataclasses import dataclass

from statekit.statefmt.channel_state import ChannelStateFile
from statekit.statefmt.metadata import StateDescriptor, StateFile
from statekit.statefmt.native_state import NativeKeyedState

__all__ = [
    "SubtaskStats",
    "OperatorStateHandle",
    "TaskStateSnapshot",
]


@dataclass(frozen=True)
class SubtaskStats:
    """What a task reports with its acknowledgement.

    Attributes:
        unaligned: The task snapshotted unaligned (at the first barrier).
        alignment_ms: From the first barrier to the snapshot (aligned: the alignment).
        barrier_ms: When the checkpoint's first barrier reached the task (epoch ms; 0: unknown);
            minus the trigger time it is Flink's *start delay*.
        sync_ms: The synchronous part (the operators' snapshots at the barrier).
        async_ms: The asynchronous part (writing the files), set by the task's checkpoint writer.
    """

    unaligned: bool = False
    alignment_ms: int = 0
    barrier_ms: int = 0
    sync_ms: float = 0.0
    async_ms: float = 0.0


@dataclass(frozen=True)
class OperatorStateHandle:
    """One operator subtask's part of a checkpoint, as written.

    Attributes:
        uid: The operator.
        descriptors: Its states (keyed and operator state).
        key_serializer: Of its keyed state (None: no keyed state).
        files: Canonical state files, relative to the snapshot directory.
        native: Keyed state as native store files (a native snapshot).
        channel_file: In-flight records of its task (only on a task's head operator, after an
            unaligned checkpoint).
        bytes_written: Bytes written for this checkpoint (shared files it reused do not count).
        new_shared: Files it added to the job's ``shared/`` (relative to it).
    """

    uid: str
    descriptors: tuple[StateDescriptor, ...]
    key_serializer: str | None
    files: tuple[StateFile, ...] = ()
    native: NativeKeyedState | None = None
    channel_file: ChannelStateFile | None = None
    bytes_written: int = 0
    new_shared: tuple[str, ...] = ()

    @property
    def full_size(self) -> int:
        """Every byte the part consists of (shared files included)."""
        native = self.native.size if self.native is not None else 0
        channel = self.channel_file.size if self.channel_file is not None else 0
        return sum(f.size for f in self.files) + native + channel


@dataclass(frozen=True)
class TaskStateSnapshot:
    """A task's acknowledgement of one checkpoint: its operators' handles (head first) and stats."""

    operators: tuple[OperatorStateHandle, ...]
    stats: SubtaskStats = SubtaskStats()

    @property
    def new_shared(self) -> list[str]:
        return [path for handle in self.operators for path in handle.new_shared]

    @property
    def full_size(self) -> int:
        return sum(h.full_size for h in self.operators)

    @property
    def bytes_written(self) -> int:
        return sum(h.bytes_written for h in self.operators)

    @property
    def inflight_bytes(self) -> int:
        return sum(h.channel_file.size for h in self.operators if h.channel_file is not None)
