"""Block encoding: how the blocks of a state file hold entries, in format versions 1 and 2.

Version 1: a block is one Arrow IPC record-batch message of a schema the file kind fixes
(keys, namespaces, user keys and values all serialized to bytes).

Version 2 (what writers produce unless told otherwise, :class:`WriteFormat`):

* the header carries the file's Arrow schema, so a file decodes without its ``_metadata``;
  the ``value`` column of a keyed file is *typed* (int64, double, string, bool, timestamp,
  list, struct, map — :class:`TypedValues`) when the state declares a type that allows it,
  serialized bytes otherwise;
* a block is an 8-byte prefix naming the optional columns present in it, then one
  record-batch message of those columns: a namespace column of only empty namespaces and a
  user-key or expiry column of only nulls is not stored and reads back as such;
* the blocks may be compressed (``lz4`` or ``zstd``: Arrow IPC buffer compression, its
  codec recorded in the header; a block that would not shrink is stored plain — every
  record-batch message names its own compression);
* entries inside a block are sorted by (key hash, key, namespace, user key).

Invariants: a header is canonical (:meth:`BlockCodec.read` re-encodes what it parsed and
refuses any other bytes), so two files' blocks are interchangeable exactly when their
headers are byte-equal — rescale copies blocks between such files without decoding them.
Every decoded block has the full logical schema (:meth:`BlockCodec.schema`), whatever
columns it stored.

pyarrow is imported lazily.
"""

from __future__ import annotations

import array
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from statekit.statefmt import layout
from statekit.statefmt.errors import BadInputError, CorruptStateError, SerializationError, UnsupportedVersionError
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.statefmt.numpy_support import numpy_or_none
from statekit.statefmt.value_types import ValueType, parse_value_type, to_arrow_type

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "WriteFormat",
    "current_write_format",
    "writing_format",
    "COMPRESSION_ENV",
    "BlockCodec",
    "TypedValues",
    "keyed_schema",
    "operator_schema",
    "python_values",
    "typed_column",
    "is_serialized",
    "empty_namespaces",
    "KEYED_COLUMNS",
    "OPERATOR_COLUMNS",
]

KEYED_COLUMNS = ("key_hash", "key", "namespace", "user_key", "value", "expiry")
OPERATOR_COLUMNS = ("key", "value")
COMPRESSION_ENV = "STATEKIT_BLOCK_COMPRESSION"
# Optional columns of a version 2 block, by prefix flag bit (the rest are always stored).
_KEYED_OPTIONAL = {"namespace": 1, "user_key": 2, "expiry": 4}
_OPERATOR_OPTIONAL = {"key": 1}
_ARROW_CODEC = {"lz4": "lz4", "zstd": "zstd"}  # IpcWriteOptions names (lz4 = the LZ4 frame format)


# ---------------------------------------------------------------- what writers write


@dataclass(frozen=True)
class WriteFormat:
    """The format version and block compression new state files are written in.

    Attributes:
        version: 2 (default) or 1 (every value serialized; no compression).
        compression: ``none``, ``lz4`` or ``zstd`` (version 2 only).
    """

    version: int = layout.STATE_FILE_VERSION
    compression: str = "none"

    def __post_init__(self) -> None:
        if self.version not in layout.STATE_FILE_VERSIONS:
            raise BadInputError(f"unknown state file version {self.version} (known: {layout.STATE_FILE_VERSIONS})")
        if self.compression not in layout.COMPRESSION_IDS:
            known = ", ".join(layout.COMPRESSION_IDS)
            raise BadInputError(f"unknown block compression {self.compression!r} (known: {known})")
        if self.version == 1 and self.compression != "none":
            raise BadInputError("state file version 1 has no block compression")


_OVERRIDE: list[WriteFormat] = []


def current_write_format() -> WriteFormat:
    """What a writer uses when not told: the innermost :func:`writing_format`, else version 2
    with the compression named by ``$STATEKIT_BLOCK_COMPRESSION`` (default ``none``)."""
    if _OVERRIDE:
        return _OVERRIDE[-1]
    named = os.environ.get(COMPRESSION_ENV, "").strip().lower() or "none"
    try:
        return WriteFormat(compression=named)
    except BadInputError as exc:
        raise BadInputError(f"${COMPRESSION_ENV}: {exc}") from None


@contextmanager
def writing_format(fmt: WriteFormat) -> Iterator[WriteFormat]:
    """Write new state files in ``fmt`` inside the block (process-wide, nests)."""
    _OVERRIDE.append(fmt)
    try:
        yield fmt
    finally:
        _OVERRIDE.pop()


