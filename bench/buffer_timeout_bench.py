"""The buffer timeout's trade-off on TaskManager processes: throughput against latency.

For each ``--timeouts`` value (ms) the keyed running count of ``bench/jobs/keyed_count.py`` runs at
parallelism 2 on TaskManager processes twice:

* unpaced (``--events`` events as fast as they go, checkpoints every 1 s): events/s from every task
  deployed to the end — the throughput the timeout leaves;
* paced at ``--rate`` events/s for ``--seconds``: every record's end-to-end latency (source to sink,
  across processes), p50, p99 and max.

The baseline of the ratios is the largest throughput measured in the same run. ``--svg PATH`` also
draws the two curves (docs/buffer-timeout.svg).

Usage: python bench/buffer_timeout_bench.py [--timeouts 0,1,10,100] [--events 1000000] [--rate 10000]
                                            [--seconds 5] [--repeat 2] [--svg docs/buffer-timeout.svg]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from runtime_bench import JOB, run_keyed_count


@dataclass(frozen=True)
class Point:
    timeout_ms: int
    events_per_s: float
    p50_ms: int
    p99_ms: int
    max_ms: int


def latencies(timeout_ms: int, rate: float, seconds: float) -> list[int]:
    """Per-record latencies (ms) of the paced job at ``rate`` events/s."""
    from statekit.runtime import RunOptions, run_job_file

    work = tempfile.mkdtemp(prefix="statekit-buffer-timeout-")
    try:
        path = os.path.join(work, "latency")
        events = int(rate * seconds)
        run_job_file(JOB, RunOptions(parallelism=2, executor="processes", buffer_timeout_ms=timeout_ms,
                                     latency_interval_ms=0,
                                     job_args=("--events", str(events), "--keys", "1000", "--latency", path,
                                               "--rate", str(rate))))
        with open(path) as measured:
            values = sorted(int(line) for line in measured)
        assert len(values) == events, (len(values), events)
        return values
    finally:
        shutil.rmtree(work, ignore_errors=True)


def quantile(ordered: list[int], q: float) -> int:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def throughput(events: int, timeout_ms: int, repeat: int) -> float:
    """Events/s of the unpaced job with 1 s checkpoints (the best of ``repeat`` runs)."""
    best = min(run_keyed_count(events, 100_000, 2, 1000, executor="processes", buffer_timeout_ms=timeout_ms).seconds
               for _ in range(repeat))
    return events / best


def svg(points: list[Point], best: float) -> str:
    """Throughput (bars, share of the best) and p99 latency (dots, log scale) per timeout."""
    import math

    width, height, left, top, plot_h = 640, 360, 70, 50, 230
    slot = (width - left - 70) / len(points)
    top_ms = max(p.p99_ms for p in points) or 1
    log_top = math.log10(max(10, top_ms * 1.5))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="Helvetica, Arial, sans-serif">', '<rect width="100%" height="100%" fill="#fff"/>',
             '<text x="20" y="28" font-size="15" font-weight="bold">Buffer timeout: throughput (bars) and p99 '
             'latency (dots), 2 TaskManagers</text>']
    base = top + plot_h
    parts.append(f'<line x1="{left}" y1="{base}" x2="{width - 60}" y2="{base}" stroke="#444"/>')
    for i, point in enumerate(points):
        x = left + i * slot + slot * 0.2
        share = point.events_per_s / best
        h = plot_h * share
        parts.append(f'<rect x="{x:.0f}" y="{base - h:.0f}" width="{slot * 0.6:.0f}" height="{h:.0f}" fill="#8ab4f8"/>')
        parts.append(f'<text x="{x + slot * 0.3:.0f}" y="{base - h - 6:.0f}" font-size="11" text-anchor="middle">'
                     f'{point.events_per_s / 1000:,.0f}k/s</text>')
        y = base - plot_h * math.log10(max(1, point.p99_ms)) / log_top
        parts.append(f'<circle cx="{x + slot * 0.3:.0f}" cy="{y:.0f}" r="5" fill="#c5221f"/>')
        parts.append(f'<text x="{x + slot * 0.3 + 9:.0f}" y="{y + 4:.0f}" font-size="11" fill="#c5221f">'
                     f'{point.p99_ms} ms</text>')
        parts.append(f'<text x="{x + slot * 0.3:.0f}" y="{base + 18}" font-size="12" text-anchor="middle">'
                     f'{point.timeout_ms} ms</text>')
    parts.append(f'<text x="{(left + width - 60) / 2:.0f}" y="{base + 40}" font-size="12" text-anchor="middle">'
                 '--buffer-timeout</text>')
    parts.append(f'<text x="20" y="{height - 12}" font-size="11" fill="#555">bars: events/s unpaced (share of the '
                 'best); dots: p99 end-to-end latency at the paced rate (log scale)</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timeouts", default="0,1,10,100")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=10_000)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--svg")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    points = []
    for timeout in (int(t) for t in args.timeouts.split(",")):
        rate = throughput(args.events, timeout, args.repeat)
        values = latencies(timeout, args.rate, args.seconds)
        points.append(Point(timeout, rate, quantile(values, 0.5), quantile(values, 0.99), values[-1]))
    best = max(p.events_per_s for p in points)
    print(f"buffer timeout bench: keyed running count, parallelism 2 on 2 TaskManagers; throughput of "
          f"{args.events:,} unpaced events (1 s checkpoints, best of {args.repeat}); latency at "
          f"{args.rate:,.0f} events/s for {args.seconds:g} s")
    print(f"  {'timeout':>9}{'events/s':>12}{'x best':>8}{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}")
    for p in points:
        print(f"  {p.timeout_ms:>7} ms{p.events_per_s:>12,.0f}{p.events_per_s / best:>7.2f}x{p.p50_ms:>8}"
              f"{p.p99_ms:>8}{p.max_ms:>8}")
    if args.svg:
        with open(args.svg, "w") as out:
            out.write(svg(points, best))
        print(f"  chart: {args.svg}")


if __name__ == "__main__":
    main()
