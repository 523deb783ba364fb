"""TODO docstring."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "VALUE_KEY_SELECTOR",
    "PAIR_EMITTER",
    "ASSIGNING_EMITTER",
    "BATCH_HANDLER",
    "LIST_HANDLER",
    "EMIT_ALL",
    "TimestampedBuffer",
]

# on a timestamped edge's key selector (it takes (value, timestamp) records): the selector of the value
VALUE_KEY_SELECTOR = "value_key_selector"


# on a hash writer's ``emit`` with a VALUE_KEY_SELECTOR: ``emit_pair(value, timestamp)``, which
# sends ``(value, timestamp)`` as ``emit`` does without a tuple to unpack for the key
PAIR_EMITTER = "emit_pair"


# on a hash writer's ``emit`` with a VALUE_KEY_SELECTOR: ``emit_assigned(values, assign, previous,
# highest)``: each value in order with its timestamp ``assign(value, t)`` as an int (``t``: the
# timestamp assigned before it, ``previous`` for the first), as ``emit_pair`` sends it; returns the
# last timestamp and the highest of ``highest`` and the timestamps
ASSIGNING_EMITTER = "emit_assigned"


# on a handler of (value, timestamp) records: ``batch(values, timestamps)``, the same for a whole
# buffer's parallel lists (what TimestampedBuffer.deliver calls instead of one call per record)
BATCH_HANDLER = "batch_handler"


# on a handler of plain records: ``handle_all(records)``, the same for a whole list buffer, in
# order (what a task calls instead of one call per record)
LIST_HANDLER = "list_handler"


# on a source's per-record emitter: ``emit_all(records)``, the same for a whole poll of
# records, in order (what a source task calls instead of one call per record)
EMIT_ALL = "emit_all"


class TimestampedBuffer(list[Any]):
    """A buffer of a keyed exchange whose records are ``(value, timestamp)`` pairs, kept as two
    parallel lists: the values (the list itself) and their ``timestamps``; record ``i`` is
    ``(self[i], self.timestamps[i])``. No pair object exists per record in flight (a tuple per
    record would be a container the garbage collector counts and scans until it is consumed).

    It is not a plain ``list``: a consumer hands it to the channel's handler with
    :meth:`deliver` (a record buffer is ``payload.__class__ is list``)."""

    __slots__ = ("timestamps",)

    def __init__(self) -> None:
        super().__init__()
        self.timestamps: list[Any] = []

    def records(self) -> list[tuple[Any, Any]]:
        """The records as ``(value, timestamp)`` pairs."""
        return list(zip(self, self.timestamps, strict=True))

    def deliver(self, handle: Callable[[Any], None]) -> None:
        """Hand every record, in order, to ``handle`` (a handler of ``(value, timestamp)`` pairs):
        in one call to its :data:`BATCH_HANDLER` when it has one, else one call per pair."""
        batch = getattr(handle, BATCH_HANDLER, None)
        if batch is not None:
            batch(self, self.timestamps)
            return
        for record in zip(self, self.timestamps, strict=True):
            handle(record)


