"""Channel state: the in-flight records an unaligned checkpoint stores, and their file format.

An unaligned checkpoint lets barriers overtake the records queued between two subtasks. The
overtaken records are part of the checkpoint: each subtask writes them into one channel-state
file (``*.skc``), in *sections*, one per channel and direction:

* ``input``: records that reached the subtask's input gate before the barrier of their channel
  but were not processed when the subtask took its snapshot;
* ``output``: records the subtask had produced but not yet handed to its consumer when the
  barrier overtook them.

On restore every section is replayed into the consumer of its channel before new input
(``input`` sections before ``output`` sections of the same channel).

File layout (little-endian)::

    header(16): magic "STKCHAN\\x01" | version u16 (= 1) | reserved u16 | section count u32
    section*:   header length u32 | header (UTF-8 JSON) | record count u32 | payload length u64
                | payload: per record u32 length + record bytes | CRC-32 of the section so far u32
    footer(16): record count u64 | CRC-32 of every byte before the footer u32 | magic "SKC\\x01"

A section header names its channel: ``{"direction", "producer", "consumer", "input",
"partitioning", "producer_subtask", "producer_parallelism", "consumer_subtask",
"consumer_parallelism", "serializer"}``. Records are encoded by
the named record serializer: ``records`` (msgpack; tuples kept as tuples through ext type 1;
safe on untrusted input) or ``pickle`` (opt-in; refused on read without trust).

A channel-state file holds what was in flight, which the runtime bounds (input gate capacity
and one input buffer's output per subtask), so it is encoded and decoded whole in memory.
"""

from __future__ import annotations

import json
import pickle
import struct
from dataclasses import dataclass
from typing import Any

import msgpack

from statekit.statefmt import layout
from statekit.statefmt.checksum import crc32, format_checksum
from statekit.statefmt.errors import CorruptStateError, SerializationError, UntrustedSerializerError

__all__ = [
    "CHANNEL_FILE_MAGIC",
    "CHANNEL_FILE_VERSION",
    "CHANNEL_FILE_SUFFIX",
    "CHANNEL_DIR",
    "DIRECTIONS",
    "RECORD_SERIALIZERS",
    "ChannelStateFile",
    "ChannelSection",
    "RecordCodec",
    "channel_state_path",
    "encode_channel_state",
    "decode_channel_state",
    "verify_channel_state",
]

CHANNEL_FILE_MAGIC = b"STKCHAN\x01"
CHANNEL_FILE_VERSION = 1
CHANNEL_FILE_SUFFIX = ".skc"
# <encoded uid>/_channel/<i>-of-<p>.skc: the suffix keeps it apart from a state named "_channel"
CHANNEL_DIR = "_channel"
DIRECTIONS = ("input", "output")
RECORD_SERIALIZERS = ("records", "pickle")

_HEADER = struct.Struct("<8sHHI")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_FOOTER = struct.Struct("<QI4s")
_END_MAGIC = b"SKC\x01"
_TUPLE_EXT = 1
_MAX_SECTION_HEADER = 1 << 16


@dataclass(frozen=True)
class ChannelStateFile:
    """One subtask's channel-state file as ``_metadata`` records it.

    Attributes:
        path: Relative to the snapshot directory.
        size: Bytes of the file.
        checksum: ``crc32:xxxxxxxx`` of the whole file.
        records: In-flight records in it (every section).
    """

    path: str
    size: int
    checksum: str
    records: int


@dataclass(frozen=True)
class ChannelSection:
    """The in-flight records of one channel and direction, in channel order.

    Attributes:
        direction: ``input`` (stored by the consumer) or ``output`` (stored by the producer).
        producer: Uid of the operator that emitted the records.
        consumer: Uid of the operator whose input the channel feeds.
        input_index: Which input of the consumer (1, or 2 for the broadcast side).
        partitioning: The edge's partitioning (``hash``, ``rebalance``, ``forward``, ``broadcast``).
        producer_subtask: The emitting subtask.
        producer_parallelism: The producer's parallelism when the checkpoint was taken.
        consumer_subtask: The receiving subtask.
        consumer_parallelism: The consumer's parallelism when the checkpoint was taken.
        serializer: Record serializer name (:data:`RECORD_SERIALIZERS`).
        records: Serialized records.
    """

    direction: str
    producer: str
    consumer: str
    input_index: int
    partitioning: str
    producer_subtask: int
    producer_parallelism: int
    consumer_subtask: int
    consumer_parallelism: int
    serializer: str
    records: tuple[bytes, ...]

    @property
    def edge(self) -> tuple[str, str, int]:
        """(producer uid, consumer uid, input index): the edge of the job graph."""
        return self.producer, self.consumer, self.input_index

    def header_json(self) -> dict[str, Any]:
        return {"direction": self.direction, "producer": self.producer, "consumer": self.consumer,
                "input": self.input_index, "partitioning": self.partitioning,
                "producer_subtask": self.producer_subtask, "producer_parallelism": self.producer_parallelism,
                "consumer_subtask": self.consumer_subtask, "consumer_parallelism": self.consumer_parallelism,
                "serializer": self.serializer}


