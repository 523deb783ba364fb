"""``statekit spark start|status|stop``: one local Spark Connect server, found and reused by
``export``, ``diff`` and ``bootstrap`` on Spark (real processes, a real server), and the
runtime directory's safety rules."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from statekit.spark.connect_server import runtime_dir
from statekit.spark.session import connect_client_missing
from statekit.statefmt.errors import BadInputError

pytestmark = pytest.mark.spark


def statekit(runtime: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STATEKIT_RUNTIME_DIR": str(runtime), "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.run([sys.executable, "-m", "statekit.cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=600)


def as_json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if connect_client_missing():
        pytest.skip("the Spark Connect client packages (statekit[connect]) are missing")
    runtime = tmp_path_factory.mktemp("runtime")
    runtime.chmod(0o700)
    started = as_json(statekit(runtime, "spark", "start", "--master", "local[2]", "--json"))
    try:
        yield {"runtime": runtime, **started}
    finally:
        statekit(runtime, "spark", "stop")


def test_start_status_and_a_second_start(server: dict[str, Any]) -> None:
    assert server["action"] == "started" and server["running"] is True
    assert "not warmed up" not in server["message"]
    assert len(worker_daemons(server["server"]["pid"])) == 1  # the warm-up's
    info = server["server"]
    assert info["url"] == f"sc://127.0.0.1:{info['port']}" and info["master"] == "local[2]"
    assert info["python"] == sys.executable and Path(info["log"]).parent == server["runtime"]
    status = as_json(statekit(server["runtime"], "spark", "status", "--json"))
    assert (status["action"], status["server"]["pid"]) == ("running", info["pid"])
    again = as_json(statekit(server["runtime"], "spark", "start", "--json"))
    assert (again["action"], again["server"]["pid"]) == ("running", info["pid"])  # one server per user
    state = json.loads((server["runtime"] / "spark-connect.json").read_text())
    assert state["pid"] == info["pid"] and state["port"] == info["port"] and len(state["session_id"]) == 36


def test_export_diff_and_bootstrap_on_spark_run_on_the_server(server: dict[str, Any], sample: str,
                                                              tmp_path: Path) -> None:
    url = server["server"]["url"]
    exported = as_json(statekit(server["runtime"], "export", sample, "-o", str(tmp_path / "out"), "--engine",
                                "spark", "--json"))
    assert (exported["engine"], exported["master"], exported["rows"]) == ("spark", url, 674)
    local = as_json(statekit(server["runtime"], "export", sample, "-o", str(tmp_path / "local"), "--json"))
    assert [s["rows"] for s in local["states"]] == [s["rows"] for s in exported["states"]]
    diff = statekit(server["runtime"], "diff", sample, sample, "--engine", "spark", "--json")
    assert diff.returncode == 0 and json.loads(diff.stdout)["equal"] is True, diff.stderr
    rows = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"word": [f"w{i}" for i in range(500)], "n": list(range(500))}), rows)
    boot = ["bootstrap", "--input", str(rows), "--uid", "counter", "--state", "count", "--key-column", "word",
            "--value-column", "n", "-p", "3"]
    on_server = as_json(statekit(server["runtime"], *boot, "-o", str(tmp_path / "boot-spark"), "--engine", "spark",
                                 "--json"))
    on_machine = as_json(statekit(server["runtime"], *boot, "-o", str(tmp_path / "boot-local"), "--json"))
    assert on_server["engine"] == "spark" and on_server["entries"] == on_machine["entries"] == 500
    same = statekit(server["runtime"], "diff", str(tmp_path / "boot-spark"), str(tmp_path / "boot-local"))
    assert same.returncode == 0, same.stdout + same.stderr
    # every command ran in the server's one shared session: one daemon of Python workers, the
    # one the start's warm-up made (Spark Connect starts workers per session)
    assert len(worker_daemons(server["server"]["pid"])) == 1


def worker_daemons(server_pid: int) -> list[int]:
    """The server's Python worker daemons (its direct children running the daemon module)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            command = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if parent == server_pid and b"statekit.spark.worker_daemon" in command and b"pyspark.worker" in command:
            found.append(int(entry))
    return found


def test_stop_ends_the_server_and_its_workers(tmp_path: Path) -> None:
    """A server of its own (the module's keeps running for the other tests)."""
    if connect_client_missing():
        pytest.skip("the Spark Connect client packages (statekit[connect]) are missing")
    runtime = tmp_path / "runtime"
    started = as_json(statekit(runtime, "spark", "start", "--master", "local[1]", "--json"))
    pid = started["server"]["pid"]
    stopped = as_json(statekit(runtime, "spark", "stop", "--json"))
    assert (stopped["action"], stopped["server"]["pid"]) == ("stopped", pid)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    assert not (runtime / "spark-connect.json").exists()
    assert as_json(statekit(runtime, "spark", "status", "--json"))["action"] == "not_running"
    assert as_json(statekit(runtime, "spark", "stop", "--json"))["action"] == "not_running"


def test_a_runtime_directory_others_may_read_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    with pytest.raises(BadInputError, match="must belong to this user with mode 0700"):
        runtime_dir({"STATEKIT_RUNTIME_DIR": str(shared)})
    fresh = runtime_dir({"STATEKIT_RUNTIME_DIR": str(tmp_path / "fresh")})
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o700
