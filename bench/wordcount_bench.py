"""``examples/wordcount.py`` end to end, as a user runs it: ``statekit run -p P`` on TaskManager
processes and on threads, 1 s checkpoints, the exactly-once file sink.

The input: ``--files`` text files of ``--words`` words in all (default 8 files, 4.8M words, the
figures of the issue that asked for TaskManager processes), lines of 12 words drawn from a
vocabulary of ``--vocabulary`` letter-only words with a Zipf-like skew (seeded: the same bytes
every run); generated once into ``--workdir`` and reused. Each run is ``python -m
statekit.cli.main run -p P --executor E --checkpoint-dir D --checkpoint-interval 1s
examples/wordcount.py --input IN --output OUT`` in a fresh process with its own job registry,
timed from its start to its exit (start-up, deployment and teardown included: what a user
waits for), ``--repeat`` times interleaved; the best run of each counts. Every run's committed
output is checked against the word counts computed here in plain Python (each word's last
count is its true total; not timed), and no TaskManager may be left behind.

Printed per executor and parallelism: seconds, words/s and the speed-up over parallelism 1 on
the same executor.

Usage: python bench/wordcount_bench.py [--words 4800000] [--files 8] [--parallelism 1,2]
                                       [--executors processes,threads] [--repeat 3]
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import shutil
import string
import tempfile
from pathlib import Path

from startup_bench import timed_statekit_run
from timed_children import use_bytecode_caches

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "examples" / "wordcount.py"
WORDS_PER_LINE = 12


def vocabulary(size: int) -> list[str]:
    """``size`` distinct lower-case words of letters only (what wordcount's tokenizer keeps whole)."""
    words = []
    for i in range(size):
        word, n = "", i
        while True:
            word = string.ascii_lowercase[n % 26] + word
            n = n // 26 - 1
            if n < 0:
                break
        words.append(word + "s")
    return words


def generate(directory: Path, files: int, words: int, size: int) -> collections.Counter[str]:
    """Write the input files (once) and return every word's true count."""
    vocab = vocabulary(size)
    weights = [1 / (rank + 1) for rank in range(size)]
    rng = random.Random(7919)
    truth: collections.Counter[str] = collections.Counter()
    marker = directory / ".complete"
    write = not marker.exists()
    if write:
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
    per_file = words // files
    for number in range(files):
        drawn = rng.choices(vocab, weights, k=per_file + (words % files if number == files - 1 else 0))
        truth.update(drawn)
        if write:
            lines = (" ".join(drawn[i:i + WORDS_PER_LINE]) for i in range(0, len(drawn), WORDS_PER_LINE))
            (directory / f"part-{number:02d}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if write:
        marker.touch()
    return truth


def committed_counts(output: Path) -> dict[str, int]:
    """Each word's highest count in the committed part files (no pending or in-progress file)."""
    names = os.listdir(output)
    hidden = [name for name in names if name.startswith(".")]
    if hidden:
        raise SystemExit(f"{output}: pending or in-progress files are visible: {hidden[:3]}")
    counts: dict[str, int] = {}
    for name in names:
        for line in (output / name).read_text(encoding="utf-8").splitlines():
            word, count = line.split("\t")
            if int(count) > counts.get(word, 0):
                counts[word] = int(count)
    return counts


def run_once(executor: str, parallelism: int, texts: Path, truth: collections.Counter[str]) -> float:
    """Seconds from ``statekit run``'s start to its exit; it must exit 0, count right, leave nothing."""
    work = Path(tempfile.mkdtemp(prefix="statekit-wordcount-bench-"))
    try:
        output = work / "out"
        seconds = timed_statekit_run(f"{executor} p={parallelism}", [
            "-p", str(parallelism), "--executor", executor, "--checkpoint-dir", str(work / "chk"),
            "--checkpoint-interval", "1s", str(JOB), "--input", str(texts), "--output", str(output)],
            str(work / "home"), timeout=900)
        counts = committed_counts(output)
        if counts != dict(truth):
            wrong = [w for w in truth if counts.get(w) != truth[w]]
            raise SystemExit(f"{executor} p={parallelism}: {len(wrong)} words miscounted, e.g. "
                             f"{[(w, counts.get(w), truth[w]) for w in wrong[:3]]}")
        return seconds
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--words", type=int, default=4_800_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--vocabulary", type=int, default=50_000)
    parser.add_argument("--parallelism", default="1,2", help="comma-separated")
    parser.add_argument("--executors", default="processes,threads", help="comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "statekit-wordcount-bench")
    args = parser.parse_args()
    use_bytecode_caches()
    texts = args.workdir / f"texts-{args.files}x{args.words}-{args.vocabulary}"
    truth = generate(texts, args.files, args.words, args.vocabulary)
    size = sum(p.stat().st_size for p in texts.glob("*.txt"))
    parallelisms = [int(p) for p in args.parallelism.split(",")]
    executors = args.executors.split(",")
    best: dict[tuple[str, int], float] = {}
    for _ in range(args.repeat):
        for executor in executors:
            for p in parallelisms:
                seconds = run_once(executor, p, texts, truth)
                best[executor, p] = min(seconds, best.get((executor, p), seconds))
    print(f"wordcount bench: {args.words:,} words ({len(truth):,} distinct) in {args.files} files, "
          f"{size / 1e6:.1f} MB; 1 s checkpoints, exactly-once file sink; {os.cpu_count()} cores; "
          f"best of {args.repeat}; load average {[round(x, 1) for x in os.getloadavg()]}")
    print(f"  {'executor':<11}{'p':>3}{'seconds':>10}{'words/s':>12}{'x p=1':>8}")
    for executor in executors:
        for p in parallelisms:
            seconds = best[executor, p]
            base = best.get((executor, parallelisms[0]), seconds)
            print(f"  {executor:<11}{p:>3}{seconds:>10.2f}{args.words / seconds:>12,.0f}{base / seconds:>7.2f}x")


if __name__ == "__main__":
    main()
