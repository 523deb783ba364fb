"""``SavepointWriter``: the write side of the State Processor API, in Python.

    SavepointWriter.new_savepoint(max_parallelism=128)
        .with_operator("counter", parallelism=2, states={ValueState("count", "int"): rows})
        .write("/savepoints/bootstrapped")

    SavepointWriter.from_existing_savepoint(path)
        .remove_operator("old-sink")
        .change_operator_identifier("map-1", "enricher")
        .write(out)

Operators taken over from an existing savepoint are copied file by file, never decoded, each
file checked first (:func:`statekit.writers.operator_copy.copy_operator`: its kind, key-group
range, size and checksums against ``_metadata``), so damaged input fails the write; a native
snapshot's operators come from its canonical view. In-flight records of an unaligned checkpoint
(:mod:`statekit.writers.in_flight`) go with the operators that stored them, uids renamed in them
too; removing an operator they belong to is refused. The output appears whole or not at all (see
:mod:`statekit.writers.staging`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from statekit.readers.progress import Advance
from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt import layout
from statekit.statefmt.entries import StateCodec, group_by_key_group
from statekit.statefmt.errors import BadInputError, StateNotFoundError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.job_id import check_job_id, new_job_id
from statekit.statefmt.keygroups import (
    check_parallelism,
    compute_default_max_parallelism,
    compute_operator_index_for_key_group,
)
from statekit.statefmt.metadata import CheckpointMetadata, OperatorMetadata, StateDescriptor, StateFile, StateKind
from statekit.writers.in_flight import InFlightRecords
from statekit.writers.metadata_builder import SnapshotMetadataBuilder, operator_metadata
from statekit.writers.operator_copy import copy_operator
from statekit.writers.staging import staged_output_dir
from statekit.writers.state_writer import commit_metadata, write_keyed_file, write_operator_file

__all__ = ["SavepointWriter", "PerSubtask"]


@dataclass(frozen=True)
class PerSubtask:
    """Operator-state elements given per subtask (instead of split evenly)."""

    parts: Sequence[Sequence[Any]]


@dataclass
class _NewOperator:
    uid: str
    name: str
    parallelism: int
    max_parallelism: int
    key_serializer: str | None
    states: list[tuple[StateDescriptor, Any]]


@dataclass
class _CopiedOperator:
    metadata: OperatorMetadata
    reader: SavepointReader


class SavepointWriter:
    """Builds a new savepoint from new operators and operators of an existing savepoint."""

    def __init__(self, max_parallelism: int, *, job_id: str | None = None, job_name: str = "") -> None:
        check_parallelism(1, max_parallelism)
        self.max_parallelism = max_parallelism
        self.job_id = check_job_id(job_id) if job_id is not None else new_job_id()
        self.job_name = job_name
        self._operators: dict[str, _NewOperator | _CopiedOperator] = {}
        self._inputs: list[str] = []  # what the output must lie outside of (an existing savepoint)
        self._input_options: dict[str, Any] | None = None
        self._in_flight = InFlightRecords((), "")  # of the existing savepoint, uids as they are now

    @classmethod
    def new_savepoint(cls, max_parallelism: int = 128, *, job_id: str | None = None, job_name: str = "") -> SavepointWriter:
        return cls(max_parallelism, job_id=job_id, job_name=job_name)

    @classmethod
    def from_existing_savepoint(
        cls, path: str, *, trust_pickle: bool = False, storage_options: dict[str, Any] | None = None
    ) -> SavepointWriter:
        opened = SavepointReader.read(path, trust_pickle=trust_pickle, storage_options=storage_options)
        reader = opened.canonical()  # native keyed state is copied as canonical files: the output is canonical
        md = reader.metadata
        max_p = max((op.max_parallelism for op in md.operators), default=128)
        writer = cls(max_p, job_id=md.job_id, job_name=md.job_name)
        writer._inputs = [path, opened.path]
        writer._input_options = storage_options
        writer._in_flight = InFlightRecords.read(reader)
        for op in md.operators:
            writer._operators[op.uid] = _CopiedOperator(op, reader)
        return writer

    @property
    def operator_uids(self) -> list[str]:
        return list(self._operators)

    def with_operator(
        self,
        uid: str,
        states: Mapping[StateDescriptor, Any] | Iterable[tuple[StateDescriptor, Any]],
        *,
        parallelism: int = 1,
        max_parallelism: int | None = None,
        name: str | None = None,
        key_serializer: str = "msgpack",
    ) -> SavepointWriter:
        """Add (or replace) an operator with the given state.

        ``states`` maps each descriptor to its data: keyed rows for keyed kinds
        (see :meth:`StateCodec.encode_keyed_rows`); a flat list (split evenly) or
        :class:`PerSubtask` for operator list state; a list (every subtask gets it) for
        union state; a dict for broadcast state.
        """
        if not uid:
            raise BadInputError("operator uid must not be empty")
        max_p = self.max_parallelism if max_parallelism is None else max_parallelism
        check_parallelism(parallelism, max_p)
        items = list(states.items()) if isinstance(states, Mapping) else list(states)
        names = [d.name for d, _ in items]
        if len(set(names)) != len(names):
            raise BadInputError(f"operator {uid!r}: duplicate state names")
        self._operators[uid] = _NewOperator(uid, name or uid, parallelism, max_p, key_serializer, items)
        return self

    def remove_operator(self, uid: str) -> SavepointWriter:
        if uid not in self._operators:
            raise StateNotFoundError(f"no operator with uid {uid!r} to remove (operators: {', '.join(self._operators) or 'none'})")
        self._in_flight.check_removal([uid], "cannot remove operator")
        del self._operators[uid]
        return self

    def change_operator_identifier(self, old: str, new: str) -> SavepointWriter:
        if old not in self._operators:
            raise StateNotFoundError(f"no operator with uid {old!r} to rename (operators: {', '.join(self._operators) or 'none'})")
        if new in self._operators:
            raise BadInputError(f"cannot rename {old!r} to {new!r}: that uid exists already")
        if not new:
            raise BadInputError("operator uid must not be empty")
        entry = self._operators.pop(old)
        self._in_flight = self._in_flight.renamed({old: new})
        if isinstance(entry, _CopiedOperator):
            entry.metadata = replace(entry.metadata, uid=new, name=new if entry.metadata.name == old else entry.metadata.name)
        else:
            entry.uid = new
        self._operators[new] = entry
        return self

    def remove_state(self, uid: str, state: str) -> SavepointWriter:
        entry = self._operators.get(uid)
        if entry is None:
            raise StateNotFoundError(f"no operator with uid {uid!r}")
        if isinstance(entry, _CopiedOperator):
            entry.metadata.state(state)
            md = entry.metadata
            entry.metadata = replace(
                md,
                states=tuple(d for d in md.states if d.name != state),
                subtasks=tuple(replace(s, files=tuple(f for f in s.files if f.state != state)) for s in md.subtasks),
            )
        else:
            if state not in [d.name for d, _ in entry.states]:
                raise StateNotFoundError(f"operator {uid!r} has no state {state!r}")
            entry.states = [(d, v) for d, v in entry.states if d.name != state]
        return self

    def write(
        self, path: str, *, storage_options: dict[str, Any] | None = None,
        on_file: Advance | None = None,
        created_at_ms: int | None = None,
    ) -> CheckpointMetadata:
        """Write the savepoint to ``path`` (must not exist or be empty); returns its metadata.

        ``on_file(relative path, size)`` is called after each file copied from an existing
        savepoint (progress display); copies verify size and checksum on the way.
        ``created_at_ms`` pins the timestamp (reproducible output); default: now.
        """
        with staged_output_dir(path, storage_options, inputs=self._inputs,
                               input_storage_options=self._input_options) as (io, directory):
            operators = tuple(
                self._in_flight.attach(io, directory, self._write_operator(io, directory, entry, on_file))
                for entry in self._operators.values()
            )
            metadata = SnapshotMetadataBuilder(self.job_id, job_name=self.job_name).build(
                operators, created_at_ms=created_at_ms)
            commit_metadata(io, directory, metadata)
        return metadata

    # ------------------------------------------------------------ internals

    def _write_operator(
        self, io: FileIO, directory: str, entry: _NewOperator | _CopiedOperator,
        on_file: Advance | None = None,
    ) -> OperatorMetadata:
        if isinstance(entry, _CopiedOperator):
            return copy_operator(entry.reader, entry.metadata, io, directory, on_bytes=on_file)
        files: list[list[StateFile]] = [[] for _ in range(entry.parallelism)]
        for descriptor, data in entry.states:
            codec = StateCodec(descriptor, entry.key_serializer, for_write=True)
            if descriptor.keyed:
                written = _write_keyed_state(io, directory, entry, descriptor, codec, data)
            else:
                written = _write_operator_state(io, directory, entry, descriptor, codec, data)
            for index, file in enumerate(written):
                if file is not None:
                    files[index].append(file)
        return operator_metadata(
            entry.uid, name=entry.name, parallelism=entry.parallelism, max_parallelism=entry.max_parallelism,
            key_serializer=entry.key_serializer, states=[d for d, _ in entry.states], files=files,
        )


def _write_keyed_state(
    io: FileIO, directory: str, op: _NewOperator, descriptor: StateDescriptor, codec: StateCodec, rows: Any
) -> list[StateFile | None]:
    table = codec.encode_keyed_rows(rows)
    per_subtask: list[list[tuple[int, Any]]] = [[] for _ in range(op.parallelism)]
    for key_group, batch in group_by_key_group(table, op.max_parallelism):
        per_subtask[compute_operator_index_for_key_group(op.max_parallelism, op.parallelism, key_group)].append((key_group, batch))
    return [
        write_keyed_file(io, directory, layout.state_file_path(op.uid, descriptor.name, i, op.parallelism),
                         descriptor.name, groups)
        for i, groups in enumerate(per_subtask)
    ]


def split_evenly(elements: Sequence[Any], parts: int) -> list[list[Any]]:
    """Flink's round-robin-free even split: contiguous slices whose sizes differ by at most 1."""
    base, extra = divmod(len(elements), parts)
    out, start = [], 0
    for i in range(parts):
        size = base + (1 if i < extra else 0)
        out.append(list(elements[start:start + size]))
        start += size
    return out


def _write_operator_state(
    io: FileIO, directory: str, op: _NewOperator, descriptor: StateDescriptor, codec: StateCodec, data: Any
) -> list[StateFile | None]:
    if isinstance(data, PerSubtask):
        if len(data.parts) != op.parallelism:
            raise BadInputError(
                f"state {descriptor.name!r}: {len(data.parts)} subtask parts for parallelism {op.parallelism}"
            )
        parts = [list(p) for p in data.parts]
    elif descriptor.kind is StateKind.OPERATOR_LIST:
        parts = split_evenly(list(data), op.parallelism)
    elif descriptor.kind is StateKind.UNION:
        # Union state: the elements are put at subtask 0; restore gives the union to all.
        parts = [list(data)] + [[] for _ in range(op.parallelism - 1)]
    else:
        pairs = list(data.items()) if isinstance(data, dict) else list(data)
        parts = [pairs for _ in range(op.parallelism)]
    return [
        write_operator_file(
            io, directory, layout.state_file_path(op.uid, descriptor.name, i, op.parallelism),
            descriptor.name, codec.encode_operator_elements(part),
        )
        for i, part in enumerate(parts)
    ]


__all__ += ["split_evenly", "compute_default_max_parallelism"]
