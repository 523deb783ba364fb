"""``bootstrap``: a new savepoint (or a new operator in a copy of one) from Parquet, CSV or
JSON-lines rows — the writer side of the State Processor API.

Keyed state streams: the input is read batch by batch (``pyarrow.dataset``), each batch is
encoded with the declared serializers and type, and the encoded entries go through
:class:`~statekit.writers.key_group_sorter.KeyGroupSorter` (spill per bucket of key groups,
then sort per bucket), so memory stays bounded whatever the input size. Operator state
(``operator-list``, ``union``, ``broadcast``) is small by nature and is collected in memory.

Row semantics per kind:

* ``value`` / ``reducing`` / ``aggregating``: one entry per (key, namespace); a later row for
  the same key replaces an earlier one.
* ``list``: a list-typed value column gives the whole list per row (the last row wins);
  any other value column gives one element per row, and the rows of one key are appended
  in input order.
* ``map``: one entry per (key, namespace, user key); the last row wins.
* ``operator-list`` / ``union``: one element per row, in input order, split evenly over the
  subtasks (union: restore gives every subtask all of them).
* ``broadcast``: one map entry per row (user key -> value), copied to every subtask.

Several ``value_columns`` make a struct value (``struct<a:T,b:U>``). The declared type
defaults to what the Arrow schema says; a declared primitive type casts the column.
"""

from __future__ import annotations

import importlib
import inspect
import posixpath
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt import layout
from statekit.statefmt.entries import StateCodec
from statekit.statefmt.errors import BadInputError, PathNotFoundError
from statekit.statefmt.fileio import FileInfo, FileIO
from statekit.statefmt.keygroups import (
    KeyGroupRange,
    check_parallelism,
    compute_default_max_parallelism,
    compute_key_group_range_for_operator_index,
)
from statekit.statefmt.metadata import (
    CheckpointMetadata,
    OperatorMetadata,
    SnapshotFormat,
    SnapshotKind,
    StateDescriptor,
    StateFile,
    StateKind,
    SubtaskState,
)
from statekit.statefmt.serializers import get_serializer
from statekit.statefmt.value_types import ValueType, parse_value_type, to_arrow_type
from statekit.writers.key_group_sorter import DEFAULT_MEMORY_BUDGET, DuplicateMode, KeyGroupSorter
from statekit.writers.operator_copy import copy_operator
from statekit.writers.operator_state_redistribution import split_counts
from statekit.readers.progress import Advance, ProgressFactory, no_progress
from statekit.writers.savepoint_writer import new_job_id
from statekit.writers.staging import staged_output_dir
from statekit.writers.state_writer import commit_metadata, write_keyed_file, write_operator_file

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as ds

__all__ = ["BootstrapReport", "BootstrapSubtask", "bootstrap_savepoint", "INPUT_FORMATS", "ENGINES"]

INPUT_FORMATS = ("parquet", "csv", "json")
ENGINES = ("local", "spark")
_EXTENSIONS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".json": "json",
               ".jsonl": "json", ".ndjson": "json"}
_PRIMITIVES = {"int", "float", "string", "bool", "bytes", "timestamp"}



@dataclass(frozen=True)
class BootstrapSubtask:
    index: int
    key_group_range: KeyGroupRange
    bytes: int
    entries: int

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "key_group_range": self.key_group_range.to_list(),
                "bytes": self.bytes, "entries": self.entries}


@dataclass
class BootstrapReport:
    """What ``bootstrap`` wrote."""

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

    @property
    def entries(self) -> int:
        return sum(s.entries for s in self.subtasks)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.subtasks)

    def to_json(self) -> dict[str, Any]:
        return {
            "output": self.output, "from_savepoint": self.from_savepoint, "engine": self.engine,
            "uid": self.uid, "state": self.state, "kind": self.kind,
            "parallelism": self.parallelism, "max_parallelism": self.max_parallelism,
            "key_serializer": self.key_serializer, "value_serializer": self.value_serializer,
            "value_type": self.value_type, "user_key_type": self.user_key_type,
            "input_format": self.input_format, "inputs": self.inputs,
            "rows_read": self.rows_read, "entries": self.entries, "bytes": self.bytes,
            "copied_operators": self.copied_operators,
            "subtasks": [s.to_json() for s in self.subtasks], "elapsed_s": round(self.elapsed_s, 3),
        }