def channel_state_path(uid: str, subtask: int, parallelism: int) -> str:
    """``<encoded uid>/_channel/<i>-of-<p>.skc``: one subtask's channel-state file."""
    return (f"{layout.encode_path_component(uid)}/{CHANNEL_DIR}/"
            f"{subtask:05d}-of-{parallelism:05d}{CHANNEL_FILE_SUFFIX}")


# ------------------------------------------------------------------ records


def _pack_default(value: Any) -> Any:
    if isinstance(value, tuple) and type(value) is tuple:
        return msgpack.ExtType(_TUPLE_EXT, _pack_records(list(value)))
    raise TypeError(f"a record of type {type(value).__name__} cannot be stored as channel state")


def _pack_records(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True, strict_types=True, default=_pack_default)  # type: ignore[no-any-return]


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _TUPLE_EXT:
        return tuple(_unpack_records(data))
    raise ValueError(f"unknown msgpack extension type {code}")


def _unpack_records(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_ext_hook)


class RecordCodec:
    """Turns in-flight records into bytes and back.

    ``records``: None, bool, int, float, str, bytes, list, tuple and dict (of those), with
    tuples kept as tuples; decoding never runs code. ``pickle``: any picklable record; decoding
    needs ``trust_pickle``.
    """

    def __init__(self, name: str, *, trust_pickle: bool = False, source: str | None = None) -> None:
        if name not in RECORD_SERIALIZERS:
            raise SerializationError(f"unknown record serializer {name!r} (known: {', '.join(RECORD_SERIALIZERS)})",
                                     path=source)
        self.name = name
        self.trust_pickle = trust_pickle
        self.source = source

    def encode(self, record: Any) -> bytes:
        """One record as bytes.

        Raises:
            SerializationError: The record's type cannot be stored by this serializer.
        """
        try:
            if self.name == "pickle":
                return pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
            return _pack_records(record)
        except Exception as exc:
            raise SerializationError(
                f"cannot store an in-flight record ({exc}); records in flight must be None, bool, int, float, "
                "str, bytes, list, tuple or dict to be part of an unaligned checkpoint, or set the checkpoint "
                "config's channel_state_serializer to 'pickle'") from exc

    def decode(self, data: bytes) -> Any:
        """One record from its bytes.

        Raises:
            UntrustedSerializerError: ``pickle`` without trust.
            CorruptStateError: The bytes do not decode.
        """
        if self.name == "pickle":
            if not self.trust_pickle:
                raise UntrustedSerializerError(
                    "in-flight records use the 'pickle' serializer, which can run arbitrary code when read; "
                    "pass --trust-pickle (trust_pickle=True) only for checkpoints you trust", path=self.source)
            return pickle.loads(data)
        try:
            return _unpack_records(data)
        except Exception as exc:
            raise CorruptStateError(f"an in-flight record does not decode: {exc}", path=self.source) from exc


# ------------------------------------------------------------------ files


def encode_channel_state(sections: list[ChannelSection]) -> tuple[bytes, ChannelStateFile]:
    """The file bytes of ``sections`` and what ``_metadata`` records about them (path left empty)."""
    parts = [_HEADER.pack(CHANNEL_FILE_MAGIC, CHANNEL_FILE_VERSION, 0, len(sections))]
    records = 0
    for section in sections:
        header = json.dumps(section.header_json(), separators=(",", ":"), sort_keys=True).encode()
        payload = b"".join(_U32.pack(len(r)) + r for r in section.records)
        body = (_U32.pack(len(header)) + header + _U32.pack(len(section.records)) + _U64.pack(len(payload))
                + payload)
        parts.append(body + _U32.pack(crc32(body)))
        records += len(section.records)
    data = b"".join(parts)
    data += _FOOTER.pack(records, crc32(data), _END_MAGIC)
    return data, ChannelStateFile("", len(data), format_checksum(crc32(data)), records)


class _Cursor:
    def __init__(self, data: bytes, path: str) -> None:
        self.data = data
        self.pos = 0
        self.path = path

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptStateError(f"truncated channel state: {what} runs past the end of the file", path=self.path)
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: struct.Struct, what: str) -> tuple[Any, ...]:
        return fmt.unpack(self.take(fmt.size, what))


