"""Spark without the wait: the export of N rows on each engine, and the second export on the
server of ``statekit spark start`` against the warm export of a long-lived session.

Printed, each measured in this run (one machine, one load):

* ``warm in-session``: the second ``export`` in one Python process holding one Spark session
  (``local[*]``), the floor of any Spark export here (the baseline);
* ``statekit spark start``: the server's start (once), then two ``statekit export --engine
  spark`` commands, each a new process (Python start, the Connect client, the export) — the
  second is what a user pays once the server runs; its ratio to the warm in-session export is
  the figure (goal: ≤ 1.5×);
* ``cold CLI, no server``: one ``statekit export --engine spark`` paying its own session start;
* ``local engine``: ``statekit export --engine local`` (pyarrow, no JVM);
* ``--remote`` to a port where nothing listens: seconds until exit 2;
* Ctrl-C: seconds from a SIGINT to a ``statekit export --engine spark`` (mid-job) until it
  exited, and whether any of its JVM and Python workers outlived it.

Usage: python bench/spark_server_bench.py [--entries 1000000] [--master local[*]] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from proc_stats import descendants

IN_SESSION = """
import sys, time
from statekit.spark.engine import export
from statekit.spark.export import ExportSpec
from statekit.spark.session import SparkSettings
settings = SparkSettings(sys.argv[2])
settings.session()
times = []
for n in range(3):
    start = time.perf_counter()
    export(ExportSpec(sys.argv[1], f"{sys.argv[3]}-{n}", spark=settings), "spark")
    times.append(time.perf_counter() - start)
print(" ".join(f"{t:.3f}" for t in times))
"""


def statekit(runtime: str, *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    env = {**os.environ, "STATEKIT_RUNTIME_DIR": runtime, "SPARK_LOCAL_IP": "127.0.0.1"}
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "statekit.cli.main", *args], env=env, capture_output=True,
                            text=True, check=False)
    return time.perf_counter() - start, result


def checked(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    if result.returncode != 0:
        raise SystemExit(f"failed ({result.returncode}): {' '.join(result.args)}\n{result.stderr[-2000:]}")
    return result


def interrupted_export(savepoint: str, out: str, master: str, runtime: str) -> tuple[float, int, int]:
    """(seconds from SIGINT to exit, exit code, processes left) of an export interrupted mid-job."""
    env = {**os.environ, "STATEKIT_RUNTIME_DIR": runtime, "SPARK_LOCAL_IP": "127.0.0.1"}
    process = subprocess.Popen([sys.executable, "-m", "statekit.cli.main", "export", savepoint, "-o", out,
                                "--engine", "spark", "--master", master], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    while True:
        family = descendants(process.pid)
        commands = []
        for pid in family:
            try:
                commands.append(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"))
            except OSError:
                continue
        if any(b"pyspark.worker" in c for c in commands):
            break
        if process.poll() is not None:
            raise SystemExit("the export ended before its Spark tasks were seen")
        time.sleep(0.1)
    time.sleep(1.0)
    family = descendants(process.pid)
    start = time.perf_counter()
    process.send_signal(signal.SIGINT)
    code = process.wait()
    took = time.perf_counter() - start
    time.sleep(0.5)
    left = {pid for pid in family if os.path.exists(f"/proc/{pid}")
            and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"}
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return took, code, len(left)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    from statekit.statefmt.metadata import StateDescriptor, StateKind
    from statekit.writers.savepoint_writer import SavepointWriter

    work = args.dir or tempfile.mkdtemp(prefix="statekit-server-bench-")
    os.makedirs(work, exist_ok=True)
    runtime = os.path.join(work, "runtime")
    os.makedirs(runtime, mode=0o700, exist_ok=True)
    savepoint = os.path.join(work, "savepoint")
    try:
        count = StateDescriptor("count", StateKind.VALUE, value_type="int")
        SavepointWriter.new_savepoint(128).with_operator(
            "counter", {count: [(f"key-{i:08d}", i) for i in range(args.entries)]}, parallelism=2).write(savepoint)
        n = f"{args.entries:,} rows"

        in_session = checked(subprocess.run([sys.executable, "-c", IN_SESSION, savepoint, args.master,
                                             os.path.join(work, "in-session")], capture_output=True, text=True,
                                            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}))
        first, *warm_runs = (float(t) for t in in_session.stdout.split())
        warm = min(warm_runs)
        print(f"in-session exports ({args.master}), {n}: first {first:.2f} s, then "
              + ", ".join(f"{t:.2f} s" for t in warm_runs) + f"; warm = {warm:.2f} s (the baseline)")

        cold, result = statekit(runtime, "export", savepoint, "-o", os.path.join(work, "cold"), "--engine", "spark",
                                "--master", args.master)
        checked(result)
        print(f"cold CLI export, no server: {cold:.2f} s = {cold / warm:.2f}x warm")

        start_s, result = statekit(runtime, "spark", "start", "--master", args.master, "--json")
        url = json.loads(checked(result).stdout)["server"]["url"]
        print(f"statekit spark start: {start_s:.2f} s ({url})")
        try:
            seconds = []
            for i in range(3):
                took, result = statekit(runtime, "export", savepoint, "-o", os.path.join(work, f"server-{i}"),
                                        "--engine", "spark", "--json")
                assert json.loads(checked(result).stdout)["master"] == url
                seconds.append(took)
            print("CLI exports on the server: " + ", ".join(f"{s:.2f} s" for s in seconds)
                  + f"; the second = {seconds[1] / warm:.2f}x warm in-session (goal <= 1.5x), "
                  f"the first {seconds[0] / warm:.2f}x, the third {seconds[2] / warm:.2f}x")
        finally:
            checked(statekit(runtime, "spark", "stop")[1])

        local, result = statekit(runtime, "export", savepoint, "-o", os.path.join(work, "local"), "--engine", "local")
        checked(result)
        print(f"local engine (pyarrow, no JVM): {local:.2f} s = {local / warm:.2f}x warm in-session Spark")

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        dead, result = statekit(runtime, "export", savepoint, "-o", os.path.join(work, "dead"), "--remote",
                                f"sc://127.0.0.1:{port}")
        print(f"--remote sc://127.0.0.1:{port} (nothing listens): exit {result.returncode} after {dead:.2f} s: "
              f"{result.stderr.strip()[:110]}")

        took, code, left = interrupted_export(savepoint, os.path.join(work, "interrupted"), args.master, runtime)
        print(f"Ctrl-C mid-export: exit {code} after {took:.2f} s, {left} process(es) of it left")
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
