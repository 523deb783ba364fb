"""The one error hierarchy of statekit.

Every failure a user can cause or meet is a :class:`StatekitError`. Each class carries the
exit code the CLI returns for it (mapped in exactly one place, ``statekit.cli.errors``),
and its message is one line that names the path and the cause.
"""

from __future__ import annotations

__all__ = [
    "StatekitError",
    "BadInputError",
    "PathNotFoundError",
    "NotACheckpointError",
    "IncompleteCheckpointError",
    "MetadataError",
    "UnsupportedVersionError",
    "UnsafePathError",
    "UntrustedSerializerError",
    "SerializationError",
    "CorruptStateError",
    "StateNotFoundError",
    "JobError",
    "JobFailedError",
    "IncompatibleStateError",
    "EXIT_OK",
    "EXIT_CHECK_FAILED",
    "EXIT_BAD_INPUT",
]

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2


class StatekitError(Exception):
    """Base class: a failure with a one-line message and an exit code."""

    exit_code: int = EXIT_BAD_INPUT

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class BadInputError(StatekitError):
    """An argument or option the user gave cannot be used (parallelism, uids, ...)."""


class PathNotFoundError(StatekitError):
    """A path that must exist does not."""


class NotACheckpointError(StatekitError):
    """A path exists but is not a checkpoint, savepoint or checkpoint directory."""


class IncompleteCheckpointError(NotACheckpointError):
    """A chk-N or savepoint directory without a valid ``_metadata``: never read as state."""


class MetadataError(StatekitError):
    """``_metadata`` is malformed, truncated or inconsistent."""


class UnsupportedVersionError(MetadataError):
    """A metadata or state file of a format version this statekit cannot read."""


class UnsafePathError(MetadataError):
    """A path in metadata escapes its checkpoint directory (``..``, absolute, other scheme)."""


class UntrustedSerializerError(StatekitError):
    """State uses a serializer that executes code on read (pickle) and trust was not given."""


class SerializationError(StatekitError):
    """A value cannot be encoded or decoded by its declared serializer or type."""


class CorruptStateError(StatekitError):
    """A state file fails its size or checksum check; the message names file and key group."""

    def __init__(
        self, message: str, *, path: str | None = None, key_group: int | None = None
    ) -> None:
        self.key_group = key_group
        if key_group is not None:
            message = f"key group {key_group}: {message}"
        super().__init__(message, path=path)


class StateNotFoundError(BadInputError):
    """An operator uid or state name that the snapshot does not hold."""


class JobError(StatekitError):
    """A job-control request that cannot be served (unknown job, refused, not running)."""


class JobFailedError(StatekitError):
    """A job ran and failed (restarts exhausted, task exception)."""

    exit_code = EXIT_CHECK_FAILED


class IncompatibleStateError(BadInputError):
    """A job cannot restore a snapshot's state (unmapped uid, changed kind, serializer or type);
    the message has one line per reason."""


class JobScriptError(BadInputError):
    """A job script that does not compile or import: the message starts with ``file:line``
    (``path`` is the file)."""

    def __init__(self, message: str, *, path: str, line: int | None = None) -> None:
        super().__init__(message, path=f"{path}:{line}" if line else path)
        self.path = path
