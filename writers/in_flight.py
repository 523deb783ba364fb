"""In-flight records of an unaligned checkpoint, carried through offline surgery.

An unaligned checkpoint stores the records its barriers overtook as channel-state sections
(:mod:`statekit.statefmt.channel_state`), one file per subtask of a task's head operator. A
writer that derives a snapshot from it carries every section over, or refuses with one line —
never writes a ``_metadata`` that loses them or names files it did not write.

What carrying over means:
    * A section keeps its channel as the checkpoint recorded it (producer, consumer, their
      subtasks and parallelisms, partitioning). On restore the runtime replays it exactly as
      it replays the checkpoint's own (:mod:`statekit.runtime.checkpoint.restore`): unchanged parallelism,
      each channel's records go to the subtask that stored them; another parallelism, records
      of a keyed exchange go to the subtask owning their key group (computed from the record
      with the *job's* key selector, which only the job has: an offline tool cannot route
      records by key), rebalance records are dealt round-robin.
    * So a section only changes its file: the records an old subtask ``i`` of ``p`` stored are
      written into the file of new subtask ``i * p' // p`` of the operator (a storage detail:
      the restore reads every section of every file).
    * Renaming a uid renames it in every section (producer, consumer) and file.

Refused, nothing written (:meth:`InFlightRecords.check_rescale`, :meth:`InFlightRecords.check_removal`):
    * a new parallelism of either end of a ``forward`` or ``broadcast`` exchange holding
      records (the restore could not redistribute them either);
    * a new max parallelism of the consumer of a keyed exchange holding records: the sections
      record the consumer subtasks of the old key groups, and regrouping them needs each
      record's key;
    * removing an operator whose subtasks stored records, or that an exchange holding records
      leads from or to.
The message says how to get there: take a savepoint (always aligned) and operate on that.
"""

from __future__ import annotations

import collections
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.channel_state import (
    ChannelSection,
    ChannelStateFile,
    channel_state_path,
    decode_channel_state,
    encode_channel_state,
)
from statekit.statefmt.checksum import crc32, format_checksum
from statekit.statefmt.errors import BadInputError, CorruptStateError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.metadata import OperatorMetadata, SubtaskState

__all__ = ["StoredSection", "InFlightRecords", "ParallelismChange", "copy_channel_file"]

_SAVEPOINT_HINT = ("restore the checkpoint at its parallelism and take a savepoint (savepoints are always aligned), "
                   "then operate on the savepoint")


@dataclass(frozen=True)
class StoredSection:
    """One section and where it was stored: the operator (a task's head) and its old subtask."""

    owner: str
    subtask: int
    parallelism: int
    section: ChannelSection


@dataclass(frozen=True)
class ParallelismChange:
    """An operator's parallelism and max parallelism before and after a rescale."""

    parallelism: tuple[int, int]
    max_parallelism: tuple[int, int]


def _read_channel_file(reader: SavepointReader, file: ChannelStateFile) -> tuple[bytes, list[ChannelSection]]:
    """The bytes and sections of a channel-state file, checked against ``_metadata`` (size,
    checksum, record count) and in themselves (structure, section CRCs)."""
    snapshot = reader.snapshot
    path = snapshot.file_path(file.path)
    shown = snapshot.io.url(path)
    data = snapshot.io.read_bytes(path, limit=file.size)
    if len(data) != file.size:
        raise CorruptStateError(f"channel-state file holds {len(data)} bytes, _metadata records {file.size}",
                                path=shown)
    checksum = format_checksum(crc32(data))
    if checksum != file.checksum:
        raise CorruptStateError(f"channel-state file checksum {checksum} differs from the recorded {file.checksum}",
                                path=shown)
    sections = decode_channel_state(data, path=shown)
    records = sum(len(s.records) for s in sections)
    if records != file.records:
        raise CorruptStateError(f"channel-state file holds {records} in-flight records, _metadata records "
                                f"{file.records}", path=shown)
    return data, sections


def copy_channel_file(reader: SavepointReader, op: OperatorMetadata, st: SubtaskState, io: FileIO,
                      directory: str) -> ChannelStateFile | None:
    """Copy subtask ``st``'s channel-state file (if any) into ``directory``, checked on the way
    (size, checksum, structure, record count); its new path is the canonical one of ``op``'s uid."""
    file = st.channel_state
    if file is None:
        return None
    data, _ = _read_channel_file(reader, file)
    relative = channel_state_path(op.uid, st.index, op.parallelism)
    io.write_atomic(posixpath.join(directory, relative), data)
    return replace(file, path=relative)


