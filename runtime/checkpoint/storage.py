"""Where snapshots go: ``<checkpoint-dir>/<job-id>/chk-N/`` and ``<dir>/savepoint-<jobid6>-<hex>/``.

A checkpoint directory is created when the checkpoint is triggered; tasks write their
state files into it and the coordinator publishes ``_metadata`` last (until then the
directory is an incomplete checkpoint, never read as state). A savepoint is built in a
staging directory (``writers.staging``) and appears whole when it completes.
"""

from __future__ import annotations

import contextlib
import logging
import posixpath
import secrets
from dataclasses import dataclass, field
from typing import Any

from statekit.statefmt import layout
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.job_lock import JobLock
from statekit.statefmt.metadata import CheckpointMetadata
from statekit.writers.staging import staged_output_dir
from statekit.writers.state_writer import commit_metadata

__all__ = [
    "SnapshotTarget",
    "SnapshotOutput",
    "CheckpointStorageLocation",
    "CheckpointStorage",
    "savepoint_dir_name",
]

log = logging.getLogger(__name__)


def savepoint_dir_name(job_id: str) -> str:
    """``savepoint-<first 6 chars of the job id>-<12 random hex chars>``."""
    return f"{layout.SAVEPOINT_DIR_PREFIX}{job_id[:6]}-{secrets.token_hex(6)}"


@dataclass(frozen=True)
class SnapshotTarget:
    """Where the tasks of one checkpoint or savepoint write their files: plain URLs (what a
    barrier carries, also to another process).

    Attributes:
        directory: The snapshot's directory (a savepoint's staging directory while it is taken).
        shared_directory: The job's ``shared/`` (checkpoints of native incremental state only).
    """

    directory: str
    shared_directory: str | None = None

    def open(self, storage_options: dict[str, Any] | None = None) -> SnapshotOutput:
        """The writing side of this target (``storage_options``: the job's, for object stores)."""
        io, directory = FileIO.for_path(self.directory, storage_options)
        shared = None if self.shared_directory is None else FileIO.for_path(self.shared_directory, storage_options)[1]
        return SnapshotOutput(io, directory, shared)


@dataclass(frozen=True)
class SnapshotOutput:
    """A task's writing side of one snapshot: the filesystem, the snapshot's directory and the
    job's ``shared/`` (None: a savepoint or canonical checkpoint, which shares nothing)."""

    io: FileIO
    directory: str
    shared_directory: str | None = None


@dataclass
class CheckpointStorageLocation:
    """One snapshot being written: the filesystem, the directory files go to, its final URL."""

    io: FileIO
    directory: str
    url: str
    checkpoint_id: int
    is_savepoint: bool
    _stage: contextlib.ExitStack | None = field(default=None, repr=False)
    shared_directory: str | None = None  # the job's shared/ (checkpoints only; savepoints are self-contained)

    @property
    def target(self) -> SnapshotTarget:
        """What the barrier of this snapshot tells the tasks."""
        shared = None if self.shared_directory is None else self.io.url(self.shared_directory)
        return SnapshotTarget(self.io.url(self.directory), shared)

    def output(self) -> SnapshotOutput:
        """The writing side in this process (tests and offline writers)."""
        return SnapshotOutput(self.io, self.directory, self.shared_directory)

    def commit(self, metadata: CheckpointMetadata) -> None:
        """Publish ``_metadata`` (last), then, for a savepoint, move it into place."""
        commit_metadata(self.io, self.directory, metadata)
        if self._stage is not None:
            stage, self._stage = self._stage, None
            stage.close()

    def discard(self) -> None:
        """Remove what was written of an aborted snapshot (best effort)."""
        if self._stage is not None:
            stage, self._stage = self._stage, None
            with contextlib.suppress(Exception):
                stage.__exit__(RuntimeError, RuntimeError("snapshot aborted"), None)
            return
        with contextlib.suppress(Exception):
            if self.io.exists(self.directory) and not self.io.exists(
                posixpath.join(self.directory, layout.METADATA_FILE)
            ):
                self.io.rm(self.directory, recursive=True)


class CheckpointStorage:
    """Creates checkpoint and savepoint locations for one job."""

    def __init__(self, checkpoint_dir: str | None, job_id: str, storage_options: dict[str, Any] | None = None) -> None:
        self.job_id = job_id
        self.storage_options = storage_options
        self.io: FileIO | None = None
        self.job_dir: str | None = None
        self.shared_dir: str | None = None
        if checkpoint_dir:
            self.io, base = FileIO.for_path(checkpoint_dir, storage_options)
            self.job_dir = posixpath.join(base, job_id)
            self.shared_dir = posixpath.join(self.job_dir, layout.SHARED_DIR)
        self._job_lock: JobLock | None = None

    def hold_job_lock(self) -> None:
        """Mark the job directory as in use while the job runs (local disks; ``dispose`` asks it)."""
        if self.io is None or self.job_dir is None or not self.io.is_local or self._job_lock is not None:
            return
        lock = JobLock(self.job_dir, self.job_id)
        if lock.acquire():
            self._job_lock = lock
        else:
            log.warning("job %s: another live process holds %s; dispose cannot tell that this job runs",
                        self.job_id, lock.path)

    def release_job_lock(self) -> None:
        lock, self._job_lock = self._job_lock, None
        if lock is not None:
            lock.release()

    @property
    def job_dir_url(self) -> str | None:
        """``<checkpoint-dir>/<job-id>`` as a URL, when checkpoints are stored."""
        return None if self.io is None or self.job_dir is None else self.io.url(self.job_dir)

    def checkpoint_location(self, checkpoint_id: int) -> CheckpointStorageLocation | None:
        """A fresh ``chk-N`` directory, or None when the job stores no checkpoints.

        A leftover incomplete ``chk-N`` of an earlier run under the same job id is removed;
        a complete one is never touched (the caller picks a higher id).
        """
        if self.io is None or self.job_dir is None:
            return None
        directory = posixpath.join(self.job_dir, layout.checkpoint_dir_name(checkpoint_id))
        if self.io.exists(directory):
            self.io.rm(directory, recursive=True)
        self.io.makedirs(directory)
        return CheckpointStorageLocation(self.io, directory, self.io.url(directory), checkpoint_id, False,
                                         shared_directory=self.shared_dir)

    def is_complete(self, checkpoint_id: int) -> bool:
        """Whether ``chk-N`` exists with its ``_metadata`` under this job's directory."""
        if self.io is None or self.job_dir is None:
            return False
        path = posixpath.join(self.job_dir, layout.checkpoint_dir_name(checkpoint_id), layout.METADATA_FILE)
        return self.io.exists(path)

    def savepoint_location(self, target_dir: str, checkpoint_id: int) -> CheckpointStorageLocation:
        """A staged ``savepoint-<jobid6>-<hex>`` directory under ``target_dir``."""
        io, base = FileIO.for_path(target_dir, self.storage_options)
        final = posixpath.join(base, savepoint_dir_name(self.job_id))
        stage = contextlib.ExitStack()
        stage_io, directory = stage.enter_context(staged_output_dir(io.url(final), self.storage_options))
        return CheckpointStorageLocation(stage_io, directory, io.url(final), checkpoint_id, True, stage)
