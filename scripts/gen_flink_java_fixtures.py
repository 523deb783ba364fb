#!/usr/bin/env python3
"""Generate tests/golden/flink-java-2.3/ with real Apache Flink 2.3: Java DataStream jobs.

    scripts/install_pyflink.sh 2.3.0          # once: PyFlink (its jars) into .venv-flink
    python3 scripts/gen_flink_java_fixtures.py [--keep-work] [--dest DIR]

Compiles scripts/flink_java/FixtureJobs.java with javac against the jars PyFlink bundles
(pyflink/lib), runs every job in one JVM (``FixtureJobs write``, a local MiniCluster, the
same one PyFlink starts) and copies each job's canonical savepoint (and, for the compressed
heap job, its retained checkpoint) into DEST/<variant>/, with facts.json and expected.json:
the state every job holds, computed here from the jobs' input (numbers 0..N-1), not read
back with statekit. The file-source job's input is 200,000 lines ("0".."199999"), not kept.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "scripts" / "flink_java" / "FixtureJobs.java"
ADD_OPENS = [f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in (
    "java.lang", "java.util", "java.nio", "sun.nio.ch", "java.lang.reflect", "java.io", "java.net",
    "java.text", "java.time", "java.util.concurrent", "java.util.concurrent.atomic")]
POJO_N, TUPLE_N, KRYO_N = 600, 600, 300
FAR_FUTURE = 4102444800000
# variant -> (job, keyed operator uid, keep the retained checkpoint too)
VARIANTS = {
    "pojo": ("pojo", "pojo-state", False),
    "tuple": ("tuple", "tuple-state", False),
    "tuple-compressed": ("tuple-compressed", "tuple-state", True),
    "tuple-compressed-rocksdb": ("tuple-compressed-rocksdb", "tuple-state", False),
    "kryo": ("kryo", "kryo-state", False),
    "files": ("files", "count", False),
}


def pyflink_lib(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python*/site-packages/pyflink/lib"))
    if not found:
        raise SystemExit(f"{venv} has no PyFlink: run scripts/install_pyflink.sh 2.3.0")
    return found[0]


def compile_jobs(lib: Path, build: Path) -> None:
    """javac FixtureJobs.java against PyFlink's jars into ``build``."""
    build.mkdir(parents=True, exist_ok=True)
    subprocess.run(["javac", "-nowarn", "-cp", f"{lib}/*", "-d", str(build), str(SOURCE)], check=True)


