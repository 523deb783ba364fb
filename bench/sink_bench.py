"""Throughput of the exactly-once PostgresSink against one COPY in one transaction.

The same rows ``(word text, count bigint)`` go into PostgreSQL twice, into two fresh tables
of one server, in one process:

* the floor: one ``COPY ... FROM STDIN`` in one transaction (psycopg ``write_row``), committed;
* the sink: a job ``from_collection(rows) -> PostgresSink`` with a checkpoint every
  ``--interval-ms`` (each one a ``PREPARE TRANSACTION`` per subtask, committed with
  ``COMMIT PREPARED`` on completion), timed from submission to the end of the job (its final
  checkpoint committed).

Each is run ``--repeat`` times, alternating, into fresh tables; the best run of each is
compared (the machine is shared: the best run is the least disturbed one). Printed as rows/s
and the sink's throughput as a ratio of the floor's (goal >= 0.5x). Every table is counted
afterwards, so a run that lost or duplicated rows fails.

Without ``--dsn`` a throwaway PostgreSQL server is started (``tests/runtime/postgres_server.py``:
initdb into a temporary directory, 127.0.0.1, a free port, ``fsync`` on).

Usage: python bench/sink_bench.py [--rows 1000000] [--parallelism 1] [--interval-ms 1000] [--repeat 3]
                                  [--dsn DSN]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

COLUMNS = {"word": "text", "count": "bigint"}


def make_rows(n: int) -> list[tuple[str, int]]:
    return [(f"word-{(i * 7919) % 100_000}", i) for i in range(n)]


def copy_floor(dsn: str, table: str, rows: list[tuple[str, int]]) -> float:
    """Seconds for one COPY of ``rows`` in one committed transaction."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        conn.execute(f"CREATE TABLE {table} (word text, count bigint)")
        conn.commit()
        start = time.perf_counter()
        with conn.cursor().copy(f"COPY {table} (word, count) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        conn.commit()
        return time.perf_counter() - start


def sink_job(dsn: str, table: str, rows: list[tuple[str, int]], parallelism: int,
             interval_ms: int) -> tuple[float, int]:
    """Seconds for the job writing ``rows`` through PostgresSink, and its completed checkpoints."""
    import shutil
    import tempfile

    from statekit.runtime.connectors.postgres_sink import PostgresSink
    from statekit.runtime.dataflow.environment import StreamEnvironment

    work = tempfile.mkdtemp(prefix="statekit-sink-bench-")
    try:
        env = StreamEnvironment().set_parallelism(parallelism)
        env.enable_checkpointing(interval_ms, checkpoint_storage=work)
        (env.from_collection(rows, "rows").uid("rows")
            .sink_to(PostgresSink(dsn, table, COLUMNS, create_table=True), "postgres").uid("sink"))
        start = time.perf_counter()
        handle = env.execute_async("sink bench")
        handle.wait()
        elapsed = time.perf_counter() - start
        if handle.failure:
            raise SystemExit(f"the sink job failed: {handle.failure}")
        return elapsed, int(handle.checkpoint_stats()["counts"]["completed"])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def count(dsn: str, table: str) -> int:
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute(f"SELECT count(*), count(DISTINCT count) FROM {table}").fetchone()
        assert row is not None
        if row[0] != row[1]:
            raise SystemExit(f"{table}: {row[0]} rows but {row[1]} distinct counts: duplicates")
        return int(row[0])


def throwaway_server() -> Any:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "runtime"))
    from postgres_server import MISSING_BINARIES, PostgresServer, find_postgres_bin

    bin_dir = find_postgres_bin()
    if bin_dir is None:
        raise SystemExit(MISSING_BINARIES)
    server = PostgresServer(bin_dir, settings={"fsync": "on"})
    server.start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--parallelism", type=int, default=1)
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dsn", help="an empty database (default: a throwaway server)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)

    server = None if args.dsn else throwaway_server()
    dsn = args.dsn if server is None else server.create_database("sink_bench")
    floors: list[float] = []
    sinks: list[tuple[float, int]] = []
    try:
        rows = make_rows(args.rows)
        for run in range(args.repeat):
            floors.append(copy_floor(dsn, f"bench_copy_{run}", rows))
            sinks.append(sink_job(dsn, f"bench_sink_{run}", rows, args.parallelism, args.interval_ms))
            for table in (f"bench_copy_{run}", f"bench_sink_{run}"):
                if count(dsn, table) != args.rows:
                    raise SystemExit(f"{table}: {count(dsn, table):,} rows, expected {args.rows:,}")
    finally:
        if server is not None:
            server.close()
    n = args.rows
    floor_s, (sink_s, completed) = min(floors), min(sinks)
    print(f"sink bench: {n:,} rows (word text, count bigint), parallelism {args.parallelism}, "
          f"best of {args.repeat} runs each")
    print(f"  one COPY in one transaction (floor)     {n / floor_s:>12,.0f} rows/s  ({floor_s:.2f} s; runs: "
          f"{', '.join(f'{s:.2f}' for s in floors)} s)")
    print(f"  PostgresSink, checkpoint every {args.interval_ms} ms  {n / sink_s:>12,.0f} rows/s  ({sink_s:.2f} s, "
          f"{completed} checkpoints incl. the final one; runs: {', '.join(f'{s:.2f}' for s, _ in sinks)} s)")
    print(f"  sink / floor                            {floor_s / sink_s:>12.2f}x  (goal >= 0.5x)")


if __name__ == "__main__":
    main()
