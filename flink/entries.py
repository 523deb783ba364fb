"""Read the keyed state of a Flink snapshot: decoded entries, decodable states, entry counts.

Canonical savepoints (heap or RocksDB), incremental RocksDB checkpoints and native RocksDB
savepoints are read alike: :func:`read_keyed_state` walks the subtasks whose key groups
are wanted (:mod:`statekit.flink.sources`) and decodes each entry by the serializers the
keyed backend recorded (:mod:`statekit.flink.decoding`). Memory stays bounded: a canonical
stream is read one key group at a time, RocksDB reads blocks from its (temporary) files.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from statekit.flink.decoding import FlinkKeyedEntry, FlinkStateDecoder, flink_state_decoder
from statekit.flink.model import KeyedHandleKind
from statekit.flink.sources import HeapSource, StreamSource, key_group_entries, keyed_sources, prefix_bytes
from statekit.flink.storage import FlinkSnapshot
from statekit.statefmt.errors import BadInputError

__all__ = [
    "FlinkEntryCounts",
    "count_savepoint_entries",
    "FlinkKeyedEntry",
    "FlinkStateDecoder",
    "flink_state_decoder",
    "read_keyed_state",
    "read_savepoint_entries",
    "decodable_states",
    "FlinkStateSupport",
    "state_value_types",
    "key_group_slices",
]


@dataclass(frozen=True)
class FlinkEntryCounts:
    """Entries per state and key group of one operator's keyed state.

    Attributes:
        operator: The operator's uid or id.
        per_key_group: ``{state name: {key group: entries}}`` (empty key groups omitted).
        bytes_per_state: Key plus value bytes per state name.
    """

    operator: str
    per_key_group: dict[str, dict[int, int]] = field(default_factory=dict)
    bytes_per_state: dict[str, int] = field(default_factory=dict)

    @property
    def totals(self) -> dict[str, int]:
        """Entries per state name."""
        return {name: sum(groups.values()) for name, groups in self.per_key_group.items()}


def count_savepoint_entries(snapshot: FlinkSnapshot, uid_or_id: str) -> FlinkEntryCounts:
    """Count the keyed entries of one operator of a canonical savepoint.

    Args:
        snapshot: An opened canonical savepoint.
        uid_or_id: The operator's uid or operator id.

    Raises:
        StateNotFoundError: No such operator.
        BadInputError: Not a canonical savepoint, or compressed key groups.
        CorruptStateError: The key-group stream is damaged (names file and byte offset).
    """
    op = snapshot.metadata.operator(uid_or_id)
    counts = FlinkEntryCounts(op.label)
    prefix = prefix_bytes(op.max_parallelism)
    for stream in keyed_sources(snapshot, op, purpose="entry counts"):
        if not isinstance(stream, StreamSource) or isinstance(stream, HeapSource):
            raise BadInputError(f"entry counts need a canonical savepoint; {op.label} has "
                                f"{stream.handle.kind.value} handles", path=snapshot.path)
        names = tuple(state.name for state in stream.meta.states)
        for key_group, offset, data in stream.key_groups(snapshot):
            for name, key, value, _ in key_group_entries(data, key_group, names, prefix, stream.source, offset):
                groups = counts.per_key_group.setdefault(name, {})
                groups[key_group] = groups.get(key_group, 0) + 1
                counts.bytes_per_state[name] = counts.bytes_per_state.get(name, 0) + len(key) + len(value)
    return counts


@dataclass(frozen=True)
class FlinkStateSupport:
    """One keyed state of an operator: its decoder, or why it cannot be decoded."""

    name: str
    kind: str
    decoder: FlinkStateDecoder | None
    reason: str | None


def state_value_types(value_types: dict[str, str] | None, state: str) -> str | None:
    """The declared type for ``state`` from ``{state: type}``; PyFlink names work without prefix."""
    if not value_types:
        return None
    if state in value_types:
        return value_types[state]
    short = state.removeprefix("python-state-")
    return value_types.get(short) if short != state else None


def decodable_states(snapshot: FlinkSnapshot, uid_or_id: str, *,
                     value_types: dict[str, str] | None = None) -> list[FlinkStateSupport]:
    """Every keyed state of one operator, with its decoder or the reason there is none.

    Reads the keyed backend header of the operator's first keyed subtask (every subtask
    writes the same states and serializers).

    Args:
        snapshot: An opened snapshot.
        uid_or_id: The operator's uid or id.
        value_types: Declared types of PyFlink state values by state name (``--value-type``).
    """
    op = snapshot.metadata.operator(uid_or_id)
    for stream in keyed_sources(snapshot, op):
        out: list[FlinkStateSupport] = []
        for state in stream.meta.states:
            declared = state_value_types(value_types, state.name)
            try:
                decoder = flink_state_decoder(stream.meta, state.name, source=stream.source, value_type=declared)
                out.append(FlinkStateSupport(state.name, state.kind, decoder, None))
            except BadInputError as exc:
                if declared is not None:
                    raise
                reason = str(exc).removeprefix(f"{stream.source}: ").removeprefix(f"state {state.name!r}: ")
                out.append(FlinkStateSupport(state.name, state.kind, None, reason))
        return out
    return []


def read_keyed_state(
    snapshot: FlinkSnapshot, uid_or_id: str, state: str, *, key_groups: Iterable[int] | None = None,
    value_type: str | None = None,
) -> Iterator[FlinkKeyedEntry]:
    """Decode the entries of one keyed state, subtask by subtask, in key-group order.

    Works on canonical savepoints, incremental RocksDB checkpoints and native RocksDB
    savepoints alike.

    Args:
        snapshot: An opened snapshot.
        uid_or_id: The operator's uid or operator id.
        state: The state name (``python-state-<name>`` for PyFlink state).
        key_groups: Only these key groups (default: all).
        value_type: Decode PyFlink ``byte[]`` values by this declared type
            (:mod:`statekit.flink.pyflink`).

    Raises:
        StateNotFoundError: No such operator or state.
        BadInputError: A handle kind or serializer that cannot be decoded, or a declared type
            that does not fit.
        CorruptStateError: Damaged bytes (names the file and byte offset or key group).
    """
    op = snapshot.metadata.operator(uid_or_id)
    wanted = None if key_groups is None else set(key_groups)
    prefix = prefix_bytes(op.max_parallelism)
    for source in keyed_sources(snapshot, op, wanted=wanted):
        decoder = flink_state_decoder(source.meta, state, source=source.source, value_type=value_type)
        yield from source.decoded(snapshot, decoder, prefix, wanted)


read_savepoint_entries = read_keyed_state  # the name of the canonical-only reader it grew from


def key_group_slices(snapshot: FlinkSnapshot, uid_or_id: str, tasks: int) -> list[list[int]]:
    """Key groups split into at most ``tasks`` slices for parallel reading.

    RocksDB state is read a subtask at a time (each slice opens one instance: the key
    groups of one or more whole subtasks); canonical streams are spread key group by key
    group, so hot ranges share out.
    """
    op = snapshot.metadata.operator(uid_or_id)
    handles = [sub.managed_keyed_state for sub in op.subtasks if sub.managed_keyed_state is not None]
    tasks = max(1, tasks)
    if handles and all(h.kind is KeyedHandleKind.INCREMENTAL for h in handles):
        ranges = [list(h.key_group_range) for h in handles]
        slices: list[list[int]] = [[] for _ in range(min(tasks, len(ranges)))]
        for index, groups in enumerate(ranges):
            slices[index % len(slices)] += groups
        return slices
    count = max(1, min(op.max_parallelism, tasks))
    return [list(range(i, op.max_parallelism, count)) for i in range(count)]
