"""``bootstrap`` on the local engine: a new savepoint (or a new operator in a copy of one) from
Parquet, CSV or JSON-lines rows — the writer side of the State Processor API.

What to write is a :class:`~statekit.writers.bootstrap_spec.BootstrapSpec` (its module
describes the row semantics of every state kind); this module holds what every engine
shares to write one — the savepoint it extends (:func:`read_from_savepoint`), the key-group
count (:func:`target_max_parallelism`), the :class:`BootstrapReport` — and the local engine,
:func:`bootstrap_savepoint`. The engine is chosen in ``statekit.spark.engine``.

Keyed state streams: the input is read batch by batch (``pyarrow.dataset``), each batch is
encoded (:class:`~statekit.writers.row_encoding.RowEncoder`), and the encoded entries go
through :class:`~statekit.writers.key_group_sorter.KeyGroupSorter` (spill per bucket of key
groups, then sort per bucket), so memory stays bounded whatever the input size. Operator
state (``operator-list``, ``union``, ``broadcast``) is small by nature and is collected in
memory. The output appears whole (``_metadata`` last) or not at all.
"""

from __future__ import annotations

import posixpath
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from statekit.readers.progress import Advance, ProgressFactory, no_progress
from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.errors import BadInputError, PathNotFoundError
from statekit.statefmt.fileio import FileInfo, FileIO
from statekit.statefmt.json_contract import JsonShape
from statekit.statefmt.keygroups import KeyGroupRange, compute_default_max_parallelism
from statekit.statefmt.metadata import StateFile, StateKind
from statekit.writers.bootstrap_spec import BootstrapPlan, BootstrapSpec, format_from_name
from statekit.writers.key_group_sorter import DEFAULT_MEMORY_BUDGET, KeyGroupSorter
from statekit.writers.operator_copy import copy_operator
from statekit.writers.operator_state_redistribution import split_counts
from statekit.writers.row_encoding import RowEncoder, one_line, plan_bootstrap
from statekit.writers.staging import staged_output_dir
from statekit.writers.state_writer import commit_metadata, write_keyed_file, write_operator_file

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as ds

__all__ = ["BootstrapReport", "BootstrapSubtask", "bootstrap_savepoint", "read_from_savepoint",
           "target_max_parallelism", "RowInput", "RowFiles", "open_rows"]


@dataclass(frozen=True)
class BootstrapSubtask:
    index: int
    key_group_range: KeyGroupRange
    bytes: int
    entries: int


@dataclass
class BootstrapReport:
    """What ``bootstrap`` wrote (either engine)."""

    json_shape: ClassVar[JsonShape] = JsonShape(extra=("entries", "bytes"), digits={"elapsed_s": 3})

    output: str
    uid: str
    state: str
    kind: str
    parallelism: int
    max_parallelism: int
    key_serializer: str | None
    value_serializer: str
    value_type: str | None
    user_key_type: str | None
    input_format: str
    inputs: list[str]
    from_savepoint: str | None = None
    copied_operators: list[str] = field(default_factory=list)
    rows_read: int = 0
    subtasks: list[BootstrapSubtask] = field(default_factory=list)
    engine: str = "local"
    elapsed_s: float = 0.0

    @classmethod
    def start(cls, plan: BootstrapPlan, *, input_format: str, inputs: list[str], source: SavepointReader | None,
              engine: str) -> BootstrapReport:
        """The report of ``plan`` before anything is written (no subtasks, no rows yet)."""
        spec = plan.spec
        out_io, out_path = FileIO.for_path(spec.output, spec.output_storage_options)
        return cls(
            output=out_io.url(out_path), uid=spec.uid, state=spec.state, kind=spec.kind.value,
            parallelism=spec.parallelism, max_parallelism=plan.max_parallelism, key_serializer=plan.key_serializer,
            value_serializer=spec.value_serializer, value_type=plan.descriptor.value_type,
            user_key_type=plan.descriptor.user_key_type, input_format=input_format, inputs=inputs,
            from_savepoint=source.path if source else None,
            copied_operators=[op.uid for op in source.operators] if source else [], engine=engine,
        )

    def finish(self, plan: BootstrapPlan, files: Sequence[StateFile], started: float) -> BootstrapReport:
        """Record the state files written (``files[i]`` of subtask ``i``) and the time since ``started``."""
        self.subtasks = [BootstrapSubtask(i, plan.key_group_range(i), f.size, f.entries) for i, f in enumerate(files)]
        self.elapsed_s = time.monotonic() - started
        return self

    @property
    def entries(self) -> int:
        return sum(s.entries for s in self.subtasks)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.subtasks)


