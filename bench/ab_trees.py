"""Two trees of statekit side by side on window_bench's three jobs, in one sitting.

    git archive REV statefmt readers writers flink runtime spark cli bench | tar -x -C DIR/statekit
    python bench/ab_trees.py DIR_A DIR_B [--rounds 2] [--repeat 4]

Each round runs one child per tree (A, then B), each with ``PYTHONPATH=DIR`` so that it
imports that tree's ``statekit``: a warm-up of each job, then ``--repeat`` interleaved runs
of the keyed running count, the count with TTL and the 1 s tumbling windows of
bench/window_bench.py (1M events, 10k keys, p=2, checkpoints every 1 s). A child prints
the median and the best of each job in wall seconds and in process CPU seconds (all its
threads), and the two ratios of issue 12 (windows / count throughput, TTL time / count
time) in both. Alternating the trees is what makes their figures comparable on a machine
whose speed drifts from minute to minute.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

CHILD = r'''
import gc, logging, resource, statistics, sys, time
sys.path.insert(0, sys.argv[1] + "/statekit/bench")
import window_bench as wb
logging.basicConfig(level=logging.ERROR)
repeat = int(sys.argv[2])
events = [f"key-{(i * 7919) % 10000}" for i in range(1_000_000)]
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
jobs = {"count": lambda: wb._runtime_bench().run_job(events, 2, 1000, "hashmap"),
        "ttl": lambda: wb.run_ttl_count(events, 2, 1000, "hashmap"),
        "windows": lambda: wb.run_windows(events, 2, 1000, "hashmap")}
for job in jobs.values():
    job()
runs = {name: [] for name in jobs}
for _ in range(repeat):
    for name, job in jobs.items():
        c0, w0 = cpu(), time.perf_counter()
        job()
        runs[name].append((time.perf_counter() - w0, cpu() - c0))
        gc.collect()
for label, pick in (("median", statistics.median), ("best", min)):
    wall = {n: pick(w for w, _ in r) for n, r in runs.items()}
    used = {n: pick(c for _, c in r) for n, r in runs.items()}
    print(f"  {label:6} wall count {wall['count']:.2f} ttl {wall['ttl']:.2f} windows {wall['windows']:.2f} s"
          f" | windows/count {wall['count'] / wall['windows']:.2f}x ttl {wall['ttl'] / wall['count']:.2f}x"
          f" | cpu windows/count {used['count'] / used['windows']:.2f}x ttl {used['ttl'] / used['count']:.2f}x")
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs=2, help="directories holding statekit/ (from git archive)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=4)
    args = parser.parse_args()
    for _ in range(args.rounds):
        for tree in args.trees:
            with open("/proc/loadavg") as f:
                load = f.read().split()[0]
            print(f"{tree} (load average {load})", flush=True)
            env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
            subprocess.run([sys.executable, "-c", CHILD, os.path.abspath(tree), str(args.repeat)],
                           env=env, check=True, cwd="/")


if __name__ == "__main__":
    main()
