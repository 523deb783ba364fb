"""``statekit rescale --max-parallelism M2 --engine spark`` of a statekit savepoint.

The rescale is :func:`statekit.writers.rescale.rescale_savepoint`; only its regrouping of
keyed state runs on Spark (its ``regroup_state`` seam): for each keyed state, **one task per
target subtask** (one key-group range of the new max parallelism) opens the savepoint and reads
only the old blocks that can hold its key groups
(:func:`~statekit.writers.rescale.needed_key_groups`: when ``M2`` divides ``M``, the old key
groups ``g`` with ``g % M2`` in its range; when ``M`` divides ``M2``, ``t % M`` of its new key
groups ``t``; otherwise all), keeps the entries whose ``key_hash % M2`` falls in its range
(a vectorized Arrow filter: the key hash is stored with every entry), sorts them with bounded
memory and writes its file into the staged output directory. The driver writes operator
state, copies, and ``_metadata`` last, as the local engine does; the files are the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from statekit.readers.savepoint_reader import SavepointReader
from statekit.spark.session import SparkSettings, spark_errors
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.metadata import StateFile
from statekit.writers.key_group_sorter import DEFAULT_MEMORY_BUDGET
from statekit.writers.rescale import RescaleReport, RescaleTarget, regroup_subtask_files, rescale_savepoint

__all__ = ["rescale_with_spark"]


@dataclass(frozen=True)
class _Task:
    path: str
    target: RescaleTarget
    state: str
    directory_url: str
    storage_options: dict[str, Any] | None
    output_storage_options: dict[str, Any] | None
    memory_budget: int


def _run(item: tuple[int, _Task]) -> Iterator[tuple[int, StateFile, list[int]]]:
    index, task = item
    reader = SavepointReader.read(task.path, storage_options=task.storage_options).canonical()
    io, directory = FileIO.for_path(task.directory_url, task.output_storage_options)
    file, groups = regroup_subtask_files(reader, task.target, task.state, index, io, directory, task.memory_budget)
    yield index, file, sorted(groups)


class _SparkStateRegroup:
    def __init__(self, settings: SparkSettings, memory_budget: int, storage_options: dict[str, Any] | None,
                 output_storage_options: dict[str, Any] | None) -> None:
        self.settings, self.memory_budget = settings, memory_budget
        self.storage_options, self.output_storage_options = storage_options, output_storage_options

    def __call__(self, reader: SavepointReader, target: RescaleTarget, state: str, io: FileIO,
                 directory: str) -> list[tuple[StateFile, set[int]]]:
        task = _Task(reader.path, target, state, io.url(directory), self.storage_options, self.output_storage_options,
                     self.memory_budget)
        items = [(i, task) for i in range(target.parallelism)]
        with spark_errors(self.settings.verbose):
            context = self.settings.session().sparkContext
            results = context.parallelize(items, len(items)).flatMap(_run).collect()
        by_index = {index: (file, set(groups)) for index, file, groups in results}
        return [by_index[i] for i in range(target.parallelism)]


def rescale_with_spark(path: str, output: str | None, spark: SparkSettings | None = None, *,
                       parallelism: int | None = None, operator_parallelism: dict[str, int] | None = None,
                       max_parallelism: int | None = None, memory_budget: int = DEFAULT_MEMORY_BUDGET,
                       storage_options: dict[str, Any] | None = None,
                       output_storage_options: dict[str, Any] | None = None) -> RescaleReport:
    """Rescale a statekit savepoint with a new max parallelism, keyed state regrouped on Spark.

    Raises:
        BadInputError: No ``max_parallelism`` (a new parallelism alone copies whole blocks:
            the local engine does that at disk speed), and whatever the local engine refuses.
    """
    if max_parallelism is None:
        raise BadInputError("--engine spark regroups keyed state for a new --max-parallelism; a new parallelism "
                            "alone copies whole key-group blocks, which the local engine does at disk speed",
                            path=path)
    regroup = _SparkStateRegroup(spark or SparkSettings(), memory_budget, storage_options, output_storage_options)
    report = rescale_savepoint(path, output, parallelism=parallelism, operator_parallelism=operator_parallelism,
                               max_parallelism=max_parallelism, storage_options=storage_options,
                               output_storage_options=output_storage_options, memory_budget=memory_budget,
                               regroup_state=regroup)
    report.engine = "spark"
    return report
