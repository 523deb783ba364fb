"""Job ids: exactly 32 lower-case hex characters, as Flink's ``JobID`` prints.

A job id names directories (``<checkpoint-dir>/<job-id>/``, the job registry's
``jobs/<job-id>/``), so every job id that enters statekit from outside (``--job-id``,
``RunOptions``, REST paths, registry names) passes :func:`check_job_id`; ids that statekit
makes come from :func:`new_job_id` and pass it by construction.
"""

from __future__ import annotations

import re
import secrets

from statekit.statefmt.errors import BadInputError

__all__ = ["JOB_ID_FORMAT", "new_job_id", "is_job_id", "is_job_id_prefix", "check_job_id"]

JOB_ID_FORMAT = "32 lower-case hex characters"
_JOB_ID = re.compile(r"[0-9a-f]{32}")
_JOB_ID_PREFIX = re.compile(r"[0-9a-f]{1,32}")


def new_job_id() -> str:
    """A fresh random job id (:data:`JOB_ID_FORMAT`)."""
    return secrets.token_hex(16)


def is_job_id(text: object) -> bool:
    """Whether ``text`` is a job id: the whole string, no trailing newline, no separators."""
    return isinstance(text, str) and _JOB_ID.fullmatch(text) is not None


def is_job_id_prefix(text: str) -> bool:
    """Whether ``text`` is a non-empty prefix of some job id (how ``statekit`` commands name a job)."""
    return _JOB_ID_PREFIX.fullmatch(text) is not None


def check_job_id(job_id: str) -> str:
    """``job_id`` itself when it is a valid job id.

    Raises:
        BadInputError: Any other value (also with a trailing newline or path separators).
    """
    if not is_job_id(job_id):
        raise BadInputError(f"invalid job id {job_id!r}: expected {JOB_ID_FORMAT}")
    return job_id
