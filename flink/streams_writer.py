"""Canonical key-group streams of an operator: check them for a rewrite, open them, write new ones.

A canonical savepoint stores each subtask's keyed state as one stream (Flink's full-snapshot
layout, :mod:`statekit.flink.sources`): the keyed backend meta information (the *header*:
key serializer, states and their serializer snapshots), then the key groups. A rewrite
keeps one header for every new stream — byte for byte, so serializer snapshots carry over
as they are — and writes the regrouped entries (:mod:`statekit.flink.regroup`) after it::

    header | per non-empty key group, ascending:
               state id short | entries, the last of each state flagged | (next state id short)...
               | 0xFFFF end-of-key-group mark

The offset of each key group (of its first state id) goes into the subtask's
``KeyGroupsSavepointStateHandle``; an empty key group keeps offset 0, as Flink writes it.

With snapshot compression (the header's flag) every key group of a source stream is read
through Snappy, and every key group written is one Snappy framed stream again, so the
rewrite keeps the compression (:mod:`statekit.flink.compression`).

Refused, with one line naming the operator, subtask or state and the reason: keyed handles
other than canonical savepoint ones, raw keyed state, headers whose
serializer snapshots statekit cannot read, keys whose Java ``hashCode`` statekit cannot
compute, and subtasks that registered different serializers for the same state.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import IO

from statekit.flink.compression import compress_framed
from statekit.flink.key_hash import KeyHasher, key_hasher, unhashable_class
from statekit.flink.model import FlinkOperatorState, KeyedHandleKind, StreamHandle, StreamHandleKind
from statekit.flink.regroup import StreamInput
from statekit.flink.serializers import TIMER_CLASS
from statekit.flink.sources import StreamSource, keyed_sources
from statekit.flink.state_meta import FlinkStateMeta, KeyedBackendMeta
from statekit.flink.storage import FlinkSnapshot, read_stream_bytes, resolve_stream
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.keygroups import KeyGroupRange

__all__ = ["OperatorStreams", "operator_streams", "open_input", "open_inputs", "key_group_blocks", "write_stream",
           "has_keyed_state"]

END_OF_KEY_GROUP = b"\xff\xff"
SUPPORTED_KEYS = ("String, Long, Integer, Short, Byte, Boolean, Character, Double, Float, Rows and Tuples of these, "
                  "and Flink SQL's RowData; a POJO, Kryo, Avro or case class key hashes by user code")


@dataclass(frozen=True)
class OperatorStreams:
    """The checked key-group streams of one operator.

    Attributes:
        operator: The operator.
        header: The keyed backend meta information every new stream starts with.
        meta: That header, parsed.
        hasher: The Java ``hashCode`` of the operator's keys.
        sources: One stream per subtask that has keyed state.
        state_ids: Per source (same order), the header's state id of each of its state ids.
        timers: State ids (of the header) of timers, whose keys start with a timestamp.
    """

    operator: FlinkOperatorState
    header: bytes
    meta: KeyedBackendMeta
    hasher: KeyHasher
    sources: tuple[StreamSource, ...]
    state_ids: tuple[tuple[int, ...], ...]
    timers: frozenset[int]

    @property
    def state_names(self) -> tuple[str, ...]:
        """The states of the header, in state id order."""
        return tuple(state.name for state in self.meta.states)

    @property
    def bytes(self) -> int:
        """The recorded size of the source streams."""
        return sum(source.delegate.size for source in self.sources)


def has_keyed_state(op: FlinkOperatorState) -> bool:
    """True when a subtask of ``op`` has a managed or raw keyed state handle."""
    return any(sub.keyed_handles for sub in op.subtasks)


def _check_handles(snapshot: FlinkSnapshot, op: FlinkOperatorState) -> None:
    for sub in op.subtasks:
        if sub.raw_keyed_state is not None:
            raise BadInputError(f"operator {op.label} subtask {sub.index} has raw keyed state (written by the operator "
                                "itself, per key group): its keys cannot be regrouped", path=snapshot.path)
        handle = sub.managed_keyed_state
        if handle is not None and handle.kind is not KeyedHandleKind.SAVEPOINT_KEY_GROUPS:
            raise BadInputError(f"is a native savepoint (operator {op.label} subtask {sub.index}: "
                                f"{handle.kind.value} keyed state handle, the state backend's own files): rewriting "
                                "keyed state needs a canonical savepoint; take one with `flink savepoint --type "
                                "canonical` (or stop-with-savepoint in the canonical format)", path=snapshot.path)


def _problem(op: FlinkOperatorState, meta: KeyedBackendMeta, source: str) -> BadInputError | None:
    """Why the header cannot be carried over and mapped by state id, or ``None``."""
    broken = next((s for s in meta.states if s.problem), None)
    if broken is not None:
        return BadInputError(f"operator {op.label}: state {broken.name!r}: {broken.problem}; the state ids that "
                             "follow it cannot be trusted, so the operator is not rewritten", path=source)
    if meta.problem or meta.header_size is None or meta.key_serializer is None:
        return BadInputError(f"operator {op.label}: the keyed state header cannot be read: "
                             f"{meta.problem or 'incomplete'}", path=source)
    return None


def _classes(state: FlinkStateMeta) -> tuple[tuple[str, str | None, tuple[str, ...]], ...]:
    return tuple((s.key, s.snapshot_class, s.nested) for s in state.serializers)


def _reference(op: FlinkOperatorState, sources: list[StreamSource]) -> StreamSource:
    """The source whose header names every state of every source, with the same serializers."""
    seen: dict[str, FlinkStateMeta] = {}
    for source in sources:
        for state in source.meta.states:
            known = seen.setdefault(state.name, state)
            if _classes(known) != _classes(state) or known.backend_type != state.backend_type:
                raise BadInputError(f"operator {op.label}: subtasks registered state {state.name!r} with different "
                                    "serializers or types; not rewritten", path=source.source)
    for source in sources:
        if {s.name for s in source.meta.states} == set(seen):
            return source
    raise BadInputError(f"operator {op.label}: no subtask registered every state ({', '.join(seen)}); their headers "
                        "cannot be merged", path=sources[0].source)


def _timers(op: FlinkOperatorState, meta: KeyedBackendMeta, source: str) -> frozenset[int]:
    ids = set()
    for index, state in enumerate(meta.states):
        if state.backend_type == "priority-queue":
            value = next((s.snapshot_class for s in state.serializers if s.key == "VALUE_SERIALIZER"), None)
            if value != TIMER_CLASS:
                raise BadInputError(f"operator {op.label}: priority queue state {state.name!r} holds {value}, not "
                                    "timers: its keys cannot be regrouped", path=source)
            ids.add(index)
        elif state.backend_type != "key-value":
            raise BadInputError(f"operator {op.label}: {state.backend_type} state {state.name!r} in a keyed state "
                                "stream cannot be regrouped", path=source)
    return frozenset(ids)


def operator_streams(snapshot: FlinkSnapshot, op: FlinkOperatorState) -> OperatorStreams:
    """Check one operator's keyed state for a rewrite and choose the header of its new streams.

    Raises:
        BadInputError: Anything a rewrite refuses (see the module docstring); the message
            names the operator and the state or subtask.
        CorruptStateError: A damaged header.
    """
    _check_handles(snapshot, op)
    sources = []
    for source in keyed_sources(snapshot, op, purpose="rewriting keyed state"):
        assert isinstance(source, StreamSource)  # _check_handles admitted savepoint key-group handles only
        problem = _problem(op, source.meta, source.source)
        if problem is not None:
            raise problem
        sources.append(source)
    if not sources:
        raise BadInputError(f"operator {op.label} has no keyed state to rewrite", path=snapshot.path)
    reference = _reference(op, sources)
    meta = reference.meta
    assert meta.key_serializer is not None and meta.header_size is not None  # _problem checked
    hasher = key_hasher(meta.key_serializer.tree)
    if hasher is None:
        state = meta.states[0].name
        raise BadInputError(f"operator {op.label}: state {state!r} is keyed by "
                            f"{unhashable_class(meta.key_serializer.tree)}, whose Java hashCode statekit cannot "
                            f"compute (it hashes {SUPPORTED_KEYS})", path=reference.source)
    names = [state.name for state in meta.states]
    state_ids = tuple(tuple(names.index(state.name) for state in source.meta.states) for source in sources)
    header = read_stream_bytes(snapshot, reference.delegate, length=meta.header_size)
    return OperatorStreams(op, header, meta, hasher, tuple(sources), state_ids,
                           _timers(op, meta, reference.source))


def _leaf(handle: StreamHandle) -> StreamHandle:
    while handle.kind is StreamHandleKind.KEY_GROUPS and handle.delegate is not None:
        handle = handle.delegate
    return handle


def _open(snapshot: FlinkSnapshot, handle: StreamHandle) -> IO[bytes]:
    leaf = _leaf(handle)
    if leaf.kind is StreamHandleKind.BYTE_STREAM:
        return io.BytesIO(leaf.data or b"")
    location = resolve_stream(snapshot, leaf)
    return location.io.open_input(location.path)


def _uncompressed(snapshot: FlinkSnapshot, source: StreamSource, spill: IO[bytes],
                  wanted: set[int] | None) -> tuple[tuple[tuple[int, int], ...], tuple[int, ...]]:
    """Write the (wanted) key groups of a compressed stream uncompressed to ``spill``: their new
    offsets and ends.

    One key group at a time, so memory holds the largest key group, not the stream.
    """
    offsets, ends = [], []
    for key_group, _, data in source.key_groups(snapshot, wanted):
        offsets.append((key_group, spill.tell()))
        spill.write(data)
        ends.append(spill.tell())
    spill.seek(0)
    return tuple(offsets), tuple(ends)


@contextmanager
def open_input(snapshot: FlinkSnapshot, streams: OperatorStreams, number: int,
               blocks: Sequence[tuple[int, int, int]] | None = None) -> Iterator[StreamInput]:
    """Source ``number`` of the operator, opened as a regrouper input (closed when the block exits).

    ``blocks``: only these ``(key group, offset, end)`` of the stream, in stream order (a slice
    of it, :func:`key_group_blocks`). A compressed stream is read through a temporary file of
    its (chosen) key groups, uncompressed.
    """
    source, state_ids = streams.sources[number], streams.state_ids[number]
    with ExitStack() as stack:
        stream: IO[bytes]
        ends: tuple[int, ...] | None = None
        if source.meta.compressed:
            stream = stack.enter_context(tempfile.TemporaryFile(prefix="statekit-flink-kg-"))
            offsets, ends = _uncompressed(snapshot, source, stream,
                                          None if blocks is None else {kg for kg, _, _ in blocks})
        elif blocks is None:
            offsets = tuple((kg, offset) for kg, offset, _ in key_group_blocks(source))
            stream = stack.enter_context(_open(snapshot, source.delegate))
        else:
            offsets, ends = tuple((kg, offset) for kg, offset, _ in blocks), tuple(end for _, _, end in blocks)
            stream = stack.enter_context(_open(snapshot, source.delegate))
        yield StreamInput(stream, source.source, offsets, state_ids, streams.timers, ends)


@contextmanager
def open_inputs(snapshot: FlinkSnapshot, streams: OperatorStreams) -> Iterator[list[StreamInput]]:
    """The operator's streams, opened, as regrouper inputs (closed when the block exits)."""
    with ExitStack() as stack:
        yield [stack.enter_context(open_input(snapshot, streams, number)) for number in range(len(streams.sources))]