# ---------------------------------------------------------------- shared by the engines


def read_from_savepoint(spec: BootstrapSpec) -> SavepointReader | None:
    """The savepoint ``spec`` adds its operator to (``from_savepoint``), if any.

    Raises:
        BadInputError: It holds an operator with the spec's uid already.
    """
    if not spec.from_savepoint:
        return None
    # native keyed state is copied as canonical files (its canonical view): the output is canonical
    source = SavepointReader.read(spec.from_savepoint, storage_options=spec.storage_options).canonical()
    uids = [op.uid for op in source.operators]
    if spec.uid in uids:
        raise BadInputError(
            f"operator {spec.uid!r} exists already (operators: {', '.join(uids)}); "
            f"remove it first with `statekit modify --remove-operator {spec.uid}` or choose another --uid",
            path=source.path,
        )
    return source


def target_max_parallelism(spec: BootstrapSpec, source: SavepointReader | None) -> int:
    """The new operator's key groups: the spec's, else the source operators' (when they agree),
    else the default for the spec's parallelism."""
    if spec.max_parallelism is not None:
        return spec.max_parallelism
    existing = {op.max_parallelism for op in source.operators} if source else set()
    if len(existing) == 1:
        max_parallelism = next(iter(existing))
    else:
        max_parallelism = int(compute_default_max_parallelism(spec.parallelism))
    spec.check_parallelism(max_parallelism)
    return max_parallelism


# ---------------------------------------------------------------- the local engine


def bootstrap_savepoint(
    spec: BootstrapSpec,
    *,
    batch_size: int = 65536,
    spill_dir: str | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    progress: ProgressFactory | None = None,
) -> BootstrapReport:
    """Write the savepoint ``spec`` describes on the local engine (pyarrow, streaming).

    Args:
        spec: what to write (validated when it was made).
        batch_size: input rows per batch.
        spill_dir: where the key-group sorter spills (default: system temp).
        memory_budget: bytes of encoded entries held in memory at once.
        progress: opens a progress bar (``Output.progress``), advanced in bytes of input and copies.

    Raises:
        BadInputError: an input that does not fit the spec (missing column, unreadable file,
            a value that does not fit its declared type), or an output that is not empty.
        PathNotFoundError: an input that does not exist.
    """
    started = time.monotonic()
    source = read_from_savepoint(spec)
    max_parallelism = target_max_parallelism(spec, source)
    io, files, fmt = _input_files(spec)
    dataset = _dataset(io, files, fmt, spec.columns)
    plan = plan_bootstrap(spec, dataset.schema, max_parallelism, where=io.url(files[0].path))
    report = BootstrapReport.start(plan, input_format=fmt, inputs=[io.url(f.path) for f in files], source=source,
                                   engine="local")
    input_bytes = sum(f.size for f in files)
    operators = source.operators if source else []
    work = input_bytes * (2 if spec.kind.keyed else 1) + sum(op.total_bytes for op in operators)
    with (progress or no_progress)("bootstrapping", total=work) as advance, \
            staged_output_dir(spec.output, spec.output_storage_options, inputs=spec.sources,
                              input_storage_options=spec.storage_options) as (out, directory):
        copied = [copy_operator(source, op, out, directory, on_bytes=advance) for op in operators] if source else []
        batches = _counting(_iter_batches(dataset, io, files, fmt, spec.columns, batch_size, advance), report)
        if spec.kind.keyed:
            written = _write_keyed(out, directory, plan, batches, input_bytes, spill_dir, memory_budget, advance)
        else:
            written = _write_operator_state(out, directory, plan, batches)
        commit_metadata(out, directory, plan.metadata(source.metadata if source else None, copied, written))
    return report.finish(plan, written, started)


