"""State migration: a state's values rewritten from one declared value type to another.

:class:`EntryMigration` migrates decoded entries of one state (keyed entries or operator-state
elements) from the snapshot's descriptor to the job's, by
:mod:`statekit.statefmt.type_evolution`; the runtime applies it on restore.
:func:`migrate_savepoint` is ``statekit migrate``: a new savepoint, written whole or not at
all, whose state ``UID/STATE`` declares the new type and holds migrated values; every other
operator is copied file by file, and the source is never modified.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.entries import KeyedStateEntry, MapStateEntry
from statekit.statefmt.errors import BadInputError, IncompatibleStateError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.json_contract import JsonShape
from statekit.statefmt.metadata import OperatorMetadata, StateDescriptor, StateKind
from statekit.statefmt.type_evolution import ValueMigration, resolve_declared_types
from statekit.statefmt.value_types import parse_value_type
from statekit.writers.savepoint_writer import PerSubtask, SavepointWriter
from statekit.writers.staging import check_output_dir

__all__ = ["EntryMigration", "MigrationReport", "migrate_savepoint", "parse_state_ref", "parse_default"]


class EntryMigration:
    """Migrates the decoded entries of one state from ``old``'s value type to ``new``'s.

    ``old`` and ``new`` name the same state of the same kind; their value-type change must be
    compatible (:func:`~statekit.statefmt.type_evolution.resolve_type_change`).
    """

    def __init__(self, old: StateDescriptor, new: StateDescriptor, defaults: Mapping[str, Any] | None = None) -> None:
        change = resolve_declared_types(old.value_type, new.value_type)
        if not change.compatible or old.kind is not new.kind:
            raise IncompatibleStateError(
                f"state {old.name!r}: {old.kind.value} {change.old} cannot be migrated to "
                f"{new.kind.value} {change.new} ({change.reason or 'the kind changed'})")
        self.kind = old.kind
        self.values = ValueMigration(change.old, change.new, defaults)

    def items(self, items: Iterable[Any]) -> Iterator[Any]:
        """Keyed entries (``KeyedStateEntry``/``MapStateEntry``) or operator-state elements
        (broadcast: ``(key, value)`` pairs), migrated one by one."""
        migrate = self._item()
        return (migrate(item) for item in items)

    def _item(self) -> Any:
        value = self.values.apply
        if self.kind is StateKind.LIST:
            return lambda e: e._replace(value=None if e.value is None else [value(v) for v in e.value])
        if self.kind in (StateKind.VALUE, StateKind.MAP, StateKind.REDUCING, StateKind.AGGREGATING):
            return lambda e: e._replace(value=value(e.value))
        if self.kind is StateKind.BROADCAST:
            return lambda pair: (pair[0], value(pair[1]))
        return value  # operator list and union list state: one element each


@dataclass(frozen=True)
class MigrationReport:
    """What ``statekit migrate`` wrote."""

    json_shape: ClassVar[JsonShape] = JsonShape(digits={"elapsed_s": 3})

    source: str
    output: str
    uid: str
    state: str
    old_type: str
    new_type: str
    compatibility: str
    entries: int
    elapsed_s: float


def parse_state_ref(text: str) -> tuple[str, str]:
    """``UID/STATE`` -> (uid, state); the last ``/`` separates them (uids may contain ``/``)."""
    uid, sep, state = text.rpartition("/")
    if not sep or not uid or not state:
        raise BadInputError(f"--state {text!r}: expected UID/STATE")
    return uid, state


def parse_default(text: str) -> tuple[str, Any]:
    """``FIELD=JSON`` -> (field, value); a value that is not JSON is taken as a string."""
    name, sep, raw = text.partition("=")
    if not sep or not name:
        raise BadInputError(f"--default {text!r}: expected FIELD=VALUE (VALUE as JSON, e.g. 0, \"EUR\", null)")
    try:
        return name, json.loads(raw)
    except ValueError:
        return name, raw


def migrate_savepoint(
    source: str, output: str, uid: str, state: str, value_type: str, *, defaults: Mapping[str, Any] | None = None,
    trust_pickle: bool = False, storage_options: dict[str, Any] | None = None,
) -> MigrationReport:
    """Write a copy of ``source`` whose state ``uid/state`` is declared ``value_type``.

    ``defaults``: values of the struct fields ``value_type`` adds (else null).

    Raises:
        StateNotFoundError: No such operator or state.
        BadInputError: A malformed type, an output that is not new/empty, native keyed state.
        IncompatibleStateError: The declared type cannot change to ``value_type``.
    """
    started = time.monotonic()
    reader = SavepointReader.read(source, trust_pickle=trust_pickle, storage_options=storage_options)
    op = reader.operator(uid)
    old = op.state(state)
    new_type = str(parse_value_type(value_type))
    change = resolve_declared_types(old.value_type, new_type)
    if not change.compatible:
        raise IncompatibleStateError(
            f"state {uid}/{state}: declared type {change.old} cannot change to {change.new} ({change.reason})",
            path=reader.path)
    if any(st.native is not None for st in op.subtasks):
        raise BadInputError(f"operator {uid!r} holds native keyed state; take a savepoint (canonical) of the job "
                            "and migrate that", path=reader.path)
    io, out_path = FileIO.for_path(output, storage_options)
    check_output_dir(io, out_path, [source, reader.path], storage_options)
    new = replace(old, value_type=new_type)
    migration = EntryMigration(old, new, defaults)
    states, entries = _operator_states(reader, op, migration, old, new)
    writer = SavepointWriter.from_existing_savepoint(source, trust_pickle=trust_pickle, storage_options=storage_options)
    writer.with_operator(uid, states, parallelism=op.parallelism, max_parallelism=op.max_parallelism, name=op.name,
                         key_serializer=op.key_serializer or "msgpack")
    writer.write(output, storage_options=storage_options)
    return MigrationReport(reader.path, io.url(out_path), uid, state, str(change.old), str(change.new),
                           change.compatibility.value, entries, time.monotonic() - started)


def _operator_states(reader: SavepointReader, op: OperatorMetadata, migration: EntryMigration, old: StateDescriptor,
                     new: StateDescriptor) -> tuple[list[tuple[StateDescriptor, Any]], int]:
    """Every state of ``op`` as writer input, ``old`` migrated to ``new``; and its entry count."""
    states: list[tuple[StateDescriptor, Any]] = []
    count = 0
    for descriptor in op.states:
        chosen = descriptor.name == old.name
        if descriptor.keyed:
            rows: list[KeyedStateEntry | MapStateEntry] = list(reader.read_keyed_state(op.uid, descriptor.name))
            data: Any = list(migration.items(rows)) if chosen else rows
            count += len(rows) if chosen else 0
        else:
            parts = reader.read_operator_state_per_subtask(op.uid, descriptor.name)
            data = PerSubtask([list(migration.items(p)) for p in parts] if chosen else parts)
            count += sum(len(p) for p in parts) if chosen else 0
        states.append((new if chosen else descriptor, data))
    return states, count