# ---------------------------------------------------------------- schemas


def keyed_schema(value_type: pa.DataType | None = None) -> pa.Schema:
    """The logical schema of keyed blocks; ``value_type`` None is serialized bytes."""
    import pyarrow as pa

    return pa.schema([
        pa.field("key_hash", pa.uint32(), nullable=False),
        pa.field("key", pa.binary(), nullable=False),
        pa.field("namespace", pa.binary(), nullable=False),
        pa.field("user_key", pa.binary()),
        pa.field("value", pa.binary() if value_type is None else value_type, nullable=value_type is not None),
        pa.field("expiry", pa.int64()),
    ])


def operator_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([pa.field("key", pa.binary()), pa.field("value", pa.binary(), nullable=False)])


def is_serialized(column_type: pa.DataType) -> bool:
    """Whether a value column holds serialized bytes (else: a typed column)."""
    import pyarrow as pa

    return bool(column_type == pa.binary())


def _check_typed(arrow_type: pa.DataType, top: bool = True) -> str | None:
    """Why ``arrow_type`` cannot be a typed value column, or None when it can."""
    import pyarrow as pa
    import pyarrow.types as t

    if arrow_type in (pa.int64(), pa.float64(), pa.string(), pa.bool_(), pa.timestamp("ms", tz="UTC")):
        return None
    if arrow_type == pa.binary():
        return "binary is the serialized form at the top level" if top else None
    if t.is_list(arrow_type):
        return _check_typed(arrow_type.value_type, False)
    if t.is_struct(arrow_type):
        names = [arrow_type.field(i).name for i in range(arrow_type.num_fields)]
        if not names or len(set(names)) != len(names):
            return "a struct needs distinct field names"
        return next((r for r in (_check_typed(arrow_type.field(i).type, False) for i in range(len(names))) if r), None)
    if t.is_map(arrow_type):
        return _check_typed(arrow_type.key_type, False) or _check_typed(arrow_type.item_type, False)
    return f"type {arrow_type} is not a statekit value type"


def _physical(arrow_type: pa.DataType) -> pa.DataType:
    """``arrow_type`` with every timestamp as int64 (epoch milliseconds: what Python values hold)."""
    import pyarrow as pa
    import pyarrow.types as t

    if t.is_timestamp(arrow_type):
        return pa.int64()
    if t.is_list(arrow_type):
        return pa.list_(_physical(arrow_type.value_type))
    if t.is_struct(arrow_type):
        return pa.struct([pa.field(f.name, _physical(f.type)) for f in arrow_type])
    if t.is_map(arrow_type):
        return pa.map_(_physical(arrow_type.key_type), _physical(arrow_type.item_type))
    return arrow_type


def _has_json(value_type: ValueType) -> bool:
    return value_type.name == "json" or any(_has_json(a) for a in value_type.args)


# ---------------------------------------------------------------- typed values


@dataclass(frozen=True)
class TypedValues:
    """The values of one state as a typed Arrow column: its declared type, stored as is.

    A value reads back as the Python value of its type: ``int``, ``float`` (a declared
    float stores ints as floats), ``str``, ``bool``, ``bytes``, epoch-millisecond ``int``
    (timestamp), ``list``, ``dict`` (map, and struct with every declared field; absent
    fields are None). A value the type cannot hold (an int beyond 64 bits, a null map key)
    is refused with :class:`SerializationError` naming the state.
    """

    state: str
    value_type: ValueType
    arrow_type: pa.DataType

    @classmethod
    def for_descriptor(cls, descriptor: StateDescriptor) -> TypedValues | None:
        """The typed column of a keyed state's values, or None when they stay serialized
        (no declared type, ``json`` anywhere in it, or a top-level ``bytes``)."""
        if not descriptor.keyed or not descriptor.value_type:
            return None
        declared = parse_value_type(descriptor.value_type)
        if _has_json(declared) or declared.name == "bytes":
            return None
        if descriptor.kind is StateKind.LIST:
            declared = ValueType("list", (declared,))
        arrow_type = to_arrow_type(declared)
        if _check_typed(arrow_type) is not None:
            return None
        return cls(descriptor.name, declared, arrow_type)

    def to_arrow(self, values: list[Any]) -> pa.Array:
        """A typed column of ``values`` (each checked against the declared type)."""
        import pyarrow as pa

        reason = self.value_type.check_many(values)
        if reason:
            raise SerializationError(f"state {self.state!r}: a value does not match the declared type: {reason}")
        try:
            if _physical(self.arrow_type) == pa.int64():
                ints = _int64_array(values)  # checked above: ints (no bool) and None only
                if ints is not None:
                    return ints if self.arrow_type == pa.int64() else ints.cast(self.arrow_type)
            return typed_column(values, self.arrow_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError) as exc:
            raise SerializationError(
                f"state {self.state!r}: a value cannot be stored as {self.value_type} ({self.arrow_type}): {exc}"
            ) from exc


