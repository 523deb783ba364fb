"""Windowed word counts: words per tumbling event-time window, written exactly once.

Input lines (UTF-8 text files of ``--input DIR``) are ``EPOCH_MS<TAB>TEXT``; the line's
epoch milliseconds are the event time of its words (lower-cased runs of letters, the
tokenizer of examples/wordcount.py). Watermarks trail the highest timestamp read by
``--out-of-orderness``; every tumbling window of ``--window`` fires once the watermark
passes its end and writes one line ``WINDOW_START_MS<TAB>WORD<TAB>COUNT`` per word through
the exactly-once file sink to ``--output DIR`` (again for records that arrive within
``--allowed-lateness``, with the updated count). A line whose window was already dropped
(later than watermark + lateness) goes, as it was read, to ``--late-output DIR`` if given.
With ``--watch`` the job keeps reading new files and appended lines of ``--input`` (an
unbounded job: stop it with ``statekit stop``, with ``--drain`` to fire every window).

Window contents and timers are keyed state of the operator ``windows``; the source's
offsets and watermark state are operator state of ``source``. Operator uids: ``source``,
``windows``, ``sink`` (and ``late-sink`` with ``--late-output``).

Run it::

    statekit run -p 2 --checkpoint-dir /tmp/chk --checkpoint-interval 1s examples/windowed_counts.py \\
        --input events/ --output counts/ --window 10s --out-of-orderness 2s
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable
from typing import Any

from statekit.runtime import (
    AggregateFunction,
    FileSink,
    FileSource,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    OutputTag,
    ProcessWindowFunction,
    Source,
    SourceReader,
    SourceReaderContext,
    TumblingEventTimeWindows,
    WatermarkStrategy,
    get_execution_environment,
    parse_duration,
)
from statekit.statefmt.errors import BadInputError

WORD = re.compile(r"[^\W\d_]+")
LATE = OutputTag("late-lines")

# A record: (word, event time ms, the original line, whether it is the line's first word).
Record = tuple[str, int, str, bool]


def records_of(line: str) -> list[Record]:
    """The words of one ``EPOCH_MS<TAB>TEXT`` line as records."""
    stamp, tab, text = line.partition("\t")
    if not tab or not stamp.strip().lstrip("-").isdigit():
        raise BadInputError(f"input line {line[:60]!r}: expected EPOCH_MS<TAB>TEXT")
    timestamp = int(stamp)
    words = WORD.findall(text.lower())
    return [(word, timestamp, line, i == 0) for i, word in enumerate(words)]


class WordRecords(Source):
    """The words of the lines of a FileSource (whose offsets stay the source's state)."""

    def __init__(self, directory: str, *, watch: bool = False) -> None:
        self.files = FileSource(directory, watch=watch)

    @property
    def bounded(self) -> bool:
        return self.files.bounded

    def create_reader(self, ctx: SourceReaderContext) -> SourceReader:
        return _WordReader(self.files.create_reader(ctx))


class _WordReader(SourceReader):
    def __init__(self, lines: SourceReader) -> None:
        self.lines = lines
        self.idle_wait_s = lines.idle_wait_s

    def initialize_state(self, ctx: FunctionInitializationContext) -> None:
        self.lines.initialize_state(ctx)

    def poll(self, max_records: int) -> tuple[list[Any], bool]:
        lines, ended = self.lines.poll(max_records)
        return [record for line in lines for record in records_of(line)], ended

    def snapshot_state(self, ctx: FunctionSnapshotContext) -> None:
        self.lines.snapshot_state(ctx)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.lines.notify_checkpoint_complete(checkpoint_id)

    def close(self) -> None:
        self.lines.close()


class CountRecords(AggregateFunction):
    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Record, accumulator: int) -> int:
        return accumulator + 1

    def get_result(self, accumulator: int) -> int:
        return accumulator

    def merge(self, a: int, b: int) -> int:
        return a + b


class WindowLine(ProcessWindowFunction):
    """``WINDOW_START_MS<TAB>WORD<TAB>COUNT`` of a fired window."""

    def process(self, key: str, context: Any, elements: Iterable[int], out: Any) -> None:
        for count in elements:
            out.collect(f"{context.window().start}\t{key}\t{count}")


class LateLines(FileSink):
    """Writes each late line once (as its first word's record)."""

    def __call__(self, record: Record) -> None:
        if record[3]:
            super().__call__(record)


def original_line(record: Record) -> str:
    return record[2]


def event_time(record: Record, previous: int | None) -> int:
    return record[1]


def _duration(text: str) -> int:
    return parse_duration(text, minimum=0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="directory of EPOCH_MS<TAB>TEXT files")
    parser.add_argument("--output", required=True, help="directory for WINDOW_START_MS<TAB>WORD<TAB>COUNT part files")
    parser.add_argument("--window", default="10s", type=_duration, help="window size (default 10s)")
    parser.add_argument("--out-of-orderness", default="2s", type=_duration,
                        help="how far behind the latest timestamp records may be (default 2s)")
    parser.add_argument("--allowed-lateness", default="0s", type=_duration,
                        help="how long windows are kept after they fired (default 0s)")
    parser.add_argument("--late-output", help="directory for lines later than watermark + lateness")
    parser.add_argument("--watch", action="store_true",
                        help="keep reading new files and appended lines (the job runs until stopped)")
    args = parser.parse_args(argv)
    if args.window <= 0:
        parser.error(f"--window must be positive, got {args.window} ms")

    env = get_execution_environment()
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(args.out_of_orderness).with_timestamp_assigner(event_time)
    windowed = (
        env.from_source(WordRecords(args.input, watch=args.watch), "lines", strategy).uid("source")
        .key_by(lambda record: record[0])
        .window(TumblingEventTimeWindows.of(args.window))
        .allowed_lateness(args.allowed_lateness)
    )
    if args.late_output:
        windowed = windowed.side_output_late_data(LATE)
    counts = windowed.aggregate(CountRecords(), WindowLine(), "count words").uid("windows")
    counts.sink_to(FileSink(args.output), "window counts").uid("sink")
    if args.late_output:
        counts.get_side_output(LATE).sink_to(LateLines(args.late_output, encoder=original_line), "late lines").uid("late-sink")
    env.execute("windowed_counts")


if __name__ == "__main__":
    main()