# ---------------------------------------------------------------- input


def _input_files(spec: BootstrapSpec | RowInput) -> tuple[FileIO, list[FileInfo], str]:
    """The input files (directories listed, hidden files skipped), their filesystem and format."""
    io: FileIO | None = None
    files: list[FileInfo] = []
    for url in spec.inputs:
        this_io, path = FileIO.for_path(url, spec.storage_options)
        if io is not None and this_io.protocol != io.protocol:
            raise BadInputError("all --input paths must be on one filesystem", path=url)
        io = this_io
        if not io.exists(path):
            raise PathNotFoundError("no such file or directory", path=io.url(path))
        files.extend(_listed(io, path, spec.input_format) if io.isdir(path) else [io.info(path)])
    assert io is not None
    if not files:
        raise BadInputError("no input files found", path=spec.inputs[0])
    return io, files, spec.format_of(io.url(files[0].path))


def _listed(io: FileIO, directory: str, input_format: str | None) -> list[FileInfo]:
    """The files of ``directory`` in the input format (every file when none has its extension)."""
    found = sorted((f for f in io.walk_files(directory) if not _hidden(directory, f.path)), key=lambda f: f.path)
    if input_format is None:
        known = [f for f in found if format_from_name(f.path)]
    else:
        known = [f for f in found if format_from_name(f.path) == input_format] or found
    return known or found


def _hidden(root: str, path: str) -> bool:
    relative = posixpath.relpath(path, root)
    return any(part.startswith((".", "_")) for part in relative.split("/"))


@dataclass(frozen=True)
class _Input:
    """The input as a dataset: ``schema`` is what planning sees; ``scan`` what is read.

    A CSV column pyarrow infers as floating point is scanned as text (``as_text``) and turned
    into floats by :func:`_checked_floats`: an integer too large for 64 bits would otherwise
    become a float unseen.
    """

    schema: pa.Schema
    scan: ds.Dataset
    as_text: tuple[str, ...] = ()


# Only an empty CSV field is null: "NaN", "NA" or "null" are values (a float NaN, text), never
# turned into nulls behind the user's back (pyarrow's default list of null spellings would).
_CSV_NULL_VALUES = [""]


def _dataset(io: FileIO, files: list[FileInfo], fmt: str, columns: Sequence[str] = ()) -> _Input:
    import pyarrow as pa
    import pyarrow.dataset as ds

    filesystem = None
    if not io.is_local:
        from pyarrow.fs import FSSpecHandler, PyFileSystem

        filesystem = PyFileSystem(FSSpecHandler(io.fs))

    def open_as(file_format: Any) -> ds.Dataset:
        try:
            return ds.dataset([f.path for f in files], format=file_format, filesystem=filesystem)
        except (pa.ArrowInvalid, OSError) as exc:
            raise BadInputError(f"cannot read as {fmt}: {one_line(exc)}", path=io.url(files[0].path)) from exc

    if fmt != "csv":
        dataset = open_as({"parquet": "parquet", "json": ds.JsonFileFormat()}[fmt])
        return _Input(dataset.schema, dataset)
    dataset = open_as(_csv_format({}))
    floats = tuple(c for c in columns if c in dataset.schema.names and pa.types.is_floating(dataset.schema.field(c).type))
    if not floats:
        return _Input(dataset.schema, dataset)
    return _Input(dataset.schema, open_as(_csv_format({c: pa.string() for c in floats})), floats)


def _csv_format(column_types: dict[str, Any]) -> Any:
    import pyarrow.csv as pcsv
    import pyarrow.dataset as ds

    return ds.CsvFileFormat(convert_options=pcsv.ConvertOptions(null_values=_CSV_NULL_VALUES,
                                                                column_types=column_types))


