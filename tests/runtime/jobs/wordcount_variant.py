"""examples/wordcount.py with one change, chosen by ``--variant`` (restore-compatibility tests).

Variants (each the change a user makes between a savepoint and a restore):

* ``same``: unchanged;
* ``renamed-uid``: the counter's uid is ``counter-v2``;
* ``removed-operator``: no counter (words go straight to the sink);
* ``added-state``: the counter also keeps ValueState ``first-seen`` (string);
* ``float-count`` / ``string-count``: ``count`` declared ``float`` (compatible after migration) /
  ``string`` (incompatible);
* ``struct-count``: ``count`` declared ``struct<n:int>`` (incompatible: int -> struct);
* ``list-count``: ``count`` is ListState (kind changed);
* ``json-serializer``: ``count`` written with the json serializer;
* ``string-keys``: words keyed with the ``utf8`` key serializer;
* ``max-parallelism-256``: the counter's max parallelism set to 256.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from statekit.runtime import (
    FileSink,
    FileSource,
    KeyedProcessFunction,
    ListStateDescriptor,
    RuntimeContext,
    ValueStateDescriptor,
    get_execution_environment,
)

WORD = re.compile(r"[^\W\d_]+")
VARIANTS = ("same", "renamed-uid", "removed-operator", "added-state", "float-count", "string-count",
            "struct-count", "list-count", "json-serializer", "string-keys", "max-parallelism-256")


class CountWords(KeyedProcessFunction):
    """Counts each word; the declared state depends on the variant."""

    def __init__(self, variant: str) -> None:
        self.variant = variant

    def open(self, ctx: RuntimeContext) -> None:
        v = self.variant
        if v == "list-count":
            self.counts = ctx.get_list_state(ListStateDescriptor("count", "int"))
            return
        declared = {"float-count": "float", "string-count": "string", "struct-count": "struct<n:int>"}.get(v, "int")
        serializer = "json" if v == "json-serializer" else "msgpack"
        self.count = ctx.get_state(ValueStateDescriptor("count", declared, serializer=serializer))
        if v == "added-state":
            self.first = ctx.get_state(ValueStateDescriptor("first-seen", "string"))

    def process_element(self, value: str, ctx: Any, out: Any) -> None:
        if self.variant == "list-count":
            self.counts.add(1)
            out.collect((value, len(self.counts.get())))
            return
        if self.variant == "float-count":
            previous = self.count.value()
            assert previous is None or isinstance(previous, float), f"restored {previous!r} is not a float"
            count: Any = (previous or 0.0) + 1.0
        else:
            count = (self.count.value() or 0) + 1
        self.count.update(count)
        out.collect((value, count))


def encode(pair: tuple[str, Any]) -> str:
    return f"{pair[0]}\t{pair[1]}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--variant", choices=VARIANTS, default="same")
    args = parser.parse_args(argv)
    v = args.variant

    env = get_execution_environment()
    words = (
        env.from_source(FileSource(args.input), "files").uid("source")
        .flat_map(lambda line: WORD.findall(line.lower()), "tokenize").uid("tokenize")
    )
    if v != "removed-operator":
        keyed = words.key_by(lambda word: word, key_serializer="utf8" if v == "string-keys" else "msgpack")
        counted = keyed.process(CountWords(v), "count words").uid("counter-v2" if v == "renamed-uid" else "counter")
        if v == "max-parallelism-256":
            counted.set_max_parallelism(256)
        words = counted
    words.sink_to(FileSink(args.output, encoder=encode if v != "removed-operator" else str), "word counts").uid("sink")
    env.execute(f"wordcount {v}")


if __name__ == "__main__":
    main()
