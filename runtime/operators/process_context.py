"""The ``ctx`` a process function receives: current key, timers, side outputs, broadcast state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from statekit.runtime.api.functions import TimerService
from statekit.runtime.api.state import (
    BroadcastState,
    MapStateDescriptor,
    ReadOnlyBroadcastState,
    State,
    StateDescriptorBase,
)
from statekit.runtime.operators.base import StreamOperator
from statekit.statefmt.errors import BadInputError

if TYPE_CHECKING:
    pass

__all__ = [
]


class _ProcessContext:
    """The ``ctx`` of process functions: current key, timers, broadcast state."""

    __slots__ = ("_op", "_timestamp", "_writable")

    def __init__(self, op: StreamOperator, writable_broadcast: bool = False) -> None:
        self._op = op
        self._timestamp: int | None = None
        self._writable = writable_broadcast

    def get_current_key(self) -> Any:
        backend = self._op.keyed_backend
        return None if backend is None else backend.current_key

    @property
    def current_key(self) -> Any:
        return self.get_current_key()

    def timestamp(self) -> int | None:
        """The timer's timestamp in ``on_timer``, else the current record's event timestamp."""
        return self._timestamp if self._timestamp is not None else self._op.element_time.timestamp

    def output(self, tag: Any, value: Any) -> None:
        """Emit ``value`` to the side output ``tag`` (an :class:`OutputTag`)."""
        self._op.side_output(tag, value)

    def timer_service(self) -> TimerService:
        op = self._op
        if op.timers is None:
            raise BadInputError(f"operator {op.ctx.uid!r}: timers are only available on a keyed stream")
        return op.timers

    def get_broadcast_state(self, descriptor: MapStateDescriptor) -> ReadOnlyBroadcastState:
        state = self._op.operator_state.get_broadcast_state(descriptor)
        return state if self._writable else _ReadOnly(state)

    def apply_to_keyed_state(self, descriptor: StateDescriptorBase, function: Callable[[Any, State], None]) -> None:
        """Call ``function(key, state)`` for every key of this subtask that has ``descriptor`` state.

        Only on the broadcast side of a keyed stream (Flink's ``applyToKeyedState``); the
        state handle is scoped to each key in turn and the current key is restored after.
        """
        op = self._op
        backend = op.keyed_backend
        if not self._writable or backend is None:
            raise BadInputError(f"operator {op.ctx.uid!r}: apply_to_keyed_state needs the broadcast side of a keyed stream")
        state = backend.get_state(descriptor)
        previous = backend.current_key
        try:
            for key in backend.keys(descriptor.name):
                backend.current_key = key
                function(key, state)
        finally:
            backend.current_key = previous


class _ReadOnly(ReadOnlyBroadcastState):
    def __init__(self, state: BroadcastState) -> None:
        self._state = state

    def get(self, key: Any) -> Any:
        return self._state.get(key)

    def contains(self, key: Any) -> bool:
        return self._state.contains(key)

    def items(self) -> list[tuple[Any, Any]]:
        return self._state.items()


