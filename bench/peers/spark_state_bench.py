"""Spark's own state tools next to statekit's, in one run on one Spark session.

1. **Export**: a Structured Streaming checkpoint of ``groupBy("key").count()`` over
   ``--keys`` keys (RocksDB state store, ``--partitions`` shuffle partitions) read with
   Spark's state data source (``spark.read.format("statestore")``) and written as Parquet,
   against ``statekit export`` (same session) of a savepoint of the same keys and counts
   (value state ``count`` declared ``int``, parallelism ``--partitions``) to Parquet.
2. **Repartition**: Spark's offline state repartitioning
   (``spark.streamingCheckpointManager.repartition``, Spark 4.2 and later) of that checkpoint
   to ``--to`` partitions, against ``statekit rescale -p`` of the savepoint. Where the
   installed Spark has no offline repartitioning, the script says so and prints statekit's
   figure alone.

Building the inputs is not timed. The Spark session is started before the clock runs; each
export runs twice (the first is a cold first job, the second is compared).

Needs PySpark (``pip install 'statekit[spark]'``): without it the script prints what to
install and exits with status 2.

Usage: python bench/peers/spark_state_bench.py [--keys 1000000] [--partitions 4] [--to 6] [--skip-export]
                                               [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

MISSING = "PySpark is not installed: pip install 'statekit[spark]' (Spark's state data source ships with it)"


def timed(func: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = func()
    return time.perf_counter() - start, result


def streaming_checkpoint(spark: Any, keys: int, partitions: int, work: str) -> str:
    """A finished Structured Streaming checkpoint of a keyed count over ``keys`` keys."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = os.path.join(work, "events")
    os.makedirs(source)
    pq.write_table(pa.table({"key": pa.array(range(keys), pa.int64())}), os.path.join(source, "part-0.parquet"))
    checkpoint = os.path.join(work, "spark-checkpoint")
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    spark.conf.set("spark.sql.streaming.stateStore.providerClass",
                   "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    query = (spark.readStream.schema("key long").parquet(source)
             .groupBy("key").count()
             .writeStream.outputMode("update").format("noop")
             .option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return checkpoint


def checkpoint_manager(spark: Any) -> Any:
    """Spark's StreamingCheckpointManager (public or underscored by version), or None."""
    for name in ("streamingCheckpointManager", "_streamingCheckpointManager"):
        try:
            manager = getattr(spark, name, None)
        except Exception:  # noqa: BLE001 - a Python API over a JVM without the method
            manager = None
        if manager is not None and hasattr(manager, "repartition"):
            return manager
    return None


def statekit_savepoint(keys: int, partitions: int, work: str) -> str:
    from statekit.statefmt.metadata import StateDescriptor, StateKind
    from statekit.writers.savepoint_writer import SavepointWriter

    path = os.path.join(work, "savepoint")
    descriptor = StateDescriptor("count", StateKind.VALUE, value_type="int")
    (SavepointWriter.new_savepoint(max(128, partitions))
     .with_operator("counter", {descriptor: ((k, 1) for k in range(keys))}, parallelism=partitions)
     .write(path))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--to", type=int, default=6, help="partitions / parallelism after repartitioning")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--skip-export", action="store_true", help="time the repartitioning only")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    try:
        import pyspark  # noqa: F401 - only whether it is installed
    except ImportError:
        print(MISSING, file=sys.stderr)
        return 2

    from statekit.spark.engine import export
    from statekit.spark.export import ExportSpec
    from statekit.spark.session import SparkSettings
    from statekit.writers.rescale import rescale_savepoint

    work = args.dir or tempfile.mkdtemp(prefix="statekit-spark-peer-")
    os.makedirs(work, exist_ok=True)
    settings = SparkSettings(args.master)
    try:
        start_s, spark = timed(settings.session)
        checkpoint = streaming_checkpoint(spark, args.keys, args.partitions, work)
        savepoint = statekit_savepoint(args.keys, args.partitions, work)

        def spark_export(name: str) -> int:
            frame = spark.read.format("statestore").load(checkpoint)
            frame.write.parquet(os.path.join(work, name))
            return int(spark.read.parquet(os.path.join(work, name)).count())

        def statekit_export(name: str) -> int:
            result = export(ExportSpec(savepoint, os.path.join(work, name), fmt="parquet", spark=settings), "spark")
            return int(result.rows or 0)

        print(f"Spark {spark.version}, {args.master}; {args.keys:,} keys, {args.partitions} partitions "
              f"(session start {start_s:.1f} s, not timed)")
        print(f"{'':34}{'peer (s)':>10}{'statekit (s)':>14}{'ratio':>8}")
        if not args.skip_export:
            spark_export("spark-cold")
            statekit_export("statekit-cold")
            spark_s, spark_rows = timed(lambda: spark_export("spark-warm"))
            ours_s, _ = timed(lambda: statekit_export("statekit-warm"))
            print(f"{'export to Parquet':34}{spark_s:>10.2f}{ours_s:>14.2f}{ours_s / spark_s:>7.2f}x"
                  f"   (peer rows: {spark_rows:,})")

        ours_r, _ = timed(lambda: rescale_savepoint(savepoint, os.path.join(work, "rescaled"), parallelism=args.to))
        manager = checkpoint_manager(spark)
        label = f"repartition {args.partitions} -> {args.to}"
        if manager is None:
            print(f"{label:34}{'n/a':>10}{ours_r:>14.3f}{'':>8}   (Spark {spark.version} has no offline state "
                  "repartitioning: it came with Spark 4.2's StreamingCheckpointManager.repartition)")
        else:
            peer_r, _ = timed(lambda: manager.repartition(checkpoint, args.to))
            print(f"{label:34}{peer_r:>10.2f}{ours_r:>14.3f}{ours_r / peer_r:>8.3f}x")
        return 0
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
