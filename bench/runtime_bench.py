"""Throughput of the mini runtime on a keyed running count, on TaskManager processes and on threads.

``--events`` events over ``--keys`` keys: a collection source, a keyed process function keeping a
running count in ValueState (``count``, declared ``int``), a discarding sink
(``bench/jobs/keyed_count.py``, run the way ``statekit run`` runs it). For each executor and each
parallelism (1, 2, 4 ... up to the core count by default) the job runs with checkpoints off and
every ``--interval-ms`` (to a temporary directory), ``--repeat`` times interleaved; the best run of
each counts. Printed: events/s from the moment every task was deployed to the end (the deployment
itself — starting TaskManagers, importing the job file, building the graph — is shown apart), the
speed-up over parallelism 1 on the same executor, the checkpoint overhead, and, as the floor, a
pure-Python dict loop over the same events timed in the same process.

On a machine with more cores the same script keeps going: ``--parallelism 1,2,4,8,16``.

Usage: python bench/runtime_bench.py [--events 1000000] [--keys 100000] [--parallelism 1,2,4]
                                     [--executors processes,threads] [--interval-ms 1000]
                                     [--backend hashmap|rocksdb] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs", "keyed_count.py")


def dict_loop(events: list[str]) -> tuple[float, dict[str, int]]:
    """The floor: the same running count in one Python loop over a dict."""
    start = time.perf_counter()
    counts: dict[str, int] = {}
    get = counts.get
    for key in events:
        counts[key] = get(key, 0) + 1
    return time.perf_counter() - start, counts


@dataclass(frozen=True)
class Run:
    """One run of the job: seconds from every task deployed to the end, the deployment, checkpoints,
    and that timed phase as (start, end) in epoch milliseconds."""

    seconds: float
    deploy_s: float
    checkpoints: int
    phase_ms: tuple[int, int]


def run_keyed_count(events: int, keys: int, parallelism: int, interval_ms: int | None, backend: str = "hashmap",
                    executor: str = "processes", buffer_timeout_ms: int | None = None) -> Run:
    """Run bench/jobs/keyed_count.py once, as ``statekit run`` would (the job master in this process)."""
    from statekit.runtime import JobHandle, RunOptions, run_job_file
    from statekit.runtime.dataflow.run_options import add_job_listener, remove_job_listener

    work = tempfile.mkdtemp(prefix="statekit-runtime-bench-")
    handles: list[JobHandle] = []
    add_job_listener(handles.append)
    try:
        args = ["--events", str(events), "--keys", str(keys), "--backend", backend]
        if interval_ms:
            args += ["--interval-ms", str(interval_ms), "--checkpoints", work]
        run_job_file(JOB, RunOptions(parallelism=parallelism, executor=executor, job_args=tuple(args),
                                     latency_interval_ms=0, buffer_timeout_ms=buffer_timeout_ms))
        (handle,) = handles
        assert handle.tasks_running_ms is not None and handle.end_time_ms is not None
        completed = int(handle.checkpoint_stats()["counts"]["completed"])
        return Run((handle.end_time_ms - handle.tasks_running_ms) / 1000,
                   (handle.tasks_running_ms - handle.start_time_ms) / 1000, completed,
                   (handle.tasks_running_ms, handle.end_time_ms))
    finally:
        remove_job_listener(handles.append)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    cores = os.cpu_count() or 1
    default_p = ",".join(str(p) for p in sorted({1, 2, 4, cores}) if p <= max(4, cores))
    parser.add_argument("--parallelism", default=default_p, help=f"comma-separated (default {default_p})")
    parser.add_argument("--executors", default="processes,threads")
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--backend", default="hashmap")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved runs of each job; the best counts")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)

    n = args.events
    events = [f"key-{(i * 7919) % args.keys}" for i in range(n)]
    floor_s, _ = dict_loop(events)
    del events
    parallelisms = [int(p) for p in args.parallelism.split(",")]
    executors = args.executors.split(",")
    print(f"runtime bench: {n:,} events over {args.keys:,} keys, {args.backend} backend, {cores} cores; "
          f"best of {args.repeat} interleaved runs")
    print(f"  pure-Python dict loop (floor)  {n / floor_s:>12,.0f} events/s  ({floor_s:.2f} s)")
    print(f"  {'executor':<10}{'p':>3}{'events/s off':>15}{'events/s on':>15}{'x p=1 off':>11}{'x p=1 on':>10}"
          f"{'ckpt overhead':>15}{'deploy s':>10}")
    for executor in executors:
        base: tuple[float, float] | None = None
        for p in parallelisms:
            offs, ons = [], []
            for _ in range(args.repeat):
                offs.append(run_keyed_count(n, args.keys, p, None, args.backend, executor))
                ons.append(run_keyed_count(n, args.keys, p, args.interval_ms, args.backend, executor))
                gc.collect()
            off = min(offs, key=lambda r: r.seconds)
            on = min(ons, key=lambda r: r.seconds)
            if base is None:
                base = (off.seconds, on.seconds)
            deploy = statistics.median(r.deploy_s for r in offs + ons)
            print(f"  {executor:<10}{p:>3}{n / off.seconds:>15,.0f}{n / on.seconds:>15,.0f}"
                  f"{base[0] / off.seconds:>10.2f}x{base[1] / on.seconds:>9.2f}x{on.seconds / off.seconds:>14.2f}x"
                  f"{deploy:>10.2f}   ({on.checkpoints} checkpoints)")


if __name__ == "__main__":
    main()
