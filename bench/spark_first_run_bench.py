"""Where the first ``statekit export`` of a Spark session spends its time, step by step.

In one fresh session (``--master``, default ``local[2]``), timed in order:

1. session start (JVM, SparkContext, data source registration);
2. a first Python job doing nothing (``sc.parallelize(range(cores)).map(...)``): starting
   the Python worker daemon and one worker per core;
3. planning the state's DataFrame (``read_state(...).schema``: the data source runs in a
   Python planner process — its import of statekit and its partitions);
4. the first export of ``--entries`` rows to Parquet (cold);
5. the same export again (warm).

The gap between 4 and 5 is what the first job pays once; 2 and 3 are parts of it that can
be measured alone.

Usage: python bench/spark_first_run_bench.py [--entries 1000000] [--master local[2]] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any


def timed(func: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = func()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()

    from statekit.spark.engine import export
    from statekit.spark.export import ExportSpec
    from statekit.spark.session import SparkSettings
    from statekit.spark.source import read_state
    from statekit.statefmt.metadata import StateDescriptor, StateKind
    from statekit.writers.savepoint_writer import SavepointWriter

    work = args.dir or tempfile.mkdtemp(prefix="statekit-spark-first-run-")
    os.makedirs(work, exist_ok=True)
    savepoint = os.path.join(work, "savepoint")
    descriptor = StateDescriptor("count", StateKind.VALUE, value_type="int")
    try:
        SavepointWriter.new_savepoint(128).with_operator(
            "counter", {descriptor: [(f"key-{i:08d}", i) for i in range(args.entries)]}, parallelism=2,
        ).write(savepoint)
        settings = SparkSettings(args.master)
        steps: list[tuple[str, float]] = []
        start_s, spark = timed(settings.session)
        steps.append(("session start", start_s))
        cores = spark.sparkContext.defaultParallelism
        steps.append(("first Python job (workers start)",
                      timed(lambda: spark.sparkContext.parallelize(range(cores), cores).map(lambda x: x).collect())[0]))
        steps.append(("plan the state's DataFrame", timed(lambda: read_state(spark, savepoint, "counter", "count").schema)[0]))
        cold_s, _ = timed(lambda: export(ExportSpec(savepoint, os.path.join(work, "cold"), spark=settings)))
        warm_s, _ = timed(lambda: export(ExportSpec(savepoint, os.path.join(work, "warm"), spark=settings)))
        steps += [("export (first after the steps above)", cold_s), ("export again (warm)", warm_s)]
        print(f"{args.entries:,} rows, {args.master} ({cores} cores)")
        for label, seconds in steps:
            print(f"  {label:<40}{seconds:>8.2f} s")
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