def typed_column(values: list[Any], arrow_type: pa.DataType) -> pa.Array:
    """Python values (timestamps as epoch-millisecond ints) as a typed column of ``arrow_type``."""
    import pyarrow as pa

    physical = _physical(arrow_type)
    column = pa.array(values, physical)
    return column if physical == arrow_type else column.cast(arrow_type)


def _int64_array(values: list[Any]) -> pa.Array | None:
    """A null-free int64 column of Python ints, through ``array.array`` (a tighter loop than
    ``pa.array``); None when a value is None (or does not fit 64 bits: ``pa.array`` then
    names it). The caller has checked that every value is an ``int`` and none a ``bool``."""
    import pyarrow as pa

    if not values or sys.byteorder != "little":
        return None
    try:
        data = array.array("q", values)
    except (TypeError, OverflowError):
        return None
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(data)])


def python_values(column: Any) -> list[Any]:
    """The Python values of a typed value column (timestamps as epoch-millisecond ints)."""
    if hasattr(column, "combine_chunks"):
        column = column.combine_chunks()
    physical = _physical(column.type)
    if physical != column.type:
        column = column.cast(physical)
    if _has_map(physical):  # maps_as_pydicts takes pyarrow's slow path: only where a map is
        return column.to_pylist(maps_as_pydicts="strict")  # type: ignore[no-any-return]
    kind = str(physical)
    if kind in ("int64", "double") and len(column) and not column.null_count and sys.byteorder == "little":
        # a null-free int64/double column: its data buffer is the values (little-endian)
        start = 8 * column.offset
        view = memoryview(column.buffers()[1])[start:start + 8 * len(column)]
        values: list[Any] = (view.cast("q") if kind == "int64" else view.cast("d")).tolist()
        return values
    return column.to_pylist()  # type: ignore[no-any-return]


def _has_map(arrow_type: pa.DataType) -> bool:
    """Whether a map type occurs anywhere in ``arrow_type``."""
    import pyarrow.types as t

    if t.is_map(arrow_type):
        return True
    if t.is_list(arrow_type) or t.is_large_list(arrow_type) or t.is_fixed_size_list(arrow_type):
        return _has_map(arrow_type.value_type)
    if t.is_struct(arrow_type):
        return any(_has_map(f.type) for f in arrow_type)
    return False


# ---------------------------------------------------------------- the block codec


