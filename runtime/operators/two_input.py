"""Operators with two inputs: the broadcast process operator (input 1: the stream, keyed or not;
input 2: the broadcast stream).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from statekit.runtime.api.functions import BroadcastProcessFunction
from statekit.runtime.operators.base import StreamOperator
from statekit.runtime.operators.process_context import _ProcessContext
from statekit.runtime.operators.timers import _InternalTimerService
from statekit.statefmt.errors import BadInputError

if TYPE_CHECKING:
    pass

__all__ = [
    "BroadcastProcessOperator",
]


class BroadcastProcessOperator(StreamOperator):
    """Input 1: the (keyed or not) stream; input 2: the broadcast stream."""

    def initialize_state(self) -> None:
        super().initialize_state()
        if self.keyed_backend is not None:
            self.timers = _InternalTimerService(self.keyed_backend, self._on_timer)
            self.timers.restore()

    def _on_timer(self, timestamp: int) -> None:
        on_timer = getattr(self.function, "on_timer", None)
        if callable(on_timer):
            ctx = _ProcessContext(self)
            ctx._timestamp = timestamp
            self.element_time.timestamp = timestamp  # what the timer emits carries its time
            on_timer(timestamp, ctx, self.output)

    def element_handler(self) -> Callable[[Any], None]:
        if not isinstance(self.function, BroadcastProcessFunction):
            raise BadInputError(f"operator {self.ctx.uid!r} needs a (Keyed)BroadcastProcessFunction")
        fn = self.function.process_element
        ctx, out = _ProcessContext(self), self.output
        selector, backend = self.ctx.key_selector, self.keyed_backend
        if selector is None or backend is None:
            return lambda value: fn(value, ctx, out)

        def handle(value: Any) -> None:
            backend.current_key = selector(value)
            fn(value, ctx, out)

        return handle

    def element_handler2(self) -> Callable[[Any], None]:
        assert isinstance(self.function, BroadcastProcessFunction)
        fn = self.function.process_broadcast_element
        ctx, out = _ProcessContext(self, writable_broadcast=True), self.output
        return lambda value: fn(value, ctx, out)