# ---------------------------------------------------------------- options


@dataclass(frozen=True)
class _Spec:
    uid: str
    descriptor: StateDescriptor
    key_column: str | None
    value_columns: tuple[str, ...]
    user_key_column: str | None
    namespace_column: str | None
    key_serializer: str
    parallelism: int
    max_parallelism: int
    name: str

    @property
    def kind(self) -> StateKind:
        return self.descriptor.kind

    @property
    def columns(self) -> list[str]:
        named = [self.key_column, self.namespace_column, self.user_key_column, *self.value_columns]
        return list(dict.fromkeys(c for c in named if c))


def _parse_kind(kind: str | StateKind) -> StateKind:
    try:
        return StateKind(kind)
    except ValueError:
        known = ", ".join(k.value for k in StateKind)
        raise BadInputError(f"--kind {kind!r}: unknown state kind (kinds: {known})") from None


def _check_columns(kind: StateKind, key_column: str | None, value_columns: Sequence[str],
                   user_key_column: str | None, namespace_column: str | None) -> None:
    if not value_columns:
        raise BadInputError("give at least one --value-column")
    if kind.keyed and not key_column:
        raise BadInputError(f"{kind.value} state is keyed: give --key-column")
    if not kind.keyed and (key_column or namespace_column):
        raise BadInputError(f"{kind.value} state is operator state (not keyed): drop --key-column/--namespace-column")
    if kind.has_user_key and not user_key_column:
        raise BadInputError(f"{kind.value} state needs --user-key-column (the map key)")
    if not kind.has_user_key and user_key_column:
        raise BadInputError(f"--user-key-column is only for map and broadcast state, not {kind.value}")


# ---------------------------------------------------------------- input


def _input_files(inputs: Sequence[str], input_format: str | None,
                 storage_options: dict[str, Any] | None) -> tuple[FileIO, list[FileInfo], str]:
    if not inputs:
        raise BadInputError("give --input (a file or a directory of Parquet, CSV or JSON-lines files)")
    io: FileIO | None = None
    files: list[FileInfo] = []
    for url in inputs:
        this_io, path = FileIO.for_path(url, storage_options)
        if io is not None and this_io.protocol != io.protocol:
            raise BadInputError("all --input paths must be on one filesystem", path=url)
        io = this_io
        if not io.exists(path):
            raise PathNotFoundError("no such file or directory", path=io.url(path))
        if io.isdir(path):
            found = sorted((f for f in io.walk_files(path) if not _hidden(path, f.path)), key=lambda f: f.path)
            if input_format is None:
                known = [f for f in found if _extension_format(f.path)]
            else:
                known = [f for f in found if _extension_format(f.path) == input_format] or found
            files.extend(known or found)
        else:
            files.append(io.info(path))
    assert io is not None
    if not files:
        raise BadInputError("no input files found", path=inputs[0])
    fmt = input_format or _extension_format(files[0].path)
    if fmt is None:
        raise BadInputError(
            f"cannot tell the format of {io.url(files[0].path)} from its name; pass --input-format parquet|csv|json"
        )
    if fmt not in INPUT_FORMATS:
        raise BadInputError(f"--input-format {fmt!r}: expected one of {', '.join(INPUT_FORMATS)}")
    return io, files, fmt


def _hidden(root: str, path: str) -> bool:
    relative = posixpath.relpath(path, root)
    return any(part.startswith((".", "_")) for part in relative.split("/"))


def _extension_format(path: str) -> str | None:
    return _EXTENSIONS.get(posixpath.splitext(path)[1].lower())