def java(lib: Path, build: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    """``java FixtureJobs ARGS`` on the MiniCluster (PyFlink's jars on the class path)."""
    return subprocess.run(["java", *ADD_OPENS, "-cp", f"{build}{os.pathsep}{lib}/*", "FixtureJobs", *args],
                          capture_output=True, text=True, timeout=timeout)


# ----------------------------------------------------------------------------- the truth


def _account(region: str, ident: int) -> dict[str, Any]:
    return {"id": ident, "region": region}


def pojo_truth() -> dict[str, list[dict[str, Any]]]:
    """PojoState over 0..599 keyed by Account("r" + (n % 30) % 3, n % 30)."""
    out: dict[str, list[dict[str, Any]]] = {"profile": [], "recent": [], "pets": [], "shape": []}
    for ident in range(30):
        ns = [n for n in range(POJO_N) if n % 30 == ident]
        key, last = _account(f"r{ident % 3}", ident), ns[-1]
        out["profile"].append({"key": key, "value": {
            "count": len(ns), "even": last % 2 == 0, "home": _account(f"h{ident % 2}", ident),
            "last": None if last % 4 == 0 else last / 4.0, "name": f"user-{ident}", "total": sum(ns)}})
        out["recent"].append({"key": key, "value": ns})
        for bucket in range(3):
            ms = [n for n in ns if n % 3 == bucket]
            if ms:
                out["pets"].append({"key": key, "user_key": f"p{bucket}", "value": _account(f"m{ms[-1]}", ms[-1])})
        shape: dict[str, Any] = {"name": f"s{last}", "radius": None, "side": None,
                                 "_class": "FixtureJobs$" + ("Shape", "Circle", "Square")[last % 3]}
        if last % 3 == 1:
            shape["radius"] = last / 2.0
        elif last % 3 == 2:
            shape["side"] = last
        out["shape"].append({"key": key, "value": shape})
    return out


def tuple_truth() -> dict[str, list[dict[str, Any]]]:
    """TupleState over 0..599 keyed by Tuple2("k" + n % 40, n % 40 % 7)."""
    out: dict[str, list[dict[str, Any]]] = {"stats": [], "history": [], "buckets": [], "misc": [], "choice": [],
                                            "_timer_state/event_user-timers": []}
    colors = ("RED", "GREEN", "BLUE")
    for i in range(40):
        ns = [n for n in range(TUPLE_N) if n % 40 == i]
        key, last = {"f0": f"k{i}", "f1": i % 7}, ns[-1]
        out["stats"].append({"key": key, "value": {"f0": len(ns), "f1": f"last-{last}", "f2": last * 0.5}})
        out["history"].append({"key": key, "value": [{"f0": n, "f1": n * n} for n in ns]})
        for bucket in range(3):
            ms = [n for n in ns if n % 3 == bucket]
            if ms:
                out["buckets"].append({"key": key, "user_key": f"b{bucket}",
                                       "value": {"f0": sum(ms), "f1": ms[-1] % 2 == 0}})
        minutes = last  # 2024-01-01T00:00 plus n minutes, as epoch ms of the wall-clock time
        out["misc"].append({"key": key, "value": {
            "f0": colors[last % 3], "f1": 1704067200000 + minutes * 60_000, "f2": (1700000000 + last) * 1000,
            "f3": f"{last // 100}.{last % 100:02d}", "f4": 1700000000000 + last}})
        out["choice"].append({"key": key, "value": {"left": f"e{last}", "right": None} if last % 2 == 0
                              else {"left": None, "right": last}})
        out["_timer_state/event_user-timers"].append({"key": key, "value": FAR_FUTURE + i})
    return out


def kryo_truth() -> dict[str, list[dict[str, Any]]]:
    """KryoState over 0..299 keyed by "k" + n % 30."""
    import uuid

    out: dict[str, list[dict[str, Any]]] = {"reading": [], "anything": [], "token": [], "note": []}
    for i in range(30):
        ns = [n for n in range(KRYO_N) if n % 30 == i]
        key, last = f"k{i}", ns[-1]
        out["reading"].append({"key": key, "value": {"count": len(ns), "sensor": key, "total": sum(ns)}})
        out["anything"].append({"key": key, "value": f"v{last}" if last % 3 == 1 else str(last)})
        out["token"].append({"key": key, "value": str(uuid.UUID(int=(last << 64) | (last * 31)))})
        out["note"].append({"key": key, "value": {"text": f"note{last}"}})
    return out


TRUTH = {"pojo": pojo_truth, "tuple": tuple_truth, "tuple-compressed": tuple_truth,
         "tuple-compressed-rocksdb": tuple_truth, "kryo": kryo_truth}
# declared fields of Kryo classes (--value-type), part of the truth of the kryo job
DECLARED = {"kryo": {"reading": "struct<sensor:string,count:int,total:long>", "note": "struct<text:string>"}}


def expected(variant: str, uid: str) -> dict[str, Any]:
    if variant == "files":
        return {"operator": uid, "input_lines": 200_000, "line": "str(i) + '\\n' for i in 0..199999",
                "keys": "'k' + str(i % 20)", "states": {"lines": "lines of the key read so far",
                                                         "last": "the last line of the key read so far"}}
    return {"operator": uid, "value_types": DECLARED.get(variant, {}), "states": TRUTH[variant]()}


# ----------------------------------------------------------------------------- copying


def _local(url: str) -> Path:
    return Path(url.removeprefix("file://") if url.startswith("file://") else url.removeprefix("file:"))


def copy_variant(variant: str, facts: dict[str, Any], dest: Path, keep_checkpoint: bool) -> None:
    target = dest / variant
    if target.exists():
        shutil.rmtree(target)
    savepoint = _local(str(facts["savepoint"]))
    shutil.copytree(savepoint, target / "savepoints" / savepoint.name)
    info: dict[str, Any] = {"flink": "2.3.0", "job": facts["job"], "job_id": facts["job_id"],
                            "work_dir": facts["out"], "savepoint": f"savepoints/{savepoint.name}"}
    if keep_checkpoint:
        job_dir = Path(str(facts["out"])) / "checkpoints" / str(facts["job_id"])
        checkpoints = sorted(job_dir.glob("chk-*"), key=lambda p: int(p.name[4:]))
        if checkpoints:
            shutil.copytree(checkpoints[-1], target / "checkpoints" / job_dir.name / checkpoints[-1].name)
            info["checkpoint"] = f"checkpoints/{job_dir.name}/{checkpoints[-1].name}"
    if "input" in facts:
        info["input"] = facts["input"]
    (target / "facts.json").write_text(json.dumps(info, indent=2) + "\n")
    (target / "expected.json").write_text(json.dumps(expected(variant, VARIANTS[variant][1]), indent=1) + "\n")
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    print(f"{variant}: {size / 1024:.0f} KiB", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep-work", action="store_true", help="keep the /tmp work directory")
    parser.add_argument("--dest", type=Path, default=ROOT / "tests" / "golden" / "flink-java-2.3")
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv-flink")
    args = parser.parse_args()
    lib = pyflink_lib(args.venv)
    work = Path(tempfile.mkdtemp(prefix="statekit-flink-java-"))
    try:
        compile_jobs(lib, work / "classes")
        done = java(lib, work / "classes", "write", str(work))
        if done.returncode != 0:
            sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
            raise SystemExit(f"the Flink jobs failed (exit {done.returncode})")
        jobs = {row["job"]: row for row in map(json.loads, (work / "facts.jsonl").read_text().splitlines())}
        for variant, (job, _, keep_checkpoint) in VARIANTS.items():
            copy_variant(variant, jobs[job], args.dest, keep_checkpoint)
    finally:
        if not args.keep_work:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"work directory: {work}")


if __name__ == "__main__":
    main()