@dataclass(frozen=True)
class BlockCodec:
    """How the blocks of one state file are encoded: version, file kind, compression and
    (version 2 keyed files) the value column's type — everything its header records."""

    version: int
    kind: int
    compression: str = "none"
    value_type: pa.DataType | None = None

    def __post_init__(self) -> None:
        if self.kind not in (layout.FILE_KIND_KEYED, layout.FILE_KIND_OPERATOR):
            raise ValueError(f"unknown file kind {self.kind}")
        WriteFormat(self.version, self.compression)
        if self.value_type is not None:
            if self.version == 1 or self.kind != layout.FILE_KIND_KEYED:
                raise ValueError("typed values need a version 2 keyed file")
            reason = _check_typed(self.value_type)
            if reason:
                raise ValueError(f"not a typed value column: {reason}")

    @classmethod
    def for_writing(cls, kind: int, schema: pa.Schema | None, fmt: WriteFormat) -> BlockCodec:
        """The codec of a new file in ``fmt`` whose blocks have ``schema`` (None: serialized values)."""
        value_type = None
        if schema is not None and kind == layout.FILE_KIND_KEYED:
            column = schema.field("value").type
            value_type = None if is_serialized(column) else column
        if value_type is not None and fmt.version == 1:
            raise ValueError("state file version 1 cannot hold typed values; encode them serialized")
        return cls(fmt.version, kind, fmt.compression, value_type)

    # ------------------------------------------------------------ schema and header

    @cached_property
    def schema(self) -> pa.Schema:
        """The logical schema of every decoded block."""
        return keyed_schema(self.value_type) if self.kind == layout.FILE_KIND_KEYED else operator_schema()

    @property
    def _optional(self) -> dict[str, int]:
        return _KEYED_OPTIONAL if self.kind == layout.FILE_KIND_KEYED else _OPERATOR_OPTIONAL

    @cached_property
    def header(self) -> bytes:
        """The file's header bytes (canonical: equal codecs have equal headers)."""
        if self.version == 1:
            return layout.STATE_FILE_HEADER.pack(layout.STATE_FILE_MAGIC, 1, self.kind, 0, 0)
        message: bytes = self.schema.serialize().to_pybytes()
        head = layout.STATE_FILE_HEADER.pack(layout.STATE_FILE_MAGIC, self.version, self.kind,
                                             layout.COMPRESSION_IDS[self.compression], len(message))
        return head + message + bytes(-(len(head) + len(message)) % 8)

    @classmethod
    def read(cls, read_at: Callable[[int, int], bytes], size: int, *, path: str) -> tuple[BlockCodec, bytes]:
        """Parse and check the header of a file of ``size`` bytes (``read_at(offset, length)``);
        returns the codec and the header bytes as read (version 1 ignores its reserved bytes)."""
        fixed = layout.STATE_FILE_HEADER.size
        head = read_at(0, fixed)
        magic, version, kind, compression_id, schema_length = layout.STATE_FILE_HEADER.unpack(head)
        if magic != layout.STATE_FILE_MAGIC:
            raise CorruptStateError("not a statekit state file (bad magic)", path=path)
        if version not in layout.STATE_FILE_VERSIONS:
            known = ", ".join(map(str, layout.STATE_FILE_VERSIONS))
            raise UnsupportedVersionError(f"state file version {version} is not supported (known: {known})", path=path)
        if kind not in (layout.FILE_KIND_KEYED, layout.FILE_KIND_OPERATOR):
            raise CorruptStateError(f"unknown file kind {kind}", path=path)
        if version == 1:
            return cls(1, kind), head
        compression = {v: k for k, v in layout.COMPRESSION_IDS.items()}.get(compression_id)
        if compression is None:
            raise CorruptStateError(f"unknown block compression {compression_id} in the header", path=path)
        padded = schema_length + (-(fixed + schema_length) % 8)
        if schema_length > layout.MAX_SCHEMA_BYTES or fixed + padded + layout.STATE_FILE_FOOTER.size > size:
            raise CorruptStateError(f"header names a schema of {schema_length} bytes, more than the file holds",
                                    path=path)
        raw = read_at(fixed, padded)
        codec = cls._from_schema(raw[:schema_length], kind, version, compression, path)
        if codec.header != head + raw:
            raise CorruptStateError("header is not in canonical form (schema or padding altered)", path=path)
        return codec, head + raw

    @classmethod
    def _from_schema(cls, message: bytes, kind: int, version: int, compression: str, path: str) -> BlockCodec:
        import pyarrow as pa

        try:
            schema = pa.ipc.read_schema(pa.py_buffer(message))
            names = schema.names  # a damaged name is not UTF-8 (UnicodeDecodeError, a ValueError)
        except (pa.ArrowException, ValueError, OSError, EOFError) as exc:
            raise CorruptStateError(f"header schema does not decode: {exc}", path=path) from exc
        value_type = None
        if kind == layout.FILE_KIND_KEYED and names == list(KEYED_COLUMNS):
            column = schema.field("value").type
            value_type = None if is_serialized(column) else column
            if value_type is not None and _check_typed(value_type):
                raise CorruptStateError(f"header schema: value column: {_check_typed(value_type)}", path=path)
        codec = cls(version, kind, compression, value_type)
        if not schema.equals(codec.schema, check_metadata=True):
            raise CorruptStateError(f"header schema is not a {'keyed' if kind == 1 else 'operator'} state schema: "
                                    f"{schema.to_string(show_schema_metadata=False)!r:.200}", path=path)
        return codec

    @property
    def header_size(self) -> int:
        return len(self.header)

    # ------------------------------------------------------------ blocks

    def encode(self, batch: pa.RecordBatch) -> bytes:
        """The block bytes of ``batch`` (of :attr:`schema`)."""
        return b"".join(self.encode_parts(batch))

    def encode_parts(self, batch: pa.RecordBatch) -> tuple[bytes | pa.Buffer, ...]:
        """The block bytes of ``batch`` as consecutive pieces, for a writer that writes
        them one after another (no copy joins them)."""
        if not batch.schema.equals(self.schema):
            raise ValueError(f"batch schema {batch.schema} is not the file's {self.schema}")
        if self.version == 1:
            return (batch.serialize(),)
        flags, present = self._present(batch)
        return layout.BLOCK_PREFIX.pack(flags), self._message(_compacted(batch.select(present)), flags)

    def encode_many(self, batches: Sequence[pa.RecordBatch]) -> list[tuple[bytes | pa.Buffer, ...]]:
        """:meth:`encode_parts` of every batch (the same bytes), the per-column work shared
        where the batches are consecutive slices of one batch (the blocks of one sorted
        table, :class:`_RunColumn`): a column absent from every block is found once, and
        the binary offsets of all blocks are rebased by one Arrow call."""
        import pyarrow as pa

        if self.version == 1 or len(batches) < 2:
            return [self.encode_parts(batch) for batch in batches]
        for batch in batches:
            if not batch.schema.equals(self.schema):
                raise ValueError(f"batch schema {batch.schema} is not the file's {self.schema}")
        optional = self._optional
        by_batch = [batch.columns for batch in batches]
        columns = [_RunColumn(name, [c[i] for c in by_batch], optional.get(name))
                   for i, name in enumerate(self.schema.names)]
        encoded: list[tuple[bytes | pa.Buffer, ...]] = []
        for i in range(len(batches)):
            flags, arrays = 0, []
            for column in columns:
                if column.bit is not None:
                    if not column.stored(i):
                        continue
                    flags |= column.bit
                arrays.append(column.canonical(i))
            stored = pa.RecordBatch.from_arrays(arrays, schema=self._stored_schema(flags))
            encoded.append((layout.BLOCK_PREFIX.pack(flags), self._message(stored, flags)))
        return encoded

    def overhead(self, batch: pa.RecordBatch) -> tuple[int, int]:
        """(bytes a block of ``batch`` takes beyond its entries' data, bytes of that data
        uncompressed): the block of none of its rows with the same columns stored (prefix,
        message metadata), and the stored columns' buffers."""
        if self.version == 1:
            return len(batch.slice(0, 0).serialize()), batch.nbytes
        _, present = self._present(batch)
        stored = batch.select(present)
        return layout.BLOCK_PREFIX.size + len(stored.slice(0, 0).serialize()), stored.nbytes

    def _present(self, batch: pa.RecordBatch) -> tuple[int, list[str]]:
        flags, present = 0, []
        for name in batch.schema.names:
            bit = self._optional.get(name)
            column = batch.column(name)
            if bit is not None:
                empty = _all_empty(column) if name == "namespace" else column.null_count == len(column)
                if empty:
                    continue
                flags |= bit
            present.append(name)
        return flags, present

    def _message(self, batch: pa.RecordBatch, flags: int) -> bytes | pa.Buffer:
        """One record-batch message: compressed (through an IPC stream writer) when that is
        smaller, else plain — a block records its own compression, so both decode alike."""
        import pyarrow as pa

        plain: pa.Buffer = batch.serialize()
        if self.compression == "none":
            return plain
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema, options=self._options) as stream:
            stream.write_batch(batch)
        data = sink.getvalue()
        start = self._schema_message_size(flags)
        compressed: pa.Buffer = data.slice(start, data.size - start - 8)
        return compressed if compressed.size < plain.size else plain

    @cached_property
    def _options(self) -> Any:
        import pyarrow as pa

        return pa.ipc.IpcWriteOptions(compression=_ARROW_CODEC[self.compression])

    def _schema_message_size(self, flags: int) -> int:
        """Bytes of the schema message an IPC stream of the ``flags`` columns starts with."""
        cache: dict[int, int] = self.__dict__.setdefault("_schema_sizes", {})
        if flags not in cache:
            import pyarrow as pa

            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, self._stored_schema(flags), options=self._options):
                pass
            cache[flags] = sink.getvalue().size - 8  # an empty stream: schema message, end-of-stream marker
        return cache[flags]

    def _stored_schema(self, flags: int) -> pa.Schema:
        cache: dict[int, pa.Schema] = self.__dict__.setdefault("_stored_schemas", {})
        if flags not in cache:
            import pyarrow as pa

            optional = self._optional
            cache[flags] = pa.schema([f for f in self.schema if optional.get(f.name, 0) & flags or f.name not in optional])
        return cache[flags]

    def decode(self, data: bytes, *, path: str, key_group: int | None = None) -> pa.RecordBatch:
        """Decode and fully validate one block; malformed bytes raise CorruptStateError."""
        import pyarrow as pa

        try:
            if self.version == 1:
                batch = pa.ipc.read_record_batch(pa.py_buffer(data), self.schema)
                batch.validate(full=True)
                return batch
            flags = self._flags(data, path, key_group)
            stored = pa.ipc.read_record_batch(pa.py_buffer(data).slice(layout.BLOCK_PREFIX.size),
                                              self._stored_schema(flags))
            stored.validate(full=True)
        except (pa.ArrowException, ValueError, OSError, EOFError) as exc:
            raise CorruptStateError(f"block does not decode: {exc}", path=path, key_group=key_group) from exc
        return self._complete(stored)

    def _flags(self, data: bytes, path: str, key_group: int | None) -> int:
        if len(data) < layout.BLOCK_PREFIX.size or any(data[1:layout.BLOCK_PREFIX.size]):
            raise CorruptStateError("block prefix is damaged", path=path, key_group=key_group)
        flags = data[0]
        if flags & ~sum(self._optional.values()):
            raise CorruptStateError(f"block prefix names unknown columns (flags {flags:#04x})", path=path,
                                    key_group=key_group)
        return flags

    def _complete(self, stored: pa.RecordBatch) -> pa.RecordBatch:
        """The stored columns plus every absent optional column (empty namespaces, nulls)."""
        import pyarrow as pa

        n = stored.num_rows
        columns = []
        for field in self.schema:
            if field.name in stored.schema.names:
                columns.append(stored.column(field.name))
            elif field.name == "namespace":
                columns.append(empty_namespaces(n))
            else:
                columns.append(pa.nulls(n, field.type))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