def _dataset(io: FileIO, files: list[FileInfo], fmt: str) -> ds.Dataset:
    import pyarrow as pa
    import pyarrow.dataset as ds

    filesystem = None
    if not io.is_local:
        from pyarrow.fs import FSSpecHandler, PyFileSystem

        filesystem = PyFileSystem(FSSpecHandler(io.fs))
    file_format: Any = {"parquet": "parquet", "csv": ds.CsvFileFormat(), "json": ds.JsonFileFormat()}[fmt]
    try:
        return ds.dataset([f.path for f in files], format=file_format, filesystem=filesystem)
    except (pa.ArrowInvalid, OSError) as exc:
        raise BadInputError(f"cannot read as {fmt}: {_one_line(exc)}", path=io.url(files[0].path)) from exc


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def _iter_batches(dataset: ds.Dataset, io: FileIO, files: list[FileInfo], fmt: str, columns: list[str],
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
    for fragment in dataset.get_fragments():
        path = fragment.path
        try:
            yield from fragment.to_batches(schema=dataset.schema, columns=columns, batch_size=batch_size,
                                           batch_readahead=1, fragment_readahead=1)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
            raise BadInputError(f"cannot read as {fmt}: {_one_line(exc)}", path=io.url(path)) from exc
        on_progress(path, sizes.get(path, 0))


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
            raise BadInputError(f"cannot read as parquet: {_one_line(exc)}", path=io.url(file.path)) from exc
        on_progress(file.path, file.size - done)


# ---------------------------------------------------------------- types


def _infer_type(arrow_type: pa.DataType, column: str) -> str | None:
    """The declared type for an Arrow type (None: any value, stored as is)."""
    import pyarrow.types as t

    if t.is_dictionary(arrow_type):
        return _infer_type(arrow_type.value_type, column)
    if t.is_boolean(arrow_type):
        return "bool"
    if t.is_integer(arrow_type):
        return "int"
    if t.is_floating(arrow_type) or t.is_decimal(arrow_type):
        return "float"
    if t.is_string(arrow_type) or t.is_large_string(arrow_type):
        return "string"
    if t.is_binary(arrow_type) or t.is_large_binary(arrow_type) or t.is_fixed_size_binary(arrow_type):
        return "bytes"
    if t.is_timestamp(arrow_type) or t.is_date(arrow_type):
        return "timestamp"
    if t.is_null(arrow_type):
        return None
    if t.is_list(arrow_type) or t.is_large_list(arrow_type):
        inner = _infer_type(arrow_type.value_type, column)
        return f"list<{inner or 'json'}>"
    if t.is_struct(arrow_type):
        fields = [arrow_type.field(i) for i in range(arrow_type.num_fields)]
        return _struct_type([(f.name, _infer_type(f.type, column)) for f in fields])
    raise BadInputError(
        f"column {column!r} has Arrow type {arrow_type}, which statekit cannot store; "
        "cast it in the input or select other columns"
    )


def _struct_type(fields: list[tuple[str, str | None]]) -> str | None:
    import re

    if not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) for name, _ in fields):
        return None  # field names the type grammar cannot spell: store as untyped values
    return "struct<" + ",".join(f"{name}:{tp or 'json'}" for name, tp in fields) + ">"


def _has_temporal(arrow_type: pa.DataType) -> bool:
    import pyarrow.types as t

    if t.is_timestamp(arrow_type) or t.is_date(arrow_type):
        return True
    if t.is_list(arrow_type) or t.is_large_list(arrow_type):
        return _has_temporal(arrow_type.value_type)
    if t.is_struct(arrow_type):
        return any(_has_temporal(arrow_type.field(i).type) for i in range(arrow_type.num_fields))
    return False


