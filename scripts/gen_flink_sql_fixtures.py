#!/usr/bin/env python3
"""Generate tests/golden/flink-sql-2.3/ with real Apache Flink 2.3: a PyFlink SQL job's state.

    scripts/install_pyflink.sh 2.3.0          # once: PyFlink into .venv-flink
    python3 scripts/gen_flink_sql_fixtures.py [--only VARIANT] [--keep-work] [--dest DIR] [--plans-only]

Runs scripts/flink_sql_fixture_job.py (two group aggregates over the numbers 0..N-1, see its
docstring) on the local MiniCluster once per state backend and copies its savepoints into
DEST/<variant>/ (the hashmap run's retained heap checkpoint too) with facts.json and expected.json: every group's key and aggregates, computed
here in plain Python from the same input rows (not read back with statekit), and the
planner's accumulator layout of each GroupAggregate operator (``AVG`` is reduced to
``SUM``/``COUNT`` and shares the ``SUM`` and ``COUNT(*)`` already asked for). Each variant also
gets plan.json: the job's statements compiled by Flink (``COMPILE PLAN``, with the variant's
``table.exec.state.ttl``) over a ``datagen`` stand-in of the same schema for the DataStream
source, which compiled plans cannot hold (``--plans-only`` writes just these, leaving the
savepoints as they are).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "scripts" / "flink_sql_fixture_job.py"
N = 2000  # flink_sql_fixture_job.N
ADD_OPENS = " ".join(f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in (
    "java.lang", "java.util", "java.nio", "sun.nio.ch", "java.lang.reflect", "java.io", "java.net",
    "java.text", "java.time", "java.util.concurrent", "java.util.concurrent.atomic"))
# variant -> (backend, savepoints, keep the retained checkpoint: a heap checkpoint, table.exec.state.ttl)
VARIANTS = {"hashmap": ("hashmap", "canonical", True, "0 ms"), "rocksdb": ("rocksdb", "canonical,native", False, "0 ms"),
            "hashmap-ttl": ("hashmap", "canonical", False, "1 d")}
# The operators' names in the job graph (the planner numbers its nodes in plan order).
OPERATORS = {"by_user": "GroupAggregate[4]", "by_bucket": "GroupAggregate[9]", "last": "GroupAggregate[14]",
             "distincts": "GroupAggregate[19]"}

# ----------------------------------------------------------------------------- the input


def _iso_ms(epoch_ms: int) -> str:
    moment = datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=epoch_ms)
    return moment.isoformat(timespec="milliseconds")


def click(n: int) -> dict[str, Any]:
    """Row n of ``clicks``, as the job's view computes it (session time zone UTC)."""
    ts_ms = 1700000000000 + n * 1001
    ts6 = datetime.datetime(2024, 1, n % 28 + 1, 10, 0, 0, n)
    day = datetime.date(1970, 1, 1) + datetime.timedelta(days=(1700000000000 + n * 86400000) // 86400000)
    t_ms = n * 61000 % 86_400_000
    return {
        "user_id": f"u{n % 50}", "bucket": n % 7, "even": n % 2 == 0, "amount": n / 8,
        "price": Decimal(n % 1000) * Decimal("0.25"), "ts": _iso_ms(ts_ms), "ts6": ts6.isoformat(timespec="microseconds"),
        "day": day.isoformat(), "ratio": struct.unpack("f", struct.pack("f", n / 2))[0], "tiny": n % 100,
        "small": n % 300, "i": n, "ltz": 1600000000000 + n * 7,
        "tag": f"tag-{n}" if n % 3 == 0 else f"a-rather-long-tag-{n}",
        "t": (datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=t_ms)).time().isoformat(),
    }


def _wrap16(value: int) -> int:
    return (value + 2**15) % 2**16 - 2**15  # SUM of SMALLINT is a SMALLINT (Java overflow)


