#!/usr/bin/env python3
"""Generate tests/golden/flink-sql-ops-2.3/ with real Apache Flink 2.3: deduplication, Top-N and join state.

    scripts/install_pyflink.sh 2.3.0          # once: PyFlink into .venv-flink
    python3 scripts/gen_flink_sql_more_fixtures.py [--only VARIANT] [--keep-work] [--dest DIR]

Runs scripts/flink_sql_more_fixture_job.py (eleven SQL queries over the numbers 0..N-1, see its
docstring) on the local MiniCluster once per state backend and copies its savepoints into
DEST/<variant>/ with facts.json and expected.json: every state of every keyed operator, each
key's content computed here in plain Python from the same input rows (not read back with
statekit), following the operators of flink-table-runtime 2.3:

- ``Deduplicate``: proctime keep-first ``deduplicate-state`` Boolean; proctime keep-last and
  rowtime keep-last ``deduplicate-state`` the row (proctime: ``pt`` is null in the row);
  rowtime keep-first (``RowTimeDeduplicateKeepFirstRowFunction``) ``waiting-to-emit-on-timer``
  the earliest row and an event-time timer at its time (the watermark never passes it), no
  ``already-emitted-state-boolean``.
- ``Rank``: ``AppendOnlyTopNFunction`` and ``UpdatableTopNFunction`` keep the rows while their
  rank is <= the rank end (``isInRankEnd``), so N + 1 rows per partition once N + 1 were seen;
  append-only ``data-state-with-append`` sort key -> rows, updatable
  ``data-state-with-update`` row key -> (row, position among equal sort keys);
  ``RetractableTopNFunction`` every current row: ``data-state`` sort key -> rows (their order
  follows arrival from two upstream subtasks: unordered) and ``sorted-map`` sort key -> count.
- ``Join`` (``JoinRecordStateViews`` / ``OuterJoinRecordStateViews``): an input whose unique
  key is the join key: a value state of the row (outer: (row, associations)); a unique key
  not in the join key: unique key -> row (outer: (row, associations)); no unique key:
  row -> count (outer: (count, associations)).
- ``IntervalJoin`` (rowtime): ``IntervalJoinLeftCache``/``RightCache`` time -> [(row, joined)]:
  every row is cached (the watermark stays 99 days behind); with a FULL JOIN the flag ends
  true exactly when the row has a partner. The timer states: a side's first row's time plus
  the other side's relative size (2 s) plus 1 (no allowed lateness, no minimum clean-up
  interval): ``IntervalJoinRightTimerState`` from the first left row, ``LeftTimerState`` from
  the first right row; an event-time timer at each.

Rows and keys are lists of the row's fields in order; TIMESTAMP(3) values are epoch ms (of the
wall-clock time); a tuple is a list [f0, f1].
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from gen_flink_sql_fixtures import _local, run_job  # noqa: E402  (the same MiniCluster setup)

JOB = ROOT / "scripts" / "flink_sql_more_fixture_job.py"
N = 2000  # flink_sql_more_fixture_job.N
T0 = 1700000000000  # rt of n = 0 (epoch ms); rt(n) = T0 + 1000 n
TOP = 3  # rk <= 3
INTERVAL_MS = 2000  # BETWEEN r.rt - 2 s AND r.rt + 2 s
# The operators' names in the job graph of every query (the planner numbers its nodes in plan order).
OPERATORS = {
    "dedup_first": "Deduplicate[6]", "dedup_last": "Deduplicate[11]", "dedup_rt_first": "Deduplicate[18]",
    "dedup_rt_last": "Deduplicate[23]", "topn_append": "Rank[28]", "topn_retract": "Rank[35]",
    "topn_update": "Rank[39]", "join_nokey": "Join[45]", "join_unique": "Join[56]", "join_uk": "Join[67]",
    "interval_join": "IntervalJoin[74]",
}
# RocksDB's native savepoints hold a few files per keyed subtask (about 55 KiB): its job runs the
# queries with the new serializers only (sorted map, tuples, lists of tuples), numbered anew.
ROCKSDB_OPERATORS = {"dedup_rt_first": "Deduplicate[6]", "topn_retract": "Rank[13]", "join_nokey": "Join[19]",
                     "interval_join": "IntervalJoin[26]"}
# variant -> (backend, savepoints, the queries and their operators)
VARIANTS = {"hashmap": ("hashmap", "canonical", OPERATORS),
            "rocksdb": ("rocksdb", "canonical,native", ROCKSDB_OPERATORS)}
EVENT_TIMERS = "_timer_state/event_user-timers"


def event(n: int) -> dict[str, Any]:
    """Row n of ``events``, as the job's view computes it."""
    return {"n": n, "user_id": f"u{n % 50}", "bucket": n % 7, "k9": n % 9, "even": n % 2 == 0, "amount": n / 8,
            "tiny": n % 100, "tag": f"tag-{n}", "rt": T0 + 1000 * n}


