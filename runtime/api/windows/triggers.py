"""Triggers (Flink's): when a window's contents are emitted (fired) and when they are dropped (purged).

A trigger is called per record, per timer of the window and when windows merge, through a
:class:`TriggerContext` scoped to the current key and window. Its own state (e.g. the
count of :class:`CountTrigger`) lives in keyed state per (key, window).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import Enum
from typing import Any

from statekit.runtime.api.windows.windows import Window
from statekit.statefmt.errors import BadInputError

__all__ = [
    "TriggerResult",
    "TriggerContext",
    "Trigger",
    "EventTimeTrigger",
    "ProcessingTimeTrigger",
    "CountTrigger",
    "PurgingTrigger",
    "NeverTrigger",
]


class TriggerResult(Enum):
    CONTINUE = (False, False)
    FIRE = (True, False)
    PURGE = (False, True)
    FIRE_AND_PURGE = (True, True)

    @property
    def is_fire(self) -> bool:
        return self.value[0]

    @property
    def is_purge(self) -> bool:
        return self.value[1]


class TriggerContext(ABC):
    """What a trigger may do for the current key and window."""

    @abstractmethod
    def current_watermark(self) -> int: ...

    @abstractmethod
    def current_processing_time(self) -> int: ...

    @abstractmethod
    def register_event_time_timer(self, timestamp: int) -> None: ...

    @abstractmethod
    def register_processing_time_timer(self, timestamp: int) -> None: ...

    @abstractmethod
    def delete_event_time_timer(self, timestamp: int) -> None: ...

    @abstractmethod
    def delete_processing_time_timer(self, timestamp: int) -> None: ...

    @abstractmethod
    def get_state(self, name: str) -> Any:
        """The trigger's value ``name`` for this key and window (None when unset)."""

    @abstractmethod
    def set_state(self, name: str, value: Any) -> None:
        """Set (None: clear) the trigger's value ``name`` for this key and window."""

    @abstractmethod
    def merged_states(self, name: str) -> list[Any]:
        """In :meth:`Trigger.on_merge`: the values ``name`` of the windows that were merged."""


class Trigger(ABC):
    """Decides when a window fires."""

    @abstractmethod
    def on_element(self, element: Any, timestamp: int, window: Window, ctx: TriggerContext) -> TriggerResult: ...

    def on_event_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return False

    def on_merge(self, window: Window, ctx: TriggerContext) -> None:
        raise BadInputError(f"{type(self).__name__} cannot be used with merging (session) windows")

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        """The window is dropped: remove the trigger's state and timers."""


class EventTimeTrigger(Trigger):
    """Fires once the watermark passes the window's end (again for each late record within lateness)."""

    def on_element(self, element: Any, timestamp: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        if window.max_timestamp() <= ctx.current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: TriggerContext) -> None:
        if window.max_timestamp() > ctx.current_watermark():
            ctx.register_event_time_timer(window.max_timestamp())

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        ctx.delete_event_time_timer(window.max_timestamp())


class ProcessingTimeTrigger(Trigger):
    """Fires when the wall clock passes the window's end."""

    def on_element(self, element: Any, timestamp: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        ctx.register_processing_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: TriggerContext) -> None:
        ctx.register_processing_time_timer(window.max_timestamp())

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        ctx.delete_processing_time_timer(window.max_timestamp())


class CountTrigger(Trigger):
    """Fires every ``count`` records of a window (the count is trigger state ``count``)."""

    def __init__(self, count: int) -> None:
        if not isinstance(count, int) or count < 1:
            raise BadInputError(f"CountTrigger needs a count >= 1, got {count!r}")
        self.count = count

    @staticmethod
    def of(count: int) -> CountTrigger:
        return CountTrigger(count)

    def on_element(self, element: Any, timestamp: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        seen = (ctx.get_state("count") or 0) + 1
        if seen >= self.count:
            ctx.set_state("count", None)
            return TriggerResult.FIRE
        ctx.set_state("count", seen)
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: TriggerContext) -> None:
        total = sum(v or 0 for v in ctx.merged_states("count"))
        ctx.set_state("count", total or None)

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        ctx.set_state("count", None)


class PurgingTrigger(Trigger):
    """Wraps a trigger: every FIRE becomes FIRE_AND_PURGE."""

    def __init__(self, trigger: Trigger) -> None:
        self.trigger = trigger

    @staticmethod
    def of(trigger: Trigger) -> PurgingTrigger:
        return PurgingTrigger(trigger)

    @staticmethod
    def _purging(result: TriggerResult) -> TriggerResult:
        return TriggerResult.FIRE_AND_PURGE if result.is_fire else result

    def on_element(self, element: Any, timestamp: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return self._purging(self.trigger.on_element(element, timestamp, window, ctx))

    def on_event_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return self._purging(self.trigger.on_event_time(time, window, ctx))

    def on_processing_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return self._purging(self.trigger.on_processing_time(time, window, ctx))

    def can_merge(self) -> bool:
        return self.trigger.can_merge()

    def on_merge(self, window: Window, ctx: TriggerContext) -> None:
        self.trigger.on_merge(window, ctx)

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        self.trigger.clear(window, ctx)


class NeverTrigger(Trigger):
    """The default of GlobalWindows: never fires."""

    def on_element(self, element: Any, timestamp: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE
