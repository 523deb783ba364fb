"""What TaskManager processes add to a tiny job's life: ``statekit run`` start to exit.

A tiny job (``bench/jobs/keyed_count.py --events 1000``, checkpoints off) runs end to end as a
user runs it — ``python -m statekit.cli.main run -p P --executor E JOB`` in a fresh process, with
its own job registry — on TaskManager processes and on threads, ``--repeat`` times interleaved.
Printed per executor: the median and best wall time from the command's start to its exit, and
the difference processes − threads, which is the cost of starting the TaskManagers (each imports
statekit and the job file and builds the graph), connecting their channels and tearing them down.
After each run the bench checks that no process of the job is left behind.

Usage: python bench/startup_bench.py [--parallelism 4] [--repeat 5] [--events 1000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs", "keyed_count.py")


def task_manager_pids() -> set[int]:
    """Process ids of every TaskManager on the machine now."""
    found = subprocess.run(["pgrep", "-f", "statekit.runtime.taskmanager"], capture_output=True, text=True).stdout
    return {int(pid) for pid in found.split()}


def timed_statekit_run(label: str, args: list[str], home: str, timeout: float = 300) -> float:
    """Seconds from the start of ``statekit run ARGS`` (a fresh process, registry in ``home``) to
    its exit; it must exit 0 and leave no TaskManager behind."""
    command = [sys.executable, "-m", "statekit.cli.main", "run", *args]
    before = task_manager_pids()
    start = time.perf_counter()
    done = subprocess.run(command, env={**os.environ, "STATEKIT_HOME": home}, capture_output=True, text=True,
                          timeout=timeout)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{label}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
    left = task_manager_pids() - before
    if left:
        raise SystemExit(f"{label}: processes left behind: {sorted(left)}")
    return seconds


def run_once(executor: str, parallelism: int, events: int) -> float:
    """Seconds from the start of ``statekit run`` to its exit; it must exit 0 and leave nothing."""
    home = tempfile.mkdtemp(prefix="statekit-startup-bench-")
    try:
        return timed_statekit_run(executor, ["-p", str(parallelism), "--executor", executor, JOB, "--events",
                                             str(events), "--keys", "100"], home)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--events", type=int, default=1000)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"threads": [], "processes": []}
    run_once("threads", args.parallelism, args.events)  # warm the page cache and the bytecode caches
    for _ in range(args.repeat):
        for executor in times:
            times[executor].append(run_once(executor, args.parallelism, args.events))
    print(f"statekit run of a tiny job ({args.events} events), p={args.parallelism}, {args.repeat} runs each "
          f"(load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    print(f"{'executor':<10} {'median s':>9} {'best s':>8}")
    for executor, values in times.items():
        print(f"{executor:<10} {statistics.median(values):>9.2f} {min(values):>8.2f}")
    extra = statistics.median(times["processes"]) - statistics.median(times["threads"])
    best = min(times["processes"]) - min(times["threads"])
    print(f"processes - threads: {extra:+.2f} s median, {best:+.2f} s best (target: at most +1 s)")


if __name__ == "__main__":
    main()
