"""``relocate``: rewrite the absolute paths of a Flink ``_metadata`` into a new file.

The chore of moving a checkpoint to another bucket or machine: RocksDB incremental
checkpoints name their ``shared/`` files (and sometimes their own files) by absolute paths.
Copy the files, then rewrite ``_metadata`` so those paths start with the new prefix.

Rules:
    * The output is a new file, written atomically: ``OUT`` ending in ``_metadata`` is that
      file; any other ``OUT`` is a directory (created when missing) that receives
      ``_metadata``. An existing output file is replaced only with ``force``.
    * Only absolute file paths that start with ``old_prefix`` change; relative handles,
      inlined state and every other byte stay identical.
    * No path starting with ``old_prefix`` (or no absolute path at all) is bad input:
      nothing is written, and the message shows what the paths do start with.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field
from typing import Any, ClassVar

from statekit.statefmt import layout
from statekit.statefmt.errors import BadInputError, NotACheckpointError, PathNotFoundError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.json_contract import JsonShape

__all__ = ["FlinkRelocation", "relocate_flink_snapshot", "auto_relocation_prefixes", "relocate_moved_snapshot"]

EXAMPLES = 3


@dataclass(frozen=True)
class FlinkRelocation:
    """What ``relocate`` rewrote.

    Attributes:
        source: The ``_metadata`` read.
        output: The ``_metadata`` written.
        old_prefix: The prefix replaced.
        new_prefix: Its replacement.
        paths: Distinct absolute paths in the file.
        paths_changed: Distinct absolute paths rewritten.
        handles_changed: File handles rewritten (a path may be referenced more than once).
        unmatched: Absolute paths kept because they do not start with ``old_prefix``.
        examples: Up to three ``(old, new)`` rewritten paths.
        bytes: Size of the written file.
        overwritten: True when an existing file was replaced (``force``).
    """

    json_shape: ClassVar[JsonShape] = JsonShape(records={"examples": ("old", "new")})

    source: str
    output: str
    old_prefix: str
    new_prefix: str
    paths: int
    paths_changed: int
    handles_changed: int
    unmatched: tuple[str, ...]
    examples: tuple[tuple[str, str], ...]
    bytes: int
    overwritten: bool = False
    warnings: tuple[str, ...] = field(default=())


def _read_source(path: str, storage_options: dict[str, Any] | None) -> tuple[str, bytes]:
    io, fs_path = FileIO.for_path(path, storage_options)
    if not io.exists(fs_path):
        raise PathNotFoundError("no such file or directory", path=path)
    if io.isdir(fs_path):
        fs_path = posixpath.join(fs_path, layout.METADATA_FILE)
        if not io.isfile(fs_path):
            raise NotACheckpointError(
                "no _metadata here: give a Flink snapshot directory or its _metadata", path=path)
    return io.url(fs_path), io.read_bytes(fs_path, limit=layout.MAX_METADATA_BYTES)


def _common_directory(paths: list[str]) -> str:
    """The longest common prefix of ``paths``, cut after its last ``/``."""
    prefix = os.path.commonprefix(paths)  # noqa: RUF071 - cut at the last "/" below, a string prefix is meant
    return prefix[: prefix.rfind("/") + 1] or prefix


def _output(output: str, storage_options: dict[str, Any] | None) -> tuple[FileIO, str]:
    io, fs_path = FileIO.for_path(output, storage_options)
    if posixpath.basename(fs_path.rstrip("/")) != layout.METADATA_FILE:
        if io.isfile(fs_path):
            raise BadInputError(
                "is a file: give a directory to receive _metadata, or a path ending in _metadata",
                path=output)
        fs_path = posixpath.join(fs_path, layout.METADATA_FILE)
    if io.isdir(fs_path):
        raise BadInputError("is a directory; the output _metadata must be a file", path=io.url(fs_path))
    return io, fs_path


def relocate_flink_snapshot(
    path: str,
    old_prefix: str,
    new_prefix: str,
    output: str,
    *,
    force: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> FlinkRelocation:
    """Write a copy of a Flink ``_metadata`` whose absolute paths start with ``new_prefix``.

    Args:
        path: A Flink snapshot directory or its ``_metadata`` file.
        old_prefix: The literal prefix as Flink wrote it, e.g. ``file:/data/checkpoints``.
        new_prefix: Its replacement, e.g. ``s3://bucket/checkpoints``.
        output: The new ``_metadata`` file, or a directory to receive it.
        force: Replace an existing output file (also ``path``'s own ``_metadata``).
        storage_options: fsspec options for ``path`` and ``output``.

    Raises:
        NotACheckpointError: ``path`` is not a Flink ``_metadata``.
        MetadataError: The ``_metadata`` is damaged (names the byte offset).
        BadInputError: No absolute path starts with ``old_prefix``, an existing output
            without ``force``, or an output that cannot hold a file.
    """
    from statekit.flink import is_flink_metadata, read_flink_metadata, relocate_flink_metadata
    from statekit.flink.metadata import iter_file_handles

    source, data = _read_source(path, storage_options)
    if not is_flink_metadata(data[:4]):
        raise NotACheckpointError(
            "not an Apache Flink _metadata file (wrong magic number); relocate rewrites Flink "
            "snapshots only (statekit snapshots hold relative paths)", path=source)
    if not old_prefix:
        raise BadInputError("--from must not be empty")
    handles = [h.path for h in iter_file_handles(read_flink_metadata(data, source=source)) if h.path]
    distinct = list(dict.fromkeys(handles))
    if not distinct:
        raise BadInputError(
            "has no absolute file paths (its state is inline or relative to the snapshot "
            "directory): nothing to relocate, copy the directory as it is", path=source)
    changed = [p for p in distinct if p.startswith(old_prefix)]
    if not changed:
        raise BadInputError(
            f"no absolute path starts with {old_prefix!r}; nothing written. Its {len(distinct)} "
            f"path(s) start with {_common_directory(distinct)!r}: pass that (or a part of it) as --from",
            path=source)
    io, target = _output(output, storage_options)
    exists = bool(io.isfile(target))
    if exists and not force:
        raise BadInputError("already exists; pass --force to replace it", path=io.url(target))
    relocated = relocate_flink_metadata(data, old_prefix, new_prefix, source=source)
    read_flink_metadata(relocated, source=io.url(target))  # the rewrite must parse as it will be read
    io.write_atomic(target, relocated)
    unmatched = tuple(p for p in distinct if not p.startswith(old_prefix))
    warnings = (f"{len(unmatched)} absolute path(s) do not start with {old_prefix!r} and were kept",) if unmatched else ()
    return FlinkRelocation(
        source=source,
        output=io.url(target),
        old_prefix=old_prefix,
        new_prefix=new_prefix,
        paths=len(distinct),
        paths_changed=len(changed),
        handles_changed=sum(1 for p in handles if p.startswith(old_prefix)),
        unmatched=unmatched,
        examples=tuple((p, new_prefix + p[len(old_prefix):]) for p in changed[:EXAMPLES]),
        bytes=len(relocated),
        overwritten=exists,
        warnings=warnings,
    )


def auto_relocation_prefixes(path: str, *, storage_options: dict[str, Any] | None = None) -> tuple[str, str]:
    """``(old prefix, new prefix)`` that move a copied checkpoint's paths into its own job directory.

    The checkpoint at ``path`` (a ``chk-N`` directory or its ``_metadata``) names files outside
    its job directory by absolute paths; each must lie in one old job directory
    (``<old>/shared/<name>``, ``<old>/taskowned/<name>`` or ``<old>/chk-N/<name>``) and a file of
    the same name must sit at the same place of this job directory.

    Raises:
        BadInputError: Not a ``chk-N`` directory, nothing to relocate, or a path that has no
            counterpart here (the message names it).
    """
    from statekit.flink.storage import load_snapshot, referenced_files
    from statekit.flink.verify import moved_job_dir

    snapshot = load_snapshot(path, storage_options=storage_options)
    job = snapshot.job_dir
    if job is None:
        raise BadInputError("--auto needs a checkpoint directory chk-N inside its job directory "
                            "(it finds the files there); give --from and --to instead", path=snapshot.path)
    external = list(dict.fromkeys(r.location for r in referenced_files(snapshot)
                                  if not r.relative and r.scope == "external"))
    if not external:
        raise BadInputError("nothing to relocate: every absolute path already points into this job "
                            "directory", path=snapshot.path)
    moved = moved_job_dir(snapshot, external)
    if moved is None:
        from statekit.flink.verify import job_counterpart

        lost = next((loc for loc in external if job_counterpart(snapshot, loc) is None), external[0])
        raise BadInputError(f"cannot relocate automatically: {lost} has no file of the same name in "
                            f"{job.url}, or the paths come from more than one job directory; give --from "
                            "and --to", path=snapshot.path)
    old, _ = moved
    new = ("file:" + job.path) if job.io.is_local else job.url
    return old, new


def relocate_moved_snapshot(
    path: str, output: str | None = None, *, force: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> FlinkRelocation:
    """``relocate --auto``: point a copied checkpoint's absolute paths at its own job directory.

    Args:
        path: The ``chk-N`` directory (or its ``_metadata``) of the copied checkpoint.
        output: The new ``_metadata`` (file or directory); default ``path``'s own ``_metadata``,
            which needs ``force`` like any existing output.
        force: Replace an existing output file.
        storage_options: fsspec options.

    Raises:
        As :func:`auto_relocation_prefixes` and :func:`relocate_flink_snapshot`.
    """
    old, new = auto_relocation_prefixes(path, storage_options=storage_options)
    return relocate_flink_snapshot(path, old, new, output or path, force=force, storage_options=storage_options)