def by_user(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for user in sorted({r["user_id"] for r in rows}):
        group = [r for r in rows if r["user_id"] == user]
        total = sum(r["amount"] for r in group)
        out.append({"key": {"user_id": user}, "result": {
            "cnt": len(group), "total": total, "max_amount": max(r["amount"] for r in group),
            "avg_amount": total / len(group), "price_sum": str(sum(r["price"] for r in group)),
            "first_ts": min(r["ts"] for r in group), "last_ts6": max(r["ts6"] for r in group),
            "last_day": max(r["day"] for r in group)}})
    return out


def by_bucket(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for bucket, even in sorted({(r["bucket"], r["even"]) for r in rows}):
        group = [r for r in rows if (r["bucket"], r["even"]) == (bucket, even)]
        out.append({"key": {"bucket": bucket, "even": even}, "result": {
            "cnt": len(group), "min_ratio": min(r["ratio"] for r in group), "max_tiny": max(r["tiny"] for r in group),
            "sum_small": _wrap16(sum(r["small"] for r in group)), "sum_i": sum(r["i"] for r in group),
            "last_ltz": max(r["ltz"] for r in group), "min_tag": min(r["tag"] for r in group),
            "max_t": max(r["t"] for r in group)}})
    return out


def last(rows: list[dict[str, Any]], ns: range) -> list[dict[str, Any]]:
    out = []
    for k, a, b in sorted({(n % 3, n % 5, r["user_id"]) for n, r in zip(ns, rows)}):
        n = max(m for m, r in zip(ns, rows) if (m % 3, m % 5, r["user_id"]) == (k, a, b))  # input order
        out.append({"key": {"k": k, "a": a, "b": b}, "result": {
            "arr": {"lastValue": [n, n + 1], "lastOrder": LAST_ORDER},
            "m": {"lastValue": {"n": n}, "lastOrder": LAST_ORDER},
            "s": {"lastValue": str(n), "lastOrder": LAST_ORDER}}})
    return out


def _wrap8(value: int) -> int:
    return (value + 2**7) % 2**8 - 2**7  # SUM of TINYINT is a TINYINT (Java overflow)


def distincts(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """The groups, and the distinct-value map states: every distinct value of a group -> 1 (the
    bitmask of the distinct aggregates that saw it: one each here; no retraction, no counting)."""
    groups, views = [], {"distinctAcc_0": [], "distinctAcc_1": []}
    for bucket in sorted({r["bucket"] for r in rows}):
        group = [r for r in rows if r["bucket"] == bucket]
        users, tinies = sorted({r["user_id"] for r in group}), sorted({r["tiny"] for r in group})
        groups.append({"key": {"bucket": bucket}, "result": {
            "users": len(users), "tinies": _wrap8(sum(tinies)), "cnt": len(group), "users_view": None,
            "tinies_view": None}})
        views["distinctAcc_0"] += [{"key": {"bucket": bucket}, "user_key": u, "value": 1} for u in users]
        views["distinctAcc_1"] += [{"key": {"bucket": bucket}, "user_key": t, "value": 1} for t in tinies]
    return groups, views


LAST_ORDER = -(2**63)  # LastValueAggFunction's order field: Long.MIN_VALUE (no order column)
# The accumulator fields of each GroupAggregate (the planner's layout) and the result each holds.
ACCUMULATORS = {
    "by_user": ["cnt", "total", "max_amount", "price_sum", "first_ts", "last_ts6", "last_day"],
    "by_bucket": ["cnt", "min_ratio", "max_tiny", "sum_small", "sum_i", "last_ltz", "min_tag", "max_t"],
    "last": ["arr", "m", "s"],
    # the distinct aggregates, COUNT(*), then one data-view placeholder per distinct aggregate (null)
    "distincts": ["users", "tinies", "cnt", "users_view", "tinies_view"],
}


def expected() -> dict[str, Any]:
    rows = [click(n) for n in range(N)]
    distinct_groups, distinct_views = distincts(rows)
    return {"input": f"n = 0..{N - 1}, columns: scripts/flink_sql_fixture_job.py (CLICKS)",
            "operators": {
                "by_user": {"name": OPERATORS["by_user"], "key": ["user_id"], "accumulators": ACCUMULATORS["by_user"],
                            "groups": by_user(rows)},
                "by_bucket": {"name": OPERATORS["by_bucket"], "key": ["bucket", "even"],
                              "accumulators": ACCUMULATORS["by_bucket"], "groups": by_bucket(rows)},
                "last": {"name": OPERATORS["last"], "key": ["k", "a", "b"], "accumulators": ACCUMULATORS["last"],
                         "groups": last(rows, range(N))},
                "distincts": {"name": OPERATORS["distincts"], "key": ["bucket"],
                              "accumulators": ACCUMULATORS["distincts"], "groups": distinct_groups,
                              "states": distinct_views}}}


# ----------------------------------------------------------------------------- running, copying


def _local(url: str) -> Path:
    return Path(url.removeprefix("file://") if url.startswith("file://") else url.removeprefix("file:"))


def run_job(venv: Path, work: Path, backend: str, plan: str, ttl: str, job: Path = JOB) -> dict[str, Any]:
    env = dict(os.environ)
    env["JAVA_TOOL_OPTIONS"] = (env.get("JAVA_TOOL_OPTIONS", "") + " " + ADD_OPENS).strip()
    done = subprocess.run([str(venv / "bin" / "python"), str(job), str(work), backend, plan, ttl],
                          cwd=work, env=env, capture_output=True, text=True, timeout=600)
    facts = [line for line in done.stdout.splitlines() if line.startswith("FIXTURE ")]
    if done.returncode != 0 or not facts:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"the Flink SQL job failed (exit {done.returncode})")
    return dict(json.loads(facts[-1][len("FIXTURE "):]))


def compile_plan(venv: Path, variant: str, dest: Path) -> None:
    """DEST/<variant>/plan.json: Flink's compiled plan of the job's statements."""
    env = dict(os.environ)
    env["JAVA_TOOL_OPTIONS"] = (env.get("JAVA_TOOL_OPTIONS", "") + " " + ADD_OPENS).strip()
    with tempfile.TemporaryDirectory(prefix="statekit-flink-sql-plan-") as work:
        done = subprocess.run([str(venv / "bin" / "python"), str(JOB), work, "compile-plan", "-", VARIANTS[variant][3]],
                              cwd=work, env=env, capture_output=True, text=True, timeout=600)
        plan = Path(work) / "plan.json"
        if done.returncode != 0 or not plan.exists():
            sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
            raise SystemExit(f"compiling the Flink SQL plan failed (exit {done.returncode})")
        (dest / variant / "plan.json").write_text(json.dumps(json.loads(plan.read_text()), indent=1) + "\n")
    print(f"{variant}: plan.json", flush=True)


def copy_variant(variant: str, facts: dict[str, Any], work: Path, dest: Path, seconds: float) -> None:
    target = dest / variant
    if target.exists():
        shutil.rmtree(target)
    savepoints = {}
    for kind, url in dict(facts["savepoints"]).items():
        source = _local(str(url))
        shutil.copytree(source, target / "savepoints" / source.name)
        savepoints[kind] = f"savepoints/{source.name}"
    info: dict[str, Any] = {"flink": "2.3.0", "job_id": facts["job_id"], "work_dir": str(work),
                            "backend": VARIANTS[variant][0], "state_ttl": VARIANTS[variant][3], "savepoints": savepoints,
                            "generation_seconds": round(seconds)}
    if VARIANTS[variant][2] and facts.get("checkpoint"):
        checkpoint = Path(str(facts["checkpoint"]))
        shutil.copytree(checkpoint, target / "checkpoints" / checkpoint.parent.name / checkpoint.name)
        info["checkpoint"] = f"checkpoints/{checkpoint.parent.name}/{checkpoint.name}"
    (target / "facts.json").write_text(json.dumps(info, indent=2) + "\n")
    (target / "expected.json").write_text(json.dumps(expected(), indent=1) + "\n")
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    print(f"{variant}: {size / 1024:.0f} KiB in {seconds:.0f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", choices=sorted(VARIANTS))
    parser.add_argument("--keep-work", action="store_true", help="keep the /tmp work directories")
    parser.add_argument("--dest", type=Path, default=ROOT / "tests" / "golden" / "flink-sql-2.3")
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv-flink")
    parser.add_argument("--plans-only", action="store_true", help="only (re)compile each variant's plan.json")
    args = parser.parse_args()
    if not (args.venv / "bin" / "python").exists():
        raise SystemExit(f"{args.venv} is missing: run scripts/install_pyflink.sh 2.3.0")
    for variant in args.only or VARIANTS:
        if args.plans_only:
            compile_plan(args.venv, variant, args.dest)
            continue
        backend, plan, _, ttl = VARIANTS[variant]
        work = Path(tempfile.mkdtemp(prefix="statekit-flink-sql-"))
        started = time.monotonic()
        try:
            facts = run_job(args.venv, work, backend, plan, ttl)
            copy_variant(variant, facts, work, args.dest, time.monotonic() - started)
            compile_plan(args.venv, variant, args.dest)
        finally:
            if not args.keep_work:
                shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
