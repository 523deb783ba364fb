"""Operators with one input: map, flat map, filter, process, keyed process, reduce, aggregate, sink.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from statekit.runtime.api.functions import (
    AggregateFunction,
    FilterFunction,
    FlatMapFunction,
    KeyedProcessFunction,
    MapFunction,
    ProcessFunction,
    ReduceFunction,
    SinkFunction,
)
from statekit.runtime.api.state import AggregatingStateDescriptor, ValueStateDescriptor
from statekit.runtime.exchange.batch_path import with_list_handler
from statekit.runtime.operators.base import StreamOperator, _method
from statekit.runtime.operators.process_context import _ProcessContext
from statekit.runtime.operators.timers import _InternalTimerService
from statekit.runtime.state.ttl import record_timed_handler

if TYPE_CHECKING:
    pass

__all__ = [
    "MapOperator",
    "FlatMapOperator",
    "FilterOperator",
    "ProcessOperator",
    "KeyedProcessOperator",
    "REDUCE_STATE",
    "ReduceOperator",
    "AggregateOperator",
    "SinkOperator",
]


class MapOperator(StreamOperator):
    def element_handler(self) -> Callable[[Any], None]:
        fn = _method(self.function, MapFunction, "map")
        collect = self.output.collect

        def handle(value: Any) -> None:
            collect(fn(value))

        return handle


class FlatMapOperator(StreamOperator):
    def element_handler(self) -> Callable[[Any], None]:
        fn = _method(self.function, FlatMapFunction, "flat_map")
        collect = self.output.collect

        def handle(value: Any) -> None:
            produced = fn(value)
            if produced is not None:
                for item in produced:
                    collect(item)

        return handle


class FilterOperator(StreamOperator):
    def element_handler(self) -> Callable[[Any], None]:
        fn = _method(self.function, FilterFunction, "filter")
        collect = self.output.collect

        def handle(value: Any) -> None:
            if fn(value):
                collect(value)

        return handle


class ProcessOperator(StreamOperator):
    """Non-keyed ProcessFunction."""

    def element_handler(self) -> Callable[[Any], None]:
        fn = _method(self.function, ProcessFunction, "process_element")
        ctx, out = _ProcessContext(self), self.output

        def handle(value: Any) -> None:
            fn(value, ctx, out)

        return handle


class KeyedProcessOperator(StreamOperator):
    """KeyedProcessFunction: keyed state and timers, scoped to each record's key."""

    def initialize_state(self) -> None:
        super().initialize_state()
        assert self.keyed_backend is not None
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
        fn = _method(self.function, KeyedProcessFunction, "process_element")
        selector = self.ctx.key_selector
        assert selector is not None and self.keyed_backend is not None
        backend, ctx, out = self.keyed_backend, _ProcessContext(self), self.output
        timed = record_timed_handler(backend, selector, fn, ctx, out)  # one TTL clock reading per record
        if timed is not None:
            return timed

        def handle(value: Any) -> None:
            backend.current_key = selector(value)
            fn(value, ctx, out)

        def handle_all(values: list[Any]) -> None:
            """``handle`` of every record of a buffer in order, the body inlined."""
            for value in values:
                backend.current_key = selector(value)
                fn(value, ctx, out)

        return with_list_handler(handle, handle_all)


REDUCE_STATE = "reduce"


class ReduceOperator(StreamOperator):
    """Keyed running reduce; emits the reduced value after every record."""

    def open(self) -> None:
        self.state = self.runtime_context.get_state(ValueStateDescriptor(REDUCE_STATE))
        super().open()

    def element_handler(self) -> Callable[[Any], None]:
        reduce = _method(self.function, ReduceFunction, "reduce")
        selector = self.ctx.key_selector
        assert selector is not None and self.keyed_backend is not None
        backend, collect, state = self.keyed_backend, self.output.collect, self.state

        def handle(value: Any) -> None:
            backend.current_key = selector(value)
            current = state.value()
            result = value if current is None else reduce(current, value)
            state.update(result)
            collect(result)

        return handle


class AggregateOperator(StreamOperator):
    """Keyed running aggregate over AggregatingState; emits the result after every record."""

    def open(self) -> None:
        function = self.function
        assert isinstance(function, AggregateFunction)
        self.state = self.runtime_context.get_aggregating_state(
            AggregatingStateDescriptor("aggregate", aggregate_function=function)
        )
        super().open()

    def element_handler(self) -> Callable[[Any], None]:
        selector = self.ctx.key_selector
        assert selector is not None and self.keyed_backend is not None
        backend, collect, state = self.keyed_backend, self.output.collect, self.state

        def handle(value: Any) -> None:
            backend.current_key = selector(value)
            state.add(value)
            collect(state.get())

        return handle


class SinkOperator(StreamOperator):
    """Hands records to a SinkFunction (or a plain callable)."""

    def element_handler(self) -> Callable[[Any], None]:
        return _method(self.function, SinkFunction, "invoke")

    def end_input(self) -> None:
        super().end_input()
        finish = getattr(self.function, "finish", None)
        if callable(finish):
            finish()