class _RunColumn:
    """One column of a run of blocks (:meth:`BlockCodec.encode_many`): which blocks store
    it, and each block's :func:`_canonical` array.

    When the blocks' arrays are consecutive slices of one flat array (``parent``), the
    column is judged once: absent from every block when ``parent`` is all empty (namespace)
    or all null, stored in every non-empty block when it has no null (user key, expiry);
    and a null-free binary column has the offsets of all blocks rebased to 0 by one Arrow
    call (``parent``'s offsets, each block's n + 1 of them, minus the block's first).
    Otherwise each block is judged and made canonical on its own, as :meth:`encode_parts`
    does.
    """

    def __init__(self, name: str, arrays: list[pa.Array], bit: int | None) -> None:
        import pyarrow.types as t

        self.name, self.arrays, self.bit = name, arrays, bit
        self.everywhere: bool | None = None  # stored in every non-empty block (True), in none (False)
        # null-free parent: each block's buffers, slices of the parent's (None: _canonical)
        self._buffers: list[list[pa.Buffer | None]] | None = None
        parent = _parent(arrays)
        if parent is None:
            return
        nulls = parent.null_count
        if bit is not None:
            if name == "namespace":
                self.everywhere = False if _all_empty(parent) else None
            elif nulls == len(parent):
                self.everywhere = False
            elif not nulls:
                self.everywhere = True
        if nulls or self.everywhere is False:
            return
        if t.is_binary(parent.type) or t.is_string(parent.type):
            self._buffers = self._rebased(parent)
        else:
            data, width = parent.buffers()[1], parent.type.byte_width
            self._buffers = [[None, _slice(data, a.offset * width, len(a) * width)] for a in arrays]

    def _rebased(self, parent: pa.Array) -> list[list[pa.Buffer | None]]:
        """Each block's [validity, offsets, data]: its offsets rebased to 0 (all blocks by one
        subtraction), its data the bytes they reference."""
        import pyarrow as pa
        import pyarrow.compute as pc

        _, buffer, data = parent.buffers()
        np = numpy_or_none()
        if np is not None:
            return self._rebased_numpy(np, parent.offset, buffer, data)
        positions = memoryview(buffer).cast("i")
        offsets = pa.Array.from_buffers(pa.int32(), len(parent) + 1, [None, buffer], offset=parent.offset)
        pieces, firsts, ends, spans = [], [], [], []
        start = end = 0
        for part in self.arrays:
            n = len(part)
            pieces.append(offsets.slice(start, n + 1))
            first = positions[part.offset]
            firsts.append(first)
            spans.append((first, positions[part.offset + n] - first))
            end += n + 1
            ends.append(end)
            start += n
        # from_buffers with the length known: from_arrays infers it through pa.scalar, whose
        # type inference imports pandas where installed (statefmt.pandas_probe)
        bases = pa.RunEndEncodedArray.from_buffers(
            pa.run_end_encoded(pa.int32(), pa.int32()), end, [None],
            children=[pa.array(ends, pa.int32()), pa.array(firsts, pa.int32())])
        rebased = pc.subtract(pa.concat_arrays(pieces), pc.run_end_decode(bases))
        out, at, rebased_buffer = [], 4 * rebased.offset, rebased.buffers()[1]
        for part, (first, size) in zip(self.arrays, spans):
            length = 4 * (len(part) + 1)
            out.append([None, _slice(rebased_buffer, at, length), _slice(data, first, size)])
            at += length
        return out

    def _rebased_numpy(self, np: Any, offset: int, buffer: pa.Buffer, data: pa.Buffer) -> list[list[pa.Buffer | None]]:
        """:meth:`_rebased` with NumPy: the same buffers, every block's offsets gathered and
        rebased by two array operations (block ``i``'s ``n + 1`` offsets start at output row
        ``start + i``, its first row ``start`` counting the rows of the blocks before it)."""
        import pyarrow as pa

        counts = np.fromiter(map(len, self.arrays), np.int64, len(self.arrays))
        starts = np.zeros(len(counts), np.int64)
        np.cumsum(counts[:-1], out=starts[1:])
        offsets = np.frombuffer(buffer, np.int32, int(counts.sum()) + 1, 4 * offset)
        block = np.repeat(np.arange(len(counts)), counts + 1)  # the block of each output offset
        firsts = offsets[starts]
        rebased = offsets[np.arange(len(block)) - block] - firsts[block]
        rebased_buffer = pa.py_buffer(rebased)
        out = []
        for n, first, end, at in zip(counts.tolist(), firsts.tolist(), offsets[starts + counts].tolist(),
                                     (4 * (starts + np.arange(len(counts)))).tolist()):
            out.append([None, _slice(rebased_buffer, at, 4 * (n + 1)), _slice(data, first, end - first)])
        return out

    def stored(self, i: int) -> bool:
        """Whether block ``i`` stores this (optional) column."""
        part = self.arrays[i]
        if self.everywhere is not None and len(part):
            return self.everywhere
        empty = _all_empty(part) if self.name == "namespace" else part.null_count == len(part)
        return not empty

    def canonical(self, i: int) -> pa.Array:
        import pyarrow as pa

        part = self.arrays[i]
        n = len(part)
        if self._buffers is None or not n:
            return _canonical(part)
        return pa.Array.from_buffers(part.type, n, self._buffers[i])


