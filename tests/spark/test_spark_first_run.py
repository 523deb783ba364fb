"""The first export of a session: Python workers prestarted while the driver plans
(:func:`statekit.spark.session.prestart_python_workers`), and what a Python worker imports
to unpickle the ``statekit`` data source."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import Any

import pytest

from statekit.spark.session import PRESTART_CONF, _run_prestart, prestart_python_workers
from statekit.spark.source import _repeated, read_state

pytestmark = pytest.mark.spark


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _descends_from(pid: int, ancestor: int) -> bool:
    try:
        while pid > 1:
            pid = _parent(pid)
            if pid == ancestor:
                return True
    except OSError:
        return False
    return False


def _udf_worker_processes() -> set[int]:
    """This test process's Spark Python UDF worker processes: the ``pyspark.worker`` daemons and their workers."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = [a for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        if b"pyspark.daemon" in argv and argv[-1] == b"pyspark.worker" and _descends_from(int(entry), os.getpid()):
            found.add(int(entry))
    return found


def test_the_data_source_read_reuses_the_prestarted_workers(spark: Any, sample: str) -> None:
    _run_prestart(spark)
    prestarted = _udf_worker_processes()
    assert len(prestarted) >= 1 + spark.sparkContext.defaultParallelism  # a daemon and one worker per core
    assert len(read_state(spark, sample, "counter", "count").collect()) == 500
    assert _udf_worker_processes() == prestarted  # no new daemon, no new worker: the read ran in them


def test_prestart_runs_once_per_application(spark: Any) -> None:
    first = prestart_python_workers(spark)  # None when an export of this session prestarted already
    if first is not None:
        first.join(timeout=120)
        assert not first.is_alive()
    assert prestart_python_workers(spark) is None


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class _Context:
    defaultParallelism = 2

    def __init__(self, master: str, conf: dict[str, str], app: str) -> None:
        self.master, self.applicationId, self._conf = master, app, _Conf(conf)
        self.jobs = 0

    def getConf(self) -> _Conf:
        return self._conf



class _Session:
    def __init__(self, master: str = "local[2]", conf: dict[str, str] | None = None, app: str = "app-1") -> None:
        self.sparkContext = _Context(master, conf or {}, app)

    def range(self, *args: int) -> Any:
        self.sparkContext.jobs += 1
        raise RuntimeError("no cluster here")  # the prestart swallows a failing job


@pytest.mark.parametrize("session", [
    _Session(master="spark://127.0.0.1:7077", app="app-cluster"),
    _Session(conf={PRESTART_CONF: "false"}, app="app-off"),
    _Session(conf={"spark.python.worker.reuse": "false"}, app="app-no-reuse"),
], ids=["cluster-master", "turned-off", "no-worker-reuse"])
def test_prestart_is_skipped_where_it_cannot_help(session: _Session) -> None:
    assert prestart_python_workers(session) is None  # type: ignore[arg-type]
    assert session.sparkContext.jobs == 0


def test_a_failing_prestart_job_is_swallowed() -> None:
    session = _Session(app="app-failing")
    thread = prestart_python_workers(session)  # type: ignore[arg-type]
    assert isinstance(thread, threading.Thread)
    thread.join(timeout=30)
    assert not thread.is_alive() and session.sparkContext.jobs == 1


def test_a_planner_worker_imports_neither_the_snapshot_reader_nor_fsspec() -> None:
    code = (
        "import json, sys\n"
        "import statekit.spark.source as source\n"
        "heavy = ('fsspec', 'statekit.readers.savepoint_reader', 'statekit.statefmt.fileio', 'pandas')\n"
        "at_import = [m for m in heavy if m in sys.modules]\n"
        "import pyarrow as pa\n"
        "assert list(source.prestart_worker(iter([pa.record_batch({'id': [1, 2]})]))) == []\n"
        "print(json.dumps([at_import, [m for m in heavy[:3] if m in sys.modules]]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    at_import, after_prestart = json.loads(done.stdout)
    assert at_import == []
    assert after_prestart == ["fsspec", "statekit.readers.savepoint_reader", "statekit.statefmt.fileio"]


def test_repeated_columns_are_int32_runs() -> None:
    column = _repeated([(3, 2), (5, 0), (7, 3)])
    assert str(column.type) == "int32" and column.to_pylist() == [3, 3, 7, 7, 7]
    assert _repeated([]).to_pylist() == [] and str(_repeated([]).type) == "int32"
