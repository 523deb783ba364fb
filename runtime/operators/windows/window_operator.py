"""The window operator: assigns records to windows, keeps their contents, fires by trigger.

State (all keyed, so it restores at any parallelism with the key groups that own it; the
window is the state's *namespace*, stored as ``[start, end]`` — ``[]`` for the global window —
with namespace type ``list<int>``, as in Flink's window operator):

* ``window-contents``: the window's contents: value state holding the reduced value
  (``reduce``) or the accumulator (``aggregate``), list state of the elements (``process``);
* ``window-trigger``: map state, user key the trigger's state name: the trigger's values;
* ``_window_timers``: the window timers (:mod:`.timers`);
* ``window-merging-set`` (merging assigners only): value state without namespace, the key's
  windows (a session window is found by the windows it intersects);
* operator state ``_watermark`` (union list): the subtask's last watermark before end of
  input. A restore starts from the least of them, so a record that was late for the
  snapshot's watermark stays late (and one on time stays on time: the watermark a record
  meets in an uninterrupted run is never lower than the one of an earlier snapshot).

Invariants: a key's windows in ``window-contents`` of a merging assigner never intersect;
a window is *late* once its cleanup time (``max_timestamp + allowed_lateness``; event time
only) is at or below the watermark — records only for late windows are dropped (or go to
the late-data side output) and a window's state is removed at its cleanup time.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from statekit.readers.window_state import (
    WINDOW_CONTENTS_STATE,
    WINDOW_MERGING_SET_STATE,
    WINDOW_NAMESPACE_TYPE,
    WINDOW_TRIGGER_STATE,
)
from statekit.runtime.api.state import (
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    StateDescriptorBase,
    ValueState,
    ValueStateDescriptor,
)
from statekit.runtime.api.watermarks import MAX_WATERMARK, MIN_WATERMARK
from statekit.runtime.api.windows.assigners import WindowAssigner
from statekit.runtime.api.windows.functions import WindowContext
from statekit.runtime.api.windows.triggers import EventTimeTrigger, Trigger, TriggerContext, TriggerResult
from statekit.runtime.api.windows.windows import GlobalWindow, TimeWindow, Window, window_of
from statekit.runtime.checkpoint.barriers import CheckpointOptions
from statekit.runtime.exchange.batch_path import with_timestamped_handler
from statekit.runtime.operators.base import OperatorSnapshot, StreamOperator
from statekit.runtime.operators.windows.live_windows import LiveWindow, LiveWindows
from statekit.runtime.operators.windows.state_access import maps_by_pair, values_by_pair
from statekit.runtime.operators.windows.timers import EVENT_TIME, PROCESSING_TIME, WindowTimers
from statekit.runtime.state.backend import hashable
from statekit.statefmt.errors import BadInputError

__all__ = [
    "WindowSpec",
    "WindowOperator",
    "window_contents",
    "WINDOW_TRIGGER",
    "WINDOW_MERGING_SET",
    "WINDOW_WATERMARK",
]

# the names and namespace type statekit.readers.window_state recognises offline
WINDOW_TRIGGER = MapStateDescriptor(WINDOW_TRIGGER_STATE, key_type="string", namespace_type=WINDOW_NAMESPACE_TYPE)
WINDOW_MERGING_SET = ValueStateDescriptor(WINDOW_MERGING_SET_STATE, value_type="list<list<int>>")
WINDOW_WATERMARK = ListStateDescriptor("_watermark", value_type="int")
# live windows the hot path keeps before its table starts again (a bound on its memory)
_INTERNED_WINDOWS = 4096
# never equal to a record's timestamp (an int or None)
_NO_TIMESTAMP = object()


def window_contents(kind: str) -> StateDescriptorBase:
    """The contents state of a window function ``kind``: the elements (process) or one value."""
    if kind == "process":
        return ListStateDescriptor(WINDOW_CONTENTS_STATE, namespace_type=WINDOW_NAMESPACE_TYPE)
    return ValueStateDescriptor(WINDOW_CONTENTS_STATE, namespace_type=WINDOW_NAMESPACE_TYPE)


@dataclass
class WindowSpec:
    """What ``.window(...)...`` configured.

    Attributes:
        kind: ``reduce``, ``aggregate`` or ``process`` (how contents are kept).
        function: The ReduceFunction/callable, AggregateFunction or ProcessWindowFunction.
        window_function: An optional ProcessWindowFunction applied to the reduced or
            aggregated result.
    """

    assigner: WindowAssigner
    trigger: Trigger
    allowed_lateness_ms: int
    late_tag: Any
    kind: str
    function: Any
    window_function: Any = None


class _Contexts(TriggerContext, WindowContext):
    """The trigger and window-function context of the current key and window."""

    def __init__(self, op: WindowOperator) -> None:
        self.op = op
        self.window_: Window = GlobalWindow()
        self.merged: list[Window] = []

    # TriggerContext
    def current_watermark(self) -> int:
        return self.op.window_timers.watermark

    def current_processing_time(self) -> int:
        return self.op.window_timers.current_processing_time()

    def register_event_time_timer(self, timestamp: int) -> None:
        self.op.window_timers.register(EVENT_TIME, timestamp, self.window_)

    def register_processing_time_timer(self, timestamp: int) -> None:
        self.op.window_timers.register(PROCESSING_TIME, timestamp, self.window_)

    def delete_event_time_timer(self, timestamp: int) -> None:
        self.op.window_timers.delete(EVENT_TIME, timestamp, self.window_)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self.op.window_timers.delete(PROCESSING_TIME, timestamp, self.window_)

    def get_state(self, name: str) -> Any:
        state = self.op.trigger_state
        state.set_current_namespace(self.window_)
        return state.get(name)

    def set_state(self, name: str, value: Any) -> None:
        state = self.op.trigger_state
        state.set_current_namespace(self.window_)
        if value is None:
            state.remove(name)
        else:
            state.put(name, value)

    def merged_states(self, name: str) -> list[Any]:
        state, values = self.op.trigger_state, []
        for window in self.merged:
            state.set_current_namespace(window)
            values.append(state.get(name))
        return values

    # WindowContext
    def window(self) -> Any:
        return self.window_

    def output(self, tag: Any, value: Any) -> None:
        self.op.side_output(tag, value)


class WindowOperator(StreamOperator):
    """Keyed windows: contents in keyed state namespaced by window, window timers in timer state."""

    def __init__(self, spec: WindowSpec) -> None:
        super().__init__(spec.function)
        self.spec = spec
        self.assigner = spec.assigner
        self.trigger = spec.trigger
        self.lateness = spec.allowed_lateness_ms
        if self.assigner.is_merging and not self.trigger.can_merge():
            raise BadInputError(f"{type(self.trigger).__name__} cannot be used with merging (session) windows")
        if spec.kind == "aggregate" and self.assigner.is_merging and not _has_merge(spec.function):
            raise BadInputError("aggregate() over session windows needs an AggregateFunction with merge()")

    # ------------------------------------------------------------ lifecycle

    def initialize_state(self) -> None:
        super().initialize_state()
        backend = self.keyed_backend
        if backend is None:
            raise BadInputError(f"operator {self.ctx.uid!r}: windows need a keyed stream (key_by(...).window(...))")
        self.contents: ValueState[Any] | ListState[Any] = backend.get_state(  # type: ignore[assignment]
            window_contents(self.spec.kind))
        self.trigger_state: MapState[Any] = backend.get_state(WINDOW_TRIGGER)  # type: ignore[assignment]
        self.merging_set: ValueState[Any] | None = (
            backend.get_state(WINDOW_MERGING_SET) if self.assigner.is_merging else None)  # type: ignore[assignment]
        self.contents_by_pair = (values_by_pair(backend, self.contents)
                                 if isinstance(self.contents, ValueState) else None)
        self.trigger_by_pair = maps_by_pair(backend, self.trigger_state)
        # the timer that fires a window also ends it: event time, the EventTimeTrigger, no lateness
        self.fires_at_end = (self.assigner.is_event_time and not self.assigner.is_merging and self.lateness == 0
                             and type(self.trigger) is EventTimeTrigger and self.contents_by_pair is not None)
        self.window_timers = WindowTimers(backend, self._on_timer)
        self.window_timers.restore()
        self.watermark_state = self.operator_state.get_union_list_state(WINDOW_WATERMARK)
        restored = [int(w) for w in self.watermark_state.get()]
        self.last_watermark = min(restored) if restored else MIN_WATERMARK
        self.window_timers.watermark = self.last_watermark
        self.timers = self.window_timers  # type: ignore[assignment]
        self.contexts = _Contexts(self)

    def open(self) -> None:
        super().open()
        self.window_timers.fire = self._timer_handler()
        opener = getattr(self.spec.window_function, "open", None)
        if callable(opener):
            opener(self.runtime_context)

    def close(self) -> None:
        try:
            closer = getattr(self.spec.window_function, "close", None)
            if callable(closer):
                closer()
        finally:
            super().close()

    def process_watermark(self, watermark: int) -> None:
        if watermark != MAX_WATERMARK and watermark > self.last_watermark:
            self.last_watermark = watermark
        super().process_watermark(watermark)

    def snapshot_state(self, checkpoint_id: int, options: CheckpointOptions) -> OperatorSnapshot:
        self.watermark_state.update([self.last_watermark] if self.last_watermark != MIN_WATERMARK else [])
        return super().snapshot_state(checkpoint_id, options)

    def end_input(self) -> None:
        """Event-time windows fire at the maximum watermark; processing-time ones fire now."""
        super().end_input()
        if not self.assigner.is_event_time:
            self.window_timers.advance_processing_time(MAX_WATERMARK)

    # ------------------------------------------------------------ records

    def element_handler(self) -> Callable[[Any], None]:
        selector = self.ctx.key_selector
        backend = self.keyed_backend
        assert selector is not None and backend is not None
        element, event_time = self.element_time, self.assigner.is_event_time
        assign, timers = self.assigner.assign_windows, self.window_timers
        add = self._adder()
        place = self._merge_into if self.assigner.is_merging else None
        late_tag, uid = self.spec.late_tag, self.ctx.uid
        on_element = self._on_element
        if place is None and event_time and type(self.trigger) is EventTimeTrigger:
            return self._event_time_handler()

        def handle(value: Any) -> None:
            backend.current_key = key = selector(value)
            if event_time:
                timestamp = element.timestamp
                if timestamp is None:
                    raise BadInputError(
                        f"operator {uid!r}: an event-time window got a record without a timestamp; "
                        "give the source a WatermarkStrategy with a timestamp assigner"
                    )
            else:
                timestamp = timers.current_processing_time()
            on_time = False
            for assigned in assign(value, timestamp):
                window = place(assigned) if place is not None else assigned
                if window is None or (place is None and self._is_late(window)):
                    continue
                on_time = True
                add((key, window), value)
                on_element(key, value, timestamp, window)
            if not on_time and late_tag is not None and event_time and \
                    timestamp + self.lateness <= timers.watermark:
                self.side_output(late_tag, value)

        return handle

    def _cleanup_time(self, window: Window) -> int:
        end = window.max_timestamp()
        if not self.assigner.is_event_time:
            return end
        return end + self.lateness if end <= MAX_WATERMARK - self.lateness else MAX_WATERMARK

    def _is_late(self, window: Window) -> bool:
        return self.assigner.is_event_time and self._cleanup_time(window) <= self.window_timers.watermark

    def _on_element(self, key: Any, value: Any, timestamp: int, window: Window) -> None:
        ctx = self.contexts
        ctx.window_ = window
        result = self.trigger.on_element(value, timestamp, window, ctx)
        self._apply(key, window, result)
        if window.max_timestamp() != MAX_WATERMARK:
            domain = EVENT_TIME if self.assigner.is_event_time else PROCESSING_TIME
            self.window_timers.register(domain, self._cleanup_time(window), window)

    def _event_time_handler(self) -> Callable[[Any], None]:
        """The record handler of a non-merging event-time assigner with the EventTimeTrigger: what
        the general handler does with that trigger, inlined (the hot path). It takes records as
        ``(value, timestamp)`` pairs too, and a keyed exchange's buffers of them as a whole
        (``values``, ``timestamps``) in one call (:func:`with_timestamped_handler`)."""
        selector, backend = self.ctx.key_selector, self.keyed_backend
        assert selector is not None and backend is not None
        element, timers, lateness = self.element_time, self.window_timers, self.lateness
        windows = LiveWindows(self.assigner.assign_windows, lateness, _INTERNED_WINDOWS)
        register = timers.register_pair
        get, put, first, merge = self._combiner()
        # the hashmap backend's live contents table: an int is read and any value stored in it
        # directly (what get and put do for them), without a call per record
        table: dict[Any, Any] | None = getattr(self.contents_by_pair, "data", None)
        direct = table is not None and get is not _no_contents
        if table is None:
            table = {}
        lookup = table.get if direct else get
        apply, late_tag, uid = self._apply, self.spec.late_tag, self.ctx.uid
        fire = TriggerResult.FIRE
        # an assigner that depends on the timestamp only: the windows of the last assigned
        # timestamp are reused for every timestamp in [span_first, span_end), the timestamps that
        # get the same windows (records mostly come in time order); the lists are never changed
        reuse, same_windows = self.assigner.by_timestamp_only, self.assigner.same_windows
        span_first = span_end = 0
        last_windows: list[LiveWindow] = []
        fast_found = False  # whether last_windows is one on-time window (see the fast path)
        pruned_at = MIN_WATERMARK  # the watermark the live windows were last pruned at
        # The fast path: a record of ``fast_timestamp`` falls in one window only, whose end the
        # watermark has not reached (no late firing, no cleanup), and ``fast_pairs`` are that
        # window's canonical pairs. A key with an int in the hashmap table is then only read,
        # merged and stored — what the general path below does for it, without its checks.
        fast = direct and reuse
        fast_timestamp: object = _NO_TIMESTAMP
        fast_pairs: Callable[[Any], tuple[Any, Any] | None] = {}.get

        def process(records: Iterable[tuple[Any, int | None]]) -> None:
            """Each ``(value, timestamp)`` record, in order (the watermark does not move meanwhile:
            watermarks arrive between buffers, and nothing here advances it)."""
            nonlocal span_first, span_end, last_windows, fast_found, pruned_at, fast_timestamp, fast_pairs
            watermark = timers.watermark
            if watermark != pruned_at:
                windows.prune(watermark)
                pruned_at, span_first, span_end, fast_timestamp = watermark, 0, 0, _NO_TIMESTAMP
            for value, timestamp in records:
                key = selector(value)  # the backend's current key is set where a state handle needs it
                if timestamp == fast_timestamp:
                    pair = fast_pairs(key)
                    if pair is not None:
                        current = lookup(pair)
                        if current.__class__ is int:
                            updated = merge(value, current)
                            if updated is not None:
                                table[pair] = updated
                            else:
                                put(pair, updated)
                            continue
                if timestamp is None:
                    raise BadInputError(
                        f"operator {uid!r}: an event-time window got a record without a timestamp; "
                        "give the source a WatermarkStrategy with a timestamp assigner"
                    )
                if span_first <= timestamp < span_end:
                    found = last_windows
                    if fast_found:
                        fast_timestamp = timestamp
                else:
                    found = windows(value, timestamp)
                    if reuse:
                        (span_first, span_end), last_windows = same_windows(timestamp), found
                        fast_found = fast and len(found) == 1 and found[0][2] > watermark
                        if fast_found:
                            fast_timestamp, fast_pairs = timestamp, found[0][3].get
                        else:
                            fast_timestamp = _NO_TIMESTAMP
                on_time = False
                for window, namespace, end, pairs in found:
                    cleanup = end + lateness
                    if cleanup <= watermark:
                        continue
                    on_time = True
                    pair = pairs.get(key)  # the window's state is addressed with this very tuple
                    if pair is None:
                        pair = pairs[key] = (key, namespace)
                    current = lookup(pair)
                    if direct and current is not None and current.__class__ is not int:
                        current = get(pair)  # the copy-on-write read of a value that may be changed in place
                    updated = first(value) if current is None else merge(value, current)
                    if direct and updated is not None:
                        table[pair] = updated
                    else:
                        put(pair, updated)
                    if end <= watermark:  # a late firing within the allowed lateness
                        backend.current_key = key
                        apply(key, window, fire)
                    if current is None:  # the window's first contents: its timers (they stay while it has contents)
                        hashed = key if key.__class__ is str or key.__class__ is int else hashable(key)
                        entry = pair if hashed is key else (hashed, namespace)
                        if end > watermark:
                            register(EVENT_TIME, end, pair, entry)
                        if lateness:
                            register(EVENT_TIME, cleanup, pair, entry)
                if not on_time and late_tag is not None and timestamp + lateness <= watermark:
                    element.timestamp = timestamp  # the side output carries the record's timestamp
                    self.side_output(late_tag, value)

        def handle_timestamped(record: tuple[Any, int | None]) -> None:
            process((record,))

        def handle_batch(values: list[Any], timestamps: list[int | None]) -> None:
            process(zip(values, timestamps, strict=True))

        def handle(value: Any) -> None:
            process(((value, element.timestamp),))

        return with_timestamped_handler(handle, handle_timestamped, handle_batch)

    def _adder(self) -> Callable[[tuple[Any, Any], Any], None]:
        """``add(pair, value)``: ``value`` into the contents of ``pair`` ``(current key, namespace)``."""
        get, put, first, merge = self._combiner()

        def add(pair: tuple[Any, Any], value: Any) -> None:
            current = get(pair)
            put(pair, first(value) if current is None else merge(value, current))

        return add

    def _combiner(self) -> tuple[Callable[[tuple[Any, Any]], Any], Callable[[tuple[Any, Any], Any], None],
                                 Callable[[Any], Any], Callable[[Any, Any], Any]]:
        """How a record goes into a window's contents: ``get(pair)`` (None: no contents, or contents
        that are not read), ``put(pair, contents)``, ``first(value)``: the contents of a window's
        first record, ``merge(value, contents)``: the contents after one more record. Element lists
        (``process``) are appended to, never read: their ``get`` is always None, ``put`` appends."""
        contents, spec, values = self.contents, self.spec, self.contents_by_pair
        if values is None:
            assert isinstance(contents, ListState)
            backend, scope, append = self.keyed_backend, contents.set_current_namespace, contents.add
            assert backend is not None

            def add_element(pair: tuple[Any, Any], value: Any) -> None:
                backend.current_key = pair[0]
                scope(pair[1])
                append(value)

            return _no_contents, add_element, _same, _same
        if spec.kind == "reduce":
            reduce = _callable(spec.function, "reduce")
            return values.get, values.put, _same, lambda value, current: reduce(current, value)
        create, add = spec.function.create_accumulator, spec.function.add
        # get: the backend's own accumulator (a copy while a snapshot shares it), safe to change
        return values.get, values.put, lambda value: add(value, create()), add

    def _contents_of(self, window: Window) -> Any:
        """The window's contents (None: none)."""
        contents = self.contents
        contents.set_current_namespace(window)
        if isinstance(contents, ListState):
            return contents.get() or None
        return contents.value()

    def _set_contents(self, window: Window, value: Any) -> None:
        self.contents.set_current_namespace(window)
        self.contents.update(value)

    def _remove_contents(self, window: Window) -> None:
        self.contents.set_current_namespace(window)
        self.contents.clear()

    # ------------------------------------------------------------ merging (session) windows

    def _merge_into(self, new: Window) -> Window | None:
        """The window ``new`` ends up in after merging with the current key's windows (None: late)."""
        assert isinstance(new, TimeWindow) and self.merging_set is not None
        existing = [window_of(w) for w in self.merging_set.value() or ()]
        group = [w for w in existing if isinstance(w, TimeWindow) and w.intersects(new)]
        merged = new
        for window in group:
            merged = merged.cover(window)
        if self._is_late(merged):
            return None
        if group != [merged]:
            kept = [w for w in existing if w not in group]
            self.merging_set.update(sorted([*kept, merged]))
        if group == [merged] or not group:
            return merged
        self._merge_state(sorted(group), merged)
        return merged

    def _merge_state(self, group: list[TimeWindow], merged: TimeWindow) -> None:
        ctx = self.contexts
        parts = [self._contents_of(w) for w in group]
        combined = None
        for part in parts:
            if part is not None:
                combined = part if combined is None else self._combine(combined, part)
        ctx.merged = list(group)
        ctx.window_ = merged
        self.trigger.on_merge(merged, ctx)
        for window in group:
            if window == merged:
                continue
            ctx.window_ = window
            self.trigger.clear(window, ctx)
            self._clear_trigger_state(window)
            self.window_timers.delete(EVENT_TIME if self.assigner.is_event_time else PROCESSING_TIME,
                                      self._cleanup_time(window), window)
            self._remove_contents(window)
        ctx.merged = []
        ctx.window_ = merged
        if combined is not None:
            self._set_contents(merged, combined)

    def _clear_trigger_state(self, window: Window) -> None:
        self.trigger_state.set_current_namespace(window)
        self.trigger_state.clear()

    def _combine(self, a: Any, b: Any) -> Any:
        kind, function = self.spec.kind, self.spec.function
        if kind == "reduce":
            return _callable(function, "reduce")(a, b)
        if kind == "aggregate":
            return function.merge(copy.deepcopy(a), b)
        return [*a, *b]

    # ------------------------------------------------------------ firing

    def _on_timer(self, key: Any, window: Window, timestamp: int, domain: int, pair: Any = None) -> None:
        """A timer of ``key`` and ``window`` fires (``pair``: its state pair, unused here)."""
        if self.fires_at_end and domain == EVENT_TIME and timestamp == window.max_timestamp():
            self._fire_and_clear(key, window)
            return
        ctx = self.contexts
        ctx.window_ = window
        if domain == EVENT_TIME:
            result = self.trigger.on_event_time(timestamp, window, ctx)
        else:
            result = self.trigger.on_processing_time(timestamp, window, ctx)
        self._apply(key, window, result)
        is_event = domain == EVENT_TIME
        if is_event == self.assigner.is_event_time and timestamp == self._cleanup_time(window):
            self._clear_window(window)

    def _timer_handler(self) -> Callable[[Any, Window, int, int, tuple[Any, Any]], None]:
        """What fires a timer: :meth:`_on_timer`, with the firing at a window's end inlined for a
        ``fires_at_end`` window that emits its reduced value or aggregate's result as it is (no
        window function): the same contents popped, output and trigger state cleared as
        :meth:`_fire_and_clear` (the hot path of tumbling and sliding event-time windows)."""
        on_timer, spec, values = self._on_timer, self.spec, self.contents_by_pair
        if not self.fires_at_end or spec.window_function is not None or spec.kind not in ("reduce", "aggregate"):
            return on_timer
        assert values is not None
        pop, clear_trigger, element, ctx, out = (values.pop, self.trigger_by_pair.clear, self.element_time,
                                                 self.contexts, self.output)
        result = spec.function.get_result if spec.kind == "aggregate" else None

        def fire(key: Any, window: Window, timestamp: int, domain: int, pair: tuple[Any, Any]) -> None:
            if domain != EVENT_TIME or timestamp != window.max_timestamp():
                on_timer(key, window, timestamp, domain, pair)
                return
            contents = pop(pair)
            if contents is not None:
                element.timestamp = timestamp
                ctx.window_ = window
                out.collect(contents if result is None else result(contents))
            clear_trigger(pair)

        return fire

    def _fire_and_clear(self, key: Any, window: Window) -> None:
        """What ``_on_timer`` does at the end of a window that fires at its end and is then dropped
        (``fires_at_end``): the trigger fires, the contents are emitted and the window's state goes."""
        assert self.contents_by_pair is not None
        pair = (key, window)
        contents = self.contents_by_pair.pop(pair)
        if contents is not None:
            self._emit(key, window, contents)
        self.trigger_by_pair.clear(pair)
        function = self.spec.window_function
        clear = getattr(function, "clear", None)
        if callable(clear):
            self.contexts.window_ = window
            clear(self.contexts)

    def _apply(self, key: Any, window: Window, result: TriggerResult) -> None:
        if result is TriggerResult.CONTINUE:
            return
        if result.is_fire:
            contents = self._contents_of(window)
            if contents is not None:
                self._emit(key, window, contents)
        if result.is_purge:
            self._remove_contents(window)

    def _emit(self, key: Any, window: Window, contents: Any) -> None:
        spec, out, ctx = self.spec, self.output, self.contexts
        self.element_time.timestamp = window.max_timestamp()
        ctx.window_ = window
        if spec.kind == "aggregate":
            contents = spec.function.get_result(contents)
        if spec.kind == "process":
            spec.function.process(key, ctx, contents, out)
        elif spec.window_function is not None:
            spec.window_function.process(key, ctx, [contents], out)
        else:
            out.collect(contents)

    def _clear_window(self, window: Window) -> None:
        ctx = self.contexts
        ctx.window_ = window
        self._remove_contents(window)
        self.trigger.clear(window, ctx)
        self._clear_trigger_state(window)
        if self.merging_set is not None:
            windows = [w for w in (window_of(w) for w in self.merging_set.value() or ()) if w != window]
            self.merging_set.update(windows or None)
        function = self.spec.function if self.spec.kind == "process" else self.spec.window_function
        clear = getattr(function, "clear", None)
        if callable(clear):
            clear(ctx)


def _callable(function: Any, name: str) -> Callable[..., Any]:
    method = getattr(function, name, None)
    if callable(method):
        return method  # type: ignore[no-any-return]
    if callable(function):
        return function  # type: ignore[no-any-return]
    raise BadInputError(f"{function!r} is neither callable nor has a {name}() method")


def _no_contents(pair: tuple[Any, Any]) -> None:
    return None


def _same(value: Any, *_: Any) -> Any:
    return value


def _has_merge(function: Any) -> bool:
    try:
        function.merge(function.create_accumulator(), function.create_accumulator())
    except NotImplementedError:
        return False
    return True
