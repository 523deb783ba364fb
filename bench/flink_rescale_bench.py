"""Flink max-parallelism change: ``statekit rescale --max-parallelism`` of a canonical savepoint of
>= 1M keys against ``cp -r`` of the same savepoint, same run; local engine and Spark.

    .venv/bin/python bench/flink_rescale_bench.py [--keys 1000000] [--savepoint DIR] [--workdir DIR]
        [--entry-path] [--spark] [--master local[2]] [--repeat N]

Steps (the timed ones each a child process, its peak RSS and CPU time read from ``os.wait4``;
this process stays small, since on Linux a child's peak RSS starts from its parent's at fork):

1. the savepoint: ``--savepoint DIR``, or one grown from a savepoint real Flink wrote. PyFlink
   under load processes a few hundred keyed events a second here (1M keys would take hours),
   so the PyFlink job of the restore test (scripts/flink_rewrite_job.py ``write``, PyFlink
   from .venv-flink or ``STATEKIT_PYFLINK_PYTHON``) writes a canonical savepoint of
   ``BASE_KEYS`` keys, one event each (per key a ValueState LONG, a ListState INT, a MapState
   STRING -> LONG entry and an event-time timer: 4 entries; max parallelism 128, parallelism
   2), and :func:`grow` copies every entry of key ``key-k`` to the keys ``key-(k + j *
   BASE_KEYS)`` until there are ``--keys`` keys: the same header, serializers and value bytes,
   each new key serialized like Flink's (checked by decoding it) and stored in the key group
   Flink assigns it. Both are kept in the work directory and reused by later runs;
2. ``cp -r`` of the savepoint (the baseline; best of 3) and ``cp -r`` + ``sync``;
3. ``statekit rescale --max-parallelism 1024`` (the *split* path: every key hashed, vectorized;
   every entry regrouped through temporary files; default memory budget), the same with
   ``--memory-budget 16`` (more spilling), and ``--max-parallelism 64`` (the *merge* path: 64
   divides 128, key groups merge whole, nothing hashed); each output checked with
   ``statekit verify`` (not timed). ``--entry-path`` adds the entry-by-entry Python path
   (``Regrouper(vectorized=False)``, the engine before the vectorized one) for comparison;
4. ``--spark``: the same two rescales with ``--engine spark`` on ``--master`` (default
   ``local[2]``), in one child that starts the session and warms the Python workers on a
   first rescale, then times each rescale alone (the session's start is reported apart):
   Spark's throughput against the local engine's, on the same bytes.

``--repeat N`` times every rescale N times (the local ones N fresh children each, the Spark
ones N times in the same session) and reports each run's median wall time (and that run's
CPU time; peak RSS the largest), every time in the JSON: on a shared 2-core machine one run
varies by 20 % or more either way.

Prints one table and a JSON line with every figure. Targets: <= 50x ``cp -r`` locally at 1M keys,
Spark local[2] >= 1.7x the local engine's throughput, peak RSS <= 300 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from timed_children import use_bytecode_caches

from statekit.flink.keygroups import flink_murmur_hash
from statekit.flink.metadata_writer import (
    Edit,
    apply_edits,
    encode_relative_file_handle,
    encode_savepoint_key_groups_handle,
    metadata_spans,
)
from statekit.flink.model import FlinkOperatorState
from statekit.flink.sources import key_group_entries, prefix_bytes
from statekit.flink.storage import FlinkSnapshot, load_snapshot, read_stream_bytes
from statekit.flink.streams_writer import operator_streams, write_stream

ROOT = Path(__file__).resolve().parents[1]
STATEKIT = [sys.executable, "-m", "statekit.cli.main"]
JOB = ROOT / "scripts" / "flink_rewrite_job.py"


def run(argv: list[str]) -> tuple[float, int, str, float]:
    """Run a child; (wall seconds, its own peak RSS in MB, stdout, its CPU seconds). Fails loudly on a
    non-zero exit. CPU seconds (user + system) show the cost on a machine that others load.

    ``os.wait4`` reports the rusage of exactly this child; its output goes to temporary files
    (a pipe could fill up while the child is waited for)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        elapsed = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({code}): {(stdout + stderr)[-3000:].strip()}")
    return elapsed, usage.ru_maxrss // 1024, stdout, usage.ru_utime + usage.ru_stime


def du(path: Path) -> tuple[int, int]:
    files = [Path(d) / f for d, _, names in os.walk(path) for f in names]
    return sum(f.stat().st_size for f in files), len(files)


def pyflink_python() -> Path:
    python = Path(os.environ.get("STATEKIT_PYFLINK_PYTHON", ROOT / ".venv-flink" / "bin" / "python"))
    if not python.exists():
        raise SystemExit(f"{python} is missing: scripts/install_pyflink.sh installs PyFlink (or pass --savepoint)")
    return python


