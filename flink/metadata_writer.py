"""Write Flink ``_metadata`` files: the original bytes, with chosen parts replaced.

A new ``_metadata`` is the source file with *edits*: byte spans replaced by new bytes (an
operator's uid, id or max parallelism, a subtask's keyed state handle, a file handle made
relative), spans dropped (a removed operator) or bytes inserted (a new subtask). Everything
not edited — master states, coordinator state, operator state handles, inlined streams, the
``CheckpointProperties`` trailer — is copied byte for byte, so the file keeps its version
and every field statekit does not model.

The spans come from :func:`metadata_spans`, which walks the file with the same readers as
:func:`statekit.flink.metadata.read_flink_metadata` and records where each part starts and
ends. Encoders write Flink's layouts (``MetadataV2V3SerializerBase``, Java
``DataOutputStream``, big-endian; strings as ``writeUTF``).

Invariant: :func:`apply_edits` of non-overlapping edits yields a file that
``read_flink_metadata`` parses; callers re-read what they wrote before publishing it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from statekit.flink.cursor import ByteCursor, encode_modified_utf8
from statekit.flink.handles import read_channel_handles, read_keyed_handle, read_operator_handle, read_stream_handle
from statekit.flink.layout import HAS_REF_CHECKPOINT_ID, HandleCode
from statekit.flink.metadata import read_flink_metadata
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.keygroups import KeyGroupRange

__all__ = [
    "Edit",
    "SubtaskSpan",
    "OperatorSpan",
    "MetadataSpans",
    "metadata_spans",
    "apply_edits",
    "encode_utf",
    "encode_relative_file_handle",
    "encode_savepoint_key_groups_handle",
    "encode_new_subtask",
    "encode_operator_identity",
]

_I32, _I64 = struct.Struct(">i"), struct.Struct(">q")
MAX_UTF_BYTES = 0xFFFF
NO_REF_CHECKPOINT_ID = 0  # MetadataV7Serializer: no refCheckpointId follows


@dataclass(frozen=True)
class Edit:
    """Replace ``data[start:end]`` by ``data`` (``start == end`` inserts)."""

    start: int
    end: int
    data: bytes


@dataclass(frozen=True)
class SubtaskSpan:
    """Where one subtask state lies in ``_metadata``.

    Attributes:
        index: The subtask index.
        start: Offset of its index int; ``end``: just after its last byte.
        finished: A finished subtask (no state follows its index).
        managed_keyed: ``(start, end)`` of its managed keyed state handle (the null byte if none).
    """

    index: int
    start: int
    end: int
    finished: bool
    managed_keyed: tuple[int, int] | None


@dataclass(frozen=True)
class OperatorSpan:
    """Where one operator state lies in ``_metadata``.

    Attributes:
        start: Offset of its first byte (name (v5+) or operator id).
        identity_end: Just after the operator id (name, uid and id precede it).
        max_parallelism_at: Offset of the max parallelism int.
        count_at: Offset of the subtask count int.
        end: Just after its last subtask.
        subtasks: Its subtask states, in file order (empty when fully finished).
    """

    start: int
    identity_end: int
    max_parallelism_at: int
    count_at: int
    end: int
    subtasks: tuple[SubtaskSpan, ...]


@dataclass(frozen=True)
class MetadataSpans:
    """The spans of a whole ``_metadata``: operator count, operators, and the trailer's start."""

    version: int
    count_at: int
    operators: tuple[OperatorSpan, ...]
    trailer_start: int


def _subtask_span(cur: ByteCursor, version: int) -> SubtaskSpan:
    start = cur.pos
    stored = cur.i32("subtask index")
    if stored < 0:
        return SubtaskSpan(-stored - 1, start, cur.pos, True, None)
    for what in ("managed", "raw"):
        if cur.i32(f"has {what} operator state"):
            read_operator_handle(cur)
    keyed_start = cur.pos
    read_keyed_handle(cur)
    managed = (keyed_start, cur.pos)
    read_keyed_handle(cur)
    read_channel_handles(cur, "input", typed=version >= 6)
    read_channel_handles(cur, "output", typed=version >= 6)
    if version >= 7 and cur.u8("ref checkpoint id marker") == HAS_REF_CHECKPOINT_ID:
        cur.i64("ref checkpoint id")
    return SubtaskSpan(stored, start, cur.pos, False, managed)


