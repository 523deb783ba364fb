"""The keyed running count on Bytewax 0.21 next to statekit's runtime, in one run.

Both count ``--events`` events over ``--keys`` keys (the event stream of
``bench/runtime_bench.py``) with 2 workers and a state snapshot every ``--interval-ms``:

* Bytewax: ``TestingSource`` (batches of 1024 events) -> ``stateful_map`` (a running count per key) ->
  ``DiscardingSink`` under ``cli_main(workers_per_process=2)``, epochs of the interval,
  recovery into SQLite partitions (``init_db_dir``; backup interval 0);
* statekit: the runtime bench's job (``bench/jobs/keyed_count.py``: ``KeyedProcessFunction`` with
  a ``ValueState``, hashmap backend) at parallelism 2 on TaskManager processes (``--executor``),
  checkpoints to a temporary directory at the same interval; timed from every task deployed to the
  end, as the runtime bench does.

Each is also run with snapshots off; printed: events/s both ways and the ratios.

Bytewax is an optional install (it is not a statekit dependency)::

    pip install 'bytewax==0.21.*'

without it the script prints statekit's figures, says what to install, and exits with
status 2.

Usage: python bench/peers/bytewax_bench.py [--events 1000000] [--keys 100000] [--interval-ms 1000]
                                          [--executor processes|threads]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

MISSING = "Bytewax is not installed: pip install 'bytewax==0.21.*' (optional peer, not a statekit dependency)"
WORKERS = 2
BATCH = 1024  # items a source poll emits (Bytewax's default of 1 would measure per-item scheduling)


def bytewax_run(events: list[str], interval_ms: int | None) -> float:
    import bytewax.operators as op
    from bytewax._bytewax import cli_main
    from bytewax.connectors.stdio import StdOutSink  # noqa: F401 - part of the install check
    from bytewax.dataflow import Dataflow
    from bytewax.recovery import RecoveryConfig, init_db_dir
    from bytewax.testing import TestingSource

    def count(state: int | None, _: str) -> tuple[int, int]:
        new = (state or 0) + 1
        return new, new

    flow = Dataflow("running_count")
    keyed = op.key_on("key", op.input("events", flow, TestingSource(events, batch_size=BATCH)), lambda e: e)
    counted = op.stateful_map("count", keyed, count)
    op.inspect("discard", counted, lambda *_: None)
    work = tempfile.mkdtemp(prefix="statekit-bytewax-peer-")
    try:
        options: dict[str, Any] = {"workers_per_process": WORKERS}
        if interval_ms:
            init_db_dir(work, WORKERS)
            options["epoch_interval"] = timedelta(milliseconds=interval_ms)
            options["recovery_config"] = RecoveryConfig(work, backup_interval=timedelta(0))
        start = time.perf_counter()
        cli_main(flow, **options)
        return time.perf_counter() - start
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--executor", default="processes", help="statekit's executor: processes or threads")
    args = parser.parse_args()
    from runtime_bench import run_keyed_count

    events = [f"key-{(i * 7919) % args.keys}" for i in range(args.events)]
    n = args.events
    ours_off = min(run_keyed_count(n, args.keys, WORKERS, None, executor=args.executor).seconds for _ in range(2))
    on = min((run_keyed_count(n, args.keys, WORKERS, args.interval_ms, executor=args.executor) for _ in range(2)),
             key=lambda r: r.seconds)
    ours_on, completed = on.seconds, on.checkpoints
    print(f"{n:,} events over {args.keys:,} keys, {WORKERS} workers, snapshots every {args.interval_ms} ms")
    print(f"{'':28}{'snapshots off':>16}{'snapshots on':>16}{'overhead':>10}")
    print(f"{f'statekit {args.executor} (events/s)':28}{n / ours_off:>16,.0f}{n / ours_on:>16,.0f}{ours_on / ours_off:>9.2f}x"
          f"   ({completed} checkpoints)")
    try:
        import bytewax  # noqa: F401 - only whether it is installed
    except ImportError:
        print(MISSING, file=sys.stderr)
        return 2
    peer_off = bytewax_run(events, None)
    peer_on = bytewax_run(events, args.interval_ms)
    print(f"{'bytewax 0.21 (events/s)':28}{n / peer_off:>16,.0f}{n / peer_on:>16,.0f}{peer_on / peer_off:>9.2f}x"
          "   (SQLite recovery)")
    print(f"{'statekit / bytewax time':28}{ours_off / peer_off:>15.2f}x{ours_on / peer_on:>15.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
