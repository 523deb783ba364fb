"""Diff two savepoints of N keys with 1% changed keys; compare with reading both once.

Baseline (same process): reading every block of both savepoints once
(``SavepointReader.read_keyed_batches``: fetch, CRC check, Arrow decode) — what any diff
that looks at all entries must at least do. The local engine skips key groups whose
blocks have equal checksums, so its ratio depends on how many key groups hold a change:
with random changed keys that is every key group at max parallelism 128, and about a
quarter at 32768. Both are measured; ``--spark`` also times the Spark engine.

Usage: python bench/diff_bench.py [--entries 1000000] [--changed 0.01] [--spark] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any


def timed(func: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = func()
    return time.perf_counter() - start, result


def write_pair(work: str, n: int, changed: float, max_parallelism: int) -> tuple[str, str, int]:
    from statekit.statefmt.metadata import StateDescriptor, StateKind
    from statekit.writers.savepoint_writer import SavepointWriter

    descriptor = StateDescriptor("count", StateKind.VALUE, value_type="int")
    rows = [(f"key-{i:08d}", i) for i in range(n)]
    picked = set(random.Random(7).sample(range(n), int(n * changed)))
    paths = []
    for name, data in (("a", rows), ("b", [(k, v + 1 if i in picked else v) for i, (k, v) in enumerate(rows)])):
        path = os.path.join(work, f"{name}-m{max_parallelism}")
        SavepointWriter.new_savepoint(max_parallelism).with_operator("counter", {descriptor: data}, parallelism=2).write(path)
        paths.append(path)
    return paths[0], paths[1], len(picked)


def read_both(a: str, b: str) -> int:
    from statekit.readers.savepoint_reader import SavepointReader

    rows = 0
    for path in (a, b):
        for _, _, batch in SavepointReader.read(path).read_keyed_batches("counter", "count"):
            rows += batch.num_rows
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--changed", type=float, default=0.01)
    parser.add_argument("--spark", action="store_true", help="also time the Spark engine (local[2])")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()

    from statekit.readers.diff import DiffSpec
    from statekit.spark.engine import diff

    work = args.dir or tempfile.mkdtemp(prefix="statekit-diff-bench-")
    os.makedirs(work, exist_ok=True)
    try:
        print(f"entries {args.entries:,} per savepoint, {args.changed:.0%} of the keys changed")
        for max_p in (128, 32768):
            a, b, changed = write_pair(work, args.entries, args.changed, max_p)
            read_s, rows = timed(lambda a=a, b=b: read_both(a, b))
            assert rows == 2 * args.entries
            diff_s, result = timed(lambda a=a, b=b: diff(DiffSpec(a, b)))
            (count,) = result.states
            assert (count.changed, count.unchanged) == (changed, args.entries - changed), count
            skipped = count.key_groups_skipped / max(1, count.key_groups_skipped + count.key_groups_compared)
            print(f"max parallelism {max_p:>5}: read both {read_s:.2f} s | diff (local) {diff_s:.2f} s "
                  f"= {diff_s / read_s:.2f}x reading | key groups skipped by checksum {skipped:.0%}")
            if args.spark:
                from statekit.spark.session import SparkSettings

                settings = SparkSettings("local[2]")
                settings.session()
                spark_s, _ = timed(lambda a=a, b=b, settings=settings: diff(DiffSpec(a, b), "spark", settings))
                print(f"{'':>21} diff (spark, local[2]) {spark_s:.2f} s = {spark_s / read_s:.2f}x reading")
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
