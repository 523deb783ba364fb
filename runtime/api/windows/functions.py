"""Window functions: what a fired window's contents become."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable
from typing import Any

from statekit.runtime.api.functions import Collector, Function

__all__ = [
    "ProcessWindowFunction",
    "WindowContext",
]


class WindowContext:
    """The ``context`` of :meth:`ProcessWindowFunction.process` (Flink's ProcessWindowFunction.Context)."""

    def window(self) -> Any:
        """The window that fired (a TimeWindow or the GlobalWindow)."""
        raise NotImplementedError

    def current_watermark(self) -> int:
        raise NotImplementedError

    def current_processing_time(self) -> int:
        raise NotImplementedError

    def output(self, tag: Any, value: Any) -> None:
        """Emit ``value`` to the side output ``tag``."""
        raise NotImplementedError


class ProcessWindowFunction(Function):
    """Gets all elements (or the pre-aggregated result) of a fired window of one key."""

    @abstractmethod
    def process(self, key: Any, context: WindowContext, elements: Iterable[Any], out: Collector) -> None:
        """Emit the results of the window ``context.window()`` of ``key``."""

    def clear(self, context: WindowContext) -> None:
        """The window is dropped (after its allowed lateness)."""
