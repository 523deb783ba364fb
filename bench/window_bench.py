"""Throughput of event-time windows, as a ratio to the keyed running count of runtime_bench.

1,000,000 events over 10,000 keys at parallelism 2, checkpoints every 1 s (asynchronous
hashmap snapshots to a temporary directory): a collection source with a bounded
out-of-orderness watermark strategy (100 events per event-time millisecond, so a key has
about 10 events per window at 10,000 keys; each source subtask's split covers the same event
time, :func:`timed_events`), 1 s tumbling
event-time windows counting per key (``aggregate``), a discarding sink. In the same run and
process, the keyed running count of bench/runtime_bench.py over the same events; the ratio of the two
throughputs is printed (goal: windows >= 0.5x the running count). Then the same running count
with a 1 h state TTL (``StateTtlConfig``, ON_CREATE_AND_WRITE, full-snapshot cleanup): its
time as a ratio to the count without TTL (goal: <= 1.3x).

Each job runs ``--repeat`` times, interleaved (count, TTL count, windows, count, ...), and
the best time of each counts: a ratio of two jobs that ran minutes apart carries the load of
two moments.

Usage: python bench/window_bench.py [--events 1000000] [--keys 10000] [--parallelism 2]
                                    [--interval-ms 1000] [--backend hashmap|rocksdb] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import logging
import shutil
import tempfile
import time
from typing import Any, ClassVar


def timed_events(events: list[str], parallelism: int) -> list[tuple[str, int]]:
    """``(key, timestamp)`` records at 100 per event-time millisecond in all, in time order within
    each of the ``parallelism`` index splits a CollectionSource hands its subtasks
    (``sources.index_split``), and every split over the same event time (as partitions of one
    stream are). Timestamps in list order instead would put split ``j`` ``j * len(events) / (100
    * parallelism)`` ms ahead of split 0; the watermark (the minimum over the splits) would hold
    that many ms of windows open per key, and the state, and each snapshot of it, would grow
    with the number of events."""
    from statekit.runtime.connectors.sources import index_split

    timed: list[tuple[str, int]] = []
    for split in range(parallelism):
        start, end = index_split(0, len(events) - 1, parallelism, split)
        timed.extend((events[i], (i - start) * parallelism // 100) for i in range(start, end + 1))
    return timed


def run_windows(events: list[str], parallelism: int, interval_ms: int, backend: str) -> tuple[float, int, int]:
    """(seconds, completed checkpoints, fired windows) of the windowed count."""
    from statekit.runtime.api.functions import AggregateFunction
    from statekit.runtime.api.watermarks import WatermarkStrategy
    from statekit.runtime.api.windows.assigners import TumblingEventTimeWindows
    from statekit.runtime.connectors.sinks import DiscardingSink
    from statekit.runtime.connectors.sources import CollectionSource
    from statekit.runtime.dataflow.environment import StreamEnvironment

    class Count(AggregateFunction):
        def create_accumulator(self) -> int:
            return 0

        def add(self, value: Any, accumulator: int) -> int:
            return accumulator + 1

        def get_result(self, accumulator: int) -> int:
            return accumulator

        def merge(self, a: int, b: int) -> int:
            return a + b

    class Counting(DiscardingSink):
        """Counts the fired windows at about a discarding sink's cost: ``list.append`` is atomic
        under the GIL (a CollectSink takes a lock per record)."""

        fired: ClassVar[list[int]] = []

        def invoke(self, value: Any) -> None:
            self.fired.append(1)

    work = tempfile.mkdtemp(prefix="statekit-window-bench-")
    timed = timed_events(events, parallelism)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(100).with_timestamp_assigner(lambda v, ts: v[1])
    sink = Counting()
    try:
        env = StreamEnvironment().set_parallelism(parallelism).set_state_backend(backend)
        env.enable_checkpointing(interval_ms, checkpoint_storage=work)
        (env.from_source(CollectionSource(timed), "events", strategy).uid("events")
            .key_by(lambda event: event[0])
            .window(TumblingEventTimeWindows.of(1_000))
            .aggregate(Count(), name="windowed count").uid("windows")
            .sink_to(sink, "discard").uid("sink"))
        start = time.perf_counter()
        handle = env.execute_async("window bench")
        handle.wait()
        elapsed = time.perf_counter() - start
        completed = int(handle.checkpoint_stats()["counts"]["completed"])
        return elapsed, completed, len(Counting.fired)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_count(events: list[str], parallelism: int, interval_ms: int, backend: str, *,
              ttl: bool = False) -> tuple[float, int]:
    """(seconds, completed checkpoints) of runtime_bench's keyed running count (with a 1 h state TTL
    if ``ttl``), on the same executor as the windows: this process's."""
    from statekit.runtime.api.functions import KeyedProcessFunction, RuntimeContext
    from statekit.runtime.api.state import ValueStateDescriptor
    from statekit.runtime.api.ttl import StateTtlConfig
    from statekit.runtime.connectors.sinks import DiscardingSink
    from statekit.runtime.dataflow.environment import StreamEnvironment

    class RunningCount(KeyedProcessFunction):
        def open(self, ctx: RuntimeContext) -> None:
            descriptor = ValueStateDescriptor("count", "int")
            if ttl:
                descriptor.enable_time_to_live(StateTtlConfig.new_builder(3_600_000).cleanup_full_snapshot().build())
            self.count = ctx.get_state(descriptor)

        def process_element(self, value: str, ctx: Any, out: Any) -> None:
            count = (self.count.value() or 0) + 1
            self.count.update(count)
            out.collect((value, count))

    work = tempfile.mkdtemp(prefix="statekit-ttl-bench-")
    try:
        env = StreamEnvironment().set_parallelism(parallelism).set_state_backend(backend)
        env.enable_checkpointing(interval_ms, checkpoint_storage=work)
        (env.from_collection(events, "events").uid("events")
            .key_by(lambda key: key)
            .process(RunningCount(), "running count").uid("counter")
            .sink_to(DiscardingSink(), "discard").uid("sink"))
        start = time.perf_counter()
        handle = env.execute_async("ttl bench")
        handle.wait()
        return time.perf_counter() - start, int(handle.checkpoint_stats()["counts"]["completed"])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--backend", default="hashmap")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved runs of each job; the best counts")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)

    n = args.events
    events = [f"key-{(i * 7919) % args.keys}" for i in range(n)]
    runs: dict[str, list[tuple[float, int]]] = {"count": [], "ttl": [], "windows": []}
    fired = 0
    for _ in range(args.repeat):  # interleaved, so each pair of figures ran at the same moment's load
        runs["count"].append(run_count(events, args.parallelism, args.interval_ms, args.backend))
        runs["ttl"].append(run_count(events, args.parallelism, args.interval_ms, args.backend, ttl=True))
        window_s, window_checkpoints, fired = run_windows(events, args.parallelism, args.interval_ms, args.backend)
        runs["windows"].append((window_s, window_checkpoints))
        gc.collect()
    (count_s, count_checkpoints), (ttl_s, ttl_checkpoints), (window_s, window_checkpoints) = (
        min(runs[name]) for name in ("count", "ttl", "windows"))

    print(f"window bench: {n:,} events over {args.keys:,} keys, parallelism {args.parallelism}, "
          f"{args.backend} backend, checkpoint every {args.interval_ms} ms, best of {args.repeat} interleaved runs")
    print(f"  keyed running count                   {n / count_s:>12,.0f} events/s  ({count_s:.2f} s, "
          f"{count_checkpoints} checkpoints)")
    print(f"  1 s tumbling event-time windows       {n / window_s:>12,.0f} events/s  ({window_s:.2f} s, "
          f"{window_checkpoints} checkpoints, {fired:,} windows fired)")
    print(f"  windows / running count throughput    {count_s / window_s:>12.2f}x  (goal >= 0.5x)")
    print(f"  running count with state TTL          {n / ttl_s:>12,.0f} events/s  ({ttl_s:.2f} s, "
          f"{ttl_checkpoints} checkpoints)")
    print(f"  TTL overhead (time with / without)    {ttl_s / count_s:>12.2f}x  (goal <= 1.3x)")
    print("  every run (s): " + "; ".join(f"{name} {', '.join(f'{t:.2f}' for t, _ in times)}"
                                         for name, times in runs.items()))


if __name__ == "__main__":
    main()
