"""The live windows of an event-time window operator's record path, and their state pairs.

A window's state is keyed by the pair ``(key, namespace)`` (the namespace: the window as a plain
tuple of ints). Hashing such a pair and comparing it with an equal pair of other objects costs
several times a lookup by the key alone, so each live window keeps its *canonical pairs*: key ->
the one ``(key, namespace)`` tuple the window's state is addressed with. A lookup of the
canonical pair in a state table meets the very tuple stored there (identity, no comparison of
the key's contents). The pairs are equal to the ones built per record, so what is stored — and
every snapshot — is the same.

Invariant: an entry holds the canonical pairs of its window only while the window may still
take records (its cleanup time is above the watermark); :meth:`LiveWindows.prune` drops the
windows the watermark passed, so the pairs never outlive the window state they address.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statekit.runtime.api.windows.windows import Window

__all__ = [
    "LiveWindow",
    "LiveWindows",
]

# (window, namespace, max timestamp, canonical pairs: key -> (key, namespace))
LiveWindow = tuple[Window, tuple[int, ...], int, dict[Any, tuple[Any, tuple[int, ...]]]]


class LiveWindows:
    """An event-time assigner's windows of a record as :data:`LiveWindow` entries, one entry (and
    one namespace tuple) per window while it is live.

    Args:
        assign: The assigner's ``assign_windows(value, timestamp)``.
        lateness: The allowed lateness: a window is live until ``max timestamp + lateness``.
        limit: At most this many windows are kept; past it the entries start again (a bound on
            memory when the watermark does not move).
    """

    def __init__(self, assign: Callable[[Any, int], list[Window]], lateness: int, limit: int) -> None:
        self._assign = assign
        self._lateness = lateness
        self._limit = limit
        self._live: dict[Window, LiveWindow] = {}

    def __call__(self, value: Any, timestamp: int) -> list[LiveWindow]:
        return [self._entry(window) for window in self._assign(value, timestamp)]

    def _entry(self, window: Window) -> LiveWindow:
        found = self._live.get(window)
        if found is None:
            if len(self._live) >= self._limit:
                self._live.clear()
            found = self._live[window] = (window, tuple(window), window.max_timestamp(), {})
        return found

    def prune(self, watermark: int) -> None:
        """Drop the windows whose cleanup time the watermark reached (they take no more records)."""
        lateness = self._lateness
        ended = [window for window, entry in self._live.items() if entry[2] + lateness <= watermark]
        for window in ended:
            del self._live[window]

    def __len__(self) -> int:
        return len(self._live)
