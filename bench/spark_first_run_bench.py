"""What the first ``statekit export`` of a Spark session costs, against a warm one.

Default: one fresh session (``--master``, default ``local[2]``), timed in order:

1. session start (JVM, SparkContext, data source registration);
2. the first export of ``--entries`` rows to Parquet — what ``statekit export`` runs after
   starting its session;
3. the same export again (warm), and a third time.

It prints first / warm (the second export) and session start + first export.

``--steps`` splits the first export's one-time costs instead (also one fresh session):
session start; a first Python job doing nothing (``sc.parallelize(range(cores)).map(...)``:
an RDD job's daemon and workers — not the ones the export's tasks use: Spark keeps one
daemon per worker environment, and its SQL runners add variables an RDD job lacks, so this
step does not warm the export's workers); planning the state's DataFrame
(``read_state(...).schema``: the data source's planner process imports statekit and reads
``_metadata``); the export; the export again.

``--floor`` measures what no export can avoid (also one fresh session): a ``mapInArrow``
job over ``spark.range`` whose function only passes its input on — the shape of the
export's read, without statekit — run three times (the first is Spark's first Python SQL job
of the session: the worker daemon, its workers, the JVM's first use of the Arrow runner),
then the export twice. First trivial job minus a warm one is the session's fixed cost.

``--cli N`` also times ``statekit export SAVEPOINT -o OUT --master MASTER`` N times as a
child process, end to end: one process is one fresh session, so this is what a user waits for.

``--conf KEY=VALUE`` (repeatable) is passed to the session and to the CLI, e.g.
``--conf spark.statekit.classArchive=false`` (no class archive: every JVM loads Spark's
classes from its jars; docs/SPARK.md).

Besides wall-clock seconds, the default mode prints the CPU seconds of the session's
processes (this one, the JVM, its Python workers and planners) for the session start and each
export — a figure that the other users of a shared machine change much less than the wall
clock — and the 1-minute load average before and after.

Usage: python bench/spark_first_run_bench.py [--entries 1000000] [--master local[2]] [--dir DIR]
       [--steps | --floor] [--cli N] [--conf KEY=VALUE]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from timed_children import use_bytecode_caches


def timed(func: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = func()
    return time.perf_counter() - start, result


def write_savepoint(path: str, entries: int) -> None:
    from statekit.statefmt.metadata import StateDescriptor, StateKind
    from statekit.writers.savepoint_writer import SavepointWriter

    descriptor = StateDescriptor("count", StateKind.VALUE, value_type="int")
    SavepointWriter.new_savepoint(128).with_operator(
        "counter", {descriptor: [(f"key-{i:08d}", i) for i in range(entries)]}, parallelism=2,
    ).write(path)


def load_average() -> float:
    with open("/proc/loadavg", encoding="ascii") as f:
        return float(f.read().split()[0])


def tree_cpu(root: int) -> float:
    """CPU seconds of ``root`` and its live descendants, with the children each has reaped."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, ValueError):
            continue
        stats[int(entry)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / tick)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0.0))[1]
        todo += [child for child, (parent, _) in stats.items() if parent == pid]
    return total


def fresh_session(savepoint: str, work: str, master: str, conf: dict[str, str]) -> list[tuple[str, float]]:
    from statekit.spark.engine import export
    from statekit.spark.export import ExportSpec
    from statekit.spark.session import SparkSettings

    settings = SparkSettings(master, conf)
    own = os.times()
    start_s, _ = timed(settings.session)
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    assert gateway is not None
    jvm = gateway.proc.pid

    def cpu() -> float:
        now = os.times()
        return tree_cpu(jvm) + (now.user + now.system) - (own.user + own.system)

    cpus = [cpu()]
    runs = []
    for n in range(3):
        runs.append(timed(lambda n=n: export(ExportSpec(savepoint, os.path.join(work, f"export-{n}"), spark=settings), "spark"))[0])
        cpus.append(cpu())
    return [("session start", start_s), ("export, first of the session", runs[0]), ("export again (warm)", runs[1]),
            ("export a third time", runs[2]), ("session start + first export", start_s + runs[0]),
            ("first / warm (ratio)", runs[0] / runs[1]),
            ("CPU: session start", cpus[0]), ("CPU: first export", cpus[1] - cpus[0]),
            ("CPU: warm export", cpus[2] - cpus[1]), ("CPU: session start + first export", cpus[1])]


