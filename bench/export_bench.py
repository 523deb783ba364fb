"""Export a savepoint of N keyed entries to Parquet through Spark; compare with pyarrow.

Printed as rows/s and as a ratio against a baseline run in the same process: pyarrow
writing the same rows (the exported table, already in memory, same columns and types) to
Parquet. The Spark session is started before the clock runs (a one-time cost, printed
separately); each export is timed end to end (planning, reading and decoding the blocks in
the executors, writing, publishing). The export runs twice: *cold* is the first job of the
session (Python workers start, the JVM warms up: what one ``statekit export`` pays),
*warm* the second (what each further state or a long-lived session pays).

Usage: python bench/export_bench.py [--entries 1000000] [--master local[2]] [--parallelism 2] [--dir DIR]
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
    parser.add_argument("--parallelism", type=int, default=2, help="subtasks of the savepoint's operator")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()

    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from statekit.spark.engine import export
    from statekit.spark.export import ExportSpec
    from statekit.spark.session import SparkSettings
    from statekit.statefmt.metadata import StateDescriptor, StateKind
    from statekit.writers.savepoint_writer import SavepointWriter

    n = args.entries
    work = args.dir or tempfile.mkdtemp(prefix="statekit-export-bench-")
    os.makedirs(work, exist_ok=True)
    savepoint, out, baseline = (os.path.join(work, name) for name in ("savepoint", "export", "baseline.parquet"))
    descriptor = StateDescriptor("count", StateKind.VALUE, value_type="int")
    try:
        setup_s, _ = timed(lambda: SavepointWriter.new_savepoint(128).with_operator(
            "counter", {descriptor: [(f"key-{i:08d}", i) for i in range(n)]}, parallelism=args.parallelism,
        ).write(savepoint))
        settings = SparkSettings(args.master)
        start_s, spark = timed(settings.session)
        cores = spark.sparkContext.defaultParallelism
        export_s, result = timed(lambda: export(ExportSpec(savepoint, out, spark=settings), "spark"))
        assert result.rows == n, result.rows
        warm_s, _ = timed(lambda: export(ExportSpec(savepoint, out + "-warm", spark=settings), "spark"))
        table = ds.dataset(os.path.join(out, "operator_uid=counter", "state_name=count"), format="parquet").to_table()
        baseline_s, _ = timed(lambda: pq.write_table(table, baseline))
        print(f"entries                 {n:,} (savepoint p={args.parallelism}, built in {setup_s:.1f} s)")
        print(f"spark session start     {start_s:.1f} s ({args.master}, {cores} cores; not in the figures below)")
        print(f"statekit export (cold)  {export_s:.2f} s   {n / export_s:,.0f} rows/s")
        print(f"statekit export (warm)  {warm_s:.2f} s   {n / warm_s:,.0f} rows/s")
        print(f"pyarrow write_table     {baseline_s:.2f} s   {n / baseline_s:,.0f} rows/s (same rows, in memory)")
        print(f"ratio export / pyarrow  {export_s / baseline_s:.1f}x cold, {warm_s / baseline_s:.1f}x warm")
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
