"""The live windows of the event-time record path: one entry per window while it may take
records, its canonical ``(key, namespace)`` pairs, pruned once the watermark passes the window's
cleanup time (the window operator prunes them as its watermark moves)."""

from __future__ import annotations

from typing import Any

import pytest

from statekit.runtime.api.watermarks import WatermarkStrategy
from statekit.runtime.api.windows.assigners import SlidingEventTimeWindows, TumblingEventTimeWindows
from statekit.runtime.api.windows.windows import TimeWindow
from statekit.runtime.connectors.sinks import CollectSink
from statekit.runtime.connectors.sources import CollectionSource
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.operators.windows import window_operator as window_operator_module
from statekit.runtime.operators.windows.live_windows import LiveWindows


def test_a_window_has_one_entry_while_it_is_live() -> None:
    live = LiveWindows(SlidingEventTimeWindows.of(20, 10).assign_windows, 0, 100)
    first = live("v", 15)
    assert [entry[0] for entry in first] == [TimeWindow(0, 20), TimeWindow(10, 30)] or \
        [entry[0] for entry in first] == [TimeWindow(10, 30), TimeWindow(0, 20)]
    for window, namespace, end, pairs in first:
        assert namespace == tuple(window) and namespace.__class__ is tuple and end == window.max_timestamp()
        assert pairs == {}
    again = live("w", 12)
    assert sorted(map(id, again)) == sorted(map(id, first))  # the same entries, the same pair dicts
    assert len(live) == 2


@pytest.mark.parametrize("lateness", [0, 5])
def test_prune_drops_the_windows_the_watermark_passed(lateness: int) -> None:
    live = LiveWindows(TumblingEventTimeWindows.of(10).assign_windows, lateness, 100)
    for timestamp in (3, 13, 23):
        live("v", timestamp)[0][3]["k"] = ("k", ())
    live.prune(8)
    assert len(live) == 3
    live.prune(9 + lateness - 1)  # [0, 10) ends at 9: live until the watermark reaches 9 + lateness
    assert len(live) == 3
    live.prune(9 + lateness)
    assert len(live) == 2
    entry = live("v", 5)[0]  # a record for a pruned window gets a fresh entry, no stale pairs
    assert entry[3] == {}
    live.prune(29 + lateness)
    assert len(live) == 0


def test_past_the_limit_the_entries_start_again() -> None:
    live = LiveWindows(TumblingEventTimeWindows.of(10).assign_windows, 0, 3)
    for timestamp in range(0, 30, 10):
        live("v", timestamp)
    assert len(live) == 3
    live("v", 35)
    assert len(live) == 1


def test_the_window_operator_prunes_its_live_windows_as_the_watermark_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    instances: list[Any] = []
    pruned: list[tuple[int, list[int]]] = []

    class Spy(LiveWindows):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            instances.append(self)

        def prune(self, watermark: int) -> None:
            super().prune(watermark)
            pruned.append((watermark, [entry[2] for entry in self._live.values()]))

    monkeypatch.setattr(window_operator_module, "LiveWindows", Spy)
    events = [(k, t) for t in range(0, 100, 3) for k in "abc"]
    env = StreamEnvironment()
    strategy = (WatermarkStrategy.for_bounded_out_of_orderness(5).with_timestamp_assigner(lambda v, ts: v[1])
                .with_watermark_interval(0))
    sink = CollectSink()
    (env.from_source(CollectionSource(events), "events", strategy).key_by(lambda v: v[0])
        .window(TumblingEventTimeWindows.of(20)).reduce(lambda a, b: (a[0], a[1] + b[1])).sink_to(sink))
    env.execute("live windows")
    assert len(instances) == 1
    expected = {(k, start): sum(t for key, t in events if key == k and start <= t < start + 20)
                for k in "abc" for start in range(0, 100, 20)}
    assert sorted(sink.values) == sorted((k, total) for (k, _), total in expected.items())
    # pruned as the watermark moved, and never a window that could still take records
    assert any(watermark > 19 for watermark, _ in pruned)
    assert all(end > watermark for watermark, ends in pruned for end in ends)
    # the pairs of the windows still live are (key, namespace) tuples of that window
    for _, namespace, _, pairs in instances[0]._live.values():
        assert all(pair == (key, namespace) for key, pair in pairs.items())