def entry(key: list[Any], value: Any, user_key: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key}
    if user_key is not None:
        out["user_key"] = user_key
    out["value"] = value
    return out


def _groups(rows: list[dict[str, Any]], *names: str) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(tuple(row[name] for name in names), []).append(row)
    return dict(sorted(out.items()))


def deduplication(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by_user, by_bucket, by_k9 = _groups(rows, "user_id"), _groups(rows, "bucket"), _groups(rows, "k9")
    first_rt = {k: min(g, key=lambda r: r["rt"]) for k, g in by_k9.items()}
    last_rt = {k: max(g, key=lambda r: r["rt"]) for k, g in by_k9.items()}
    return {
        "dedup_first": {"deduplicate-state": [entry(list(k), True) for k in by_user]},
        "dedup_last": {"deduplicate-state": [  # input order: the last row; pt (proctime) stays null
            entry(list(k), [g[-1]["n"], None, g[-1]["bucket"], g[-1]["tag"]]) for k, g in by_bucket.items()]},
        "dedup_rt_first": {
            "waiting-to-emit-on-timer": [entry(list(k), [r["n"], r["rt"], r["k9"], r["amount"]])
                                         for k, r in first_rt.items()],
            "already-emitted-state-boolean": [],
            EVENT_TIMERS: [entry(list(k), r["rt"]) for k, r in first_rt.items()]},
        "dedup_rt_last": {"deduplicate-state": [entry(list(k), [r["n"], r["rt"], r["k9"], r["tag"]])
                                                for k, r in last_rt.items()]},
    }


def per_user(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"bucket": b, "user_id": u, "c": len(g)} for (b, u), g in _groups(rows, "bucket", "user_id").items()]


def top_n(rows: list[dict[str, Any]]) -> dict[str, Any]:
    kept = TOP + 1  # rows stay while their rank <= rank end
    append, retract_data, retract_sorted, update = [], [], [], []
    for (bucket,), group in _groups(rows, "bucket").items():
        for r in sorted(group, key=lambda r: -r["amount"])[:kept]:
            append.append(entry([bucket], [[r["n"], r["bucket"], r["amount"]]], [r["amount"]]))
    for (bucket,), group in _groups(per_user(rows), "bucket").items():
        for (c,), same in _groups(group, "c").items():
            retract_data.append(entry([bucket], [[r["bucket"], r["user_id"], r["c"]] for r in same], [c]))
        retract_sorted.append(entry([bucket], [{"key": [c], "value": len(same)}
                                               for (c,), same in _groups(group, "c").items()]))
        for r in sorted(group, key=lambda r: (-r["c"], r["user_id"]))[:kept]:
            update.append(entry([bucket], [[r["bucket"], r["user_id"], r["c"]], 1], [r["bucket"], r["user_id"]]))
    return {"topn_append": {"data-state-with-append": append},
            "topn_retract": {"data-state": retract_data, "sorted-map": retract_sorted},
            "topn_update": {"data-state-with-update": update}}