def _iter_batches(source: _Input, io: FileIO, files: list[FileInfo], fmt: str, columns: list[str],
                  batch_size: int, on_progress: Advance) -> Iterator[pa.RecordBatch]:
    """Input batches of ``columns``, file by file, with bounded read-ahead.

    Parquet is read with ``ParquetFile.iter_batches`` (decodes pages incrementally; a
    dataset scan would decode a whole row group at once); CSV and JSON lines stream
    through the dataset scanner block by block.
    """
    import pyarrow as pa

    if fmt == "parquet":
        yield from _parquet_batches(io, files, columns, batch_size, on_progress)
        return
    sizes = {f.path: f.size for f in files}
    for fragment in source.scan.get_fragments():
        path = fragment.path
        row = 0
        try:
            for batch in fragment.to_batches(schema=source.scan.schema, columns=columns, batch_size=batch_size,
                                             batch_readahead=1, fragment_readahead=1):
                yield _with_floats(batch, source, row, io.url(path)) if source.as_text else batch
                row += batch.num_rows
        except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
            raise BadInputError(f"cannot read as {fmt}: {one_line(exc)}", path=io.url(path)) from exc
        on_progress(path, sizes.get(path, 0))


def _with_floats(batch: pa.RecordBatch, source: _Input, first_row: int, where: str) -> pa.RecordBatch:
    """``batch`` with its text-scanned columns as the floats planning saw (:func:`_checked_floats`)."""
    import pyarrow as pa

    arrays = [
        _checked_floats(batch.column(i), name, first_row, where) if name in source.as_text else batch.column(i)
        for i, name in enumerate(batch.schema.names)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema([source.schema.field(n) for n in batch.schema.names]))


_INTEGER = r"^\s*[+-]?[0-9]+\s*$"
_INT64 = range(-(1 << 63), 1 << 63)