def key_group_blocks(source: StreamSource) -> list[tuple[int, int, int]]:
    """``(key group, offset, end)`` of every non-empty key group of the stream, in stream order
    (offsets as the handle records them: of the compressed bytes in a compressed stream)."""
    handle = source.handle
    starts = sorted((offset, kg) for kg, offset in zip(handle.key_group_range, handle.key_group_offsets) if offset)
    return [(kg, offset, starts[i + 1][0] if i + 1 < len(starts) else source.delegate.size)
            for i, (offset, kg) in enumerate(starts)]


def write_stream(out: IO[bytes], header: bytes, key_groups: KeyGroupRange,
                 groups: Iterable[tuple[int, int, Iterator[bytes | memoryview]]], *,
                 compressed: bool = False) -> tuple[list[int], int]:
    """Write one subtask's stream: ``header``, then ``groups`` (ascending, inside ``key_groups``).

    With ``compressed`` each key group is written as one Snappy framed stream (the header
    then says so already: it is the source's, byte for byte).

    Returns:
        The offset of every key group of ``key_groups`` (0 when empty) and the stream's size.
    """
    if compressed:
        return _write_compressed(out, header, key_groups, groups)
    out.write(header)
    position = len(header)
    offsets = [0] * len(key_groups)
    current: int | None = None
    for key_group, state, chunks in groups:
        if key_group != current:
            if current is not None:
                out.write(END_OF_KEY_GROUP)
                position += 2
            offsets[key_group - key_groups.start] = position
            current = key_group
        out.write(state.to_bytes(2, "big"))
        position += 2
        for chunk in chunks:
            out.write(chunk)
            position += len(chunk)
    if current is not None:
        out.write(END_OF_KEY_GROUP)
        position += 2
    return offsets, position


def _write_compressed(out: IO[bytes], header: bytes, key_groups: KeyGroupRange,
                      groups: Iterable[tuple[int, int, Iterator[bytes | memoryview]]]) -> tuple[list[int], int]:
    """:func:`write_stream` with every key group compressed on its own (as Flink's full snapshot writes it)."""
    out.write(header)
    position = len(header)
    offsets = [0] * len(key_groups)
    current: int | None = None
    pending = bytearray()

    def flush() -> None:
        nonlocal position
        if current is None:
            return
        pending.extend(END_OF_KEY_GROUP)
        data = compress_framed(bytes(pending))
        offsets[current - key_groups.start] = position
        out.write(data)
        position += len(data)
        pending.clear()

    for key_group, state, chunks in groups:
        if key_group != current:
            flush()
            current = key_group
        pending.extend(state.to_bytes(2, "big"))
        for chunk in chunks:
            pending.extend(chunk)
    flush()
    return offsets, position