def joins(rows: list[dict[str, Any]]) -> dict[str, Any]:
    # join_nokey: l (even n): j = n % 50, v = n % 7; r (odd n): j = (n + 1) % 40, w = n % 3; ON l.j = r.j
    left = [(r["n"] % 50, r["n"] % 7) for r in rows if r["even"]]
    right = [((r["n"] + 1) % 40, r["n"] % 3) for r in rows if not r["even"]]
    right_per_j = {j: sum(1 for rj, _ in right if rj == j) for j, _ in right}
    nokey = {"left-records": [entry([j], [left.count((j, v)), right_per_j.get(j, 0)], [j, v])
                              for j, v in sorted(set(left))],
             "right-records": [entry([j], right.count((j, w)), [j, w]) for j, w in sorted(set(right))]}
    # join_unique: l = COUNT(*) per user_id; r = MAX(n) per user_id over n < 175 AND bucket = 0
    counts = {u: len(g) for (u,), g in _groups(rows, "user_id").items()}
    maxes = {u: max(r["n"] for r in g) for (u,), g in _groups([r for r in rows if r["n"] < 175 and r["bucket"] == 0],
                                                               "user_id").items()}
    unique = {"left-records": [entry([u], [[u, c], int(u in maxes)]) for u, c in counts.items()],
              "right-records": [entry([u], [u, m]) for u, m in maxes.items()]}
    # join_uk: l = COUNT(*) per (bucket, even); r = SUM(amount) per (bucket, tiny) over n < 40 AND bucket < 5
    by_be = {k: len(g) for k, g in _groups(rows, "bucket", "even").items()}
    by_bt = {k: sum(r["amount"] for r in g)
             for k, g in _groups([r for r in rows if r["n"] < 40 and r["bucket"] < 5], "bucket", "tiny").items()}
    uk = {"left-records": [entry([b], [[b, e, c], sum(1 for rb, _ in by_bt if rb == b)], [b, e])
                           for (b, e), c in by_be.items()],
          "right-records": [entry([b], [b, t, s], [b, t]) for (b, t), s in by_bt.items()]}
    return {"join_nokey": nokey, "join_unique": unique, "join_uk": uk}