def _checked_floats(text: pa.Array, column: str, first_row: int, where: str) -> pa.Array:
    """A CSV column of number texts as float64, refusing an integer that does not fit 64 bits
    (pyarrow made the column floating point for it: its value would silently change type and,
    past 2**53, digits).

    Raises:
        BadInputError: Such an integer (names the file, the column and the row: the file's data
            rows counted from 0, as every bootstrap message counts rows), or a text that is no number.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    integers = pc.fill_null(pc.match_substring_regex(text, _INTEGER), False)
    if pc.any(integers).as_py():
        for index in pc.indices_nonzero(integers).to_pylist():
            value = int(text[index].as_py())
            if value not in _INT64:
                raise BadInputError(
                    f"row {first_row + index}: column {column!r} holds the integer {value}, which does not fit "
                    "a 64-bit int (statekit would store a float in its place): write it with a decimal point "
                    "(e.g. 1.0e21) to store a float", path=where)
    empty = pc.equal(pc.utf8_trim_whitespace(text), "")  # an empty field: null, as pyarrow reads numbers
    try:
        return pc.cast(pc.if_else(empty, pa.scalar(None, pa.string()), text), pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise BadInputError(f"column {column!r}: {one_line(exc)}", path=where) from exc


def _parquet_batches(io: FileIO, files: list[FileInfo], columns: list[str], batch_size: int,
                     on_progress: Advance) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    for file in files:
        done = 0
        try:
            with io.open_input(file.path) as stream:
                parquet = pq.ParquetFile(stream, pre_buffer=False, buffer_size=1 << 20)
                rows = max(1, parquet.metadata.num_rows)
                for batch in parquet.iter_batches(batch_size=batch_size, columns=columns, use_threads=False):
                    yield batch
                    step = file.size * batch.num_rows // rows
                    on_progress(file.path, step)
                    done += step
        except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
            raise BadInputError(f"cannot read as parquet: {one_line(exc)}", path=io.url(file.path)) from exc
        on_progress(file.path, file.size - done)


def _counting(batches: Iterator[pa.RecordBatch], report: BootstrapReport) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield batch
        report.rows_read += batch.num_rows


# ---------------------------------------------------------------- write


def _write_keyed(io: FileIO, directory: str, plan: BootstrapPlan, batches: Iterator[pa.RecordBatch],
                 input_bytes: int, spill_dir: str | None, memory_budget: int, advance: Advance) -> list[StateFile]:
    encoder = RowEncoder(plan)
    name = plan.descriptor.name
    with KeyGroupSorter(plan.max_parallelism, plan.parallelism, memory_budget=memory_budget,
                        expected_bytes=input_bytes * 2, duplicates=plan.duplicates, spill_dir=spill_dir) as sorter:
        row = 0
        for batch in batches:
            sorter.add(encoder.keyed_table(batch, row))
            row += batch.num_rows
        per_row = input_bytes / max(1, sorter.rows_in)
        lock = threading.Lock()
        ticked = [0]

        def on_rows(rows: int) -> None:
            with lock:
                step = min(int(rows * per_row), input_bytes - ticked[0])
                ticked[0] += step
                advance(name, step)

        def write(i: int, blocks: Iterator[tuple[int, pa.RecordBatch]]) -> StateFile:
            return write_keyed_file(io, directory, plan.file_path(i), name, _advancing(blocks, on_rows))

        files = sorter.drain(write)
        advance(name, input_bytes - ticked[0])  # rows merged away (duplicates) still took work
        return files


def _advancing(blocks: Iterator[tuple[int, pa.RecordBatch]],
               on_rows: Callable[[int], None]) -> Iterator[tuple[int, pa.RecordBatch]]:
    for key_group, batch in blocks:
        on_rows(batch.num_rows)
        yield key_group, batch


def _write_operator_state(io: FileIO, directory: str, plan: BootstrapPlan,
                          batches: Iterator[pa.RecordBatch]) -> list[StateFile]:
    encoder = RowEncoder(plan)
    elements: list[Any] = []
    row = 0
    for batch in batches:
        elements.extend(encoder.operator_elements(batch, row))
        row += batch.num_rows
    if plan.kind is StateKind.BROADCAST:
        try:
            pairs = dict(elements)
        except TypeError as exc:
            raise BadInputError(f"broadcast keys must be scalars: {exc}") from None
        parts = [list(pairs.items())] * plan.parallelism
    else:
        parts, start = [], 0
        for count in split_counts(len(elements), plan.parallelism):
            parts.append(elements[start:start + count])
            start += count
    name = plan.descriptor.name
    return [write_operator_file(io, directory, plan.file_path(i), name, encoder.codec.encode_operator_elements(part))
            for i, part in enumerate(parts)]


# ---------------------------------------------------------------- rows for other writers


@dataclass(frozen=True)
class RowInput:
    """Input rows of another writer (the Flink bootstrap): files or directories, format, fsspec options."""

    inputs: Sequence[str]
    input_format: str | None = None
    storage_options: dict[str, Any] | None = field(default=None, hash=False)

    def format_of(self, path: str) -> str:
        """The input format of the file ``path``: ``input_format``, else what its name says."""
        fmt = self.input_format or format_from_name(path)
        if fmt is None:
            raise BadInputError(f"cannot tell the format of {path} from its name; pass --input-format parquet|csv|json")
        return fmt


@dataclass(frozen=True)
class RowFiles:
    """Opened input files: their format, URLs, total size and Arrow schema; :meth:`batches` reads them."""

    io: FileIO
    files: list[FileInfo]
    format: str
    dataset: ds.Dataset

    @property
    def urls(self) -> list[str]:
        return [self.io.url(f.path) for f in self.files]

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def schema(self) -> pa.Schema:
        return self.dataset.schema

    def batches(self, columns: list[str], batch_size: int = 65536,
                advance: Advance | None = None) -> Iterator[pa.RecordBatch]:
        """Record batches of ``columns``, file by file, with bounded read-ahead (as ``bootstrap`` reads)."""
        return _iter_batches(self.dataset, self.io, self.files, self.format, columns, batch_size,
                             advance or (lambda _name, _amount: None))


def open_rows(source: RowInput) -> RowFiles:
    """The input files of ``source`` (directories listed, hidden files skipped), opened as a dataset.

    Raises:
        BadInputError: Files on several filesystems, no files, an unreadable format.
        PathNotFoundError: An input that does not exist.
    """
    if not source.inputs:
        raise BadInputError("give --input (a file or a directory of Parquet, CSV or JSON-lines files)")
    io, files, fmt = _input_files(source)
    return RowFiles(io, files, fmt, _dataset(io, files, fmt))
