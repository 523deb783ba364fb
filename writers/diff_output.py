"""``statekit diff`` on this machine, and its ``-o`` directory: every differing entry as Parquet.

Layout (like ``statekit export``)::

    OUT/operator_uid=<uid>/state_name=<state>/part-00000.parquet

with the columns of :func:`statekit.readers.diff.diff_arrow_schema` (JSON text, so states of
any type share one schema, and the key group). Invariants: both savepoints are opened and
the plan is made before OUT is touched; OUT is staged by :mod:`statekit.writers.staging`, so
it appears whole when the diff finishes and not at all when it fails; a state without
differences gets no directory; the parent of a local OUT must exist (a typo is not created).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING, Any

from statekit.readers.diff import DIFF_COLUMNS, DiffInputs, DiffSpec, SavepointDiff, diff_arrow_schema, diff_locally
from statekit.readers.progress import ProgressFactory
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.layout import hive_partition_dir
from statekit.writers.staging import staged_output_dir

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["DiffOutput", "open_diff_output", "write_diff"]


def write_diff(spec: DiffSpec, progress: ProgressFactory | None = None) -> SavepointDiff:
    """Diff ``spec.a`` with ``spec.b`` on this machine; with ``spec.output``, write every
    differing entry there.

    Raises:
        StatekitError: Bad input (exit 2): a savepoint cannot be read, an unknown operator or
            state, an output that exists and is not an empty directory.
    """
    inputs = DiffInputs.open(spec)
    if spec.output is None:
        return diff_locally(inputs, progress=progress)
    with open_diff_output(spec.output, spec.storage_options, [spec.a, spec.b]) as out:
        result = diff_locally(inputs, out, progress)
    return replace(result, output=out.url)


@contextmanager
def open_diff_output(url: str, storage_options: dict[str, Any] | None = None,
                     inputs: Sequence[str] = ()) -> Iterator[DiffOutput]:
    """The staged ``-o`` directory: published at ``url`` on a clean exit, removed on failure;
    it must lie outside ``inputs`` (the savepoints compared)."""
    _, final = FileIO.for_path(url, storage_options)
    with staged_output_dir(url, storage_options, parent_must_exist=True, inputs=inputs) as (io, directory):
        yield DiffOutput(io.url(final), io, directory)


class DiffOutput:
    """The differences of a diff as Parquet files below ``directory``, one per state.

    A :class:`statekit.readers.diff.DifferenceOutput`; ``url`` is where they appear.
    """

    def __init__(self, url: str, io: FileIO, directory: str) -> None:
        self.url, self.io, self.directory = url, io, directory

    def state_writer(self, uid: str, state: str) -> StateDifferenceWriter:
        path = posixpath.join(self.directory, hive_partition_dir(uid, state), "part-00000.parquet")
        return StateDifferenceWriter(self.io, path)


class StateDifferenceWriter:
    """A Parquet file of one state's differences, created on the first row."""

    def __init__(self, io: FileIO, path: str) -> None:
        self.io, self.path = io, path
        self._context: Any = None
        self._writer: Any = None

    def __enter__(self) -> StateDifferenceWriter:
        return self

    def write_table(self, table: pa.Table) -> None:
        import pyarrow.parquet as pq

        if self._writer is None:
            self._context = self.io.open_output(self.path)
            self._writer = pq.ParquetWriter(self._context.__enter__(), diff_arrow_schema())
        self._writer.write_table(table.select(list(DIFF_COLUMNS)).cast(diff_arrow_schema()))

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._writer is not None:
            self._writer.close()
            self._context.__exit__(exc_type, exc, tb)
