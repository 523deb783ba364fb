"""``dispose``: delete a checkpoint or savepoint directory, carefully.

Refuses anything that is not a snapshot, and a snapshot directory holding files its
``_metadata`` does not name. An incomplete ``chk-N`` (no ``_metadata``) may be disposed
when it holds nothing but statekit state files and temp files.
"""

from __future__ import annotations

import posixpath
from dataclasses import asdict, dataclass
from typing import Any

from statekit.readers.snapshot import read_metadata
from statekit.statefmt import layout
from statekit.statefmt.errors import BadInputError, NotACheckpointError, PathNotFoundError
from statekit.statefmt.fileio import FileIO

__all__ = ["DisposalPlan", "dispose_snapshot"]

STATE_FILE_SUFFIX = ".sks"


@dataclass(frozen=True)
class DisposalPlan:
    path: str
    files: list[str]
    bytes: int
    complete: bool
    dry_run: bool
    disposed: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def dispose_snapshot(url: str, *, dry_run: bool = False, storage_options: dict[str, Any] | None = None) -> DisposalPlan:
    io, path = FileIO.for_path(url, storage_options)
    if not io.exists(path):
        raise PathNotFoundError("no such file or directory", path=url)
    if not io.isdir(path):
        if posixpath.basename(path) != layout.METADATA_FILE:
            raise NotACheckpointError("is a file, not a checkpoint or savepoint directory", path=url)
        path = posixpath.dirname(path)
    files = io.walk_files(path)
    relative = {posixpath.relpath(f.path, path): f for f in files}
    complete = layout.METADATA_FILE in relative
    if complete:
        md = read_metadata(io, path)
        expected = {f.path for f in md.files() if not f.path.startswith("../")} | {layout.METADATA_FILE}
        foreign = sorted(r for r in relative if r not in expected and not _is_temp(r))
        if foreign:
            raise BadInputError(
                f"refusing to dispose: {len(foreign)} file(s) not named by its _metadata, e.g. {foreign[0]!r}; "
                "remove them first if they are yours",
                path=io.url(path),
            )
    else:
        name = posixpath.basename(path)
        if layout.parse_checkpoint_dir_name(name) is None and not name.startswith(layout.SAVEPOINT_DIR_PREFIX):
            raise NotACheckpointError("not a checkpoint or savepoint directory (no _metadata)", path=io.url(path))
        foreign = sorted(r for r in relative if not (r.endswith(STATE_FILE_SUFFIX) or _is_temp(r)))
        if foreign:
            raise BadInputError(
                f"refusing to dispose an incomplete checkpoint holding non-state file {foreign[0]!r}",
                path=io.url(path),
            )
    plan = DisposalPlan(
        path=io.url(path),
        files=sorted(io.url(f.path) for f in files),
        bytes=sum(f.size for f in files),
        complete=complete,
        dry_run=dry_run,
        disposed=False,
    )
    if dry_run:
        return plan
    # _metadata goes first, so a crash part-way leaves an incomplete checkpoint, never
    # a complete-looking one with files missing.
    if complete:
        io.rm_file(posixpath.join(path, layout.METADATA_FILE))
    io.rm(path, recursive=True)
    return DisposalPlan(**{**asdict(plan), "disposed": True})


def _is_temp(relative: str) -> bool:
    base = posixpath.basename(relative)
    return base.startswith(".") and (base.endswith(".tmp") or ".inprogress-" in base)