def decode_channel_state(data: bytes, *, path: str) -> list[ChannelSection]:
    """Every section of a channel-state file, checked (magic, version, CRCs, structure).

    Raises:
        CorruptStateError: Anything malformed, truncated or damaged; names ``path``.
    """
    if len(data) < _HEADER.size + _FOOTER.size:
        raise CorruptStateError(f"truncated channel state: {len(data)} bytes is shorter than header and footer",
                                path=path)
    records_total, file_crc, end_magic = _FOOTER.unpack_from(data, len(data) - _FOOTER.size)
    if end_magic != _END_MAGIC:
        raise CorruptStateError("not a channel-state file or truncated (bad end magic)", path=path)
    if crc32(data[:len(data) - _FOOTER.size]) != file_crc:
        raise CorruptStateError("channel-state checksum mismatch in the footer: the file is damaged", path=path)
    cursor = _Cursor(data[:len(data) - _FOOTER.size], path)
    magic, version, _, count = cursor.unpack(_HEADER, "the header")
    if magic != CHANNEL_FILE_MAGIC:
        raise CorruptStateError("not a channel-state file (bad magic)", path=path)
    if version != CHANNEL_FILE_VERSION:
        raise CorruptStateError(f"channel-state format version {version} is not supported (this statekit reads "
                                f"version {CHANNEL_FILE_VERSION})", path=path)
    sections = [_section(cursor, i) for i in range(count)]
    if cursor.pos != len(cursor.data):
        raise CorruptStateError("trailing bytes after the last channel-state section", path=path)
    if sum(len(s.records) for s in sections) != records_total:
        raise CorruptStateError("the footer's record count differs from the sections'", path=path)
    return sections


def _section(cursor: _Cursor, index: int) -> ChannelSection:
    start = cursor.pos
    what = f"section {index}"
    (header_length,) = cursor.unpack(_U32, what)
    if header_length > _MAX_SECTION_HEADER:
        raise CorruptStateError(f"{what}: header of {header_length} bytes is implausible", path=cursor.path)
    raw_header = cursor.take(header_length, what)
    (count,) = cursor.unpack(_U32, what)
    (payload_length,) = cursor.unpack(_U64, what)
    payload = cursor.take(payload_length, what)
    body = cursor.data[start:cursor.pos]
    (expected,) = cursor.unpack(_U32, what)
    if crc32(body) != expected:
        raise CorruptStateError(f"{what}: checksum mismatch (damaged)", path=cursor.path)
    header = _section_header(raw_header, what, cursor.path)
    return ChannelSection(records=_records(payload, count, what, cursor.path), **header)


def _section_header(raw: bytes, what: str, path: str) -> dict[str, Any]:
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptStateError(f"{what}: header is not JSON: {exc}", path=path) from None
    fields = {"direction": str, "producer": str, "consumer": str, "input": int, "partitioning": str,
              "producer_subtask": int, "producer_parallelism": int, "consumer_subtask": int,
              "consumer_parallelism": int, "serializer": str}
    if not isinstance(header, dict) or set(header) != set(fields) or not all(
            isinstance(header[k], t) and not isinstance(header[k], bool) for k, t in fields.items()):
        raise CorruptStateError(f"{what}: header fields are missing or mistyped", path=path)
    if header["direction"] not in DIRECTIONS or header["serializer"] not in RECORD_SERIALIZERS:
        raise CorruptStateError(f"{what}: unknown direction or serializer", path=path)
    if not (0 <= header["producer_subtask"] < header["producer_parallelism"]
            and 0 <= header["consumer_subtask"] < header["consumer_parallelism"]) or header["input"] not in (1, 2):
        raise CorruptStateError(f"{what}: a subtask outside its parallelism, or an unknown input", path=path)
    header["input_index"] = header.pop("input")
    return header


def _records(payload: bytes, count: int, what: str, path: str) -> tuple[bytes, ...]:
    cursor = _Cursor(payload, path)
    records = []
    for _ in range(count):
        (length,) = cursor.unpack(_U32, what)
        records.append(cursor.take(length, what))
    if cursor.pos != len(payload):
        raise CorruptStateError(f"{what}: payload length differs from its records", path=path)
    return tuple(records)


def verify_channel_state(data: bytes, *, path: str, expected: ChannelStateFile,
                         trust_pickle: bool = False) -> list[CorruptStateError]:
    """Every check on one channel-state file: size, checksum, structure, record count, and that
    each record decodes (pickle records only when trusted). Returns the problems found."""
    problems: list[CorruptStateError] = []
    if len(data) != expected.size:
        problems.append(CorruptStateError(f"size {len(data)} differs from the recorded {expected.size}", path=path))
    checksum = format_checksum(crc32(data))
    if checksum != expected.checksum:
        problems.append(CorruptStateError(f"file checksum {checksum} differs from the recorded {expected.checksum}",
                                          path=path))
    try:
        sections = decode_channel_state(data, path=path)
    except CorruptStateError as exc:
        return [*problems, exc]
    records = sum(len(s.records) for s in sections)
    if records != expected.records:
        problems.append(CorruptStateError(f"holds {records} in-flight records, _metadata records {expected.records}",
                                          path=path))
    for section in sections:
        if section.serializer == "pickle" and not trust_pickle:
            continue
        codec = RecordCodec(section.serializer, trust_pickle=True, source=path)
        try:
            for record in section.records:
                codec.decode(record)
        except CorruptStateError as exc:
            problems.append(exc)
    return problems
