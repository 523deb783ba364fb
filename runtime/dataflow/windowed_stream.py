"""``WindowedStream``: ``keyed.window(assigner)`` configured, then ended by a window function."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statekit.runtime.api.side_outputs import OutputTag
from statekit.runtime.api.windows.assigners import WindowAssigner
from statekit.runtime.api.windows.triggers import Trigger
from statekit.runtime.operators.windows.window_operator import WindowOperator, WindowSpec
from statekit.statefmt.errors import BadInputError

if TYPE_CHECKING:
    from statekit.runtime.dataflow.datastream import DataStream, KeyedStream

__all__ = [
    "WindowedStream",
]


class WindowedStream:
    """A keyed stream cut into windows (Flink's WindowedStream)."""

    def __init__(self, keyed: KeyedStream, assigner: WindowAssigner) -> None:
        if not isinstance(assigner, WindowAssigner):
            raise BadInputError(f"window() needs a WindowAssigner, got {assigner!r}")
        self._keyed = keyed
        self._assigner = assigner
        self._trigger: Trigger = assigner.get_default_trigger()
        self._lateness = 0
        self._late_tag: OutputTag | None = None

    def trigger(self, trigger: Trigger) -> WindowedStream:
        """Fire by ``trigger`` instead of the assigner's default."""
        if not isinstance(trigger, Trigger):
            raise BadInputError(f"trigger() needs a Trigger, got {trigger!r}")
        if self._assigner.is_merging and not trigger.can_merge():
            raise BadInputError(f"{type(trigger).__name__} cannot be used with merging (session) windows")
        self._trigger = trigger
        return self

    def allowed_lateness(self, lateness_ms: int) -> WindowedStream:
        """Keep windows ``lateness_ms`` past their end: late records then fire them again."""
        if not isinstance(lateness_ms, int) or lateness_ms < 0:
            raise BadInputError(f"allowed lateness must be >= 0 ms, got {lateness_ms!r}")
        if lateness_ms and not self._assigner.is_event_time:
            raise BadInputError("allowed lateness applies to event-time windows only")
        self._lateness = lateness_ms
        return self

    def side_output_late_data(self, tag: OutputTag) -> WindowedStream:
        """Send records that arrive after their windows' lateness to side output ``tag``."""
        if not isinstance(tag, OutputTag):
            raise BadInputError(f"side_output_late_data needs an OutputTag, got {tag!r}")
        self._late_tag = tag
        return self

    def _build(self, kind: str, function: Any, window_function: Any, name: str) -> DataStream:
        from statekit.runtime.dataflow.datastream import copy_function

        spec = WindowSpec(self._assigner, self._trigger, self._lateness, self._late_tag, kind, function,
                          window_function)
        WindowOperator(spec)  # validates now, where the job is defined
        return self._keyed._add("window", name, lambda: WindowOperator(copy_function(spec)))

    def reduce(self, function: Any, window_function: Any = None, name: str = "Window(Reduce)") -> DataStream:
        """Reduce each window's records with ``function(a, b)`` (a ReduceFunction or callable)."""
        return self._build("reduce", function, window_function, name)

    def aggregate(self, function: Any, window_function: Any = None, name: str = "Window(Aggregate)") -> DataStream:
        """Aggregate each window with an AggregateFunction (then, optionally, a ProcessWindowFunction)."""
        for method in ("create_accumulator", "add", "get_result"):
            if not callable(getattr(function, method, None)):
                raise BadInputError(f"aggregate() needs an AggregateFunction with {method}()")
        return self._build("aggregate", function, window_function, name)

    def process(self, function: Any, name: str = "Window(Process)") -> DataStream:
        """Give all records of each fired window to a ProcessWindowFunction."""
        if not callable(getattr(function, "process", None)):
            raise BadInputError("process() needs a ProcessWindowFunction")
        return self._build("process", function, None, name)