def _parent(arrays: list[pa.Array]) -> pa.Array | None:
    """The flat (fixed-width but not boolean, binary or string) array whose consecutive
    slices ``arrays`` are — the same buffers, each slice starting where the previous one
    ends — or None."""
    import pyarrow as pa
    import pyarrow.types as t

    first = arrays[0]
    kind = first.type
    if not ((t.is_primitive(kind) and not t.is_boolean(kind)) or t.is_binary(kind) or t.is_string(kind)):
        return None
    buffers = first.buffers()
    where = [None if b is None else (b.address, b.size) for b in buffers]
    end = first.offset
    for part in arrays:
        if part.offset != end or part.type != kind:
            return None
        if [None if b is None else (b.address, b.size) for b in part.buffers()] != where:
            return None
        end += len(part)
    return pa.Array.from_buffers(kind, end - first.offset, buffers, offset=first.offset)


def consecutive(previous: pa.RecordBatch, batch: pa.RecordBatch) -> bool:
    """Whether ``batch`` looks like the slice of one batch that follows ``previous`` (its
    first column shares ``previous``'s buffers and starts where it ends): a writer encodes
    such runs together (:meth:`BlockCodec.encode_many` checks every column)."""
    if not previous.num_columns or previous.num_columns != batch.num_columns:
        return False
    a, b = previous.column(0), batch.column(0)
    if a.offset + len(a) != b.offset:
        return False
    return [None if x is None else x.address for x in a.buffers()] == [None if x is None else x.address for x in b.buffers()]