def steps(savepoint: str, work: str, master: str, conf: dict[str, str]) -> list[tuple[str, float]]:
    from statekit.spark.engine import export
    from statekit.spark.export import ExportSpec
    from statekit.spark.session import SparkSettings
    from statekit.spark.source import read_state

    settings = SparkSettings(master, conf)
    start_s, spark = timed(settings.session)
    cores = spark.sparkContext.defaultParallelism
    job_s, _ = timed(lambda: spark.sparkContext.parallelize(range(cores), cores).map(lambda x: x).collect())
    plan_s, _ = timed(lambda: read_state(spark, savepoint, "counter", "count").schema)
    cold_s, _ = timed(lambda: export(ExportSpec(savepoint, os.path.join(work, "cold"), spark=settings), "spark"))
    warm_s, _ = timed(lambda: export(ExportSpec(savepoint, os.path.join(work, "warm"), spark=settings), "spark"))
    return [("session start", start_s), ("first Python job (RDD workers start)", job_s),
            ("plan the state's DataFrame", plan_s), ("export (first after the steps above)", cold_s),
            ("export again (warm)", warm_s)]


def floor(savepoint: str, work: str, master: str, conf: dict[str, str]) -> list[tuple[str, float]]:
    from statekit.spark.engine import export
    from statekit.spark.export import ExportSpec
    from statekit.spark.session import SparkSettings, map_in_arrow

    settings = SparkSettings(master, conf)
    start_s, spark = timed(settings.session)
    cores = spark.sparkContext.defaultParallelism
    figures = [("session start", start_s)]
    for n in range(3):
        seconds, _ = timed(lambda: map_in_arrow(spark.range(0, cores, 1, cores), _passed_on, "id long").collect())
        figures.append((f"trivial mapInArrow job #{n + 1}", seconds))
    for n in range(2):
        seconds, _ = timed(lambda n=n: export(ExportSpec(savepoint, os.path.join(work, f"floor-{n}"), spark=settings), "spark"))
        figures.append((f"export #{n + 1} after the trivial jobs", seconds))
    figures.append(("fixed cost of a session's first job", figures[1][1] - figures[2][1]))
    return figures


def _passed_on(batches: Any) -> Any:
    yield from batches


def cli_runs(savepoint: str, work: str, master: str, conf: dict[str, str], repeat: int) -> list[tuple[str, float]]:
    command = [os.path.join(os.path.dirname(sys.executable), "statekit"), "export", savepoint, "--master", master]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    figures = []
    for n in range(repeat):
        out = os.path.join(work, f"cli-{n}")
        seconds, done = timed(lambda out=out: subprocess.run([*command, "-o", out], capture_output=True, text=True))
        if done.returncode != 0:
            raise SystemExit(f"statekit export failed ({done.returncode}): {done.stderr.strip()[-500:]}")
        figures.append((f"statekit export (CLI, end to end) #{n + 1}", seconds))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--dir", default=None, help="keep the savepoint here (reused when it exists)")
    parser.add_argument("--steps", action="store_true", help="the first export's one-time costs, step by step")
    parser.add_argument("--floor", action="store_true", help="Spark's fixed cost of a session's first Python job")
    parser.add_argument("--cli", type=int, default=0, metavar="N", help="also time the CLI N times")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    use_bytecode_caches()
    conf = dict(pair.split("=", 1) for pair in args.conf)

    root = args.dir or tempfile.mkdtemp(prefix="statekit-spark-first-run-")
    os.makedirs(root, exist_ok=True)
    savepoint = os.path.join(root, "savepoint")
    work = tempfile.mkdtemp(prefix="out-", dir=root)
    try:
        if not os.path.exists(os.path.join(savepoint, "_metadata")):
            write_savepoint(savepoint, args.entries)
        load_before = load_average()
        mode = steps if args.steps else floor if args.floor else fresh_session
        figures = mode(savepoint, work, args.master, conf)
        if args.cli:
            figures += cli_runs(savepoint, work, args.master, conf, args.cli)
        print(f"{args.entries:,} rows, {args.master}, conf {conf or 'default'}, "
              f"load average {load_before:.2f} before, {load_average():.2f} after")
        for label, value in figures:
            unit = "×" if "ratio" in label else "CPU s" if label.startswith("CPU") else "s"
            print(f"  {label:<44}{value:>8.2f} {unit}")
    finally:
        shutil.rmtree(work if args.dir else root, ignore_errors=True)


if __name__ == "__main__":
    main()
