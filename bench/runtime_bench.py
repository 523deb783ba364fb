"""Throughput of the mini runtime on a word-count-style keyed running count.

1,000,000 events over 100,000 keys at parallelism 2: a collection source, a keyed
process function keeping a running count in ValueState (``count``, declared ``int``), a
discarding sink. Printed as events/s with checkpoints off and every 1 s (to a temporary
directory, asynchronous hashmap snapshots), the checkpoint overhead as a ratio, and, as
the floor, a pure-Python dict loop over the same events timed in the same process.

The two jobs run ``--repeat`` times, interleaved (off, on, off, on, ...), and the best time
of each counts: the job run first pays the process's one-time costs (imports, first
allocations), and a ratio of two runs minutes apart carries the load of two moments.

Usage: python bench/runtime_bench.py [--events 1000000] [--keys 100000] [--parallelism 2]
                                     [--interval-ms 1000] [--backend hashmap|rocksdb] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import logging
import shutil
import statistics
import tempfile
import time
from typing import Any


def dict_loop(events: list[str]) -> tuple[float, dict[str, int]]:
    """The floor: the same running count in one Python loop over a dict."""
    start = time.perf_counter()
    counts: dict[str, int] = {}
    get = counts.get
    for key in events:
        counts[key] = get(key, 0) + 1
    return time.perf_counter() - start, counts


def run_job(events: list[str], parallelism: int, interval_ms: int | None, backend: str) -> tuple[float, int]:
    from statekit.runtime.api.functions import KeyedProcessFunction, RuntimeContext
    from statekit.runtime.api.state import ValueStateDescriptor
    from statekit.runtime.connectors.sinks import DiscardingSink
    from statekit.runtime.dataflow.environment import StreamEnvironment

    class RunningCount(KeyedProcessFunction):
        def open(self, ctx: RuntimeContext) -> None:
            self.count = ctx.get_state(ValueStateDescriptor("count", "int"))

        def process_element(self, value: str, ctx: Any, out: Any) -> None:
            count = (self.count.value() or 0) + 1
            self.count.update(count)
            out.collect((value, count))

    work = tempfile.mkdtemp(prefix="statekit-runtime-bench-")
    try:
        env = StreamEnvironment().set_parallelism(parallelism).set_state_backend(backend)
        if interval_ms:
            env.enable_checkpointing(interval_ms, checkpoint_storage=work)
        (env.from_collection(events, "events").uid("events")
            .key_by(lambda key: key)
            .process(RunningCount(), "running count").uid("counter")
            .sink_to(DiscardingSink(), "discard").uid("sink"))
        start = time.perf_counter()
        handle = env.execute_async("runtime bench")
        handle.wait()
        elapsed = time.perf_counter() - start
        completed = int(handle.checkpoint_stats()["counts"]["completed"])
        return elapsed, completed
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--backend", default="hashmap")
    parser.add_argument("--repeat", type=int, default=5, help="interleaved runs of each job; the best counts")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)

    n = args.events
    events = [f"key-{(i * 7919) % args.keys}" for i in range(n)]
    floor_s, _ = dict_loop(events)
    offs: list[tuple[float, int]] = []
    ons: list[tuple[float, int]] = []
    for _ in range(args.repeat):
        offs.append(run_job(events, args.parallelism, None, args.backend))
        ons.append(run_job(events, args.parallelism, args.interval_ms, args.backend))
        gc.collect()
    (off_s, _), (on_s, completed) = min(offs), min(ons)

    print(f"runtime bench: {n:,} events over {args.keys:,} keys, parallelism {args.parallelism}, "
          f"{args.backend} backend")
    print(f"  pure-Python dict loop (floor)     {n / floor_s:>12,.0f} events/s  ({floor_s:.2f} s)")
    print(f"  runtime, checkpoints off          {n / off_s:>12,.0f} events/s  ({off_s:.2f} s)"
          f"  = {off_s / floor_s:.1f}x the floor's time")
    print(f"  runtime, checkpoint every {args.interval_ms} ms  {n / on_s:>12,.0f} events/s  ({on_s:.2f} s, "
          f"{completed} checkpoints incl. the final one)")
    pairs = sorted(on / off for (off, _), (on, _) in zip(offs, ons))
    print(f"  checkpoint overhead               {on_s / off_s:>12.2f}x  (time with / time without; "
          f"best of {args.repeat} interleaved runs)")
    print(f"  overhead of each pair (off, on)   {', '.join(f'{r:.2f}x' for r in pairs)}  "
          f"(median {statistics.median(pairs):.2f}x)")
    print(f"  every run (s): off {', '.join(f'{t:.2f}' for t, _ in offs)}; on {', '.join(f'{t:.2f}' for t, _ in ons)}")


if __name__ == "__main__":
    main()
