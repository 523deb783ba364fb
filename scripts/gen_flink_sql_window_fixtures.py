#!/usr/bin/env python3
"""Generate tests/golden/flink-sql-window-2.3/ with real Apache Flink 2.3: window TVF aggregates.

    scripts/install_pyflink.sh 2.3.0          # once: PyFlink into .venv-flink
    python3 scripts/gen_flink_sql_window_fixtures.py [--only VARIANT] [--keep-work] [--dest DIR]

Runs scripts/flink_sql_window_fixture_job.py (TUMBLE, HOP and CUMULATE aggregates over the event
times BASE + n s, n = 0..N-1, see its docstring) on the local MiniCluster once per state backend
and copies its savepoints into DEST/<variant>/ with facts.json and expected.json, and the job's
compiled plan into DEST/plan.json (the same for every variant). expected.json holds what the
window operators keep at the savepoint, computed here in plain Python from the input rows (not
read back with statekit) by the slicing rules of Flink's window aggregate
(``SliceAssigners``, ``Slice{Unshared,Shared}SyncStateWindowAggProcessor``):

* every row goes to the slice ending at the next multiple of the slice size (tumble: the size;
  hop: gcd(size, slide); cumulate: the step) after its event time; the slice's accumulator is
  state ``window-aggs`` under the namespace = the slice end (epoch ms), and an event-time timer
  at slice end - 1 under the same namespace;
* a window ending at W fires once the watermark reaches W - 1; tumble then drops its slice;
  hop drops the window's first slice (W - size + slide) and, when the window held rows, sets a
  timer for the next window (W + slide); cumulate merges slice W into the window's first slice
  (which holds the running accumulator), drops slice W unless it is the first one (and the
  first one too at the window's last step), and sets a timer for the next step;
* the watermark stops at BASE + (N - 1 - 5) s: the last row's time less the 5 s delay (no window
  ends within a second of it, so the watermark's exact timing does not matter).
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "scripts" / "flink_sql_window_fixture_job.py"
N, BASE, DELAY = 600, 1700000040000, 5000  # flink_sql_window_fixture_job: rows, first event time, watermark delay
WATERMARK = BASE + (N - 1) * 1000 - DELAY
ADD_OPENS = " ".join(f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in (
    "java.lang", "java.util", "java.nio", "sun.nio.ch", "java.lang.reflect", "java.io", "java.net",
    "java.text", "java.time", "java.util.concurrent", "java.util.concurrent.atomic"))
VARIANTS = {"hashmap": ("hashmap", "canonical"), "rocksdb": ("rocksdb", "native,canonical")}
MINUTE = 60_000
# query -> (operator name in the job graph, uid from the compiled plan, window, sizes in ms)
WINDOWS: dict[str, dict[str, Any]] = {
    "tumble": {"name": "WindowAggregate[6]", "uid": "6_window-aggregate", "size": MINUTE},
    "hop": {"name": "WindowAggregate[9]", "uid": "9_window-aggregate", "size": 3 * MINUTE, "slide": MINUTE},
    "cumulate": {"name": "WindowAggregate[12]", "uid": "12_window-aggregate", "max_size": 4 * MINUTE, "step": MINUTE},
}
ACCUMULATORS = ["cnt", "total", "max_amount", "min_tag"]  # COUNT(*), SUM(n), MAX(amount), MIN(tag)

# ----------------------------------------------------------------------------- the truth


def row(n: int) -> dict[str, Any]:
    return {"n": n, "ts": BASE + n * 1000, "user_id": f"u{n % 5}", "amount": n / 4, "tag": f"t{n}"}


def _empty() -> dict[str, Any]:
    return {"cnt": 0, "total": None, "max_amount": None, "min_tag": None}


def _merge(acc: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    def pick(f: Any, a: Any, b: Any) -> Any:
        return b if a is None else a if b is None else f(a, b)
    return {"cnt": acc["cnt"] + other["cnt"], "total": pick(lambda a, b: a + b, acc["total"], other["total"]),
            "max_amount": pick(max, acc["max_amount"], other["max_amount"]),
            "min_tag": pick(min, acc["min_tag"], other["min_tag"])}


def _of_row(r: dict[str, Any]) -> dict[str, Any]:
    return {"cnt": 1, "total": r["n"], "max_amount": r["amount"], "min_tag": r["tag"]}


def _slice(window: dict[str, Any]) -> int:
    return int(window.get("size") if "slide" not in window and "step" not in window
               else (window["step"] if "step" in window else _gcd(window["size"], window["slide"])))


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def window_state(window: dict[str, Any], rows: list[dict[str, Any]]) -> tuple[dict[int, dict[str, Any]], set[int]]:
    """One key's slice accumulators and timer namespaces (window ends) left at the watermark."""
    size = _slice(window)
    state: dict[int, dict[str, Any]] = {}
    for r in rows:
        end = r["ts"] - r["ts"] % size + size
        state[end] = _merge(state.get(end, _empty()), _of_row(r))
    timers = set(state)  # each slice's first flush registers its timer (no row is late)
    while timers and min(timers) - 1 <= WATERMARK:
        w = min(timers)
        timers.discard(w)
        if "slide" in window:  # hop: the window is the slices w - size + slice .. w
            merged = _empty()
            for s in range(w - window["size"] + size, w + 1, size):
                merged = _merge(merged, state.get(s, _empty()))
            if merged["cnt"]:
                timers.add(w + size)
            state.pop(w - window["size"] + size, None)
        elif "step" in window:  # cumulate: the running accumulator lives in the first slice
            start = (w - 1) - (w - 1) % window["max_size"]
            first, last = start + size, start + window["max_size"]
            if w != first:
                state[first] = _merge(state.get(first, _empty()), state.get(w, _empty()))
                state.pop(w, None)
            if w == last:
                state.pop(first, None)
            elif w + size <= last:
                timers.add(w + size)
        else:
            state.pop(w, None)
    return state, timers


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + "Z"


