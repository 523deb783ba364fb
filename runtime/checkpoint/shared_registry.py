"""The shared-file registry of one job: which checkpoints reference which file of ``shared/``.

Flink's ``SharedStateRegistry``. An incremental checkpoint names shared files (SST files
uploaded once, referenced by every later checkpoint that still contains them). The registry
counts, per file, the completed and retained checkpoints that name it:

* a completed checkpoint registers its files *before* an older one is released, so a file
  both name is never deleted in between;
* releasing a checkpoint (retention, cancellation) returns the files no retained checkpoint
  names any more. They are deleted once every checkpoint that was in progress at that moment
  has ended: a checkpoint in progress may have reused them (it reuses the files of its base,
  the latest completed checkpoint when it was triggered) and registers them when it completes;
* files a checkpoint uploaded and then failed to complete are named by nobody: the
  coordinator deletes them when it aborts the checkpoint.

The registry is in-memory state of the coordinator; a job that starts on an existing job
directory seeds it from the complete checkpoints there (``adopt``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

__all__ = [
    "SharedStateRegistry",
]


class SharedStateRegistry:
    """Reference counts of shared files (paths relative to the job's ``shared/``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._refs: dict[str, set[int]] = {}
        self._waiting: list[tuple[set[int], list[str]]] = []

    def register(self, checkpoint_id: int, paths: Iterable[str]) -> None:
        """``checkpoint_id`` (completed, retained) names ``paths``."""
        with self._lock:
            for path in paths:
                self._refs.setdefault(path, set()).add(checkpoint_id)

    def release(self, checkpoint_id: int, in_progress: Iterable[int]) -> list[str]:
        """``checkpoint_id`` is no longer retained.

        Returns the files that nobody names any more and may be deleted now; those that a
        checkpoint of ``in_progress`` may still reuse are held until :meth:`ended` says so.
        """
        with self._lock:
            freed = []
            for path, holders in list(self._refs.items()):
                holders.discard(checkpoint_id)
                if not holders:
                    del self._refs[path]
                    freed.append(path)
            waiting = set(in_progress)
            if freed and waiting:
                self._waiting.append((waiting, freed))
                return []
            return sorted(freed)

    def ended(self, checkpoint_id: int) -> list[str]:
        """A checkpoint in progress completed or was aborted: the held files now free to delete."""
        with self._lock:
            ready: list[str] = []
            still: list[tuple[set[int], list[str]]] = []
            for waiting, paths in self._waiting:
                waiting.discard(checkpoint_id)
                if waiting:
                    still.append((waiting, paths))
                else:
                    ready.extend(p for p in paths if p not in self._refs)
            self._waiting = still
            return sorted(ready)

    def referenced(self, path: str) -> bool:
        with self._lock:
            return path in self._refs

    def holders(self, path: str) -> set[int]:
        with self._lock:
            return set(self._refs.get(path, ()))

    def files(self) -> set[str]:
        """Every file some retained checkpoint names."""
        with self._lock:
            return set(self._refs)
