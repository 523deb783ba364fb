"""Paths inside a checkpoint: metadata may only name files inside its own directory.

Invariant: every path accepted by :func:`check_relative_path` resolves to a location
inside the checkpoint directory, or (native format only) inside the job's ``shared/``.
"""

from __future__ import annotations

import posixpath
import re

from statekit.statefmt.errors import UnsafePathError

__all__ = ["check_relative_path", "join", "SHARED_PREFIX"]

SHARED_PREFIX = "../shared/"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def check_relative_path(path: str, *, allow_shared: bool = False, source: str | None = None) -> str:
    """Return ``path`` if it stays inside its checkpoint directory, else raise.

    Refused: empty paths, absolute paths, paths with a scheme (``s3:``, ``file:``),
    backslashes, NUL bytes and any ``..`` component — except the single leading
    ``../shared/`` of a native incremental checkpoint when ``allow_shared``.
    """
    reason = _unsafe_reason(path, allow_shared)
    if reason:
        raise UnsafePathError(f"unsafe file path {path!r} in metadata: {reason}", path=source)
    return path


def _unsafe_reason(path: str, allow_shared: bool) -> str | None:
    if not isinstance(path, str) or not path:
        return "empty"
    if "\\" in path or "\x00" in path:
        return "contains a backslash or NUL"
    if path.startswith("/") or _SCHEME.match(path):
        return "absolute paths and URLs are not allowed"
    rest = path
    if allow_shared and path.startswith(SHARED_PREFIX):
        rest = path[len(SHARED_PREFIX):]
    parts = rest.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "must not contain '..', '.' or empty components"
    return None


def join(base: str, relative: str) -> str:
    """Join a checked relative path to a directory (POSIX separators, as fsspec uses)."""
    return posixpath.normpath(posixpath.join(base.rstrip("/"), relative)) if base else relative