class InFlightRecords:
    """Every channel-state section of a snapshot (read and checked once), by where it was stored."""

    def __init__(self, sections: Sequence[StoredSection], source: str) -> None:
        self.sections = tuple(sections)
        self.source = source

    @classmethod
    def read(cls, reader: SavepointReader) -> InFlightRecords:
        """The sections of ``reader``'s snapshot.

        Raises:
            CorruptStateError: A channel-state file whose size, checksum or structure is wrong.
        """
        found = []
        for op in reader.metadata.operators:
            for st in op.subtasks:
                if st.channel_state is None:
                    continue
                _, sections = _read_channel_file(reader, st.channel_state)
                found += [StoredSection(op.uid, st.index, op.parallelism, s) for s in sections]
        return cls(found, reader.path)

    def __bool__(self) -> bool:
        return bool(self.sections)

    @property
    def records(self) -> int:
        return sum(len(s.section.records) for s in self.sections)

    def touching(self, uid: str) -> list[StoredSection]:
        """Sections stored by ``uid`` or on an exchange from or to it."""
        return [s for s in self.sections if uid in (s.owner, s.section.producer, s.section.consumer)]

    # ------------------------------------------------------------ checks

    def check_removal(self, uids: Iterable[str], what: str) -> None:
        """Refuse removing operators that in-flight records belong to.

        Raises:
            BadInputError: One names the operator and the records.
        """
        for uid in uids:
            touched = self.touching(uid)
            if touched:
                count = sum(len(s.section.records) for s in touched)
                raise BadInputError(
                    f"{what} {uid}: the unaligned checkpoint holds {count} in-flight record(s) stored by it or on "
                    f"its exchanges, which the output could not keep; {_SAVEPOINT_HINT}", path=self.source)

    def check_rescale(self, changes: Mapping[str, ParallelismChange]) -> None:
        """Refuse a rescale the sections cannot follow (see the module docstring).

        Args:
            changes: Per uid that changes, its parallelism and max parallelism before and after.

        Raises:
            BadInputError: The exchange, its records and why.
        """
        for edge, sections in sorted(self._by_edge().items()):
            producer, consumer, _ = edge
            first = sections[0].section
            count = sum(len(s.section.records) for s in sections)
            moved = [uid for uid in (producer, consumer)
                     if uid in changes and changes[uid].parallelism[0] != changes[uid].parallelism[1]]
            where = f"the {first.partitioning} exchange {producer} -> {consumer}"
            if moved and first.partitioning in ("forward", "broadcast"):
                raise BadInputError(
                    f"{count} in-flight record(s) on {where} cannot follow a new parallelism of {moved[0]} (the "
                    f"order and the per-subtask copies of a {first.partitioning} exchange would be lost); "
                    f"{_SAVEPOINT_HINT}", path=self.source)
            change = changes.get(consumer)
            if first.partitioning == "hash" and change is not None and \
                    change.max_parallelism[0] != change.max_parallelism[1]:
                raise BadInputError(
                    f"{count} in-flight record(s) on {where} were routed by the key groups of max parallelism "
                    f"{change.max_parallelism[0]}; regrouping them to {change.max_parallelism[1]} needs each "
                    f"record's key, which only the job's key selector gives; {_SAVEPOINT_HINT}", path=self.source)

    def _by_edge(self) -> dict[tuple[str, str, int], list[StoredSection]]:
        edges: dict[tuple[str, str, int], list[StoredSection]] = collections.defaultdict(list)
        for stored in self.sections:
            edges[stored.section.edge].append(stored)
        return edges

    # ------------------------------------------------------------ changes

    def renamed(self, renames: Mapping[str, str]) -> InFlightRecords:
        """These sections with uids renamed (``{old: new}``, applied simultaneously)."""
        def name(uid: str) -> str:
            return renames.get(uid, uid)

        return InFlightRecords([
            replace(s, owner=name(s.owner),
                    section=replace(s.section, producer=name(s.section.producer), consumer=name(s.section.consumer)))
            for s in self.sections], self.source)

    def without_owners(self, uids: Iterable[str]) -> InFlightRecords:
        """These sections without those stored by ``uids`` (after :meth:`check_removal`)."""
        gone = set(uids)
        return InFlightRecords([s for s in self.sections if s.owner not in gone], self.source)

    # ------------------------------------------------------------ writing

    def write(self, io: FileIO, directory: str, uid: str, parallelism: int) -> list[ChannelStateFile | None]:
        """The channel-state files of operator ``uid`` at ``parallelism`` (one per new subtask,
        None where no record lands): old subtask ``i`` of ``p`` goes to ``i * parallelism // p``."""
        per_subtask: list[list[ChannelSection]] = [[] for _ in range(parallelism)]
        for stored in sorted((s for s in self.sections if s.owner == uid), key=lambda s: s.subtask):
            per_subtask[stored.subtask * parallelism // stored.parallelism].append(stored.section)
        written: list[ChannelStateFile | None] = []
        for index, sections in enumerate(per_subtask):
            if not sections:
                written.append(None)
                continue
            data, summary = encode_channel_state(sections)
            relative = channel_state_path(uid, index, parallelism)
            io.write_atomic(posixpath.join(directory, relative), data)
            written.append(replace(summary, path=relative))
        return written

    def attach(self, io: FileIO, directory: str, op: OperatorMetadata) -> OperatorMetadata:
        """``op`` with the channel-state files of its uid written and named by its subtasks."""
        files = self.write(io, directory, op.uid, op.parallelism)
        return replace(op, subtasks=tuple(replace(st, channel_state=files[st.index]) for st in op.subtasks))
