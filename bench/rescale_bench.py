"""Rescale benchmark: ``statekit rescale`` against ``cp -r`` of the same savepoint, same run.

    .venv/bin/python bench/rescale_bench.py [--entries 5000000] [--workdir DIR] [--keep]

Steps (each a child process, its peak RSS read from ``os.wait4``):

1. write Parquet input (``--entries`` rows: a string key and a string value), then build a
   savepoint of one keyed value state at parallelism 4, max parallelism 128, with
   ``statekit bootstrap`` (streaming, so generation is bounded too);
2. the same at a tenth of the size (memory must stay flat as the savepoint grows 10x);
3. per size: ``cp -r`` of the savepoint (the baseline), ``rescale -p 6`` (whole-block
   copy), ``rescale --max-parallelism 1024 -p 6`` (a multiple of 128: key groups split,
   rows stay in order) and ``rescale --max-parallelism 1000 -p 6`` (general: full re-sort);
   each output is checked with ``statekit verify`` (not timed); ``statekit start`` is a
   child that only imports what rescale imports (the fixed cost in every rescale figure);
4. ``statekit diff`` of the savepoint and its copy at max parallelism 1000 against
   ``statekit verify`` of both (target: diff <= 3x the verifies, <= 300 MB).

Prints one table and a JSON line with every figure. Targets: ``rescale -p`` <= 1.5x cp -r,
``--max-parallelism`` <= 10x cp -r, peak RSS <= 300 MB at both sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from timed_children import use_bytecode_caches

STATEKIT = [sys.executable, "-m", "statekit.cli.main"]


def run(argv: list[str]) -> tuple[float, int]:
    """Run a child; return (wall seconds, its own peak RSS in MB). Fails loudly on a non-zero exit.

    ``os.wait4`` reports the rusage of exactly this child (RUSAGE_CHILDREN would be the
    maximum over every child so far)."""
    started = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - started
    stderr = child.stderr.read().decode() if child.stderr else ""
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({child.returncode}): {stderr.strip()}")
    return elapsed, usage.ru_maxrss // 1024


def du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def write_input(directory: str, entries: int, rows_per_file: int = 1_000_000) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(directory)
    for start in range(0, entries, rows_per_file):
        stop = min(entries, start + rows_per_file)
        keys = pa.array([f"user-{i:010d}" for i in range(start, stop)])
        values = pa.array([f"session-{i * 7919 % 1000003:08d}-payload" for i in range(start, stop)])
        pq.write_table(pa.table({"key": keys, "value": values}), os.path.join(directory, f"part-{start:010d}.parquet"))


def build(workdir: str, entries: int) -> dict[str, Any]:
    inputs = os.path.join(workdir, f"input-{entries}")
    savepoint = os.path.join(workdir, f"savepoint-{entries}")
    # in a child: this process stays small, so children forked from it start small too
    run([sys.executable, __file__, "--write-input", inputs, "--entries", str(entries)])
    seconds, rss = run([*STATEKIT, "bootstrap", "--input", inputs, "--uid", "sessions", "--state", "last",
                        "--key-column", "key", "--value-column", "value", "-p", "4", "--max-parallelism", "128",
                        "-o", savepoint])
    shutil.rmtree(inputs)
    return {"path": savepoint, "entries": entries, "bytes": du(savepoint), "bootstrap_s": seconds,
            "bootstrap_rss_mb": rss}


def measure(workdir: str, savepoint: str, label: str, argv: list[str], verify: bool = True) -> dict[str, Any]:
    out = os.path.join(workdir, f"out-{label}")
    shutil.rmtree(out, ignore_errors=True)
    os.sync()  # no case pays for the writeback of what an earlier step wrote (the savepoint's build)
    seconds, rss = run([arg.replace("{OUT}", out).replace("{SRC}", savepoint) for arg in argv])
    if verify:
        run([*STATEKIT, "verify", out])
    shutil.rmtree(out, ignore_errors=True)  # the import-only case writes nothing
    return {"seconds": seconds, "rss_mb": rss}


def bench_size(workdir: str, entries: int, repeat: int) -> dict[str, Any]:
    info = build(workdir, entries)
    src = info["path"]
    cases = {
        "cp -r": ["cp", "-r", "{SRC}", "{OUT}"],
        "statekit start (imports only)": [sys.executable, "-c", "import pyarrow, statekit.cli.main, statekit.writers.rescale"],
        "cp -r + sync": ["sh", "-c", 'cp -r "$0" "$1" && sync -f "$1"', "{SRC}", "{OUT}"],
        "rescale -p 6": [*STATEKIT, "rescale", "{SRC}", "-p", "6", "-o", "{OUT}"],
        "rescale --max-parallelism 1024 -p 6": [*STATEKIT, "rescale", "{SRC}", "--max-parallelism", "1024",
                                                "-p", "6", "-o", "{OUT}"],
        "rescale --max-parallelism 1000 -p 6": [*STATEKIT, "rescale", "{SRC}", "--max-parallelism", "1000",
                                                "-p", "6", "-o", "{OUT}"],
    }
    results: dict[str, Any] = {}
    for label, argv in cases.items():
        runs = [measure(workdir, src, str(i), argv, verify=label.startswith("rescale")) for i in range(repeat)]
        results[label] = min(runs, key=lambda r: r["seconds"])
    results.update(diff_across_max_parallelism(workdir, src))
    baseline = results["cp -r"]["seconds"]
    for r in results.values():
        r["ratio_to_cp"] = r["seconds"] / baseline
    shutil.rmtree(src)
    return {**info, "results": results}


def diff_across_max_parallelism(workdir: str, src: str) -> dict[str, Any]:
    """``statekit diff`` of the savepoint and its copy at max parallelism 1000 (equal
    entries, every key group different) against ``verify`` of both (ratios to cp -r are
    not meaningful here: compare the diff with the verifies)."""
    other = os.path.join(workdir, "copy-m1000")
    run([*STATEKIT, "rescale", src, "--max-parallelism", "1000", "-o", other])
    results = {}
    for label, argv in (("verify both (savepoint, copy at M=1000)", ["sh", "-c", " ".join(STATEKIT) + ' verify "$0" && '
                                                                    + " ".join(STATEKIT) + ' verify "$1"', src, other]),
                        ("diff savepoint vs copy at M=1000", [*STATEKIT, "diff", src, other])):
        seconds, rss = run(argv)
        results[label] = {"seconds": seconds, "rss_mb": rss}
    shutil.rmtree(other)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=5_000_000)
    parser.add_argument("--workdir", default=None, help="Scratch directory (default: a new temp dir).")
    parser.add_argument("--repeat", type=int, default=2, help="Runs per case; the fastest counts.")
    parser.add_argument("--write-input", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    use_bytecode_caches()
    if args.write_input:
        write_input(args.write_input, args.entries)
        return
    workdir = args.workdir or tempfile.mkdtemp(prefix="statekit-rescale-bench-")
    os.makedirs(workdir, exist_ok=True)
    try:
        sizes = [bench_size(workdir, max(1, args.entries // 10), args.repeat), bench_size(workdir, args.entries, args.repeat)]
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    for size in sizes:
        print(f"\nsavepoint: {size['entries']:,} entries, {size['bytes'] / 1e6:.0f} MB "
              f"(bootstrap {size['bootstrap_s']:.1f} s, peak RSS {size['bootstrap_rss_mb']} MB)")
        print(f"  {'case':<40} {'seconds':>8} {'x cp -r':>8} {'peak RSS MB':>12}")
        for label, r in size["results"].items():
            print(f"  {label:<40} {r['seconds']:>8.2f} {r['ratio_to_cp']:>8.2f} {r['rss_mb']:>12}")
    print(json.dumps({"sizes": sizes}))


if __name__ == "__main__":
    main()
