"""Restore modes, Flink's ``RestoreMode``: who owns the snapshot a job restores from.

* ``NO_CLAIM`` (the default): the snapshot stays the user's. The job never modifies or deletes
  any of its files: it is never put into retention (even when it is a checkpoint of the job's
  own directory, adopted by a job id reused after a crash), its shared files stay registered
  for as long as the job runs (no release, so no deletion), and the first checkpoint after the
  restore is a full one: it references nothing of the restored snapshot, so the restored
  snapshot may be deleted by the user as soon as that checkpoint completes.
* ``CLAIM``: the job takes ownership. The restored checkpoint joins retention as the oldest
  retained checkpoint and is disposed once ``num_retained`` newer ones completed (its shared
  files once no retained checkpoint names them); when it is a checkpoint of the job's own
  directory, the first incremental checkpoint builds on it (reuses its shared files).
"""

from __future__ import annotations

import enum

from statekit.statefmt.errors import BadInputError

__all__ = [
    "RestoreMode",
    "DEFAULT_RESTORE_MODE",
    "parse_restore_mode",
]


class RestoreMode(enum.Enum):
    CLAIM = "claim"
    NO_CLAIM = "no-claim"


DEFAULT_RESTORE_MODE = RestoreMode.NO_CLAIM


def parse_restore_mode(text: str | RestoreMode | None) -> RestoreMode:
    """``claim`` / ``no-claim`` (also ``NO_CLAIM``, ``no_claim``); None is the default."""
    if text is None:
        return DEFAULT_RESTORE_MODE
    if isinstance(text, RestoreMode):
        return text
    normalized = text.strip().lower().replace("_", "-")
    for mode in RestoreMode:
        if mode.value == normalized:
            return mode
    raise BadInputError(f"invalid restore mode {text!r}; use claim or no-claim")
