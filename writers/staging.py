"""Output directories that appear whole or not at all: snapshots, diff outputs, local exports.

On local disks an output is built in a hidden sibling directory
(:func:`statekit.statefmt.layout.staging_dir_name`) and renamed into place when complete (a
snapshot after its ``_metadata`` is written); on object stores it is built in place (a
snapshot's ``_metadata`` written last) and removed again if anything fails.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from statekit.statefmt.errors import BadInputError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.layout import staging_dir_name

__all__ = ["staged_output_dir", "check_output_dir"]


def check_output_dir(io: FileIO, path: str) -> None:
    """Refuse an output path that exists and is not an empty directory."""
    if io.exists(path):
        if not io.isdir(path):
            raise BadInputError("output exists and is a file", path=io.url(path))
        if io.list_dir(path):
            raise BadInputError("output directory exists and is not empty; choose a new path", path=io.url(path))


@contextmanager
def staged_output_dir(url: str, storage_options: dict[str, Any] | None = None, *,
                      parent_must_exist: bool = False) -> Iterator[tuple[FileIO, str]]:
    """Yield (io, staging dir); on clean exit the staging dir becomes ``url``.

    Args:
        url: The output directory: new, or an empty directory.
        storage_options: fsspec options.
        parent_must_exist: Refuse a local output whose parent directory does not exist
            (exports and diff outputs: a typo is not created); snapshots create it.
    """
    io, final = FileIO.for_path(url, storage_options)
    check_output_dir(io, final)
    if parent_must_exist and io.is_local and not io.isdir(posixpath.dirname(final)):
        raise BadInputError("the output's parent directory does not exist", path=io.url(final))
    if not io.is_local:
        try:
            yield io, final
        except BaseException:
            if io.exists(final):
                io.rm(final, recursive=True)
            raise
        return
    parent, name = posixpath.split(final)
    staging = posixpath.join(parent, staging_dir_name(name))
    io.makedirs(staging)
    try:
        yield io, staging
        if io.exists(final):
            io.rm(final, recursive=True)  # an empty directory, checked above
        io.rename(staging, final)
        io.sync_dir(parent)
    except BaseException:
        if io.exists(staging):
            io.rm(staging, recursive=True)
        raise
