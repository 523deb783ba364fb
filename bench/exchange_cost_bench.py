"""What the keyed exchange adds to a record at p=2, and the speed-up over p=1 that leaves possible.

At parallelism 1 the keyed running count of ``bench/runtime_bench.py`` hands every record to its
only consumer (one append to a buffer). At parallelism 2 on TaskManager processes every record is
also routed — the key selector, then the route cache, a dict of every key, looked up with the
event's own string — and half of them cross to the other TaskManager: pickled into a buffer,
unpickled there, and hashed once more (a fresh string) by the consumer's state lookup. None of
this work exists at p=1, so with ``c1`` the time of a record at p=1 and ``x`` this extra work,
two cores at their full use (no job master, no network threads, no idle moment) give at most

    speed-up(p=2 / p=1) <= 2 * c1 / (c1 + x)

Measured here in one run, with the product's own classes on the bench job's records:

- ``x``: ``RecordWriter.emit_all`` keyed over two channels against the single channel of p=1 on
  the same events, each key already hashed once (p=1's state lookup hashes it too);
  ``encode_payload`` + ``decode_payload`` of the buffers and the consumer's ``hash`` of the
  decoded strings, counted for the half of the records that cross;
- ``c1``: seconds per event of the job itself at p=1 on processes (``run_keyed_count``, 1 s
  checkpoints, the best of ``--repeat``); a wall-clock figure, so at least the CPU a record takes
  and the bound errs upwards;
- and the jobs themselves at p=1 and p=2, with the CPU their TaskManagers spent in the timed
  phase (read from ``/proc/<pid>/stat`` every 20 ms; Linux only). p=2's CPU per event, whatever
  it is spent on, caps its rate on C cores at ``C / cpu2``: the second, measured, bound.

Usage: python bench/exchange_cost_bench.py [--events 2000000] [--keys 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from proc_stats import cpu_seconds, descendants
from runtime_bench import run_keyed_count


@dataclass(frozen=True)
class JobRun:
    """One run of the bench job: the timed phase's seconds and its TaskManagers' CPU seconds."""

    seconds: float
    cpu_seconds: float | None


def run_with_cpu(events: int, keys: int, parallelism: int, interval_ms: int) -> JobRun:
    """``runtime_bench.run_keyed_count`` on processes, with the CPU its TaskManagers spend from the
    moment every task runs to the end (samples every 20 ms; the nearest ones inside the phase)."""
    samples: list[tuple[float, dict[int, float]]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            cpu = {pid: s for pid in descendants(os.getpid()) if (s := cpu_seconds(pid)) is not None}
            samples.append((time.time() * 1000, cpu))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        run = run_keyed_count(events, keys, parallelism, interval_ms)
    finally:
        done.set()
        sampler.join()
    start_ms, end_ms = run.phase_ms
    inside = [s for s in samples if start_ms <= s[0] <= end_ms and s[1]]
    cpu: float | None = None
    if inside:
        first_ms, first = inside[0]
        inside = [s for s in inside if first.keys() <= s[1].keys()]  # until a TaskManager exits
        last_ms, last = inside[-1]
        if last_ms > first_ms:
            spent = sum(last[pid] - first[pid] for pid in first)
            cpu = spent * (end_ms - start_ms) / (last_ms - first_ms)  # the phase's share outside the samples
    return JobRun(run.seconds, cpu)


class _Sink:
    """A gate that takes every buffer (what the writer hands over is kept for the wire part)."""

    def __init__(self) -> None:
        self.items: list[tuple[int, Any]] = []

    def offer(self, item: tuple[int, Any]) -> bool:
        self.items.append(item)
        return True


def _events(n: int, keys: int) -> list[str]:
    """The bench job's events, fresh strings, each hashed once (as p=1's state lookup does)."""
    events = [f"key-{(i * 7919) % keys}" for i in range(n)]
    for event in events:
        hash(event)
    return events


def _emit_seconds(channels: int, n: int, keys: int) -> tuple[float, list[_Sink]]:
    """Seconds ``RecordWriter.emit_all`` takes over ``n`` events into ``channels`` channels, and its gates."""
    from statekit.runtime.exchange.batch_path import emit_all_of
    from statekit.runtime.exchange.partitioning import Partitioning
    from statekit.runtime.exchange.record_writer import ChannelTarget, RecordWriter

    sinks = [_Sink() for _ in range(channels)]
    targets = [ChannelTarget(sink, 0) for sink in sinks]
    if channels == 1:
        writer = RecordWriter(targets, Partitioning.FORWARD)
    else:
        writer = RecordWriter(targets, Partitioning.HASH, key_selector=lambda key: key)
        for event in _events(keys, keys):  # the route cache warm, filled in the order the job fills it
            writer.emit(event)
        writer.flush()
        for sink in sinks:
            sink.items.clear()
    events = _events(n, keys)
    batches = [events[i:i + 512] for i in range(0, n, 512)]  # the source's polls
    emit, emit_all = writer.emit, emit_all_of(writer.emit)
    gc.disable()
    try:
        start = time.perf_counter()
        for batch in batches:  # as a source task hands over a poll
            if emit_all is not None:
                emit_all(batch)
            else:
                for record in batch:
                    emit(record)
        return time.perf_counter() - start, sinks
    finally:
        gc.enable()


def _wire_seconds(buffers: list[list[str]]) -> float:
    """Seconds to encode, decode and hash (the consumer's first state lookup) ``buffers``."""
    from statekit.runtime.exchange.network import decode_payload, encode_payload

    gc.disable()
    try:
        start = time.perf_counter()
        for buffer in buffers:
            kind, data = encode_payload(buffer)
            for record in decode_payload(kind, data):
                hash(record)
        return time.perf_counter() - start
    finally:
        gc.enable()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--interval-ms", type=int, default=1000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    n, keys = args.events, args.keys

    single, keyed, wire = [], [], []
    for _ in range(args.repeat):  # interleaved, the best of each counts
        single.append(_emit_seconds(1, n, keys)[0])
        seconds, sinks = _emit_seconds(2, n, keys)
        keyed.append(seconds)
        wire.append(_wire_seconds([buffer for _, buffer in sinks[1].items]))  # channel 1: the remote half
        del sinks
        gc.collect()
    route = (min(keyed) - min(single)) / n
    crossing = min(wire) / n  # per event of the whole stream: only the crossing half pays it
    extra = route + crossing

    p1: list[JobRun] = []
    p2: list[JobRun] = []
    for _ in range(args.repeat):
        p1.append(run_with_cpu(n, keys, 1, args.interval_ms))
        p2.append(run_with_cpu(n, keys, 2, args.interval_ms))
        gc.collect()
    best1, best2 = min(p1, key=lambda r: r.seconds), min(p2, key=lambda r: r.seconds)
    c1 = best1.seconds / n
    bound = 2 * c1 / (c1 + extra)

    ns = 1e9
    print(f"keyed exchange cost: {n:,} events over {keys:,} keys, best of {args.repeat} interleaved runs")
    print(f"  emit, one channel (p=1)            {min(single) / n * ns:7.0f} ns/event")
    print(f"  emit keyed, two channels (p=2)     {min(keyed) / n * ns:7.0f} ns/event")
    print(f"  routing (the difference)           {route * ns:7.0f} ns/event")
    print(f"  crossing: pickle, unpickle, hash   {crossing * ns:7.0f} ns/event (the half that crosses)")
    print(f"  x = the work p=2 adds              {extra * ns:7.0f} ns/event")
    print(f"  c1 = the job at p=1, processes     {c1 * ns:7.0f} ns/event ({1 / c1:,.0f} events/s, "
          f"{args.interval_ms} ms checkpoints)")
    print(f"  bound 2*c1/(c1+x)                  {bound:7.2f}x  (both cores busy with records only)")
    for label, run in (("p=1", best1), ("p=2", best2)):
        busy = "" if run.cpu_seconds is None else (
            f", TaskManagers' CPU {run.cpu_seconds / n * ns:,.0f} ns/event, busy {run.cpu_seconds / run.seconds:.2f} cores")
        print(f"  the job at {label}                     {n / run.seconds:,.0f} events/s{busy}")
    if best2.cpu_seconds:
        cores = os.cpu_count() or 1
        print(f"  bound {cores}/cpu2 over p=1             {cores * best1.seconds / best2.cpu_seconds:7.2f}x  "
              f"(p=2's own CPU per event on every core)")
    print(f"  measured p=2 / p=1                 {best1.seconds / best2.seconds:7.2f}x")


if __name__ == "__main__":
    main()
