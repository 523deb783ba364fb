"""The runtime bench's job as a job file (TaskManager processes import it): a keyed running count.

``keyed_count.py --events N --keys K [--interval-ms MS] [--backend hashmap|rocksdb] [--latency FILE]``:
a collection source of ``key-<(i * 7919) % K>`` for ``i < N``, a keyed process function keeping
the running count in ValueState (``count``, declared ``int``), a discarding sink. With
``--latency FILE`` the events carry their creation time and the sink appends each record's
end-to-end latency in ms to FILE (the buffer-timeout bench; a rate-limited source then).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from statekit.runtime import (
    DiscardingSink,
    KeyedProcessFunction,
    RuntimeContext,
    SinkFunction,
    Source,
    SourceReader,
    SourceReaderContext,
    ValueStateDescriptor,
    get_execution_environment,
)


class RunningCount(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", "int"))

    def process_element(self, value: Any, ctx: Any, out: Any) -> None:
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        out.collect((value, count))


class _Paced(SourceReader):
    """``rate`` events a second for this subtask: ``(key, created_ms)``."""

    def __init__(self, ctx: SourceReaderContext, events: int, keys: int, rate: float) -> None:
        self.i, self.step, self.events, self.keys, self.rate = ctx.subtask, ctx.parallelism, events, keys, rate
        self.started, self.sent, self.idle_wait_s = time.monotonic(), 0, 0.0005

    def poll(self, max_records: int) -> tuple[list[Any], bool]:
        if self.i >= self.events:
            return [], True
        due = min(max_records, int((time.monotonic() - self.started) * self.rate) - self.sent)
        out = []
        now = int(time.time() * 1000)
        while due > 0 and self.i < self.events:
            out.append((f"key-{(self.i * 7919) % self.keys}", now))
            self.i += self.step
            due -= 1
        self.sent += len(out)
        return out, False


class Paced(Source):
    def __init__(self, events: int, keys: int, rate: float) -> None:
        self.events, self.keys, self.rate = events, keys, rate

    def create_reader(self, ctx: SourceReaderContext) -> SourceReader:
        return _Paced(ctx, self.events, self.keys, self.rate / ctx.parallelism)


class Latencies(SinkFunction):
    def __init__(self, path: str) -> None:
        self.path = path

    def open(self, ctx: RuntimeContext) -> None:
        self.seen: list[int] = []

    def invoke(self, value: Any) -> None:
        self.seen.append(int(time.time() * 1000) - value[0][1])

    def close(self) -> None:
        with open(self.path, "a") as out:
            out.write("".join(f"{ms}\n" for ms in self.seen))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--interval-ms", type=int, default=0)
    parser.add_argument("--backend", default="hashmap")
    parser.add_argument("--checkpoints")
    parser.add_argument("--latency", help="append per-record latencies (ms) here; the source is paced by --rate")
    parser.add_argument("--rate", type=float, default=10_000, help="events/s of the paced source (all subtasks)")
    args = parser.parse_args()
    env = get_execution_environment().set_state_backend(args.backend)
    if args.interval_ms:
        env.enable_checkpointing(args.interval_ms, checkpoint_storage=args.checkpoints)
    if args.latency:
        (env.from_source(Paced(args.events, args.keys, args.rate), "events").uid("events")
            .key_by(lambda event: event[0])
            .process(RunningCount(), "running count").uid("counter")
            .sink_to(Latencies(args.latency), "latencies").uid("sink"))
    else:
        events = [f"key-{(i * 7919) % args.keys}" for i in range(args.events)]
        (env.from_collection(events, "events").uid("events")
            .key_by(lambda key: key)
            .process(RunningCount(), "running count").uid("counter")
            .sink_to(DiscardingSink(), "discard").uid("sink"))
    env.execute("runtime bench")


if __name__ == "__main__":
    main()
