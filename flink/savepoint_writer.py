"""Write a new canonical Flink savepoint: one key-group stream per subtask, ``_metadata`` last.

The writers that create savepoints (bootstrap on either engine, convert) hand this module,
per subtask, the header of its operator (:func:`statekit.flink.state_meta_writer.encode_keyed_backend_meta`)
and its entries grouped by key group and state (:class:`statekit.flink.entry_sorter.EntrySorter`);
it frames them (:func:`statekit.flink.streams_writer.write_stream`) into a file named by a new
UUID, as Flink names its streams, and records the key-group offsets for the subtask's
``KeyGroupsSavepointStateHandle``. :func:`publish_savepoint` writes ``_metadata`` (parsed back
first) into the staged directory, after every stream.
"""

from __future__ import annotations

import posixpath
import struct
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

from statekit.flink.metadata import read_flink_metadata
from statekit.flink.savepoint_metadata import NewOperator, NewSubtask, encode_savepoint_metadata
from statekit.flink.sources import META_FOLLOWS, prefix_bytes
from statekit.flink.streams_writer import write_stream
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.json_contract import JsonShape
from statekit.statefmt.keygroups import KeyGroupRange

__all__ = ["WrittenSubtask", "framed_entries", "write_subtask_stream", "publish_savepoint"]

_I32 = struct.Struct(">i")
Group = tuple[int, int, list[bytes], list[bytes]]  # key group, state id, keys (no prefix), values


@dataclass(frozen=True)
class WrittenSubtask:
    """A written stream: its handle data and what it holds."""

    json_shape: ClassVar[JsonShape] = JsonShape(omit=("subtask",), extra=("index", "key_group_range", "file", "bytes"))

    subtask: NewSubtask
    entries: int
    key_groups: int

    @property
    def index(self) -> int:
        return self.subtask.index

    @property
    def key_group_range(self) -> KeyGroupRange:
        return self.subtask.key_groups

    @property
    def file(self) -> str:
        return self.subtask.file

    @property
    def bytes(self) -> int:
        return self.subtask.size


def framed_entries(key_group: int, prefix: int, keys: list[bytes], values: list[bytes]) -> bytes:
    """Entries in the stream layout, Flink's meta-data-follows flag on the last key."""
    head = key_group.to_bytes(prefix, "big")
    last = len(keys) - 1
    flagged = bytes([head[0] | META_FOLLOWS]) + head[1:]
    parts = []
    pack = _I32.pack
    for index, (key, value) in enumerate(zip(keys, values)):
        parts.append(pack(prefix + len(key)))
        parts.append(flagged if index == last else head)
        parts.append(key)
        parts.append(pack(len(value)))
        parts.append(value)
    return b"".join(parts)


def write_subtask_stream(io: FileIO, directory: str, index: int, header: bytes, max_parallelism: int,
                         key_groups: KeyGroupRange, groups: Iterable[Group]) -> WrittenSubtask:
    """Write subtask ``index``'s stream of ``groups`` (ascending key group, then state) under ``directory``."""
    prefix = prefix_bytes(max_parallelism)
    counts = {"entries": 0}
    filled: set[int] = set()

    def chunks() -> Iterator[tuple[int, int, Iterator[bytes]]]:
        for key_group, state, keys, values in groups:
            counts["entries"] += len(keys)
            filled.add(key_group)
            yield key_group, state, iter((framed_entries(key_group, prefix, keys, values),))

    name = str(uuid.uuid4())
    with io.open_output(posixpath.join(directory, name)) as out:
        offsets, size = write_stream(out, header, key_groups, chunks())
    return WrittenSubtask(NewSubtask(index, key_groups, tuple(offsets), name, size), counts["entries"], len(filled))


def publish_savepoint(io: FileIO, directory: str, operators: Sequence[NewOperator], *, version: int,
                      checkpoint_id: int) -> int:
    """Write ``_metadata`` last (after checking that it parses); its size."""
    data = encode_savepoint_metadata(operators, version=version, checkpoint_id=checkpoint_id)
    target = posixpath.join(directory, "_metadata")
    read_flink_metadata(data, source=io.url(target))
    io.write_atomic(target, data)
    return len(data)