def _operator_span(cur: ByteCursor, version: int) -> OperatorSpan:
    start = cur.pos
    if version >= 5:
        cur.utf("operator name")
        cur.utf("operator uid")
    cur.skip(16, "operator id")
    identity_end = cur.pos
    cur.i32("parallelism")
    max_parallelism_at = cur.pos
    cur.i32("max parallelism")
    read_stream_handle(cur)
    count_at = cur.pos
    count = cur.i32("number of subtask states")
    subtasks = tuple(_subtask_span(cur, version) for _ in range(max(0, count)))
    return OperatorSpan(start, identity_end, max_parallelism_at, count_at, cur.pos, subtasks)


def metadata_spans(data: bytes, *, source: str) -> MetadataSpans:
    """The spans of a ``_metadata`` file that :func:`read_flink_metadata` accepts.

    Raises:
        MetadataError: The file does not parse (checked first, with the reader's message).
    """
    metadata = read_flink_metadata(data, source=source)
    cur = ByteCursor(data, source=source, pos=16)  # magic, version, checkpoint id
    for _ in range(cur.i32("number of master states")):
        cur.i32("master state magic number")
        cur.skip(cur.i32("master state length"), "master state")
    count_at = cur.pos
    operators = tuple(_operator_span(cur, metadata.version) for _ in range(cur.i32("number of operators")))
    return MetadataSpans(metadata.version, count_at, operators, cur.pos)


def apply_edits(data: bytes, edits: Iterable[Edit]) -> bytes:
    """``data`` with every edit applied; edits must not overlap.

    Raises:
        ValueError: Two edits overlap (a bug of the caller).
    """
    out = bytearray()
    copied = 0
    for edit in sorted(edits, key=lambda e: (e.start, e.end)):
        if edit.start < copied:
            raise ValueError(f"overlapping _metadata edits at byte offset {edit.start}")
        out += data[copied:edit.start]
        out += edit.data
        copied = edit.end
    out += data[copied:]
    return bytes(out)


def encode_utf(text: str, *, what: str) -> bytes:
    """Java ``writeUTF``: a 2-byte length, then modified UTF-8.

    Raises:
        BadInputError: Longer than 65535 bytes encoded.
    """
    encoded = encode_modified_utf8(text)
    if len(encoded) > MAX_UTF_BYTES:
        raise BadInputError(f"{what} is {len(encoded)} bytes encoded, Flink allows {MAX_UTF_BYTES}")
    return len(encoded).to_bytes(2, "big") + encoded


def encode_relative_file_handle(relative_path: str, size: int) -> bytes:
    """A ``RelativeFileStateHandle``: type 6, path (utf), state size (long)."""
    return bytes([HandleCode.RELATIVE_FILE]) + encode_utf(relative_path, what="a file name") + _I64.pack(size)


def encode_savepoint_key_groups_handle(key_groups: KeyGroupRange, offsets: Sequence[int], delegate: bytes) -> bytes:
    """A ``KeyGroupsSavepointStateHandle``: type 7, range start and count, one offset per key group, stream."""
    count = len(key_groups)
    if len(offsets) != count:
        raise ValueError(f"{len(offsets)} offsets for {count} key groups")
    head = bytes([HandleCode.SAVEPOINT_KEY_GROUPS]) + _I32.pack(key_groups.start) + _I32.pack(count)
    return head + struct.pack(f">{count}q", *offsets) + delegate


def encode_new_subtask(index: int, managed_keyed: bytes, version: int) -> bytes:
    """A subtask state holding only a managed keyed state handle (no operator or channel state)."""
    body = _I32.pack(index) + _I32.pack(0) + _I32.pack(0) + managed_keyed + bytes([HandleCode.NULL])
    body += _I32.pack(0) + _I32.pack(0)  # no input, no output channel state
    if version >= 7:
        body += bytes([NO_REF_CHECKPOINT_ID])
    return body


def encode_operator_identity(version: int, name: str | None, uid: str | None, operator_id: str) -> bytes:
    """What precedes an operator's parallelism: name and uid (v5+, ``""`` when unset), then the 16-byte id."""
    head = b""
    if version >= 5:
        head = encode_utf(name or "", what="an operator name") + encode_utf(uid or "", what="an operator uid")
    return head + bytes.fromhex(operator_id)
