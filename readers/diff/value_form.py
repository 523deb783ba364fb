"""The form values are compared in: typed columns of one primitive type directly, anything else as serialized bytes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statekit.readers.diff.plan import StatePair
from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.encoding import is_serialized, keyed_schema
from statekit.statefmt.entries import StateCodec
from statekit.statefmt.metadata import OperatorMetadata, StateDescriptor

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ValueForm", "value_form"]


class ValueForm:
    """The one value column type both sides of a state are compared in.

    Every file of both sides holds typed values of one primitive type: that type (compared
    without decoding). Otherwise — serialized values anywhere, nested types, a version 1
    file on one side — serialized bytes: typed columns are serialized with the side's value
    serializer, giving the bytes a version 1 file holds for the same values.
    """

    def __init__(self, value_types: set[Any], codec_a: StateCodec | None, codec_b: StateCodec | None) -> None:
        import pyarrow as pa

        only = next(iter(value_types)) if len(value_types) == 1 else None
        self.type = only if only is not None and str(only) in _COMPARABLE else pa.binary()
        self.codecs = {"a": codec_a, "b": codec_b}

    def schema(self) -> pa.Schema:
        return keyed_schema(None if is_serialized(self.type) else self.type)

    def conform(self, side: str, batch: pa.RecordBatch) -> pa.RecordBatch:
        import pyarrow as pa

        value = batch.column("value")
        if value.type == self.type:
            return batch
        codec = self.codecs[side]
        assert codec is not None and is_serialized(self.type)
        index = batch.schema.get_field_index("value")
        columns = list(batch.columns)
        columns[index] = codec.serialized_values(value)
        return pa.RecordBatch.from_arrays(columns, schema=keyed_schema())

    def empty(self) -> pa.Table:
        return self.schema().empty_table()

    def concat(self, batches: list[pa.RecordBatch]) -> pa.Table:
        import pyarrow as pa

        return pa.Table.from_batches(batches, schema=self.schema()) if batches else self.empty()


def value_form(ra: SavepointReader | None, rb: SavepointReader | None, pair: StatePair) -> ValueForm:
    """The form of ``pair``'s values, from the headers of every file of both sides."""
    types = set()
    for reader, op in ((ra, pair.op_a), (rb, pair.op_b)):
        if reader is None or op is None:
            continue
        for subtask in op.subtasks:
            file = subtask.file_of(pair.name)
            if file is not None and file.entries:
                with reader.open_subtask_file(op, subtask, file) as state_file:
                    types.add(state_file.codec.schema.field("value").type)
    return ValueForm(types, _serializing_codec(pair.a, pair.op_a), _serializing_codec(pair.b, pair.op_b))


def _serializing_codec(descriptor: StateDescriptor | None, op: OperatorMetadata | None) -> StateCodec | None:
    """A codec that only serializes values (safe for every serializer: nothing is decoded)."""
    if descriptor is None or op is None:
        return None
    return StateCodec(descriptor, op.key_serializer, for_write=True)


_COMPARABLE = ("int64", "double", "string", "bool", "timestamp[ms, tz=UTC]")
