"""``SavepointReader``: the read side of the State Processor API, in Python.

Every read verifies what it touches: on open, the file's size and the whole-file CRC-32 that
``_metadata`` records, as its header, index and footer give it (no block read); then the CRC-32
of each block it reads. So every byte a read uses is checked against ``_metadata``. Reads stream block by block; nothing holds a whole state in memory
unless the caller collects it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from itertools import chain
from typing import TYPE_CHECKING, Any

from statekit.readers.snapshot import Snapshot, open_snapshot
from statekit.statefmt import layout
from statekit.statefmt.entries import KeyedStateEntry, MapStateEntry, StateCodec
from statekit.statefmt.errors import BadInputError, CorruptStateError
from statekit.statefmt.keygroups import KeyGroupRange
from statekit.statefmt.metadata import (
    CheckpointMetadata,
    OperatorMetadata,
    StateDescriptor,
    StateFile,
    StateKind,
    SubtaskState,
)
from statekit.statefmt.statefile import IndexEntry, StateFileReader

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["SavepointReader"]


class SavepointReader:
    """Reads the metadata and the state of one savepoint or checkpoint."""

    def __init__(self, snapshot: Snapshot, *, trust_pickle: bool = False) -> None:
        self.snapshot = snapshot
        self.trust_pickle = trust_pickle
        self._canonical: SavepointReader | None = None

    def canonical(self) -> SavepointReader:
        """This reader, or for a native snapshot a reader of its canonical view (built once,
        :mod:`statekit.readers.native_view`): what reads of keyed state files go through."""
        if self._canonical is None:
            from statekit.readers.native_view import canonical_view

            view = canonical_view(self.snapshot)
            self._canonical = self if view is self.snapshot else SavepointReader(view, trust_pickle=self.trust_pickle)
        return self._canonical

    def _native(self, uid: str) -> bool:
        return any(st.native is not None for st in self.operator(uid).subtasks)

    @classmethod
    def read(
        cls, path: str, *, trust_pickle: bool = False, storage_options: dict[str, Any] | None = None
    ) -> SavepointReader:
        """Open a savepoint/checkpoint directory, its ``_metadata``, or a job checkpoint dir.

        Args:
            path: local path or fsspec URL (``file://``, ``memory://``, ``s3://``...).
            trust_pickle: allow decoding pickle-serialized state (runs code: trusted input only).
            storage_options: passed to fsspec.
        """
        return cls(open_snapshot(path, storage_options=storage_options), trust_pickle=trust_pickle)

    @property
    def metadata(self) -> CheckpointMetadata:
        return self.snapshot.metadata

    @property
    def operators(self) -> tuple[OperatorMetadata, ...]:
        return self.metadata.operators

    @property
    def path(self) -> str:
        return self.snapshot.url

    def operator(self, uid: str) -> OperatorMetadata:
        return self.metadata.operator(uid)

    def descriptor(self, uid: str, state: str) -> StateDescriptor:
        return self.operator(uid).state(state)

    def codec(self, uid: str, state: str) -> StateCodec:
        op = self.operator(uid)
        return StateCodec(op.state(state), op.key_serializer, trust_pickle=self.trust_pickle, source=self.path)

    # ------------------------------------------------------------ files

    @contextmanager
    def open_file(self, file: StateFile) -> Iterator[StateFileReader]:
        """Open one state file, checking its size, entry count and whole-file CRC-32 (from its header,
        index and footer: :meth:`StateFileReader.check_indexed_checksum`) against the metadata."""
        path = self.snapshot.file_path(file.path)
        url = self.snapshot.io.url(path)
        with self.snapshot.io.open_input(path) as stream:
            size = _stream_size(stream)
            if size != file.size:
                raise CorruptStateError(
                    f"size {size} differs from the {file.size} bytes recorded in _metadata (truncated or replaced)",
                    path=url,
                )
            reader = StateFileReader(stream, size, path=url)
            if reader.entries != file.entries:
                raise CorruptStateError(
                    f"its index holds {reader.entries} entries, _metadata records {file.entries}", path=url
                )
            reader.check_indexed_checksum(file.checksum)
            yield reader

    @contextmanager
    def open_subtask_file(self, op: OperatorMetadata, subtask: SubtaskState, file: StateFile) -> Iterator[StateFileReader]:
        """Open a subtask's file of one state, checked to be of the state's kind (keyed or
        operator) and, for keyed state, to hold only blocks of the subtask's key-group range."""
        with self.open_file(file) as reader:
            if op.state(file.state).keyed:
                _check_groups_in_range(reader, subtask.key_group_range)
            else:
                _check_kind(reader, layout.FILE_KIND_OPERATOR)
            yield reader

    def _subtask_files(self, uid: str, state: str) -> Iterator[tuple[int, KeyGroupRange, StateFile]]:
        op = self.operator(uid)
        op.state(state)
        for subtask in op.subtasks:
            file = subtask.file_of(state)
            if file is not None:
                yield subtask.index, subtask.key_group_range, file

    # ------------------------------------------------------------ keyed state

    def read_keyed_batches(
        self, uid: str, state: str, key_groups: Iterable[int] | None = None
    ) -> Iterator[tuple[int, int, pa.RecordBatch]]:
        """(subtask, key group, Arrow batch) for each block, in key-group order."""
        if self._native(uid):
            yield from self.canonical().read_keyed_batches(uid, state, key_groups)
            return
        descriptor = self.descriptor(uid, state)
        if not descriptor.keyed:
            raise BadInputError(f"state {state!r} of {uid!r} is {descriptor.kind.value} state, not keyed")
        wanted = None if key_groups is None else sorted(set(key_groups))
        for index, kg_range, file in self._subtask_files(uid, state):
            groups = None if wanted is None else [g for g in wanted if g in kg_range]
            if groups == []:
                continue
            with self.open_file(file) as reader:
                _check_groups_in_range(reader, kg_range)
                for key_group, batch in reader.iter_blocks(groups):
                    yield index, key_group, batch

    def read_keyed_state(
        self, uid: str, state: str, key_groups: Iterable[int] | None = None
    ) -> Iterator[KeyedStateEntry | MapStateEntry]:
        """Decoded entries: (key, namespace, value[, expiry]) or, for map state,
        (key, user_key, value[, namespace, expiry]).

        Lazy like a generator (nothing is read, and no error raised, before the first
        entry is asked for), but the entries of a block pass through C iterators only: no
        Python frame resumes per entry."""
        return chain.from_iterable(self._decoded_blocks(uid, state, key_groups))

    def _decoded_blocks(
        self, uid: str, state: str, key_groups: Iterable[int] | None
    ) -> Iterator[Iterator[KeyedStateEntry | MapStateEntry]]:
        codec = self.codec(uid, state)
        for _, _, batch in self.read_keyed_batches(uid, state, key_groups):
            yield codec.decode_keyed_batch(batch)

    def read_keyed_columns(
        self, uid: str, state: str, key_groups: Iterable[int] | None = None
    ) -> Iterator[dict[str, list[Any]]]:
        """Decoded entries a block at a time, as columns of Python values (no object per
        entry): ``key``, ``namespace``, ``value``, ``expiry`` and, for map state,
        ``user_key`` — row ``i`` of every column is the ``i``-th entry
        :meth:`read_keyed_state` yields for that block."""
        codec = self.codec(uid, state)
        for _, _, batch in self.read_keyed_batches(uid, state, key_groups):
            yield codec.decode_keyed_columns(batch)

    def read_raw_blocks(
        self, uid: str, state: str, key_groups: Iterable[int] | None = None
    ) -> Iterator[tuple[int, IndexEntry, bytes]]:
        """(subtask, index entry, verified block bytes) without decoding entries."""
        if self._native(uid):
            yield from self.canonical().read_raw_blocks(uid, state, key_groups)
            return
        wanted = None if key_groups is None else set(key_groups)
        for index, kg_range, file in self._subtask_files(uid, state):
            with self.open_file(file) as reader:
                _check_groups_in_range(reader, kg_range)
                for entry, data in reader.iter_raw_blocks(wanted):
                    yield index, entry, data

    # ------------------------------------------------------------ operator state

    def read_operator_state_per_subtask(self, uid: str, state: str) -> list[list[Any]]:
        """The elements (or broadcast pairs) each subtask held, by subtask index."""
        descriptor = self.descriptor(uid, state)
        if descriptor.keyed:
            raise BadInputError(f"state {state!r} of {uid!r} is keyed {descriptor.kind.value} state")
        codec = self.codec(uid, state)
        out: list[list[Any]] = [[] for _ in self.operator(uid).subtasks]
        for index, _, file in self._subtask_files(uid, state):
            with self.open_file(file) as reader:
                _check_kind(reader, layout.FILE_KIND_OPERATOR)
                for _, batch in reader.iter_blocks():
                    out[index].extend(codec.decode_operator_batch(batch))
        return out

    def _operator_state(self, uid: str, state: str, kind: StateKind) -> list[list[Any]]:
        descriptor = self.descriptor(uid, state)
        if descriptor.kind is not kind:
            raise BadInputError(
                f"state {state!r} of {uid!r} is {descriptor.kind.value} state, not {kind.value} state"
            )
        return self.read_operator_state_per_subtask(uid, state)

    def read_list_state(self, uid: str, state: str) -> list[Any]:
        """All elements of an even-split operator list state, subtask by subtask."""
        return [e for part in self._operator_state(uid, state, StateKind.OPERATOR_LIST) for e in part]

    def read_union_state(self, uid: str, state: str) -> list[Any]:
        """All elements of a union list state (what every subtask gets on restore)."""
        return [e for part in self._operator_state(uid, state, StateKind.UNION) for e in part]

    def read_broadcast_state(self, uid: str, state: str) -> dict[Any, Any]:
        """The broadcast map (every subtask holds the same copy; subtask 0's is returned)."""
        parts = self._operator_state(uid, state, StateKind.BROADCAST)
        return {_hashable(k): v for k, v in (parts[0] if parts else [])}


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def _check_groups_in_range(reader: StateFileReader, kg_range: KeyGroupRange) -> None:
    """A keyed file holds keyed blocks of its subtask's key-group range only."""
    _check_kind(reader, layout.FILE_KIND_KEYED)
    for entry in reader.index:
        if entry.key_group not in kg_range:
            raise CorruptStateError(
                f"block outside the subtask's key-group range {kg_range.to_list()}",
                path=reader.path, key_group=entry.key_group,
            )


def _check_kind(reader: StateFileReader, kind: int) -> None:
    if reader.kind != kind:
        expected = "a keyed" if kind == layout.FILE_KIND_KEYED else "an operator"
        raise CorruptStateError(f"not {expected} state file (file kind {reader.kind}): another state's file",
                                path=reader.path)


def _stream_size(stream: Any) -> int:
    size = getattr(stream, "size", None)
    if isinstance(size, int):
        return size
    position = stream.tell()
    stream.seek(0, 2)
    end = int(stream.tell())
    stream.seek(position)
    return end
