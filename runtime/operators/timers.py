"""Timers of keyed process functions, per key, persisted as keyed map state ``_timers``.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from statekit.runtime.api.functions import TimerService
from statekit.runtime.api.state import MapState, MapStateDescriptor
from statekit.runtime.api.watermarks import MIN_WATERMARK
from statekit.runtime.state.backend import KeyedStateBackend

if TYPE_CHECKING:
    pass

__all__ = [
    "TIMERS",
]


TIMERS = MapStateDescriptor("_timers", value_type="bool", key_type="string")


class _InternalTimerService(TimerService):
    """Timers per key, persisted as keyed map state ``_timers`` (user key ``p:<ts>``/``e:<ts>``)."""

    def __init__(self, backend: KeyedStateBackend[Any], fire: Callable[[int], None]) -> None:
        self.backend = backend
        self.fire = fire
        self.state: MapState[Any] | None = None
        self.processing: list[tuple[int, int, Any]] = []
        self.event: list[tuple[int, int, Any]] = []
        self.watermark = MIN_WATERMARK
        self.sequence = itertools.count()

    def _state(self) -> MapState[Any]:
        if self.state is None:
            self.state = self.backend.get_state(TIMERS)  # type: ignore[assignment]
        assert self.state is not None
        return self.state

    def restore(self) -> None:
        if not any(d.name == TIMERS.name for d in self.backend.descriptors()):
            return
        state = self._state()
        for key in list(self.backend.keys(TIMERS.name)):
            self.backend.current_key = key
            for name in state.keys():  # noqa: SIM118 (MapState, not a dict)
                domain, _, ts = str(name).partition(":")
                heap = self.processing if domain == "p" else self.event
                heapq.heappush(heap, (int(ts), next(self.sequence), key))

    def current_processing_time(self) -> int:
        return int(time.time() * 1000)

    def current_watermark(self) -> int:
        return self.watermark

    def _register(self, domain: str, heap: list[tuple[int, int, Any]], timestamp: int) -> None:
        name = f"{domain}:{int(timestamp)}"
        state = self._state()
        if not state.contains(name):
            state.put(name, True)
            heapq.heappush(heap, (int(timestamp), next(self.sequence), self.backend.current_key))

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._register("p", self.processing, timestamp)

    def register_event_time_timer(self, timestamp: int) -> None:
        self._register("e", self.event, timestamp)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._state().remove(f"p:{int(timestamp)}")

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._state().remove(f"e:{int(timestamp)}")

    def next_processing_time(self) -> int | None:
        return self.processing[0][0] if self.processing else None

    def _advance(self, domain: str, heap: list[tuple[int, int, Any]], until: int) -> None:
        state = self._state() if heap else None
        while heap and heap[0][0] <= until:
            timestamp, _, key = heapq.heappop(heap)
            self.backend.current_key = key
            name = f"{domain}:{timestamp}"
            assert state is not None
            if state.contains(name):
                state.remove(name)
                self.fire(timestamp)

    def advance_processing_time(self, now_ms: int) -> None:
        self._advance("p", self.processing, now_ms)

    def advance_watermark(self, watermark: int) -> None:
        self.watermark = max(self.watermark, watermark)
        self._advance("e", self.event, self.watermark)


