"""Export state to Parquet through Spark (``statekit export``).

Layout of the output directory (Hive partitions, one directory per state)::

    OUT/operator_uid=<uid>/state_name=<state>/part-*.parquet

Columns: ``key``, ``namespace``, ``user_key``, ``value``, ``expiry``, ``key_group``,
``subtask`` — typed as the ``statekit`` data source types them
(:mod:`statekit.readers.typed_columns`); each state directory has its own schema.
Operator state exports with null key, namespace and key group (broadcast state: one copy,
its keys in ``user_key``).

Atomicity: Spark writes every state into a hidden directory beside OUT
(``.<name>.inprogress-<id>``); only when all states are written is it renamed to OUT. A
failed export removes the hidden directory and leaves nothing at OUT. Paths without a
scheme (or ``file://``) are published with an atomic local rename; other Hadoop
filesystems (``hdfs://``, ``s3a://``) through Hadoop's rename.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statekit.readers.diff import hive_partition_dir
from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.errors import BadInputError, StateNotFoundError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["ExportedState", "ExportResult", "export_savepoint", "selected_states", "ProgressFactory", "OutputDir"]

FORMATS = ("parquet",)
Progress = Callable[[str, int], None]
ProgressFactory = Callable[..., AbstractContextManager[Progress]]


@dataclass(frozen=True)
class ExportedState:
    operator_uid: str
    state_name: str
    kind: str
    path: str
    rows: int | None
    files: int | None

    def to_json(self) -> dict[str, Any]:
        return {"operator_uid": self.operator_uid, "state_name": self.state_name, "kind": self.kind,
                "path": self.path, "rows": self.rows, "files": self.files}


@dataclass(frozen=True)
class ExportResult:
    source: str
    output: str
    format: str
    master: str
    states: tuple[ExportedState, ...]
    seconds: float

    @property
    def rows(self) -> int | None:
        counts = [s.rows for s in self.states]
        return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "output": self.output, "format": self.format, "master": self.master,
                "rows": self.rows, "seconds": round(self.seconds, 3), "states": [s.to_json() for s in self.states]}


def selected_states(reader: SavepointReader, operator: str | None, state: str | None) -> list[tuple[str, str, str]]:
    """(uid, state, kind) of every state to export; unknown names are bad input."""
    ops = [reader.operator(operator)] if operator else list(reader.operators)
    chosen = [(op.uid, d.name, d.kind.value) for op in ops for d in op.states if state in (None, d.name)]
    if state and not chosen:
        where = f"operator {operator!r}" if operator else "any operator"
        raise StateNotFoundError(f"no state named {state!r} in {where}")
    if not chosen:
        raise BadInputError("nothing to export: the savepoint holds no state", path=reader.path)
    for uid, name, _ in chosen:
        reader.codec(uid, name)  # refuses pickle without --trust-pickle before Spark starts
    return chosen


def export_savepoint(
    path: str,
    output: str,
    *,
    operator: str | None = None,
    state: str | None = None,
    master: str = "local[*]",
    conf: Mapping[str, str] | None = None,
    fmt: str = "parquet",
    include_expired: bool = False,
    trust_pickle: bool = False,
    storage_options: dict[str, Any] | None = None,
    verbose: bool = False,
    progress: ProgressFactory | None = None,
) -> ExportResult:
    """Export all (or the chosen) states of a savepoint to Parquet through Spark.

    Args:
        path: savepoint/checkpoint path or fsspec URL (read by the executors through fsspec).
        output: new directory (a local path or a Hadoop filesystem URL); must not exist or be empty.
        operator, state: export only this operator and/or state name.
        master, conf: Spark master and extra configuration (embedded ``local[*]`` by default).
        fmt: output format (``parquet``).
        include_expired: keep entries whose TTL has expired.
        trust_pickle: allow decoding pickle-serialized state.
        storage_options: fsspec options for reading ``path`` (driver and executors).
        verbose: show Spark's logs.
        progress: ``Output.progress``-like factory; advanced once per exported state.

    Raises:
        BadInputError: unknown format, existing output, unknown operator or state.
        SparkJobError: the Spark job failed for a reason outside statekit.
    """
    if fmt not in FORMATS:
        raise BadInputError(f"unsupported export format {fmt!r} (supported: {', '.join(FORMATS)})")
    started = time.monotonic()
    reader = SavepointReader.read(path, trust_pickle=trust_pickle, storage_options=storage_options)
    states = selected_states(reader, operator, state)
    from statekit.readers.spark_session import get_spark, spark_errors

    spark = get_spark(master, conf, verbose)
    target = OutputDir.for_url(spark, output)
    exported: list[ExportedState] = []
    options = {"includeExpired": str(include_expired).lower(), "trustPickle": str(trust_pickle).lower()}
    with spark_errors(verbose), target.staged() as staging, _progress(progress, len(states)) as advance:
        for uid, name, kind in states:
            relative = hive_partition_dir(uid, name)
            _write_state(spark, reader.path, uid, name, target.join(staging, relative), storage_options, options)
            exported.append(ExportedState(uid, name, kind, relative, *target.count(staging, relative)))
            advance(f"{uid}/{name}", 1)
    return ExportResult(reader.path, target.url, fmt, spark.sparkContext.master, tuple(exported),
                        time.monotonic() - started)


@contextmanager
def _progress(factory: ProgressFactory | None, total: int) -> Iterator[Progress]:
    if factory is None:
        yield lambda _name, _amount: None
        return
    with factory(f"exporting {total} state(s)", total=total, unit="items") as advance:
        yield advance


def _write_state(spark: SparkSession, source: str, uid: str, name: str, target: str,
                 storage_options: dict[str, Any] | None, options: dict[str, str]) -> None:
    from statekit.readers.spark_source import read_state

    frame = read_state(spark, source, uid, name, storage_options=storage_options, **options)
    frame.write.mode("errorifexists").parquet(target)


# ---------------------------------------------------------------- the output directory


class OutputDir:
    """The export target and its hidden staging sibling, on the local disk or a Hadoop filesystem."""

    def __init__(self, url: str, spark: SparkSession | None = None) -> None:
        self.url = url
        self._spark = spark

    @classmethod
    def for_url(cls, spark: SparkSession, url: str) -> OutputDir:
        if not url:
            raise BadInputError("empty output path")
        if "://" not in url or url.startswith("file://"):
            return _LocalOutputDir(os.path.abspath(url.removeprefix("file://")))
        return _HadoopOutputDir(url.rstrip("/"), spark)

    def join(self, directory: str, relative: str) -> str:
        return f"{directory.rstrip('/')}/{relative}"

    def staging_name(self) -> str:
        parent, name = self.url.rstrip("/").rsplit("/", 1)
        return f"{parent}/.{name}.inprogress-{uuid.uuid4().hex[:12]}"

    @contextmanager
    def staged(self) -> Iterator[str]:
        """Yield the staging directory; publish it as the output on a clean exit, else remove it."""
        self.check()
        staging = self.staging_name()
        try:
            yield staging
            self.publish(staging)
        except BaseException:
            self.remove(staging)
            raise

    def check(self) -> None:
        raise NotImplementedError

    def publish(self, staging: str) -> None:
        raise NotImplementedError

    def remove(self, path: str) -> None:
        raise NotImplementedError

    def count(self, staging: str, relative: str) -> tuple[int | None, int | None]:
        return None, None


class _LocalOutputDir(OutputDir):
    def check(self) -> None:
        if os.path.exists(self.url):
            if not os.path.isdir(self.url):
                raise BadInputError("output exists and is a file", path=self.url)
            if os.listdir(self.url):
                raise BadInputError("output directory exists and is not empty; choose a new path", path=self.url)
        parent = os.path.dirname(self.url)
        if not os.path.isdir(parent):
            raise BadInputError("the output's parent directory does not exist", path=self.url)

    def publish(self, staging: str) -> None:
        if os.path.isdir(self.url):
            os.rmdir(self.url)  # empty, checked before the export
        os.replace(staging, self.url)

    def remove(self, path: str) -> None:
        import shutil

        shutil.rmtree(path, ignore_errors=True)

    def count(self, staging: str, relative: str) -> tuple[int | None, int | None]:
        import pyarrow.parquet as pq

        directory = os.path.join(staging, relative)
        files = [f for f in sorted(os.listdir(directory)) if f.endswith(".parquet")]
        return sum(pq.ParquetFile(os.path.join(directory, f)).metadata.num_rows for f in files), len(files)


class _HadoopOutputDir(OutputDir):
    """Publishing through Hadoop's FileSystem (atomic on HDFS; a copy on object stores)."""

    def _fs_path(self, url: str) -> tuple[Any, Any]:
        assert self._spark is not None
        jvm = self._spark.sparkContext._jvm
        assert jvm is not None
        path = jvm.org.apache.hadoop.fs.Path(url)
        return path.getFileSystem(self._spark.sparkContext._jsc.hadoopConfiguration()), path

    def check(self) -> None:
        from statekit.readers.spark_session import spark_errors

        with spark_errors():
            fs, path = self._fs_path(self.url)
            if fs.exists(path) and (not fs.getFileStatus(path).isDirectory() or fs.listStatus(path)):
                raise BadInputError("output exists and is not an empty directory; choose a new path", path=self.url)

    def publish(self, staging: str) -> None:
        fs, path = self._fs_path(self.url)
        if fs.exists(path):
            fs.delete(path, True)
        if not fs.rename(self._fs_path(staging)[1], path):
            raise BadInputError("cannot publish the export (rename failed)", path=self.url)

    def remove(self, path: str) -> None:
        try:
            fs, hadoop_path = self._fs_path(path)
            fs.delete(hadoop_path, True)
        except Exception:  # noqa: BLE001 - best effort cleanup after a failure
            pass
