"""The batch paths: whole buffers handed over in one call instead of one call per record.

A record handler is a plain callable (the hot path: one call per record). Some handlers also
offer a variant for a whole buffer, and some emitters a variant for a whole poll; this module
is the one place that attaches such a variant to a callable and the one place that looks it
up (:func:`with_list_handler` / :func:`list_handler`, ...): nothing else sets or reads these
attributes. A caller that finds no variant falls back to one call per record, so a variant is
always an optimization with the same effect, never a different behaviour.

* ``list_handler``: on a handler of plain records, ``handle_all(records)`` for a list buffer.
* ``batch_handler``: on a handler of ``(value, timestamp)`` records,
  ``batch(values, timestamps)`` for a :class:`TimestampedBuffer`.
* ``emit_all``: on a per-record emitter, ``emit_all(records)`` for a whole poll.
* ``pair_emitter`` / ``assigning_emitter``: on a hash writer's emitter of a timestamped edge,
  ``emit_pair(value, timestamp)`` and ``emit_assigned(values, assign, previous, highest)``.
* ``value_key_selector``: on the key selector of a timestamped edge (it takes
  ``(value, timestamp)`` records), the selector of the value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = [
    "TimestampedBuffer",
    "with_list_handler",
    "list_handler",
    "with_batch_handler",
    "batch_handler",
    "with_timestamped_handler",
    "timestamped_handler",
    "with_emit_all",
    "emit_all_of",
    "with_pair_emitters",
    "pair_emitter",
    "assigning_emitter",
    "with_value_key_selector",
    "value_key_selector",
]

F = TypeVar("F", bound=Callable[..., Any])

# The attributes behind the variants (private: use the functions below)
_LIST_HANDLER = "list_handler"
_BATCH_HANDLER = "batch_handler"
_TIMESTAMPED_HANDLER = "timestamped_handler"
_EMIT_ALL = "emit_all"
_PAIR_EMITTER = "emit_pair"
_ASSIGNING_EMITTER = "emit_assigned"
_VALUE_KEY_SELECTOR = "value_key_selector"

ListHandler = Callable[[list[Any]], None]
BatchHandler = Callable[[list[Any], list[Any]], None]
PairEmitter = Callable[[Any, int], None]
# ``emit_assigned(values, assign, previous, highest)``: each value in order with its timestamp
# ``assign(value, t)`` as an int (``t``: the timestamp assigned before it, ``previous`` for the
# first), as ``emit_pair`` sends it; returns the last timestamp and the highest of ``highest`` and
# the timestamps
AssigningEmitter = Callable[[list[Any], Callable[[Any, Any], Any], Any, int], tuple[Any, int]]


def _attach(function: F, name: str, variant: Any) -> F:
    setattr(function, name, variant)
    return function


def with_list_handler(handle: F, handle_all: ListHandler) -> F:
    """``handle`` (a handler of plain records) with ``handle_all(records)``: the same for a whole
    list buffer, in order (what a task calls instead of one call per record)."""
    return _attach(handle, _LIST_HANDLER, handle_all)


def list_handler(handle: Callable[[Any], None]) -> ListHandler | None:
    """The whole-buffer variant of ``handle``, if it has one."""
    return getattr(handle, _LIST_HANDLER, None)


def with_batch_handler(handle: F, batch: BatchHandler) -> F:
    """``handle`` (a handler of ``(value, timestamp)`` records) with ``batch(values, timestamps)``:
    the same for a whole :class:`TimestampedBuffer`'s parallel lists."""
    return _attach(handle, _BATCH_HANDLER, batch)


def batch_handler(handle: Callable[[Any], None]) -> BatchHandler | None:
    """The :class:`TimestampedBuffer` variant of ``handle``, if it has one."""
    return getattr(handle, _BATCH_HANDLER, None)


def with_timestamped_handler(handle: F, timestamped: Callable[[Any], None],
                             batch: BatchHandler | None = None) -> F:
    """``handle`` (which takes plain records and reads their timestamp from the task's element
    time), marked with ``timestamped``: the same handler for records as ``(value, timestamp)``
    pairs, which a task calls for its channels that carry them instead (it sets no element time:
    the handler uses the record's timestamp). ``batch``: ``timestamped``'s whole-buffer variant."""
    if batch is not None:
        with_batch_handler(timestamped, batch)
    return _attach(handle, _TIMESTAMPED_HANDLER, timestamped)


def timestamped_handler(handle: Callable[[Any], None]) -> Callable[[Any], None] | None:
    """The ``(value, timestamp)`` variant of ``handle``, if it has one."""
    return getattr(handle, _TIMESTAMPED_HANDLER, None)


def with_emit_all(emit: F, emit_all: ListHandler) -> F:
    """``emit`` (a per-record emitter) with ``emit_all(records)``: the same for a whole poll of
    records, in order (what a source task calls instead of one call per record)."""
    return _attach(emit, _EMIT_ALL, emit_all)


def emit_all_of(emit: Callable[[Any], None]) -> ListHandler | None:
    """The whole-poll variant of ``emit``, if it has one."""
    return getattr(emit, _EMIT_ALL, None)


def with_pair_emitters(emit: F, emit_pair: PairEmitter, emit_assigned: AssigningEmitter) -> F:
    """``emit`` (a hash writer's emitter of a timestamped edge, taking ``(value, timestamp)``
    records) with ``emit_pair(value, timestamp)``, which sends the pair as ``emit`` does without a
    tuple to unpack for the key, and ``emit_assigned`` (see :data:`AssigningEmitter`)."""
    _attach(emit, _PAIR_EMITTER, emit_pair)
    return _attach(emit, _ASSIGNING_EMITTER, emit_assigned)


def pair_emitter(emit: Callable[[Any], None]) -> PairEmitter | None:
    """``emit_pair`` of a hash writer's emitter, if it has one."""
    return getattr(emit, _PAIR_EMITTER, None)


def assigning_emitter(emit: Callable[[Any], None]) -> AssigningEmitter | None:
    """``emit_assigned`` of a hash writer's emitter, if it has one."""
    return getattr(emit, _ASSIGNING_EMITTER, None)


def with_value_key_selector(record_key: F, value_key: Callable[[Any], Any]) -> F:
    """``record_key`` (the key selector of a timestamped edge: it takes ``(value, timestamp)``
    records) with ``value_key``, the selector of the value (a writer keys pairs by it)."""
    return _attach(record_key, _VALUE_KEY_SELECTOR, value_key)


def value_key_selector(selector: Callable[[Any], Any]) -> Callable[[Any], Any] | None:
    """The value's key selector of a timestamped edge's selector, if it has one."""
    return getattr(selector, _VALUE_KEY_SELECTOR, None)


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
        in one call to its batch variant (:func:`batch_handler`) when it has one, else one call per pair."""
        batch = batch_handler(handle)
        if batch is not None:
            batch(self, self.timestamps)
            return
        for record in zip(self, self.timestamps, strict=True):
            handle(record)


