"""The asynchronous part of one window operator subtask's checkpoint, against pyarrow.

What a subtask of bench/window_bench.py writes at a checkpoint: the window contents
(``(key, window) -> count``, value state) and the window timers (``(key, window) ->
{(domain, timestamp): True}``, map state), ``--pairs`` (key, window) pairs over ``--windows``
live windows, every key of a window sharing its namespace and timer objects as the runtime's
tables do. statekit's step is the backend's: the rows of both tables split into columns
(``namespaced_columns``) and written as two state files (``write_keyed_rows``: encode, sort
by key group, blocks, fsync). The baseline is pyarrow building the same rows into Arrow
tables (key, window start, window end, value; plus the timer for the timers) and writing
them as Arrow IPC files. Each step runs ``--repeat`` times, alternating, and the best of
each counts; times are CPU seconds of this process (steadier than wall time on a shared
machine; the baseline does no fsync).

Usage: python bench/window_snapshot_bench.py [--pairs 18000] [--windows 2] [--repeat 7]
"""

from __future__ import annotations

import argparse
import gc
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any


def window_tables(pairs: int, windows: int) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """Contents and timers of ``pairs`` (key, window) pairs spread over ``windows`` windows."""
    contents: dict[Any, Any] = {}
    timers: dict[Any, Any] = {}
    per_window = pairs // windows
    for w in range(windows):
        namespace = (5_000 + 1_000 * w, 6_000 + 1_000 * w)
        timer = (0, namespace[1] - 1)
        for i in range(per_window):
            pair = (f"key-{(i * 7919 + w) % 10_000}", namespace)
            contents[pair] = 1 + i % 50
            timers[pair] = {timer: True}
    return contents, timers


def best_cpu(step: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.process_time()
        step()
        times.append(time.process_time() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=18_000)
    parser.add_argument("--windows", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    import pyarrow as pa
    import pyarrow.ipc

    from statekit.runtime.checkpoint.storage import SnapshotOutput
    from statekit.runtime.operators.windows.timers import WINDOW_TIMERS
    from statekit.runtime.operators.windows.window_operator import window_contents
    from statekit.runtime.state.backend import SubtaskScope, write_keyed_rows
    from statekit.runtime.state.backend_hashmap import namespaced_columns
    from statekit.statefmt.fileio import FileIO
    from statekit.statefmt.keygroups import compute_key_group_range_for_operator_index

    contents, timers = window_tables(args.pairs, args.windows)
    tables = [(window_contents("aggregate").to_metadata(), contents), (WINDOW_TIMERS.to_metadata(), timers)]
    scope = SubtaskScope("windows", 0, 1, 128, "msgpack", compute_key_group_range_for_operator_index(128, 1, 0))
    work = tempfile.mkdtemp(prefix="statekit-window-snapshot-bench-")
    try:
        io, directory = FileIO.for_path(work)
        location = SnapshotOutput(io, directory)

        def statekit_write() -> None:
            for descriptor, data in tables:
                write_keyed_rows(location, scope, descriptor, namespaced_columns(descriptor.kind, data))

        def baseline_write() -> None:
            for name, data in (("contents", contents), ("timers", timers)):
                keys = [key for key, _ in data]
                starts = [namespace[0] for _, namespace in data]
                ends = [namespace[1] for _, namespace in data]
                columns: dict[str, Any] = {"key": pa.array(keys, pa.string()), "start": pa.array(starts, pa.int64()),
                                           "end": pa.array(ends, pa.int64())}
                if name == "timers":
                    timer = [next(iter(entries)) for entries in data.values()]
                    columns["timer"] = pa.array([t[1] for t in timer], pa.int64())
                    columns["value"] = pa.array([True] * len(timer), pa.bool_())
                else:
                    columns["value"] = pa.array(list(data.values()), pa.int64())
                table = pa.table(columns)
                with pa.OSFile(f"{work}/{name}.arrow", "wb") as sink, pyarrow.ipc.new_file(sink, table.schema) as out:
                    out.write_table(table)

        statekit_write()  # one-time costs of the process (kernel registry, first use of each path)
        baseline_write()
        ours, theirs = [], []
        for _ in range(args.repeat):  # alternating: both sides see the same moments of the machine
            ours.append(best_cpu(statekit_write, 1))
            theirs.append(best_cpu(baseline_write, 1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"window snapshot bench: {args.pairs:,} (key, window) pairs over {args.windows} windows, "
          f"contents and timers, best of {args.repeat} (CPU seconds)")
    print(f"  statekit, both state files            {min(ours) * 1000:8.1f} ms")
    print(f"  pyarrow, the same rows as Arrow IPC   {min(theirs) * 1000:8.1f} ms")
    print(f"  statekit / pyarrow                    {min(ours) / min(theirs):8.2f}x")


if __name__ == "__main__":
    main()
