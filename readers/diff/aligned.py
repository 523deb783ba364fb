"""Keyed state at the same max parallelism: both sides' blocks in key-group order, equal blocks counted unchanged without decoding."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statekit.readers.diff.join import Chunks, Counts, identity
from statekit.readers.diff.plan import StatePair
from statekit.readers.diff.rows import DifferenceSink
from statekit.readers.diff.value_form import value_form
from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.metadata import OperatorMetadata
from statekit.statefmt.statefile import IndexEntry

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["diff_aligned"]


@dataclass
class _Block:
    key_group: int
    entry: IndexEntry
    read: Callable[[], pa.RecordBatch]
    check: Callable[[], None]  # its bytes against the CRC-32 of its index entry, nothing decoded
    header: bytes  # its file's header: the same block bytes mean the same entries only under equal headers


def _blocks(reader: SavepointReader | None, op: OperatorMetadata | None, state: str) -> Iterator[_Block]:
    """Blocks of one state in key-group order; ``read`` works until the next block is drawn."""
    if reader is None or op is None:
        return
    for subtask in op.subtasks:
        file = subtask.file_of(state)
        if file is None:
            continue
        with reader.open_subtask_file(op, subtask, file) as state_file:
            for entry in state_file.index:
                def read(kg: int = entry.key_group, f: Any = state_file) -> pa.RecordBatch:
                    batch: pa.RecordBatch = f.read_block(kg)
                    return batch

                def check(kg: int = entry.key_group, f: Any = state_file) -> None:
                    f.read_block_bytes(kg)

                yield _Block(entry.key_group, entry, read, check, state_file.codec.header)


def _same_block(x: _Block, y: _Block) -> bool:
    """Equal entries without decoding: equal block bytes (CRC-32, length, count) under equal
    headers (a typed float 0.0 and int 0 are the same bytes in files of other schemas) — once both
    blocks' bytes are checked against those CRC-32s (``_Block.check``)."""
    return bool(x.entry.checksum == y.entry.checksum and x.entry.length == y.entry.length
                and x.entry.entries == y.entry.entries and x.header == y.header)


def diff_aligned(ra: SavepointReader | None, rb: SavepointReader | None, pair: StatePair,
                  counts: Counts, sink: DifferenceSink | None) -> None:
    """Merge both sides by key group; equal checksums skip the key group.

    A key group whose blocks hold the same identities on both sides (only values changed)
    goes to the *aligned* chunk, compared row by row; any other goes to the *join* chunk.
    Blocks are equal byte for byte only between files of one encoding; a version 1 and a
    version 2 file of the same entries are compared entry by entry.
    """
    form = value_form(ra, rb, pair)
    side_a, side_b = _blocks(ra, pair.op_a, pair.name), _blocks(rb, pair.op_b, pair.name)
    x, y = next(side_a, None), next(side_b, None)
    chunks = Chunks(identity(pair.descriptor), counts, sink, form)
    while x is not None or y is not None:
        if x is not None and y is not None and x.key_group == y.key_group:
            if _same_block(x, y):
                x.check()  # equal index entries say equal blocks only for blocks that match them
                y.check()
                counts.unchanged += x.entry.entries
                counts.skipped += 1
            else:
                counts.compared += 1
                chunks.add_pair(x.read(), y.read())
            x, y = next(side_a, None), next(side_b, None)
        elif y is None or (x is not None and x.key_group < y.key_group):
            assert x is not None
            counts.compared += 1
            chunks.add(x.read(), None)
            x = next(side_a, None)
        else:
            counts.compared += 1
            chunks.add(None, y.read())
            y = next(side_b, None)
    chunks.flush()
