"""Word count into PostgreSQL: one row per update, written exactly once.

The job of ``examples/wordcount.py`` (uids ``source``, ``tokenize``, ``counter``, ``sink``:
the same tokenizer and the same running count, imported from it) with a
:class:`~statekit.runtime.connectors.postgres_sink.PostgresSink` instead of the file sink: every
update becomes one row ``(word text, count bigint)`` of ``--table`` (created if missing),
committed by two-phase commit when its checkpoint completes. After any number of crashes
and restores each word has exactly the rows 1..N. Needs ``statekit[postgres]`` and a
server with ``max_prepared_transactions`` > 0. With ``--watch`` the job keeps reading new
files and appended lines (it runs until stopped).

Run it::

    statekit run [-p N] [-s SNAPSHOT] --checkpoint-dir /tmp/chk --checkpoint-interval 1s \\
        examples/wordcount_postgres.py --input texts/ --dsn "host=127.0.0.1 dbname=demo" [--table word_counts] \\
        [--watch]
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from types import ModuleType

from statekit.runtime import FileSource, PostgresSink, get_execution_environment

COLUMNS = {"word": "text", "count": "bigint"}


def wordcount() -> ModuleType:
    """``examples/wordcount.py`` beside this file (job scripts run by path, not as a package)."""
    path = Path(__file__).with_name("wordcount.py")
    spec = importlib.util.spec_from_file_location("statekit_example_wordcount", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="directory of UTF-8 text files")
    parser.add_argument("--dsn", required=True, help="libpq connection string or postgresql:// URL")
    parser.add_argument("--table", default="word_counts", help="target table (default: word_counts)")
    parser.add_argument("--watch", action="store_true",
                        help="keep reading new files and appended lines (the job runs until stopped)")
    args = parser.parse_args(argv)
    wc = wordcount()

    env = get_execution_environment()
    (
        env.from_source(FileSource(args.input, watch=args.watch), "files").uid("source")
        .flat_map(wc.tokenize, "tokenize").uid("tokenize")
        .key_by(lambda word: word)
        .process(wc.CountWords(), "count words").uid("counter")
        .sink_to(PostgresSink(args.dsn, args.table, COLUMNS, create_table=True), "word counts").uid("sink")
    )
    env.execute("wordcount-postgres")


if __name__ == "__main__":
    main()
