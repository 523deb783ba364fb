#!/usr/bin/env python3
"""Generate the golden Flink fixtures under tests/golden/ with real Apache Flink (PyFlink).

    scripts/install_pyflink.sh 2.3.0          # once: PyFlink into .venv-flink
    scripts/install_pyflink.sh 1.20.3         # once: PyFlink 1.20 into .venv-flink-1.20 (metadata v4)
    python3 scripts/gen_flink_fixtures.py [--only NAME] [--keep-work] [--dest DIR]

Each fixture runs scripts/flink_fixture_job.py (local MiniCluster, Java 17) in a work directory
under /tmp, then copies the retained checkpoint (with its job's shared/ files) and the
savepoints into tests/golden/<fixture>/ and writes facts.json (job id, snapshot paths, the
work directory the checkpoint's absolute paths point at, Flink version). The RocksDB
checkpoints keep those absolute paths: copied here they are "moved" checkpoints.

PyFlink 1.16 (Python 3.9) also runs on Java 17 when JAVA_TOOL_OPTIONS carries the --add-opens
flags below; releases before 1.16 bundle a Beam that refuses Java 17.
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

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "scripts" / "flink_fixture_job.py"
ADD_OPENS = " ".join(f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in (
    "java.lang", "java.util", "java.nio", "sun.nio.ch", "java.lang.reflect", "java.io", "java.net",
    "java.text", "java.time", "java.util.concurrent", "java.util.concurrent.atomic"))

# name -> (virtualenv, Flink version, backend, inline threshold, savepoints)
FIXTURES = {
    "pyflink-2.3/rocksdb": (".venv-flink", "2.3.0", "rocksdb", "20kb", "canonical,native"),
    "pyflink-2.3/hashmap": (".venv-flink", "2.3.0", "hashmap", "20kb", "canonical"),
    "pyflink-1.20/rocksdb": (".venv-flink-1.20", "1.20.3", "rocksdb", "20kb", "canonical"),
}


def run_job(venv: Path, work: Path, backend: str, inline: str, plan: str) -> dict[str, object]:
    env = dict(os.environ)
    env["JAVA_TOOL_OPTIONS"] = (env.get("JAVA_TOOL_OPTIONS", "") + " " + ADD_OPENS).strip()
    done = subprocess.run([str(venv / "bin" / "python"), str(JOB), str(work), backend, inline, plan],
                          cwd=work, env=env, capture_output=True, text=True, timeout=900)
    facts = [line for line in done.stdout.splitlines() if line.startswith("FIXTURE ")]
    if done.returncode != 0 or not facts:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"the Flink job failed (exit {done.returncode})")
    return dict(json.loads(facts[-1][len("FIXTURE "):]))


def _local(url: str) -> Path:
    return Path(url.removeprefix("file:").replace("//", "/", 1) if url.startswith("file://") else
                url.removeprefix("file:"))


def copy_fixture(name: str, work: Path, facts: dict[str, object], version: str, dest: Path) -> None:
    target = dest / name
    if target.exists():
        shutil.rmtree(target)
    checkpoint = Path(str(facts["checkpoint"]))
    job_dir = checkpoint.parent
    dest_job = target / "checkpoints" / job_dir.name
    shutil.copytree(checkpoint, dest_job / checkpoint.name)
    if (job_dir / "shared").is_dir() and any((job_dir / "shared").iterdir()):
        shutil.copytree(job_dir / "shared", dest_job / "shared")
    savepoints = {}
    for kind, url in dict(facts["savepoints"]).items():  # type: ignore[call-overload]
        source = _local(str(url))
        shutil.copytree(source, target / "savepoints" / source.name)
        savepoints[kind] = f"savepoints/{source.name}"
    info = {"flink": version, "job_id": job_dir.name, "work_dir": str(work),
            "checkpoint": f"checkpoints/{job_dir.name}/{checkpoint.name}", "savepoints": savepoints}
    (target / "facts.json").write_text(json.dumps(info, indent=2) + "\n")
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    print(f"{name}: {size / 1024:.0f} KiB", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", choices=sorted(FIXTURES))
    parser.add_argument("--keep-work", action="store_true", help="keep the /tmp work directories")
    parser.add_argument("--dest", type=Path, default=ROOT / "tests" / "golden",
                        help="where the fixtures go (default: tests/golden)")
    args = parser.parse_args()
    for name in args.only or FIXTURES:
        venv_name, version, backend, inline, plan = FIXTURES[name]
        venv = ROOT / venv_name
        if not (venv / "bin" / "python").exists():
            raise SystemExit(f"{venv} is missing: run scripts/install_pyflink.sh {version}")
        work = Path(tempfile.mkdtemp(prefix="statekit-flink-fixture-"))
        try:
            facts = run_job(venv, work, backend, inline, plan)
            copy_fixture(name, work, facts, version, args.dest)
        finally:
            if not args.keep_work:
                shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
