"""A keyed running sum over numbers, for tests of the TaskManager processes.

``numbers.py --count N --output DIR [--rate R] [--keys K] [--crash exit|segfault|raise --crash-at I
--marker PATH] [--slow-sink S] [--latency FILE] [--uid-from-pid]``

Each source subtask emits its share of ``0..N-1`` as ``(n, created_ms)`` (``--rate``: records per
second per subtask; 0: as fast as it can). A map may crash the process once at ``n == crash-at``
(guarded by ``--marker``); ``n`` is keyed by ``n % K``; a keyed process function keeps the running
sum of its key and emits ``(key, sum, created_ms)``; the exactly-once file sink writes
``key<TAB>sum`` lines (the largest sum of a key is its total). ``--latency FILE``: the sink
appends each record's end-to-end latency in ms (not exactly-once; for timing tests).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import time
from typing import Any

from statekit.runtime import (
    FileSink,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    ListStateDescriptor,
    RuntimeContext,
    SinkFunction,
    Source,
    SourceReader,
    SourceReaderContext,
    ValueStateDescriptor,
    get_execution_environment,
)

SPLITS = ListStateDescriptor("splits", value_type="struct<next:int,end:int>")


class _Reader(SourceReader):
    """Emits its splits of ``0..count-1`` in order (``rate`` per second); the splits are even-split
    list state, so the source restores at any parallelism."""

    def __init__(self, ctx: SourceReaderContext, count: int, rate: float) -> None:
        self.ctx, self.count, self.rate = ctx, count, rate
        self.splits: list[list[int]] = []
        self.started = time.monotonic()
        self.emitted = 0
        self.idle_wait_s = 0.002

    def initialize_state(self, ctx: FunctionInitializationContext) -> None:
        self.state = ctx.operator_state_store.get_list_state(SPLITS)
        if ctx.is_restored():
            self.splits = [[int(s["next"]), int(s["end"])] for s in self.state.get()]
            return
        per, extra = divmod(self.count, self.ctx.parallelism)
        start = self.ctx.subtask * per + min(self.ctx.subtask, extra)
        end = start + per + (1 if self.ctx.subtask < extra else 0) - 1
        self.splits = [[start, end]] if start <= end else []

    def poll(self, max_records: int) -> tuple[list[Any], bool]:
        while self.splits and self.splits[0][0] > self.splits[0][1]:
            self.splits.pop(0)
        if not self.splits:
            return [], True
        budget = max_records
        if self.rate:
            budget = min(budget, int((time.monotonic() - self.started) * self.rate) - self.emitted)
            if budget <= 0:
                return [], False
        split = self.splits[0]
        stop = min(split[1], split[0] + budget - 1)
        now = int(time.time() * 1000)
        out = [(n, now) for n in range(split[0], stop + 1)]
        split[0] = stop + 1
        self.emitted += len(out)
        return out, False

    def snapshot_state(self, ctx: FunctionSnapshotContext) -> None:
        self.state.update([{"next": s[0], "end": s[1]} for s in self.splits if s[0] <= s[1]])


class Numbers(Source):
    def __init__(self, count: int, rate: float) -> None:
        self.count, self.rate = count, rate

    def create_reader(self, ctx: SourceReaderContext) -> SourceReader:
        return _Reader(ctx, self.count, self.rate)


class Crash:
    def __init__(self, how: str | None, at: int, marker: str | None) -> None:
        self.how, self.at, self.marker = how, at, marker

    def __call__(self, record: tuple[int, int]) -> tuple[int, int]:
        if self.how and record[0] == self.at and self.marker and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            if self.how == "exit":
                os._exit(7)
            if self.how == "segfault":
                ctypes.string_at(0)
            raise RuntimeError(f"crash at {record[0]}")
        return record


class RunningSum(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.sum = ctx.get_state(ValueStateDescriptor("sum", "int"))

    def process_element(self, value: tuple[int, int], ctx: Any, out: Any) -> None:
        total = (self.sum.value() or 0) + value[0]
        self.sum.update(total)
        out.collect((ctx.get_current_key(), total, value[1]))


class Latency(SinkFunction):
    def __init__(self, path: str, slow_s: float) -> None:
        self.path, self.slow_s = path, slow_s

    def open(self, ctx: RuntimeContext) -> None:
        self.out = open(self.path, "a")  # noqa: SIM115 - closed in close()

    def invoke(self, value: Any) -> None:
        if self.slow_s:
            time.sleep(self.slow_s)
        self.out.write(f"{int(time.time() * 1000) - value[2]}\n")
        self.out.flush()

    def close(self) -> None:
        self.out.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=0.0)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--output")
    parser.add_argument("--latency")
    parser.add_argument("--slow-sink", type=float, default=0.0)
    parser.add_argument("--crash", choices=("exit", "segfault", "raise"))
    parser.add_argument("--crash-at", type=int, default=-1)
    parser.add_argument("--marker")
    parser.add_argument("--uid-from-pid", action="store_true")
    args = parser.parse_args()

    env = get_execution_environment()
    keys = args.keys
    summed = (env.from_source(Numbers(args.count, args.rate), "numbers").uid("numbers")
              .map(Crash(args.crash, args.crash_at, args.marker)).uid(f"crash-{os.getpid()}" if args.uid_from_pid else "crash")
              .key_by(lambda record: record[0] % keys)
              .process(RunningSum(), "sum").uid("sum"))
    if args.output:
        summed.map(lambda r: (r[0], r[1])).uid("pairs").sink_to(
            FileSink(args.output, encoder=lambda p: f"{p[0]}\t{p[1]}"), "files").uid("sink")
    if args.latency:
        summed.sink_to(Latency(args.latency, args.slow_sink), "latency").uid("latency")
    env.execute("numbers")


if __name__ == "__main__":
    main()
