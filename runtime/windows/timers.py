"""Window timers: per (key, window), persisted as keyed map state ``_window_timers``.

The state's namespace is the window (as stored by :mod:`.windows`); a timer's user key is
``[domain, timestamp]`` (domain 0: event time, 1: processing time), so timers restore with
the key groups that own them — at any parallelism. ``registered`` mirrors the state in memory
(what is in it is in the state, and the reverse), which keeps registration a set lookup;
heap entries whose timer is no longer registered are skipped when popped.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any

from statekit.readers.window_state import WINDOW_NAMESPACE_TYPE, WINDOW_TIMERS_STATE
from statekit.runtime.backend import KeyedStateBackend, hashable
from statekit.runtime.state import MapState, MapStateDescriptor
from statekit.runtime.watermarks import MIN_WATERMARK
from statekit.runtime.windows.windows import Window, window_of

__all__ = ["WINDOW_TIMERS", "EVENT_TIME", "PROCESSING_TIME", "WindowTimers"]

WINDOW_TIMERS = MapStateDescriptor(WINDOW_TIMERS_STATE, value_type="bool", key_type="list<int>",
                                   namespace_type=WINDOW_NAMESPACE_TYPE)
EVENT_TIME = 0
PROCESSING_TIME = 1

Fire = Callable[[Any, Window, int, int], None]


class WindowTimers:
    """Event- and processing-time timers of a window operator subtask."""

    def __init__(self, backend: KeyedStateBackend[Any], fire: Fire) -> None:
        self.backend = backend
        self.fire = fire
        self.state: MapState[Any] = backend.get_state(WINDOW_TIMERS)  # type: ignore[assignment]
        self.registered: set[tuple[int, int, Any, Window]] = set()
        self.heaps: tuple[list[tuple[int, int, Any, Window]], ...] = ([], [])
        self.sequence = itertools.count()
        self.watermark = MIN_WATERMARK

    def restore(self) -> None:
        """Load the timers of every key this subtask restored."""
        backend, state = self.backend, self.state
        for key, namespace in backend.namespaces(WINDOW_TIMERS.name):
            backend.current_key = key
            window = window_of(namespace)
            state.set_current_namespace(window)
            for user_key in state.keys():  # noqa: SIM118 - MapState, not a dict
                domain, timestamp = user_key
                self._push(int(domain), int(timestamp), key, window)

    def _push(self, domain: int, timestamp: int, key: Any, window: Window) -> None:
        self.registered.add((domain, timestamp, hashable(key), window))
        heapq.heappush(self.heaps[domain], (timestamp, next(self.sequence), key, window))

    def register(self, domain: int, timestamp: int, window: Window) -> None:
        """A timer of the current key and ``window``."""
        key = self.backend.current_key
        if (domain, timestamp, hashable(key), window) in self.registered:
            return
        self.state.set_current_namespace(window)
        self.state.put((domain, timestamp), True)
        self._push(domain, timestamp, key, window)

    def delete(self, domain: int, timestamp: int, window: Window) -> None:
        entry = (domain, timestamp, hashable(self.backend.current_key), window)
        if entry in self.registered:
            self.registered.discard(entry)
            self.state.set_current_namespace(window)
            self.state.remove((domain, timestamp))

    def _advance(self, domain: int, until: int) -> None:
        heap, backend = self.heaps[domain], self.backend
        while heap and heap[0][0] <= until:
            timestamp, _, key, window = heapq.heappop(heap)
            entry = (domain, timestamp, hashable(key), window)
            if entry not in self.registered:
                continue
            self.registered.discard(entry)
            backend.current_key = key
            self.state.set_current_namespace(window)
            self.state.remove((domain, timestamp))
            self.fire(key, window, timestamp, domain)

    # the operator-facing names of the runtime's timer services

    def current_processing_time(self) -> int:
        return int(time.time() * 1000)

    def current_watermark(self) -> int:
        return self.watermark

    def next_processing_time(self) -> int | None:
        heap = self.heaps[PROCESSING_TIME]
        return heap[0][0] if heap else None

    def advance_processing_time(self, now_ms: int) -> None:
        self._advance(PROCESSING_TIME, now_ms)

    def advance_watermark(self, watermark: int) -> None:
        if watermark > self.watermark:
            self.watermark = watermark
        self._advance(EVENT_TIME, self.watermark)

    def pending(self) -> int:
        return len(self.registered)
