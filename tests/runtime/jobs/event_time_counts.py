"""An unbounded event-time job for the dashboard tests: keyed counts per tumbling window.

Each source subtask emits ``(key, now)`` records (``--rate`` per second); watermarks trail by
50 ms; windows of ``--window`` ms count records per key; the sink discards. Runs until stopped.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from statekit.runtime import (
    ProcessWindowFunction,
    Source,
    SourceReader,
    SourceReaderContext,
    TumblingEventTimeWindows,
    WatermarkStrategy,
    get_execution_environment,
)


class _Reader(SourceReader):
    idle_wait_s = 0.02

    def __init__(self, ctx: SourceReaderContext, rate: int) -> None:
        self.subtask = ctx.subtask
        self.interval = 1.0 / max(1, rate)
        self.next = time.monotonic()

    def poll(self, max_records: int) -> tuple[list[Any], bool]:
        now = time.monotonic()
        if now < self.next:
            return [], False
        count = min(max_records, 1 + int((now - self.next) / self.interval))
        self.next += count * self.interval
        stamp = int(time.time() * 1000)
        return [(f"k{(self.subtask + i) % 8}", stamp) for i in range(count)], False


class Ticking(Source):
    def __init__(self, rate: int) -> None:
        self.rate = rate

    @property
    def bounded(self) -> bool:
        return False

    def create_reader(self, ctx: SourceReaderContext) -> SourceReader:
        return _Reader(ctx, self.rate)


class Count(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: Any, out: Any) -> None:
        out.collect((key, context.window().start, sum(1 for _ in elements)))


def at(value: Any, previous: int | None) -> int:
    return int(value[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--window", type=int, default=500)
    args = parser.parse_args()
    env = get_execution_environment()
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(50).with_timestamp_assigner(at).with_idleness(1000)
    (env.from_source(Ticking(args.rate), "ticking", strategy).uid("source")
        .key_by(lambda v: v[0]).window(TumblingEventTimeWindows.of(args.window)).process(Count(), "count").uid("windows")
        .sink_to(lambda v: None, "discard").uid("sink"))
    env.execute("event-time counts")


if __name__ == "__main__":
    main()