def _prepared(array: pa.Array, declared: ValueType | None, column: str) -> pa.Array:
    """The column cast to a declared primitive type, timestamps as epoch milliseconds."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.types as t

    if t.is_dictionary(array.type):
        array = array.dictionary_decode()
    if declared is not None and declared.name in _PRIMITIVES:
        target = to_arrow_type(declared)
        if array.type != target and not (declared.name == "timestamp" and t.is_timestamp(array.type)):
            try:
                array = pc.cast(array, target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise BadInputError(
                    f"column {column!r} ({array.type}) cannot be cast to the declared type {declared}: {_one_line(exc)}"
                ) from exc
    if t.is_date(array.type):
        array = pc.cast(array, pa.timestamp("ms"))
    if t.is_timestamp(array.type):
        return pc.cast(pc.cast(array, pa.timestamp("ms", tz=array.type.tz), safe=False), pa.int64())
    if t.is_decimal(array.type):
        return pc.cast(array, pa.float64())
    if _has_temporal(array.type):
        raise BadInputError(
            f"column {column!r} ({array.type}) nests timestamps or dates; cast them to int (epoch ms) in the input"
        )
    return array


# ---------------------------------------------------------------- encode


class _Encoder:
    """Arrow batches of input rows -> keyed tables (or operator elements) of one state."""

    def __init__(self, spec: _Spec, list_per_row: bool) -> None:
        self.spec = spec
        self.codec = StateCodec(spec.descriptor, spec.key_serializer if spec.kind.keyed else None, for_write=True)
        self.value_type = parse_value_type(spec.descriptor.value_type) if spec.descriptor.value_type else None
        self.user_key_type = parse_value_type(spec.descriptor.user_key_type) if spec.descriptor.user_key_type else None
        self.list_per_row = list_per_row

    def _values(self, batch: pa.RecordBatch) -> list[Any]:
        spec = self.spec
        if len(spec.value_columns) == 1:
            name = spec.value_columns[0]
            declared = None if self.list_per_row else self.value_type
            return _python(batch.column(name), declared, name)
        fields = self.value_type.fields if self.value_type and self.value_type.name == "struct" else ()
        types = dict(zip(fields, self.value_type.args)) if self.value_type and fields else {}
        columns = [_python(batch.column(n), types.get(n), n) for n in spec.value_columns]
        return [dict(zip(spec.value_columns, row)) for row in zip(*columns)]

    def keyed_table(self, batch: pa.RecordBatch, first_row: int) -> pa.Table:
        spec = self.spec
        assert spec.key_column is not None
        keys = _python(batch.column(spec.key_column), None, spec.key_column)
        _refuse_nulls(keys, spec.key_column, "key", first_row)
        values = self._values(batch)
        if spec.kind is StateKind.LIST:
            values = [[] if v is None else v for v in values] if self.list_per_row else [[v] for v in values]
        columns: list[list[Any]] = [keys]
        if spec.namespace_column:
            columns.append(_python(batch.column(spec.namespace_column), None, spec.namespace_column))
        if spec.kind is StateKind.MAP:
            assert spec.user_key_column is not None
            user_keys = _python(batch.column(spec.user_key_column), self.user_key_type, spec.user_key_column)
            _refuse_nulls(user_keys, spec.user_key_column, "user key", first_row)
            columns.append(user_keys)
        columns.append(values)
        return self.codec.encode_keyed_rows(list(zip(*columns)))

    def operator_elements(self, batch: pa.RecordBatch, first_row: int) -> list[Any]:
        values = self._values(batch)
        if self.spec.kind is not StateKind.BROADCAST:
            return values
        assert self.spec.user_key_column is not None
        keys = _python(batch.column(self.spec.user_key_column), self.user_key_type, self.spec.user_key_column)
        _refuse_nulls(keys, self.spec.user_key_column, "broadcast key", first_row)
        return list(zip(keys, values))


def _python(array: Any, declared: ValueType | None, column: str) -> list[Any]:
    import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    return _prepared(array, declared, column).to_pylist()  # type: ignore[no-any-return]


def _refuse_nulls(values: list[Any], column: str, what: str, first_row: int) -> None:
    if None in values:
        row = first_row + values.index(None)
        raise BadInputError(f"row {row}: column {column!r} (the {what}) is null; every row needs a {what}")


# ---------------------------------------------------------------- main


def bootstrap_savepoint(
    *,
    inputs: Sequence[str],
    output: str,
    uid: str,
    state: str,
    kind: str | StateKind = "value",
    key_column: str | None = None,
    value_columns: Sequence[str] = (),
    user_key_column: str | None = None,
    namespace_column: str | None = None,
    input_format: str | None = None,
    value_type: str | None = None,
    user_key_type: str | None = None,
    key_serializer: str = "msgpack",
    value_serializer: str = "msgpack",
    user_key_serializer: str = "msgpack",
    max_parallelism: int | None = None,
    parallelism: int = 1,
    name: str | None = None,
    ttl_ms: int | None = None,
    from_savepoint: str | None = None,
    storage_options: dict[str, Any] | None = None,
    output_storage_options: dict[str, Any] | None = None,
    engine: str = "local",
    batch_size: int = 65536,
    spill_dir: str | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    progress: ProgressFactory | None = None,
) -> Any:
    """Write a savepoint with one operator state bootstrapped from rows (see the module doc).

    Args:
        inputs: files or directories of Parquet, CSV or JSON-lines rows (local or fsspec URLs).
        output: the new savepoint directory (must not exist or be empty).
        uid, state, kind, name: the operator, its state name and kind.
        key_column, value_columns, user_key_column, namespace_column: the input columns.
        input_format: ``parquet|csv|json`` (default: from the file names).
        value_type, user_key_type: declared types (default: from the Arrow schema).
        key_serializer, value_serializer, user_key_serializer: serializer names.
        max_parallelism: key-group count (default: the ``from_savepoint`` operators' or
            the default for ``parallelism``).
        parallelism: subtasks of the new operator.
        ttl_ms: TTL recorded in the state descriptor.
        from_savepoint: copy this savepoint's operators into the output and add the new one.
        engine: ``local`` (pyarrow, streaming) or ``spark`` (``statekit.spark.bootstrap``).
        batch_size, spill_dir, memory_budget: streaming knobs (rows per batch, spill place, bytes in memory).
        progress: opens a progress bar (``Output.progress``), advanced in bytes of input and copies.

    Returns:
        A :class:`BootstrapReport` (the Spark engine returns its own report).
    """
    if engine not in ENGINES:
        raise BadInputError(f"--engine {engine!r}: expected one of {', '.join(ENGINES)}")
    if engine == "spark":
        return _bootstrap_with_spark(dict(
            inputs=list(inputs), output=output, uid=uid, state=state,
            kind=kind.value if isinstance(kind, StateKind) else kind,
            key_column=key_column, value_columns=list(value_columns), user_key_column=user_key_column,
            namespace_column=namespace_column, input_format=input_format, value_type=value_type,
            user_key_type=user_key_type, key_serializer=key_serializer, value_serializer=value_serializer,
            user_key_serializer=user_key_serializer, max_parallelism=max_parallelism, parallelism=parallelism,
            name=name, ttl_ms=ttl_ms, from_savepoint=from_savepoint, storage_options=storage_options,
            output_storage_options=output_storage_options,
        ))
    started = time.monotonic()
    state_kind = _parse_kind(kind)
    _check_columns(state_kind, key_column, value_columns, user_key_column, namespace_column)
    if not uid or not state:
        raise BadInputError("--uid and --state must not be empty")
    source = SavepointReader.read(from_savepoint, storage_options=storage_options) if from_savepoint else None
    if source is not None and uid in [op.uid for op in source.operators]:
        raise BadInputError(
            f"operator {uid!r} exists already (operators: {', '.join(op.uid for op in source.operators)}); "
            f"remove it first with `statekit modify --remove-operator {uid}` or choose another --uid",
            path=source.path,
        )
    max_p = max_parallelism or _default_max_parallelism(source, parallelism)
    try:
        check_parallelism(parallelism, max_p)
    except BadInputError as exc:
        raise BadInputError(f"operator {uid!r}: {exc}") from None
    io, files, fmt = _input_files(inputs, input_format, storage_options)
    dataset = _dataset(io, files, fmt)
    descriptor, list_per_row = _descriptor(dataset.schema, state, state_kind, value_columns, user_key_column,
                                           value_type, user_key_type, value_serializer, user_key_serializer,
                                           ttl_ms)
    spec = _Spec(uid, descriptor, key_column, tuple(value_columns), user_key_column, namespace_column,
                 key_serializer, parallelism, max_p, name or uid)
    missing = [c for c in spec.columns if c not in dataset.schema.names]
    if missing:
        raise BadInputError(
            f"no column {missing[0]!r} in the input (columns: {', '.join(dataset.schema.names)})",
            path=io.url(files[0].path),
        )
    for serializer in (key_serializer, value_serializer, user_key_serializer):
        get_serializer(serializer, for_write=True)
    out_io, out_path = FileIO.for_path(output, output_storage_options)
    report = BootstrapReport(
        output=out_io.url(out_path), uid=uid, state=state, kind=state_kind.value, parallelism=parallelism,
        max_parallelism=max_p, key_serializer=key_serializer if state_kind.keyed else None,
        value_serializer=value_serializer, value_type=descriptor.value_type,
        user_key_type=descriptor.user_key_type, input_format=fmt, inputs=[io.url(f.path) for f in files],
        from_savepoint=source.path if source else None,
    )
    encoder = _Encoder(spec, list_per_row)
    input_bytes = sum(f.size for f in files)
    work = input_bytes * (2 if state_kind.keyed else 1) + (sum(op.total_bytes for op in source.operators) if source else 0)
    with (progress or no_progress)("bootstrapping", total=work) as advance, \
            staged_output_dir(output, output_storage_options) as (out, directory):
        batches = _counting(_iter_batches(dataset, io, files, fmt, spec.columns, batch_size, advance), report)
        operators: list[OperatorMetadata] = []
        if source is not None:
            for op in source.operators:
                operators.append(copy_operator(source, op, out, directory, on_bytes=advance))
                report.copied_operators.append(op.uid)
        if state_kind.keyed:
            written = _write_keyed(out, directory, spec, encoder, batches, input_bytes, list_per_row,
                                   spill_dir, memory_budget, advance)
        else:
            written = _write_operator_state(out, directory, spec, encoder, batches)
        operators.append(OperatorMetadata(
            uid=uid, name=spec.name, parallelism=parallelism, max_parallelism=max_p,
            key_serializer=key_serializer if state_kind.keyed else None, states=(descriptor,),
            subtasks=tuple(SubtaskState(i, _range(spec, i), (f,)) for i, f in enumerate(written)),
        ))
        metadata = CheckpointMetadata(
            job_id=source.metadata.job_id if source else new_job_id(),
            job_name=source.metadata.job_name if source else "",
            checkpoint_id=source.metadata.checkpoint_id if source else 0,
            kind=SnapshotKind.SAVEPOINT, format=SnapshotFormat.CANONICAL,
            created_at_ms=CheckpointMetadata.now_ms(), operators=tuple(operators),
            properties={**(source.metadata.properties if source else {}), "statekit.bootstrapped": f"{uid}/{state}"},
        )
        commit_metadata(out, directory, metadata)
    report.subtasks = [BootstrapSubtask(i, _range(spec, i), f.size, f.entries) for i, f in enumerate(written)]
    report.elapsed_s = time.monotonic() - started
    return report


def _bootstrap_with_spark(arguments: dict[str, Any]) -> Any:
    try:
        importlib.import_module("pyspark")
        spark_bootstrap = importlib.import_module("statekit.spark.bootstrap")
    except ImportError:
        raise BadInputError("--engine spark needs PySpark: pip install 'statekit[spark]'") from None
    function = spark_bootstrap.bootstrap_with_spark
    parameters = inspect.signature(function).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        arguments = {k: v for k, v in arguments.items() if k in parameters}
    return function(**arguments)


def _default_max_parallelism(source: SavepointReader | None, parallelism: int) -> int:
    existing: set[int] = {op.max_parallelism for op in source.operators} if source else set()
    if len(existing) == 1:
        return next(iter(existing))
    return int(compute_default_max_parallelism(parallelism))


def _range(spec: _Spec, index: int) -> KeyGroupRange:
    return compute_key_group_range_for_operator_index(spec.max_parallelism, spec.parallelism, index)


def _counting(batches: Iterator[pa.RecordBatch], report: BootstrapReport) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield batch
        report.rows_read += batch.num_rows


def _descriptor(schema: pa.Schema, state: str, kind: StateKind, value_columns: Sequence[str],
                user_key_column: str | None, value_type: str | None, user_key_type: str | None,
                value_serializer: str, user_key_serializer: str, ttl_ms: int | None) -> tuple[StateDescriptor, bool]:
    """The state descriptor (declared types from the options or the schema) and whether a
    list state takes a whole list per row."""
    import pyarrow.types as t

    for column in [*value_columns, *([user_key_column] if user_key_column else [])]:
        if column not in schema.names:
            raise BadInputError(f"no column {column!r} in the input (columns: {', '.join(schema.names)})")
    first = schema.field(value_columns[0]).type
    list_per_row = kind is StateKind.LIST and len(value_columns) == 1 and (t.is_list(first) or t.is_large_list(first))
    if value_type is not None:
        parse_value_type(value_type)
    elif len(value_columns) == 1:
        value_type = _infer_type(first.value_type if list_per_row else first, value_columns[0])
    else:
        value_type = _struct_type([(c, _infer_type(schema.field(c).type, c)) for c in value_columns])
    if user_key_column and user_key_type is None:
        user_key_type = _infer_type(schema.field(user_key_column).type, user_key_column)
    elif user_key_type is not None:
        parse_value_type(user_key_type)
    descriptor = StateDescriptor(
        name=state, kind=kind, value_serializer=value_serializer, value_type=value_type,
        user_key_serializer=user_key_serializer if kind.has_user_key else None,
        user_key_type=user_key_type if kind.has_user_key else None, ttl_ms=ttl_ms,
    )
    return descriptor, list_per_row


def _write_keyed(io: FileIO, directory: str, spec: _Spec, encoder: _Encoder, batches: Iterator[pa.RecordBatch],
                 input_bytes: int, list_per_row: bool, spill_dir: str | None, memory_budget: int,
                 advance: Advance) -> list[StateFile]:
    mode = DuplicateMode.CONCAT_LISTS if spec.kind is StateKind.LIST and not list_per_row else DuplicateMode.LAST
    name = spec.descriptor.name
    with KeyGroupSorter(spec.max_parallelism, spec.parallelism, memory_budget=memory_budget,
                        expected_bytes=input_bytes * 2, duplicates=mode, spill_dir=spill_dir) as sorter:
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
            relative = layout.state_file_path(spec.uid, name, i, spec.parallelism)
            return write_keyed_file(io, directory, relative, name, _advancing(blocks, on_rows))

        files = sorter.drain(write)
        advance(name, input_bytes - ticked[0])  # rows merged away (duplicates) still took work
        return files


def _advancing(blocks: Iterator[tuple[int, pa.RecordBatch]],
               on_rows: Callable[[int], None]) -> Iterator[tuple[int, pa.RecordBatch]]:
    for key_group, batch in blocks:
        on_rows(batch.num_rows)
        yield key_group, batch


def _write_operator_state(io: FileIO, directory: str, spec: _Spec, encoder: _Encoder,
                          batches: Iterator[pa.RecordBatch]) -> list[StateFile]:
    elements: list[Any] = []
    row = 0
    for batch in batches:
        elements.extend(encoder.operator_elements(batch, row))
        row += batch.num_rows
    name = spec.descriptor.name
    if spec.kind is StateKind.BROADCAST:
        try:
            pairs = dict(elements)
        except TypeError as exc:
            raise BadInputError(f"broadcast keys must be scalars: {exc}") from None
        parts = [list(pairs.items())] * spec.parallelism
    else:
        parts, start = [], 0
        for count in split_counts(len(elements), spec.parallelism):
            parts.append(elements[start:start + count])
            start += count
    return [
        write_operator_file(io, directory, layout.state_file_path(spec.uid, name, i, spec.parallelism), name,
                            encoder.codec.encode_operator_elements(part))
        for i, part in enumerate(parts)
    ]