def expected() -> dict[str, Any]:
    rows = [row(n) for n in range(N)]
    users = sorted({r["user_id"] for r in rows})
    operators = {}
    for query, window in WINDOWS.items():
        slices, timers = [], []
        for user in users:
            state, open_timers = window_state(window, [r for r in rows if r["user_id"] == user])
            slices += [{"key": {"user_id": user}, "slice_end": end, "slice_end_time": _iso(end), "acc": acc}
                       for end, acc in sorted(state.items())]
            timers += [{"key": {"user_id": user}, "window_end": end, "timestamp": end - 1} for end in sorted(open_timers)]
        operators[query] = {**window, "slice": _slice(window), "key": ["user_id"], "accumulators": ACCUMULATORS,
                            "slices": slices, "event_timers": timers}
    return {"input": f"n = 0..{N - 1}: ts = {BASE} + n * 1000 ms, user_id = u(n % 5), amount = n / 4, tag = tn",
            "watermark": WATERMARK, "operators": operators}


# ----------------------------------------------------------------------------- running, copying


def _local(url: str) -> Path:
    return Path(url.removeprefix("file://") if url.startswith("file://") else url.removeprefix("file:"))


def run_job(venv: Path, work: Path, backend: str, plan: str) -> dict[str, Any]:
    env = dict(os.environ)
    env["JAVA_TOOL_OPTIONS"] = (env.get("JAVA_TOOL_OPTIONS", "") + " " + ADD_OPENS).strip()
    done = subprocess.run([str(venv / "bin" / "python"), str(JOB), str(work), backend, plan],
                          cwd=work, env=env, capture_output=True, text=True, timeout=600)
    facts = [line for line in done.stdout.splitlines() if line.startswith("FIXTURE ")]
    if done.returncode != 0 or not facts:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"the Flink SQL window job failed (exit {done.returncode})")
    return dict(json.loads(facts[-1][len("FIXTURE "):]))


def copy_variant(variant: str, facts: dict[str, Any], work: Path, dest: Path, seconds: float) -> None:
    target = dest / variant
    if target.exists():
        shutil.rmtree(target)
    savepoints = {}
    for kind, url in dict(facts["savepoints"]).items():
        source = _local(str(url))
        shutil.copytree(source, target / "savepoints" / source.name)
        savepoints[kind] = f"savepoints/{source.name}"
    info = {"flink": "2.3.0", "job_id": facts["job_id"], "backend": VARIANTS[variant][0], "savepoints": savepoints,
            "generation_seconds": round(seconds)}
    (target / "facts.json").write_text(json.dumps(info, indent=2) + "\n")
    (target / "expected.json").write_text(json.dumps(expected(), indent=1) + "\n")
    plan = json.loads((work / "plan.json").read_text())
    (dest / "plan.json").write_text(json.dumps(plan, indent=1) + "\n")
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    print(f"{variant}: {size / 1024:.0f} KiB in {seconds:.0f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", choices=sorted(VARIANTS))
    parser.add_argument("--keep-work", action="store_true", help="keep the /tmp work directories")
    parser.add_argument("--dest", type=Path, default=ROOT / "tests" / "golden" / "flink-sql-window-2.3")
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv-flink")
    parser.add_argument("--print-expected", action="store_true", help="print expected.json and exit")
    args = parser.parse_args()
    if args.print_expected:
        print(json.dumps(expected(), indent=1))
        return
    if not (args.venv / "bin" / "python").exists():
        raise SystemExit(f"{args.venv} is missing: run scripts/install_pyflink.sh 2.3.0")
    for variant in args.only or VARIANTS:
        backend, plan = VARIANTS[variant]
        work = Path(tempfile.mkdtemp(prefix="statekit-flink-sql-window-"))
        started = time.monotonic()
        try:
            facts = run_job(args.venv, work, backend, plan)
            copy_variant(variant, facts, work, args.dest, time.monotonic() - started)
        finally:
            if not args.keep_work:
                shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
