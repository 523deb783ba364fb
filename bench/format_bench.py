"""Write and read a savepoint of N keyed entries; compare with pyarrow on the same rows.

Printed as entries/s and as ratios against baselines run in the same process:
  * write: pyarrow building an Arrow table from the same Python rows and writing it as
    Arrow IPC (the floor for "Python rows to a columnar file");
  * read (decoded): pyarrow reading that IPC file back into Python rows; statekit once as
    entry tuples (``read_keyed_state``) and once as columns of Python values
    (``read_keyed_columns``, what the baseline builds);
  * read (columnar): pyarrow reading that IPC file as Arrow batches.

Both sides first write and read a small file untimed, so one-time costs of the process
(pyarrow.compute's kernel registry, first use of each code path) stay out of per-entry
figures. Then ``--repeat`` rounds (default 3) each run every step of both sides once, in
turn, and the best time of each step is printed: the first use of fresh memory in a
process (page faults of the allocators' first large blocks, 0.1–0.2 s of a 0.5–0.7 s write at
1M entries) falls on whichever step runs first, which with one round was always statekit's
write (``--repeat 1`` gives that single round). ``--value-type none`` declares no value
type: values are msgpack blobs (format version 1's encoding of every value).

``--clock cpu`` times CPU seconds of this process instead of wall-clock seconds: on a
machine shared with other work it is the steadier figure (it leaves out time spent waiting
for the CPU, and also statekit's fsyncs, which the baseline does not do).

Usage: python bench/format_bench.py [--entries 1000000] [--parallelism 2] [--value-type int|none]
                                    [--repeat 3] [--clock wall|cpu] [--dir DIR]
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCKS["wall"]


def timed(func: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds ``func`` took, and its result. A full collection first, so neither side pays
    for the garbage collector's traversal of objects allocated before its step (the 1M
    Python rows): that cost depends on which step happens to run first."""
    gc.collect()
    start = clock()
    result = func()
    return clock() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--value-type", default="int", help="declared value type; none: msgpack values")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of every step; the best of each is printed")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="cpu: this process's CPU time (on a shared machine; leaves out waits such as fsync)")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    global clock
    clock = CLOCKS[args.clock]

    import pyarrow as pa
    import pyarrow.ipc as ipc

    from statekit.readers.savepoint_reader import SavepointReader
    from statekit.statefmt.metadata import StateDescriptor, StateKind
    from statekit.writers.savepoint_writer import SavepointWriter

    n = args.entries
    work = args.dir or tempfile.mkdtemp(prefix="statekit-format-bench-")
    os.makedirs(work, exist_ok=True)
    rows = [(f"key-{i:08d}", i) for i in range(n)]
    value_type = None if args.value_type == "none" else args.value_type
    descriptor = StateDescriptor("count", StateKind.VALUE, value_type=value_type)
    try:
        def write(path: str, rows: list[tuple[str, int]]) -> None:
            SavepointWriter.new_savepoint(128).with_operator(
                "counter", {descriptor: rows}, parallelism=args.parallelism).write(path)

        def baseline_write(path: str, rows: list[tuple[str, int]]) -> None:
            table = pa.table({"key": [r[0] for r in rows], "value": [r[1] for r in rows]})
            with ipc.new_file(path, table.schema) as writer:
                writer.write_table(table)

        def read_entries(path: str) -> int:
            return sum(1 for _ in SavepointReader.read(path).read_keyed_state("counter", "count"))

        def read_columns(path: str) -> int:
            return sum(sum(1 for _ in zip(c["key"], c["value"]))
                       for c in SavepointReader.read(path).read_keyed_columns("counter", "count"))

        def baseline_read_rows(path: str) -> int:
            table = ipc.open_file(path).read_all()
            keys, values = table.column("key").to_pylist(), table.column("value").to_pylist()
            return sum(1 for _ in zip(keys, values))

        warm_rows = rows[:1000]
        warm, warm_ipc = os.path.join(work, "warm"), os.path.join(work, "warm.arrow")
        write(warm, warm_rows)
        baseline_write(warm_ipc, warm_rows)
        read_entries(warm), read_columns(warm), baseline_read_rows(warm_ipc)

        ipc_path = os.path.join(work, "baseline.arrow")

        def one_round(savepoint: str) -> dict[str, float]:
            """Every step once, statekit's and pyarrow's in turn: seconds per step."""
            times: dict[str, float] = {}
            times["write"], _ = timed(lambda: write(savepoint, rows))
            times["base_write"], _ = timed(lambda: baseline_write(ipc_path, rows))
            times["read"], count = timed(lambda: read_entries(savepoint))
            assert count == n, (count, n)
            times["read_columns"], count = timed(lambda: read_columns(savepoint))
            assert count == n, (count, n)
            reader = SavepointReader.read(savepoint)
            times["read_batches"], count = timed(
                lambda: sum(b.num_rows for _, _, b in reader.read_keyed_batches("counter", "count"))
            )
            assert count == n, (count, n)
            times["base_read"], count = timed(lambda: baseline_read_rows(ipc_path))
            assert count == n, (count, n)
            times["base_read_batches"], _ = timed(lambda: ipc.open_file(ipc_path).read_all().num_rows)
            return times

        best: dict[str, float] = {}
        size = 0
        for round_ in range(args.repeat):
            savepoint = os.path.join(work, f"savepoint-{round_}")
            for step, seconds in one_round(savepoint).items():
                best[step] = min(best.get(step, seconds), seconds)
            size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(savepoint) for f in fs)
            shutil.rmtree(savepoint)

        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}  value type: {args.value_type}  "
              f"best of {args.repeat}  clock: {args.clock}")
        print(f"entries: {n:,}  parallelism: {args.parallelism}  savepoint: {size / 2**20:.1f} MiB  "
              f"arrow ipc: {os.path.getsize(ipc_path) / 2**20:.1f} MiB")
        print(f"{'':24}{'statekit':>14}{'pyarrow':>14}{'ratio':>8}")
        for label, ours, base in (
            ("write (entries/s)", "write", "base_write"),
            ("read decoded (entries/s)", "read", "base_read"),
            ("read decoded columns", "read_columns", "base_read"),
            ("read columnar (entries/s)", "read_batches", "base_read_batches"),
        ):
            print(f"{label:24}{n / best[ours]:>14,.0f}{n / best[base]:>14,.0f}{best[ours] / best[base]:>7.1f}x")
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
