"""Word count: the running count of every word, written exactly once.

Reads the UTF-8 text files of ``--input DIR``, lower-cases each line and splits it on
non-letters, keys by word, keeps a running count in keyed ValueState ``count`` (declared
type ``int``) under uid ``counter``, and writes ``word<TAB>count`` on every update through
the exactly-once file sink to ``--output DIR``. Operator uids: ``source``, ``tokenize``,
``counter``, ``sink``.

Run it::

    statekit run --checkpoint-dir /tmp/chk --checkpoint-interval 1s examples/wordcount.py \\
        --input texts/ --output counts/
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from typing import Any

from statekit.runtime import (
    FileSink,
    FileSource,
    KeyedProcessFunction,
    RuntimeContext,
    ValueStateDescriptor,
    get_execution_environment,
)

WORD = re.compile(r"[^\W\d_]+")


def tokenize(line: str) -> Iterator[str]:
    """Lower-case ``line`` and yield its runs of letters."""
    return iter(WORD.findall(line.lower()))


class CountWords(KeyedProcessFunction):
    """Counts the words of each key and emits (word, count) on every update."""

    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", "int"))

    def process_element(self, value: str, ctx: Any, out: Any) -> None:
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        out.collect((value, count))


def encode(pair: tuple[str, int]) -> str:
    return f"{pair[0]}\t{pair[1]}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="directory of UTF-8 text files")
    parser.add_argument("--output", required=True, help="directory for word<TAB>count part files")
    args = parser.parse_args(argv)

    env = get_execution_environment()
    (
        env.from_source(FileSource(args.input), "files").uid("source")
        .flat_map(tokenize, "tokenize").uid("tokenize")
        .key_by(lambda word: word)
        .process(CountWords(), "count words").uid("counter")
        .sink_to(FileSink(args.output, encoder=encode), "word counts").uid("sink")
    )
    env.execute("wordcount")


if __name__ == "__main__":
    main()
