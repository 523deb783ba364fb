"""A job whose map holds the interpreter lock in C for a few seconds once, for the heartbeat tests.

``gil_hold.py --output DIR --held FILE [--hold-s S]``

The map, at record 5, runs one regular-expression match that backtracks for about ``S`` seconds
(``re`` keeps the interpreter lock for a whole match, so no other thread of its process runs
meanwhile; the pattern's size is calibrated on this machine first) and writes the seconds it
held to FILE. Every record ``n`` of ``0..19`` is written as ``n * 10`` by the exactly-once
file sink.
"""

from __future__ import annotations

import argparse
import math
import re
import time

from statekit.runtime import FileSink, get_execution_environment

_BACKTRACKS = re.compile(r"(a|aa)+$")  # 'a' * n + 'b' takes about 1.618 ** n steps, lock held


def hold_interpreter_lock(seconds: float) -> float:
    """Run one match that takes about ``seconds`` seconds; the seconds it took."""
    probe = 24
    started = time.thread_time()  # CPU time: a loaded machine does not shorten the hold
    _BACKTRACKS.match("a" * probe + "b")
    unit = max(time.thread_time() - started, 1e-4)
    n = min(60, probe + max(1, math.ceil(math.log(seconds / unit) / math.log((1 + 5 ** 0.5) / 2))))
    started = time.perf_counter()
    _BACKTRACKS.match("a" * n + "b")
    return time.perf_counter() - started


class Hold:
    def __init__(self, seconds: float, held: str) -> None:
        self.seconds, self.held = seconds, held

    def __call__(self, n: int) -> int:
        if n == 5:
            took = hold_interpreter_lock(self.seconds)
            with open(self.held, "w") as out:
                out.write(f"{took:.3f}\n")
        return n * 10


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", required=True)
    parser.add_argument("--held", required=True)
    parser.add_argument("--hold-s", type=float, default=3.0)
    args = parser.parse_args()
    env = get_execution_environment()
    (env.from_collection(list(range(20))).uid("numbers")
     .rebalance().map(Hold(args.hold_s, args.held)).uid("hold")
     .sink_to(FileSink(args.output, encoder=str), "files").uid("sink"))
    env.execute("gil-hold")


if __name__ == "__main__":
    main()
