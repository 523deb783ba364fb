"""Write and read a savepoint of N keyed entries; compare with pyarrow on the same rows.

Printed as entries/s and as ratios against baselines run in the same process:
  * write: pyarrow building an Arrow table from the same Python rows and writing it as
    Arrow IPC (the floor for "Python rows to a columnar file");
  * read (decoded): pyarrow reading that IPC file back into Python rows;
  * read (columnar): pyarrow reading that IPC file as Arrow batches.

Usage: python bench/format_bench.py [--entries 1000000] [--parallelism 2] [--dir DIR]
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
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()

    import pyarrow as pa
    import pyarrow.ipc as ipc

    from statekit.readers.savepoint_reader import SavepointReader
    from statekit.statefmt.metadata import StateDescriptor, StateKind
    from statekit.writers.savepoint_writer import SavepointWriter

    n = args.entries
    work = args.dir or tempfile.mkdtemp(prefix="statekit-format-bench-")
    os.makedirs(work, exist_ok=True)
    rows = [(f"key-{i:08d}", i) for i in range(n)]
    descriptor = StateDescriptor("count", StateKind.VALUE, value_type="int")
    savepoint = os.path.join(work, "savepoint")
    ipc_path = os.path.join(work, "baseline.arrow")
    try:
        write_s, _ = timed(
            lambda: SavepointWriter.new_savepoint(128)
            .with_operator("counter", {descriptor: rows}, parallelism=args.parallelism)
            .write(savepoint)
        )

        def baseline_write() -> None:
            table = pa.table({"key": [r[0] for r in rows], "value": [r[1] for r in rows]})
            with ipc.new_file(ipc_path, table.schema) as writer:
                writer.write_table(table)

        base_write_s, _ = timed(baseline_write)

        reader = SavepointReader.read(savepoint)
        read_s, count = timed(lambda: sum(1 for _ in reader.read_keyed_state("counter", "count")))
        assert count == n, (count, n)
        read_cols_s, col_rows = timed(
            lambda: sum(b.num_rows for _, _, b in reader.read_keyed_batches("counter", "count"))
        )
        assert col_rows == n

        def baseline_read_rows() -> int:
            table = ipc.open_file(ipc_path).read_all()
            keys, values = table.column("key").to_pylist(), table.column("value").to_pylist()
            return sum(1 for _ in zip(keys, values))

        base_read_s, base_count = timed(baseline_read_rows)
        assert base_count == n
        base_read_cols_s, _ = timed(lambda: ipc.open_file(ipc_path).read_all().num_rows)

        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(savepoint) for f in fs)
        print(f"entries: {n:,}  parallelism: {args.parallelism}  savepoint: {size / 2**20:.1f} MiB  "
              f"arrow ipc: {os.path.getsize(ipc_path) / 2**20:.1f} MiB")
        print(f"{'':24}{'statekit':>14}{'pyarrow':>14}{'ratio':>8}")
        for label, ours, base in (
            ("write (entries/s)", write_s, base_write_s),
            ("read decoded (entries/s)", read_s, base_read_s),
            ("read columnar (entries/s)", read_cols_s, base_read_cols_s),
        ):
            print(f"{label:24}{n / ours:>14,.0f}{n / base:>14,.0f}{ours / base:>7.1f}x")
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