def interval_join(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def side(keep: Any) -> list[dict[str, Any]]:
        return [{"n": r["n"], "k": r["n"] // 10 % 5, "rt": r["rt"]} for r in rows if keep(r)]

    left = side(lambda r: r["even"])
    right = side(lambda r: not r["even"] and r["n"] % 3 == 0)

    def partners(row: dict[str, Any], others: list[dict[str, Any]]) -> bool:
        return any(o["k"] == row["k"] and abs(o["rt"] - row["rt"]) <= INTERVAL_MS for o in others)

    def cache(mine: list[dict[str, Any]], others: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [entry([r["k"]], [[[r["n"], r["k"], r["rt"]], partners(r, others)]], r["rt"]) for r in mine]

    def first_time(mine: list[dict[str, Any]]) -> dict[int, int]:
        out: dict[int, int] = {}
        for r in mine:  # input order
            out.setdefault(r["k"], r["rt"] + INTERVAL_MS + 1)
        return dict(sorted(out.items()))

    left_timer, right_timer = first_time(right), first_time(left)  # the opposite side's first row
    return {"interval_join": {
        "IntervalJoinLeftCache": cache(left, right), "IntervalJoinRightCache": cache(right, left),
        "IntervalJoinLeftTimerState": [entry([k], t) for k, t in left_timer.items()],
        "IntervalJoinRightTimerState": [entry([k], t) for k, t in right_timer.items()],
        EVENT_TIMERS: [entry([k], t) for timers in (left_timer, right_timer) for k, t in timers.items()]}}


UNORDERED = {"topn_retract": ["data-state"]}  # list values whose order follows arrival from two subtasks


def expected(operators: dict[str, str]) -> dict[str, Any]:
    rows = [event(n) for n in range(N)]
    states = {**deduplication(rows), **top_n(rows), **joins(rows), **interval_join(rows)}
    return {"input": f"n = 0..{N - 1}, columns: scripts/flink_sql_more_fixture_job.py (EVENTS)",
            "operators": {query: {"name": name, "unordered_lists": UNORDERED.get(query, []),
                                  "states": states[query]} for query, name in operators.items()}}


def expected_text(operators: dict[str, str]) -> str:
    """expected.json with one state entry a line (compact: the variants stay below 1 MB)."""
    data = expected(operators)
    out = ["{", f' "input": {json.dumps(data["input"])},', ' "operators": {']
    for i, (query, op) in enumerate(data["operators"].items()):
        out.append(f'  {json.dumps(query)}: {{"name": {json.dumps(op["name"])}, '
                   f'"unordered_lists": {json.dumps(op["unordered_lists"])}, "states": {{')
        for j, (state, entries) in enumerate(op["states"].items()):
            out.append(f"   {json.dumps(state)}: [")
            out += [f"    {json.dumps(e, separators=(',', ':'))}" + ("," if k < len(entries) - 1 else "")
                    for k, e in enumerate(entries)]
            out.append("   ]" + ("," if j < len(op["states"]) - 1 else ""))
        out.append("  }}" + ("," if i < len(data["operators"]) - 1 else ""))
    out += [" }", "}"]
    text = "\n".join(out) + "\n"
    assert json.loads(text) == data
    return text


# ----------------------------------------------------------------------------- running, copying


def copy_variant(variant: str, facts: dict[str, Any], work: Path, dest: Path, seconds: float) -> None:
    target = dest / variant
    if target.exists():
        shutil.rmtree(target)
    savepoints = {}
    for kind, url in dict(facts["savepoints"]).items():
        source = _local(str(url))
        shutil.copytree(source, target / "savepoints" / source.name)
        savepoints[kind] = f"savepoints/{source.name}"
    backend, _, operators = VARIANTS[variant]
    info: dict[str, Any] = {"flink": "2.3.0", "job_id": facts["job_id"], "backend": backend,
                            "savepoints": savepoints, "queries": list(operators), "generation_seconds": round(seconds)}
    (target / "facts.json").write_text(json.dumps(info, indent=2) + "\n")
    (target / "expected.json").write_text(expected_text(operators))
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    print(f"{variant}: {size / 1024:.0f} KiB in {seconds:.0f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", choices=sorted(VARIANTS))
    parser.add_argument("--keep-work", action="store_true", help="keep the /tmp work directories")
    parser.add_argument("--dest", type=Path, default=ROOT / "tests" / "golden" / "flink-sql-ops-2.3")
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv-flink")
    parser.add_argument("--expected-only", action="store_true", help="rewrite expected.json of existing variants")
    args = parser.parse_args()
    if args.expected_only:
        for variant in args.only or VARIANTS:
            (args.dest / variant / "expected.json").write_text(expected_text(VARIANTS[variant][2]))
        return
    if not (args.venv / "bin" / "python").exists():
        raise SystemExit(f"{args.venv} is missing: run scripts/install_pyflink.sh 2.3.0")
    for variant in args.only or VARIANTS:
        backend, plan, operators = VARIANTS[variant]
        work = Path(tempfile.mkdtemp(prefix="statekit-flink-sql-ops-"))
        started = time.monotonic()
        try:  # the job's fourth argument: the queries to run
            facts = run_job(args.venv, work, backend, plan, ",".join(operators), job=JOB)
            copy_variant(variant, facts, work, args.dest, time.monotonic() - started)
        finally:
            if not args.keep_work:
                shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