BASE_KEYS = 2000
KEY = re.compile(rb"key-(\d+)$")


def grow(base: Path, keys: int, out: Path) -> None:
    """Copy ``base`` (a canonical savepoint of the writer job, keys ``key-0`` .. ``key-(n-1)``) to
    ``out`` with ``keys`` keys: every entry of ``key-k`` also under ``key-(k + j * n)``."""
    snapshot = load_snapshot(str(base))
    (op,) = [op for op in snapshot.metadata.operators if op.uid == "state"]
    streams = operator_streams(snapshot, op)
    prefix, names = prefix_bytes(op.max_parallelism), streams.state_names
    groups: dict[tuple[int, int], bytearray] = {}
    last: dict[tuple[int, int], int] = {}
    base_keys = 0
    for source in streams.sources:
        data = read_stream_bytes(snapshot, source.delegate)
        own = tuple(state.name for state in source.meta.states)
        for kg, offset in zip(source.handle.key_group_range, source.handle.key_group_offsets):
            if not offset:
                continue
            for name, key, value, _ in key_group_entries(data[offset:], kg, own, prefix, source.source, offset):
                state = names.index(name)
                skip = 8 if state in streams.timers else 0
                body = key[prefix:]
                _, end = streams.hasher.java_hash(body, skip, where=source.source)
                serialized = body[skip:end]
                found = KEY.search(serialized)
                assert found and serialized[found.start() - 1] == len(found.group()) + 1, serialized
                k = int(found.group(1))
                base_keys = max(base_keys, k + 1)
                for j in range(-(-keys // BASE_KEYS)):
                    if k + j * BASE_KEYS >= keys:
                        break
                    text = f"key-{k + j * BASE_KEYS}".encode()
                    new_key = serialized[:found.start() - 1] + bytes([len(text) + 1]) + text
                    code, new_end = streams.hasher.java_hash(new_key, 0, where="grown key")
                    assert new_end == len(new_key)
                    new_kg = flink_murmur_hash(code) % op.max_parallelism
                    composite = new_kg.to_bytes(prefix, "big") + body[:skip] + new_key + body[end:]
                    group = groups.setdefault((new_kg, state), bytearray())
                    last[(new_kg, state)] = len(group)
                    group += len(composite).to_bytes(4, "big") + composite + len(value).to_bytes(4, "big") + value
    assert base_keys == BASE_KEYS, f"{base} holds {base_keys} keys, not {BASE_KEYS}"
    for group, at in last.items():
        groups[group][at + 4] |= 0x80  # Flink's meta-data-follows flag: the last entry of a state in a key group
    _write_grown(snapshot, op, streams.header, groups, out)


def _write_grown(snapshot: FlinkSnapshot, op: FlinkOperatorState, header: bytes, groups: dict[tuple[int, int], bytearray], out: Path) -> None:
    """``snapshot`` copied to ``out`` with new streams for ``op``'s subtasks (same key-group ranges)."""
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(snapshot.path, tmp)
    data = (tmp / "_metadata").read_bytes()
    (span,) = [sp for sp, o in zip(metadata_spans(data, source="base").operators, snapshot.metadata.operators)
               if o is op]
    edits = []
    for sub, sub_span in zip(op.subtasks, span.subtasks):
        handle = sub.managed_keyed_state
        assert handle is not None and handle.delegate is not None and sub_span.managed_keyed is not None
        (tmp / str(handle.delegate.path)).unlink()
        key_groups = handle.key_group_range
        name = str(uuid.uuid4())
        with open(tmp / name, "wb") as f:
            chosen = sorted(g for g in groups if key_groups.start <= g[0] <= key_groups.end)
            offsets, size = write_stream(f, header, key_groups, ((kg, st, iter([bytes(groups[(kg, st)])]))
                                                                 for kg, st in chosen))
        edits.append(Edit(*sub_span.managed_keyed, encode_savepoint_key_groups_handle(
            key_groups, offsets, encode_relative_file_handle(name, size))))
    (tmp / "_metadata").write_bytes(apply_edits(data, edits))
    tmp.rename(out)


def base_savepoint(workdir: Path) -> tuple[Path, float | None]:
    """A canonical savepoint of ``BASE_KEYS`` keys written by PyFlink (reused when already there)."""
    keys = BASE_KEYS
    job = workdir / f"pyflink-{keys}"
    done = job / "savepoint.txt"
    if done.exists():
        return Path(done.read_text().strip()), None
    if job.exists():
        shutil.rmtree(job)
    job.mkdir(parents=True)
    started = time.perf_counter()
    result = subprocess.run([str(pyflink_python()), str(JOB), "write", str(job), str(keys), str(keys), "128", "2",
                             "hashmap"], cwd=job, capture_output=True, text=True)
    lines = [line for line in result.stdout.splitlines() if line.startswith("REWRITE ")]
    if result.returncode != 0 or not lines:
        raise SystemExit(f"the PyFlink job failed ({result.returncode}): {(result.stdout + result.stderr)[-3000:]}")
    location = json.loads(lines[-1][len("REWRITE "):])["savepoint"]
    path = Path(location.removeprefix("file:").replace("//", "/", 1) if location.startswith("file://")
                else location.removeprefix("file:"))
    done.write_text(str(path))
    return path, time.perf_counter() - started


def copy_baseline(savepoint: Path, scratch: Path, repeat: int = 3) -> tuple[float, float]:
    """Best ``cp -r`` time of ``repeat`` runs, and one ``cp -r`` + ``sync``."""
    times = []
    for _ in range(repeat):
        target = scratch / "copy"
        elapsed, _, _, _ = run(["cp", "-r", str(savepoint), str(target)])
        times.append(elapsed)
        shutil.rmtree(target)
    started = time.perf_counter()
    subprocess.run(["cp", "-r", str(savepoint), str(scratch / "copy")], check=True)
    subprocess.run(["sync"], check=True)
    synced = time.perf_counter() - started
    shutil.rmtree(scratch / "copy")
    return min(times), synced


ENTRY_PATH = """
import json, sys
from statekit.flink import regroup
from statekit.flink.rewrite import rescale_flink_savepoint
from statekit.statefmt.json_contract import json_data
init = regroup.Regrouper.__init__
def entry_path(self, *args, **kwargs):
    kwargs["vectorized"] = False
    init(self, *args, **kwargs)
regroup.Regrouper.__init__ = entry_path
report = rescale_flink_savepoint(sys.argv[1], sys.argv[2], max_parallelism=int(sys.argv[3]), spill_dir=sys.argv[4])
print(json.dumps(json_data(report)))
"""

SPARK_RUNS = """
import json, shutil, sys, time
from statekit.flink.rewrite import rescale_flink_savepoint
from statekit.spark.flink_rewrite import SparkRegroup
from statekit.spark.session import SparkSettings
savepoint, scratch, master, warm, repeat = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
CLI_BUDGET = 96 << 20  # rescale --memory-budget's default, as the local runs (CLI children) have it
started = time.perf_counter()
settings = SparkSettings(master)
settings.session()
session_s = time.perf_counter() - started
rescale_flink_savepoint(warm, scratch + "/warm", max_parallelism=512, regroup=SparkRegroup(settings))
out = {"session_s": round(session_s, 2)}
for label, m2 in (("spark-1024", 1024), ("spark-merge-64", 64)):
    times = []
    for number in range(repeat):
        started = time.perf_counter()
        report = rescale_flink_savepoint(savepoint, f"{scratch}/{label}-{number}", max_parallelism=m2,
                                         regroup=SparkRegroup(settings, memory_budget=CLI_BUDGET), spill_dir=scratch)
        times.append(round(time.perf_counter() - started, 2))
        shutil.rmtree(f"{scratch}/{label}-{number}")
    out[label] = {"seconds": sorted(times)[(len(times) - 1) // 2], "seconds_each": times,
                  "entries": sum(op.entries for op in report.operators)}
print(json.dumps(out))
"""


def rescale(savepoint: Path, scratch: Path, label: str, *extra: str, max_parallelism: int = 1024,
            entry_path: bool = False, repeat: int = 1) -> dict[str, Any]:
    out = scratch / label
    if entry_path:
        argv = [sys.executable, "-c", ENTRY_PATH, str(savepoint), str(out), str(max_parallelism), str(scratch)]
    else:
        argv = [*STATEKIT, "rescale", str(savepoint), "--max-parallelism", str(max_parallelism), "-o", str(out),
                "--spill-dir", str(scratch), "--json", *extra]
    runs = []
    for _ in range(repeat):
        elapsed, rss, stdout, cpu = run(argv)
        report = json.loads(stdout)
        run([*STATEKIT, "verify", str(out)])
        size, _ = du(out)
        shutil.rmtree(out)
        runs.append((elapsed, cpu, rss))
    elapsed, cpu, _ = sorted(runs)[(len(runs) - 1) // 2]  # the median run (the lower one of an even count)
    rss = max(r[2] for r in runs)
    entries = sum(op["entries"] for op in report["operators"])
    return {"label": label, "seconds": round(elapsed, 2), "cpu_s": round(cpu, 2), "peak_rss_mb": rss,
            "seconds_each": [round(r[0], 2) for r in runs], "entries": entries,
            "bytes_written": size, "spilled_bytes": report["spilled_bytes"],
            "entries_per_s": round(entries / elapsed)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000, help="keys of the generated savepoint")
    parser.add_argument("--savepoint", type=Path, help="a canonical Flink savepoint to use instead")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "statekit-flink-rescale-bench",
                        help="keeps the generated savepoint between runs")
    parser.add_argument("--entry-path", action="store_true", help="also time the entry-by-entry Python path")
    parser.add_argument("--spark", action="store_true", help="also time --engine spark (PySpark)")
    parser.add_argument("--master", default="local[2]", help="Spark master of --spark")
    parser.add_argument("--repeat", type=int, default=1, help="runs of every rescale; the median is reported")
    parser.add_argument("--grow", nargs=3, metavar=("BASE", "KEYS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    use_bytecode_caches()
    if args.grow:
        grow(Path(args.grow[0]), int(args.grow[1]), Path(args.grow[2]))
        return
    args.workdir.mkdir(parents=True, exist_ok=True)
    generated = None
    savepoint = args.savepoint
    if savepoint is None:
        base, generated = base_savepoint(args.workdir)
        savepoint = args.workdir / f"grown-{args.keys}"
        if not savepoint.exists():  # in a child: a child's peak RSS counts its parent's at fork (Linux)
            subprocess.run([sys.executable, __file__, "--grow", str(base), str(args.keys), str(savepoint)],
                           check=True)
    size, files = du(savepoint)
    scratch = Path(tempfile.mkdtemp(prefix="run-", dir=args.workdir))
    try:
        cp_s, cp_sync_s = copy_baseline(savepoint, scratch)
        repeat = max(1, args.repeat)
        runs = [rescale(savepoint, scratch, "rescale", repeat=repeat),
                rescale(savepoint, scratch, "rescale-16MiB", "--memory-budget", "16", repeat=repeat),
                rescale(savepoint, scratch, "merge-64", max_parallelism=64, repeat=repeat)]
        if args.entry_path:
            runs.append(rescale(savepoint, scratch, "entry-path", entry_path=True, repeat=repeat))
        spark = spark_runs(savepoint, scratch, args.master, base if args.savepoint is None else savepoint, repeat) \
            if args.spark else None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"savepoint {savepoint}: {size / 1e6:.1f} MB in {files} files"
          + (f" (grown from a PyFlink savepoint of {BASE_KEYS} keys written in {generated:.0f} s)" if generated
             else ""))
    load = [round(x, 1) for x in os.getloadavg()]
    print(f"cp -r {cp_s:.3f} s, cp -r + sync {cp_sync_s:.3f} s; load average {load} on {os.cpu_count()} CPUs")
    if args.repeat > 1:
        print(f"each row: the median of {args.repeat} runs (every run's time in the JSON)")
    print(f"{'run':<16}{'seconds':>9}{'CPU s':>8}{'x cp -r':>9}{'x cp+sync':>10}{'entries':>10}{'entries/s':>11}"
          f"{'peak RSS':>10}{'spilled':>10}")
    for r in runs:
        r["x_cp"] = round(r["seconds"] / cp_s, 1)
        r["x_cp_sync"] = round(r["seconds"] / cp_sync_s, 1)
        print(f"{r['label']:<16}{r['seconds']:>9.2f}{r['cpu_s']:>8.1f}{r['x_cp']:>9.1f}{r['x_cp_sync']:>10.1f}{r['entries']:>10}"
              f"{r['entries_per_s']:>11}{r['peak_rss_mb']:>7} MB{r['spilled_bytes'] / 1e6:>7.0f} MB")
    if spark is not None:
        local = {r["label"]: r["seconds"] for r in runs}
        print(f"Spark {args.master} (session started in {spark['session_s']} s, not counted):")
        for label, baseline in (("spark-1024", "rescale"), ("spark-merge-64", "merge-64")):
            row = spark[label]
            row["throughput_vs_local"] = round(local[baseline] / row["seconds"], 2)
            print(f"  {label:<16}{row['seconds']:>8.2f} s  {row['throughput_vs_local']:>5.2f}x the local "
                  f"engine's throughput ({baseline}: {local[baseline]:.2f} s)")
    print(json.dumps({"savepoint": str(savepoint), "bytes": size, "files": files, "keys": args.keys,
                      "cp_s": round(cp_s, 3), "cp_sync_s": round(cp_sync_s, 3), "load_average": load,
                      "cpus": os.cpu_count(), "runs": runs, "spark": spark}))


def spark_runs(savepoint: Path, scratch: Path, master: str, warm: Path, repeat: int = 1) -> dict[str, Any]:
    """The --engine spark rescales in one child (session and Python workers warm), each timed alone."""
    _, _, stdout, _ = run([sys.executable, "-c", SPARK_RUNS, str(savepoint), str(scratch), master, str(warm),
                           str(repeat)])
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return result


if __name__ == "__main__":
    main()
