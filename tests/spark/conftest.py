"""One SparkSession (local[2]) for every Spark test, and the savepoints they share."""

from __future__ import annotations

import faulthandler
import importlib.util
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekit.statefmt.entries import KeyedStateEntry
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

COUNT = StateDescriptor("count", StateKind.VALUE, value_type="int")
TAGS = StateDescriptor("tags", StateKind.MAP, value_type="struct<n:int,seen:timestamp>", user_key_type="string")
HISTORY = StateDescriptor("history", StateKind.LIST, value_type="float")
SESSION = StateDescriptor("session", StateKind.VALUE, ttl_ms=60_000)  # no declared type: JSON text
OFFSETS = StateDescriptor("offsets", StateKind.OPERATOR_LIST, value_type="int")
SEEN = StateDescriptor("seen", StateKind.UNION, value_type="string")
RULES = StateDescriptor("rules", StateKind.BROADCAST, value_type="list<int>", user_key_type="string")
NOW_MS = int(time.time() * 1000)


def sample_states() -> dict[str, dict[StateDescriptor, Any]]:
    """Every kind of state, small: operator uid -> {descriptor: data}."""
    return {
        "counter": {
            COUNT: [(f"w{i}", i) for i in range(500)],
            TAGS: [(i, f"t{j}", {"n": i * j, "seen": 1_700_000_000_000 + j}) for i in range(40) for j in range(3)],
            HISTORY: [(i, [i / 2, i / 4]) for i in range(30)],
            SESSION: [KeyedStateEntry(i, None, {"user": i, "pages": [1, 2]},
                                      NOW_MS - 10_000 if i % 4 == 0 else NOW_MS + 3_600_000) for i in range(20)],
        },
        "source": {OFFSETS: [10, 20, 30, 40, 50], SEEN: ["a", "b"], RULES: {"r1": [1, 2], "r2": []}},
    }


def write_sample(path: str, parallelism: int = 2, storage_options: dict[str, Any] | None = None) -> str:
    writer = SavepointWriter.new_savepoint(128)
    for uid, states in sample_states().items():
        writer.with_operator(uid, states, parallelism=parallelism)
    writer.write(path, storage_options=storage_options)
    return path


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    from statekit.spark.session import get_spark, stop_spark

    session = get_spark("local[2]")
    try:
        yield session
    finally:
        stop_spark()


@pytest.fixture(scope="session")
def sample(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_sample(str(tmp_path_factory.mktemp("spark") / "sample"))


def rows_by(frame: Any, *columns: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r[c] for c in columns) for r in frame.collect())


def tmp(tmp_path: Path, name: str) -> str:
    return str(tmp_path / name)


@pytest.fixture(scope="session")
def sample_writer() -> Any:
    """``write_sample(path, parallelism=2, storage_options=None)``: the sample savepoint anywhere."""
    return write_sample


@pytest.fixture(scope="session")
def now_ms() -> int:
    """The reference time of the sample's TTL expiries."""
    return NOW_MS


@pytest.fixture(autouse=True)
def _stack_dump_when_stuck() -> Iterator[None]:
    """A Spark test stuck for 5 minutes prints every Python thread's stack (CI diagnosis)."""
    faulthandler.dump_traceback_later(300, exit=False, file=sys.stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def cluster_module() -> Any:
    """``tests/spark/cluster.py``, loaded by its path (the tests run with ``--import-mode=importlib``)."""
    name = "statekit_tests_spark_cluster"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("cluster.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def cluster_helpers() -> Any:
    """The ``tests/spark/cluster.py`` module (``SparkCluster``, ``python_without_statekit``)."""
    return cluster_module()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A standalone master and two workers (1 core, 1 GiB each) on 127.0.0.1, for the whole run.

    Logs stay under the run's tmp dir (``spark-cluster*/``); the processes are stopped by
    their ids at the end, and when starting fails.
    """
    pytest.importorskip("pyspark")
    cluster = cluster_module().SparkCluster(tmp_path_factory.mktemp("spark-cluster")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def connect_server_module() -> Any:
    """``tests/spark/connect_server.py``, loaded by its path (like :func:`cluster_module`)."""
    name = "statekit_tests_spark_connect_server"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("connect_server.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Spark Connect server (master local[2]) on 127.0.0.1 whose Python workers cannot import
    statekit (it must ship itself), for the whole run; its log stays under ``spark-connect*/``.
    Skipped only when the Spark Connect client packages (the ``connect`` extra) are missing."""
    pytest.importorskip("pyspark")
    module = connect_server_module()
    missing = module.missing_client_modules()
    if missing:
        pytest.skip(f"Spark Connect client packages missing ({', '.join(missing)}): install statekit[connect]")
    directory = tmp_path_factory.mktemp("spark-connect")
    server = module.ConnectServer(directory, python=cluster_module().python_without_statekit(directory)).start()
    try:
        yield server
    finally:
        server.stop()
