"""Which checkpoints of a job reference which files of its ``shared/`` directory.

Incremental checkpoints of a native backend keep their SST files once in
``<checkpoint-dir>/<job-id>/shared/`` and name them in ``_metadata`` as ``../shared/<file>``.
The references of every complete ``chk-N`` of a job directory are what decide whether a shared
file may be deleted: ``dispose`` of one checkpoint deletes exactly the shared files no other
complete checkpoint names, and a job that starts on an existing job directory deletes the
shared files no complete checkpoint names (leftovers of a run killed mid-checkpoint).

Reads ``_metadata`` files and listings only.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from statekit.readers.snapshot import read_metadata
from statekit.statefmt import layout
from statekit.statefmt.errors import StatekitError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.metadata import CheckpointMetadata
from statekit.statefmt.native_state import SHARED_FILE_PATTERN
from statekit.statefmt.paths import SHARED_PREFIX

__all__ = ["SharedReferences", "shared_files_of", "shared_references", "complete_checkpoints",
           "incomplete_checkpoints", "unreferenced_files"]


@dataclass
class SharedReferences:
    """The shared files named by the complete checkpoints of one job directory.

    Attributes:
        refs: File (relative to ``shared/``) -> ids of the checkpoints naming it.
        checkpoints: (id, directory, metadata) of every complete checkpoint read.
        damaged: Complete-looking checkpoints whose ``_metadata`` could not be read (their
            references are unknown: no shared file may be deleted on their account).
    """

    refs: dict[str, set[int]] = field(default_factory=dict)
    checkpoints: list[tuple[int, str, CheckpointMetadata]] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)


def shared_files_of(metadata: CheckpointMetadata) -> set[str]:
    """The shared files a checkpoint names, relative to its job's ``shared/``."""
    return {f.path[len(SHARED_PREFIX):] for f in metadata.native_files() if f.path.startswith(SHARED_PREFIX)}


def complete_checkpoints(io: FileIO, job_dir: str) -> list[tuple[int, str]]:
    """(id, directory) of every ``chk-N`` with a ``_metadata`` directly under ``job_dir``, by id."""
    if not io.isdir(job_dir):
        return []
    found = []
    for entry in io.list_dir(job_dir):
        checkpoint_id = layout.parse_checkpoint_dir_name(entry.name)
        if entry.is_dir and checkpoint_id is not None and io.isfile(posixpath.join(entry.path, layout.METADATA_FILE)):
            found.append((checkpoint_id, entry.path))
    return sorted(found)


def incomplete_checkpoints(io: FileIO, job_dir: str) -> list[tuple[int, str]]:
    """(id, directory) of every ``chk-N`` without a ``_metadata`` directly under ``job_dir``, by
    id: in progress, or left by a job killed while taking it (what they reference is unknown)."""
    if not io.isdir(job_dir):
        return []
    found = []
    for entry in io.list_dir(job_dir):
        checkpoint_id = layout.parse_checkpoint_dir_name(entry.name)
        if entry.is_dir and checkpoint_id is not None and not io.isfile(posixpath.join(entry.path,
                                                                                      layout.METADATA_FILE)):
            found.append((checkpoint_id, entry.path))
    return sorted(found)


def shared_references(io: FileIO, job_dir: str, *, skip: str | None = None) -> SharedReferences:
    """The references of every complete checkpoint of ``job_dir`` (except the directory ``skip``)."""
    result = SharedReferences()
    for checkpoint_id, directory in complete_checkpoints(io, job_dir):
        if skip is not None and directory.rstrip("/") == skip.rstrip("/"):
            continue
        try:
            metadata = read_metadata(io, directory)
        except StatekitError:
            result.damaged.append(io.url(directory))
            continue
        result.checkpoints.append((checkpoint_id, directory, metadata))
        for path in shared_files_of(metadata):
            result.refs.setdefault(path, set()).add(checkpoint_id)
    return result


def unreferenced_files(io: FileIO, job_dir: str, references: SharedReferences) -> list[str]:
    """Files of ``job_dir/shared`` in statekit's shared-file layout that no checkpoint of
    ``references`` names (relative to ``shared/``); nothing when some references are unknown."""
    shared = posixpath.join(job_dir, layout.SHARED_DIR)
    if references.damaged or not io.isdir(shared):
        return []
    found = []
    for info in io.walk_files(shared):
        relative = posixpath.relpath(info.path, shared)
        if SHARED_FILE_PATTERN.match(relative) and relative not in references.refs:
            found.append(relative)
    return sorted(found)
