"""Two trees of statekit side by side on command-line figures, in one sitting.

    git archive REV statefmt readers writers flink runtime spark cli bench | tar -x -C DIR/statekit
    python bench/ab_cli.py DIR_A DIR_B --savepoint SAVEPOINT [--rounds 5]

Each round times, for tree A then tree B (``PYTHONPATH=DIR``, cwd ``/``), children that:
import what ``rescale`` imports; run ``statekit --help``; ``statekit inspect SAVEPOINT``;
``statekit rescale SAVEPOINT -p 6``; and ``cp -r`` of the savepoint (the baseline of the
rescale, the same for both trees). Medians and bests of the rounds are printed, with the
ratio B / A. Alternating the trees is what makes their figures comparable on a machine whose
speed drifts from minute to minute. A savepoint: ``bench/rescale_bench.py --keep`` builds one.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable


def timed(tree: str, argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env={"PYTHONPATH": tree, "PATH": "/usr/bin:/bin"}, cwd="/",
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tree_a")
    parser.add_argument("tree_b")
    parser.add_argument("--savepoint", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    python, savepoint = sys.executable, args.savepoint
    statekit = [python, "-m", "statekit.cli.main"]
    work = tempfile.mkdtemp(prefix="statekit-ab-cli-")
    out = f"{work}/out"

    def fresh(argv: list[str]) -> Callable[[str], float]:
        def run(tree: str) -> float:
            shutil.rmtree(out, ignore_errors=True)
            return timed(tree, argv)
        return run

    cases: dict[str, Callable[[str], float]] = {
        "imports of rescale": fresh([python, "-c", "import pyarrow, statekit.cli.main, statekit.writers.rescale"]),
        "statekit --help": fresh([*statekit, "--help"]),
        "statekit inspect": fresh([*statekit, "inspect", savepoint]),
        "statekit rescale -p 6": fresh([*statekit, "rescale", savepoint, "-p", "6", "-o", out]),
        "cp -r (baseline)": fresh(["cp", "-r", savepoint, out]),
    }
    times: dict[str, dict[str, list[float]]] = {case: {"a": [], "b": []} for case in cases}
    try:
        for _ in range(args.rounds):
            for case, run in cases.items():
                times[case]["a"].append(run(args.tree_a))
                times[case]["b"].append(run(args.tree_b))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"A = {args.tree_a}, B = {args.tree_b}, {args.rounds} rounds, seconds (median / best)")
    for case, by_tree in times.items():
        a, b = statistics.median(by_tree["a"]), statistics.median(by_tree["b"])
        print(f"  {case:24s} A {a:6.3f} / {min(by_tree['a']):6.3f}   B {b:6.3f} / {min(by_tree['b']):6.3f}"
              f"   B/A {b / a:5.2f}")


if __name__ == "__main__":
    main()
