"""Flink max-parallelism change: ``statekit rescale --max-parallelism`` of a real PyFlink savepoint
against ``cp -r`` of the same savepoint, same run.

    .venv/bin/python bench/flink_rescale_bench.py [--keys 1000000] [--savepoint DIR] [--workdir DIR]

Steps (each a child process, its peak RSS read from ``os.wait4``):

1. the savepoint: ``--savepoint DIR``, or one written by real Flink — the PyFlink job of the
   restore test (scripts/flink_rewrite_job.py ``write``, PyFlink from .venv-flink or
   ``STATEKIT_PYFLINK_PYTHON``) with ``--keys`` keys, one event each: per key a ValueState
   LONG, a ListState INT, a MapState STRING -> LONG entry and an event-time timer (4 entries),
   max parallelism 128, parallelism 2, canonical format. It is kept in the work directory and
   reused by later runs;
2. ``cp -r`` of the savepoint (the baseline; best of 3) and ``cp -r`` + ``sync``;
3. ``statekit rescale --max-parallelism 1024`` (every key hashed, every entry regrouped through
   temporary files; default memory budget), then the same with ``--memory-budget 16`` (more
   spilling); each output checked with ``statekit verify`` (not timed).

Prints one table and a JSON line with every figure. Targets: <= 10x ``cp -r``, peak RSS <= 300 MB.
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
STATEKIT = [sys.executable, "-m", "statekit.cli.main"]
JOB = ROOT / "scripts" / "flink_rewrite_job.py"


def run(argv: list[str]) -> tuple[float, int, str]:
    """Run a child; (wall seconds, its own peak RSS in MB, stdout). Fails loudly on a non-zero exit.

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
    return elapsed, usage.ru_maxrss // 1024, stdout


def du(path: Path) -> tuple[int, int]:
    files = [Path(d) / f for d, _, names in os.walk(path) for f in names]
    return sum(f.stat().st_size for f in files), len(files)


def pyflink_python() -> Path:
    python = Path(os.environ.get("STATEKIT_PYFLINK_PYTHON", ROOT / ".venv-flink" / "bin" / "python"))
    if not python.exists():
        raise SystemExit(f"{python} is missing: scripts/install_pyflink.sh installs PyFlink (or pass --savepoint)")
    return python


def flink_savepoint(workdir: Path, keys: int) -> tuple[Path, float | None]:
    """A canonical savepoint of ``keys`` keys written by PyFlink (reused when already there)."""
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
        elapsed, _, _ = run(["cp", "-r", str(savepoint), str(target)])
        times.append(elapsed)
        shutil.rmtree(target)
    started = time.perf_counter()
    subprocess.run(["cp", "-r", str(savepoint), str(scratch / "copy")], check=True)
    subprocess.run(["sync"], check=True)
    synced = time.perf_counter() - started
    shutil.rmtree(scratch / "copy")
    return min(times), synced


def rescale(savepoint: Path, scratch: Path, label: str, *extra: str) -> dict[str, Any]:
    out = scratch / label
    elapsed, rss, stdout = run([*STATEKIT, "rescale", str(savepoint), "--max-parallelism", "1024", "-o", str(out),
                                "--spill-dir", str(scratch), "--json", *extra])
    report = json.loads(stdout)
    run([*STATEKIT, "verify", str(out)])
    size, _ = du(out)
    shutil.rmtree(out)
    entries = sum(op["entries"] for op in report["operators"])
    return {"label": label, "seconds": round(elapsed, 2), "peak_rss_mb": rss, "entries": entries,
            "bytes_written": size, "spilled_bytes": report["spilled_bytes"],
            "entries_per_s": round(entries / elapsed)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000, help="keys of the generated savepoint")
    parser.add_argument("--savepoint", type=Path, help="a canonical Flink savepoint to use instead")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "statekit-flink-rescale-bench",
                        help="keeps the generated savepoint between runs")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    generated = None
    savepoint = args.savepoint
    if savepoint is None:
        savepoint, generated = flink_savepoint(args.workdir, args.keys)
    size, files = du(savepoint)
    scratch = Path(tempfile.mkdtemp(prefix="run-", dir=args.workdir))
    try:
        cp_s, cp_sync_s = copy_baseline(savepoint, scratch)
        runs = [rescale(savepoint, scratch, "rescale"), rescale(savepoint, scratch, "rescale-16MiB",
                                                                "--memory-budget", "16")]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"savepoint {savepoint}: {size / 1e6:.1f} MB in {files} files"
          + (f" (written by PyFlink in {generated:.0f} s)" if generated else ""))
    print(f"cp -r {cp_s:.3f} s, cp -r + sync {cp_sync_s:.3f} s")
    print(f"{'run':<16}{'seconds':>9}{'x cp -r':>9}{'x cp+sync':>10}{'entries':>10}{'entries/s':>11}"
          f"{'peak RSS':>10}{'spilled':>10}")
    for r in runs:
        r["x_cp"] = round(r["seconds"] / cp_s, 1)
        r["x_cp_sync"] = round(r["seconds"] / cp_sync_s, 1)
        print(f"{r['label']:<16}{r['seconds']:>9.2f}{r['x_cp']:>9.1f}{r['x_cp_sync']:>10.1f}{r['entries']:>10}"
              f"{r['entries_per_s']:>11}{r['peak_rss_mb']:>7} MB{r['spilled_bytes'] / 1e6:>7.0f} MB")
    print(json.dumps({"savepoint": str(savepoint), "bytes": size, "files": files, "keys": args.keys,
                      "cp_s": round(cp_s, 3), "cp_sync_s": round(cp_sync_s, 3), "runs": runs}))


if __name__ == "__main__":
    main()
