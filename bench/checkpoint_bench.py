"""Checkpoint modes, measured in one run: incremental vs full RocksDB checkpoints, and aligned vs
unaligned checkpoints under backpressure.

1. *Incremental vs full* (RocksDB): a keyed running sum over ``--keys`` keys, loaded once, then
   ``--updates`` records that touch only 1% of the keys; a checkpoint every ``--interval-ms``.
   The job runs twice, with full and with incremental checkpoints. Reported: throughput
   (records/s, submission to end), and over the last three periodic checkpoints (the update
   phase: 1% of the keys changed in between) the median bytes written and duration; then the
   ratios incremental / full (goals: bytes <= 0.05, duration <= 0.25, throughput >= 2x).
2. *Aligned vs unaligned under backpressure*: a sink taking ``--sink-delay-ms`` per record
   backs the job up; three checkpoints each way; median end-to-end and alignment durations and
   the in-flight bytes unaligned checkpoints stored.

Usage: python bench/checkpoint_bench.py [--keys 200000] [--updates 1500000] [--interval-ms 1000]
                                        [--parallelism 2] [--sink-delay-ms 0.2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "runtime"))

from jobs_for_checkpoints import SlowSink, completed, start_with, summing_job

from statekit.runtime.connectors.sinks import DiscardingSink
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.dataflow.job_handle import JobStatus
from statekit.runtime.dataflow.run_options import RunOptions, set_run_options


def loaded_then_updated(keys: int, updates: int, parallelism: int, checkpoints: str, *, incremental: bool,
                        interval_ms: int) -> StreamEnvironment:
    """numbers 1..keys+updates keyed by themselves up to ``keys``, then by 1% of the keys."""
    hot = max(1, keys // 100)
    env = StreamEnvironment().set_parallelism(parallelism)
    env.set_state_backend("rocksdb", incremental=incremental)
    env.enable_checkpointing(interval_ms, checkpoint_storage=checkpoints)
    (env.from_sequence(1, keys + updates).uid("numbers")
        .key_by(lambda v: v if v <= keys else v % hot)
        .sum().uid("sums")
        .sink_to(DiscardingSink()).uid("sink"))
    return env


def measure_incremental(args: argparse.Namespace, incremental: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="checkpoint-bench-") as directory:
        env = loaded_then_updated(args.keys, args.updates, args.parallelism, directory, incremental=incremental,
                                  interval_ms=args.interval_ms)
        set_run_options(RunOptions())
        try:
            start = time.perf_counter()
            handle = env.execute_async("checkpoint bench")
            status = handle.wait()
            elapsed = time.perf_counter() - start
        finally:
            set_run_options(None)
        assert status is JobStatus.FINISHED, handle.describe()
        periodic = sorted(completed(handle), key=lambda e: e["id"])[:-1]  # the newest is the final checkpoint
        steady = periodic[-3:]
        assert steady, "no periodic checkpoint completed; lower --interval-ms or raise --updates"
        return {
            "throughput": (args.keys + args.updates) / elapsed,
            "checkpoints": len(periodic),
            "bytes": statistics.median(e["checkpointed_size"] for e in steady),
            "state": statistics.median(e["state_size"] for e in steady),
            "duration_ms": statistics.median(e["end_to_end_duration"] for e in steady),
        }


def measure_backpressure(args: argparse.Namespace, unaligned: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="checkpoint-bench-") as directory:
        env = summing_job(10_000_000, args.parallelism, SlowSink(args.sink_delay_ms / 1000), storage=directory)
        env.enable_checkpointing(100)
        if unaligned:
            env.enable_unaligned_checkpoints()
        handle = start_with(env, RunOptions(), "backpressure bench")
        try:
            deadline = time.monotonic() + 300
            while len(completed(handle)) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            handle.cancel()
            handle.wait(60)
        done = completed(handle)[:3]
        return {
            "duration_ms": statistics.median(e["end_to_end_duration"] for e in done),
            "alignment_ms": statistics.median(e["alignment_duration"] for e in done),
            "inflight": statistics.median(e["persisted_data"] for e in done),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--updates", type=int, default=1_500_000)
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--sink-delay-ms", type=float, default=0.2)
    args = parser.parse_args(argv)

    full, inc = measure_incremental(args, False), measure_incremental(args, True)
    print(f"RocksDB, {args.keys:,} keys then {args.updates:,} updates of 1% of them, "
          f"checkpoint every {args.interval_ms} ms, parallelism {args.parallelism}")
    for name, m in (("full", full), ("incremental", inc)):
        print(f"  {name:<12} {m['throughput']:>10,.0f} records/s  {m['checkpoints']:>3.0f} checkpoints  "
              f"last 3: {m['bytes']:>12,.0f} B written of {m['state']:>12,.0f} B  {m['duration_ms']:>6,.0f} ms")
    print(f"  incremental / full: bytes {inc['bytes'] / max(full['bytes'], 1):.3f} (goal <= 0.05), "
          f"duration {inc['duration_ms'] / max(full['duration_ms'], 1):.2f} (goal <= 0.25), "
          f"throughput {inc['throughput'] / full['throughput']:.2f}x (goal >= 2)")

    aligned, unaligned = measure_backpressure(args, False), measure_backpressure(args, True)
    print(f"Backpressure (sink {args.sink_delay_ms} ms/record), median of 3 checkpoints:")
    for name, m in (("aligned", aligned), ("unaligned", unaligned)):
        print(f"  {name:<12} end-to-end {m['duration_ms']:>7,.0f} ms  alignment {m['alignment_ms']:>7,.0f} ms  "
              f"in-flight {m['inflight']:>10,.0f} B")
    print(f"  unaligned / aligned end-to-end: {unaligned['duration_ms'] / max(aligned['duration_ms'], 1):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