def _compacted(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` in buffers each exactly as long as its data (slices of the original
    buffers for flat null-free columns, zero-padded copies otherwise).

    Arrow's IPC writer rounds a buffer's length up to 8 bytes when the buffer holds more
    (a slice's neighbours) and, for a sliced binary column, writes more of its data buffer:
    without this a block would carry bytes of the rows around it, or whatever memory held
    before, and equal entries would not encode to equal blocks. Past an exact buffer's end
    it writes zeros. Values under nulls are zeroed for the same reason.
    """
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([_canonical(c) for c in batch.columns], schema=batch.schema)


def _canonical(array: pa.Array) -> pa.Array:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.types as t

    flat = _flat_canonical(array)
    if flat is not None:
        return flat
    array = pa.concat_arrays([array])  # offset 0, children cut to what it references
    n, kind = len(array), array.type
    buffers = array.buffers()
    validity = _bits(buffers[0], n) if array.null_count else None
    if t.is_boolean(kind) or (t.is_primitive(kind) and array.null_count):
        filled = pc.fill_null(array, False if t.is_boolean(kind) else 0) if array.null_count else array
        data = _bits(filled.buffers()[1], n) if t.is_boolean(kind) else _exact(filled.buffers()[1], n * kind.byte_width)
        return pa.Array.from_buffers(kind, n, [validity, data], array.null_count)
    if t.is_primitive(kind):
        return pa.Array.from_buffers(kind, n, [None, _exact(buffers[1], n * kind.byte_width)])
    if t.is_binary(kind) or t.is_string(kind):
        end = memoryview(buffers[1]).cast("i")[n] if n else 0
        return pa.Array.from_buffers(kind, n, [validity, _exact(buffers[1], 4 * (n + 1)), _exact(buffers[2], end)],
                                     array.null_count)
    if t.is_list(kind) or t.is_map(kind):
        end = memoryview(buffers[1]).cast("i")[n] if n else 0
        child = _canonical(array.values.slice(0, end))
        return pa.Array.from_buffers(kind, n, [validity, _exact(buffers[1], 4 * (n + 1))], array.null_count,
                                     children=[child])
    if t.is_struct(kind):
        children = [_canonical(array.field(i)) for i in range(kind.num_fields)]
        return pa.Array.from_buffers(kind, n, [validity], array.null_count, children=children)
    raise ValueError(f"no canonical encoding for type {kind}")


def _flat_canonical(array: pa.Array) -> pa.Array | None:
    """:func:`_canonical` of a non-empty, null-free fixed-width (not boolean) or binary/string
    array without copying its bytes: each buffer becomes a slice of exactly the bytes the
    array references (the IPC writer pads a buffer to 8 bytes with zeros past its end, and
    reads past it only when the buffer is longer), and binary offsets are rebased to start
    at 0; None for any other array."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.types as t

    n, kind, offset = len(array), array.type, array.offset
    if not n or array.null_count:
        return None
    if t.is_primitive(kind) and not t.is_boolean(kind):
        width = kind.byte_width
        return pa.Array.from_buffers(kind, n, [None, _slice(array.buffers()[1], offset * width, n * width)])
    if not (t.is_binary(kind) or t.is_string(kind)):
        return None
    _, offsets, data = array.buffers()
    positions = memoryview(offsets).cast("i")
    first, last = positions[offset], positions[offset + n]
    if first:  # offsets rebased to start at 0, as concatenating the slice does
        rebased = pc.subtract(pa.Array.from_buffers(pa.int32(), n + 1, [None, offsets], offset=offset),
                              pa.scalar(first, pa.int32()))
        offsets, offset = rebased.buffers()[1], rebased.offset
    return pa.Array.from_buffers(kind, n, [None, _slice(offsets, 4 * offset, 4 * (n + 1)),
                                           _slice(data, first, last - first)])


def _slice(buffer: pa.Buffer, start: int, size: int) -> pa.Buffer:
    """Bytes ``start .. start + size`` of ``buffer``, shared (no copy)."""
    if start + size > buffer.size:
        raise ValueError(f"buffer of {buffer.size} bytes has no bytes {start}..{start + size}")
    return buffer.slice(start, size)


def _all_empty(column: pa.Array) -> bool:
    """Whether every value of a binary column is empty (or null): its offsets never advance."""
    if not len(column):
        return True
    positions = memoryview(column.buffers()[1]).cast("i")
    return bool(positions[column.offset] == positions[column.offset + len(column)])


def _exact(buffer: Any, size: int, start: int = 0) -> pa.Buffer:
    """Bytes ``start .. start + size`` of ``buffer`` in memory of their own, zero-padded to 8."""
    import pyarrow as pa

    data = bytearray(size + -size % 8)
    if buffer is not None and size:
        part = memoryview(buffer)[start:start + size]
        if len(part) != size:
            raise ValueError(f"buffer of {len(memoryview(buffer))} bytes has no bytes {start}..{start + size}")
        data[:size] = part
    return pa.py_buffer(data).slice(0, size)


def _bits(buffer: Any, n: int) -> pa.Buffer:
    """A bitmap of ``n`` bits with the unused bits of its last byte cleared, zero-padded."""
    import pyarrow as pa

    size = (n + 7) // 8
    data = bytearray(buffer.slice(0, size).to_pybytes()) if size else bytearray()
    if n % 8:
        data[-1] &= (1 << (n % 8)) - 1
    return pa.py_buffer(bytes(data) + bytes(-size % 8)).slice(0, size)


def empty_namespaces(n: int) -> pa.Array:
    """A namespace column of ``n`` void (empty) namespaces."""
    import pyarrow as pa

    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(bytes(4 * (n + 1))), pa.py_buffer(b"")])
