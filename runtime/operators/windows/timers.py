"""Window timers: per (key, window), persisted as keyed map state ``_window_timers``.

The state's namespace is the window (as stored by :mod:`.windows`); a timer's user key is
``[domain, timestamp]`` (domain 0: event time, 1: processing time), so timers restore with
the key groups that own them — at any parallelism.

In memory, per domain, the timers are grouped by timestamp: ``queues[domain][timestamp]`` maps
each timer's *entry* ``(hashable key, namespace)`` (the namespace: the window as a plain tuple)
to its key, in registration order, and a heap
holds the timestamps (a timestamp may be in it more than once, or without a group: such heap
entries are skipped). What is in the queues is in the state, and the reverse. Timers fire in
timestamp order, those of one timestamp in registration order; a timer registered while its
timestamp's group fires joins that group and fires in the same pass.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from typing import Any

from statekit.readers.window_state import WINDOW_NAMESPACE_TYPE, WINDOW_TIMERS_STATE
from statekit.runtime.api.state import MapState, MapStateDescriptor
from statekit.runtime.api.watermarks import MIN_WATERMARK
from statekit.runtime.api.windows.windows import Window, window_of
from statekit.runtime.operators.windows.state_access import maps_by_pair
from statekit.runtime.state.backend import KeyedStateBackend, hashable
from statekit.runtime.state.shared_map import SharedMap

__all__ = [
    "WINDOW_TIMERS",
    "EVENT_TIME",
    "PROCESSING_TIME",
    "WindowTimers",
    "Fire",
    "Group",
]

WINDOW_TIMERS = MapStateDescriptor(WINDOW_TIMERS_STATE, value_type="bool", key_type="list<int>",
                                   namespace_type=WINDOW_NAMESPACE_TYPE)
EVENT_TIME = 0
PROCESSING_TIME = 1

# fire(key, window, timestamp, domain, pair): pair is the (key, namespace) tuple of the timer's entry,
# equal to the pair the window's state is keyed by (the very tuple stored, for the record path's timers)
Fire = Callable[[Any, Window, int, int, tuple[Any, Any]], None]
# a timestamp's timers: its state user key (one tuple shared by them all), entry -> key, and the
# state map of a pair with only this timer (one SharedMap held by all such pairs)
Group = tuple[tuple[int, int], dict[tuple[Any, Any], Any], SharedMap]

_MISSING: Any = object()


class WindowTimers:
    """Event- and processing-time timers of a window operator subtask."""

    def __init__(self, backend: KeyedStateBackend[Any], fire: Fire) -> None:
        self.backend = backend
        self.fire = fire
        self.state: MapState[Any] = backend.get_state(WINDOW_TIMERS)  # type: ignore[assignment]
        self.pairs = maps_by_pair(backend, self.state)
        self.queues: tuple[dict[int, Group], dict[int, Group]] = ({}, {})
        self.heaps: tuple[list[int], list[int]] = ([], [])
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
                self._group(int(domain), int(timestamp))[1][(hashable(key), tuple(window))] = key

    def _group(self, domain: int, timestamp: int) -> Group:
        queue = self.queues[domain]
        group = queue.get(timestamp)
        if group is None:
            user_key = (domain, timestamp)
            group = queue[timestamp] = (user_key, {}, SharedMap({user_key: True}))
            heapq.heappush(self.heaps[domain], timestamp)
        return group

    def contains(self, domain: int, timestamp: int, entry: tuple[Any, Any]) -> bool:
        """Whether the timer of ``entry`` ``(hashable key, namespace)`` at ``timestamp`` is registered."""
        group = self.queues[domain].get(timestamp)
        return group is not None and entry in group[1]

    def register(self, domain: int, timestamp: int, window: Window) -> None:
        """A timer of the current key and ``window``."""
        key, namespace = self.backend.current_key, tuple(window)
        self.register_pair(domain, timestamp, (key, namespace), (hashable(key), namespace))

    def register_pair(self, domain: int, timestamp: int, pair: tuple[Any, Any], entry: tuple[Any, Any]) -> None:
        """A timer of ``pair`` ``(key, namespace)``, whose entry is ``(hashable(key), namespace)`` (the
        same tuple may serve as both when the key is hashable as it is)."""
        group = self.queues[domain].get(timestamp)
        _, timers, alone = group if group is not None else self._group(domain, timestamp)
        if entry in timers:
            return
        self.pairs.put_shared(pair, alone)
        timers[entry] = pair[0]

    def delete(self, domain: int, timestamp: int, window: Window) -> None:
        key, namespace = self.backend.current_key, tuple(window)
        group = self.queues[domain].get(timestamp)
        if group is not None and group[1].pop((hashable(key), namespace), _MISSING) is not _MISSING:
            self.pairs.remove((key, namespace), group[0])

    def _advance(self, domain: int, until: int) -> None:
        heap, queue, backend, remove, fire = self.heaps[domain], self.queues[domain], self.backend, \
            self.pairs.remove, self.fire
        while heap and heap[0] <= until:
            timestamp = heapq.heappop(heap)
            group = queue.get(timestamp)
            if group is None:
                continue
            user_key, timers, _ = group
            namespace: Any = None
            window: Window | None = None
            while timers:  # timers registered for this timestamp while it fires join the pass
                for entry in list(timers):
                    key = timers.pop(entry, _MISSING)
                    if key is _MISSING:
                        continue  # deleted by an earlier timer's firing
                    if entry[1] is not namespace:  # a timestamp's timers mostly share one window
                        namespace, window = entry[1], window_of(entry[1])
                    assert window is not None
                    backend.current_key = key
                    pair = entry if entry[0] is key else (key, namespace)
                    remove(pair, user_key)
                    fire(key, window, timestamp, domain, pair)
            del queue[timestamp]

    # the operator-facing names of the runtime's timer services

    def current_processing_time(self) -> int:
        return int(time.time() * 1000)

    def current_watermark(self) -> int:
        return self.watermark

    def next_processing_time(self) -> int | None:
        heap, queue = self.heaps[PROCESSING_TIME], self.queues[PROCESSING_TIME]
        while heap and heap[0] not in queue:
            heapq.heappop(heap)  # a timestamp whose timers all went
        return heap[0] if heap else None

    def advance_processing_time(self, now_ms: int) -> None:
        self._advance(PROCESSING_TIME, now_ms)

    def advance_watermark(self, watermark: int) -> None:
        if watermark > self.watermark:
            self.watermark = watermark
        self._advance(EVENT_TIME, self.watermark)

    def pending(self) -> int:
        return sum(len(group[1]) for queue in self.queues for group in queue.values())
