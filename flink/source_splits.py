"""Source positions: the splits FLIP-27 sources keep in operator state (``SourceReaderState``).

A ``SourceOperator`` keeps its reader's splits in the split-distributed list state
``SourceReaderState``; each element is a ``byte[]`` (``BytePrimitiveArraySerializer``: int
length, the bytes) holding ``SimpleVersionedSerialization.writeVersionAndSerialize``: the
split serializer's version (int), the length (int), the split. The split serializer is not
recorded, so statekit recognises the split by its version and exact shape (every byte
consumed), restated from the connectors' serializers::

    Kafka (KafkaPartitionSplitSerializer v0)       topic utf | partition int
                                                   | starting offset long | stopping offset long
    number sequence (NumberSequenceSource v1)      split id utf | next number long | last number long
    file (FileSourceSplitSerializer v1)            split id utf | path (Path: present boolean, then
                                                   scheme, user info, host as nullable strings, port
                                                   int, path, query, fragment) | offset long | length
                                                   long | modification time long | file size long
                                                   | host count int, hosts utf | has position boolean
                                                   [| offset long | records after offset long]

A nullable string is a boolean (present) and a ``StringValue``. Kafka's special offsets are
named: -1 latest, -2 earliest, -3 committed, ``Long.MIN_VALUE`` none (no stopping offset).
With snapshot compression an operator state stream is Snappy framed from each state's
start; each element's offset points at the chunk that holds it (after the stream
identifier), so an element is read by decompressing from its offset.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from statekit.flink.compression import STREAM_IDENTIFIER, decompress_framed
from statekit.flink.cursor import ByteCursor
from statekit.flink.model import FlinkOperatorState, OperatorStateHandle
from statekit.flink.serializers import read_java_string
from statekit.flink.storage import FlinkSnapshot, read_stream_bytes
from statekit.statefmt.errors import CorruptStateError, StatekitError
from statekit.statefmt.json_contract import JsonShape

__all__ = ["SourceSplit", "source_splits", "decode_split", "snapshot_splits", "savepoint_get_kafka_offsets",
           "SOURCE_READER_STATE", "KAFKA_OFFSETS"]

SOURCE_READER_STATE = "SourceReaderState"
OPERATOR_STATE_VERSION_BYTES = 4  # OperatorBackendSerializationProxy: version int, then compression boolean
KAFKA_OFFSETS = {-1: "latest", -2: "earliest", -3: "committed", -(1 << 63): "none"}


@dataclass(frozen=True)
class SourceSplit:
    """One split a source reader held when the snapshot was taken.

    Attributes:
        operator: The source operator's uid or id.
        subtask: The reader's subtask.
        connector: ``kafka``, ``file``, ``number-sequence`` or ``unknown``.
        version: The split serializer's version.
        split_id: The split id (Kafka: ``topic-partition``).
        topic, partition: Kafka's topic partition.
        starting_offset, stopping_offset: Kafka's offsets (``stopping_offset`` ``None`` when
            unbounded); the reader resumes at ``starting_offset``.
        path, offset, length: The file split; ``position`` and ``records_to_skip`` are its
            checkpointed reader position (resume at ``position``, then skip that many records).
        next_number, last_number: The numbers a number-sequence split has left.
        problem: Why an ``unknown`` split was not recognised; ``raw`` holds its bytes (hex).
    """

    json_shape: ClassVar[JsonShape] = JsonShape(omit_none=(
        "split_id", "topic", "partition", "starting_offset", "stopping_offset", "path", "offset", "length",
        "position", "records_to_skip", "next_number", "last_number", "problem", "raw"))

    operator: str
    subtask: int
    connector: str
    version: int
    split_id: str | None = None
    topic: str | None = None
    partition: int | None = None
    starting_offset: int | None = None
    stopping_offset: int | None = None
    path: str | None = None
    offset: int | None = None
    length: int | None = None
    position: int | None = None
    records_to_skip: int | None = None
    next_number: int | None = None
    last_number: int | None = None
    problem: str | None = None
    raw: str | None = None

    @property
    def describe(self) -> str:
        """One line for people: where the reader resumes."""
        if self.connector == "kafka":
            stop = "" if self.stopping_offset is None else f", stop at {_kafka_offset(self.stopping_offset)}"
            return f"{self.topic}-{self.partition} at offset {_kafka_offset(self.starting_offset)}{stop}"
        if self.connector == "file":
            resume = "from the start" if self.position is None else (
                f"at byte {self.position} + {self.records_to_skip} records" if self.position >= 0
                else f"after {self.records_to_skip} records")
            return f"{self.path} [{self.offset}, +{self.length}) {resume}"
        if self.connector == "number-sequence":
            return f"numbers {self.next_number}..{self.last_number}"
        return self.problem or "unknown split"


def _kafka_offset(value: int | None) -> str:
    return "?" if value is None else KAFKA_OFFSETS.get(value, str(value))


def _nullable(cur: ByteCursor, what: str) -> str | None:
    return read_java_string(cur) if cur.boolean(f"{what} present") else None


def _kafka(cur: ByteCursor) -> dict[str, Any]:
    topic = cur.utf("Kafka topic")
    partition = cur.i32("Kafka partition")
    start, stop = cur.i64("Kafka starting offset"), cur.i64("Kafka stopping offset")
    return {"connector": "kafka", "split_id": f"{topic}-{partition}", "topic": topic, "partition": partition,
            "starting_offset": start, "stopping_offset": None if stop == -(1 << 63) else stop}


def _number_sequence(cur: ByteCursor) -> dict[str, Any]:
    return {"connector": "number-sequence", "split_id": cur.utf("split id"),
            "next_number": cur.i64("next number"), "last_number": cur.i64("last number")}


def _file(cur: ByteCursor) -> dict[str, Any]:
    split_id = cur.utf("split id")
    path = None
    if cur.boolean("path present"):
        scheme, user, host = _nullable(cur, "scheme"), _nullable(cur, "user info"), _nullable(cur, "host")
        port = cur.i32("port")
        local, query, fragment = _nullable(cur, "path"), _nullable(cur, "query"), _nullable(cur, "fragment")
        authority = (f"{user}@" if user else "") + (host or "") + (f":{port}" if port >= 0 else "")
        path = (f"{scheme}:" if scheme else "") + (f"//{authority}" if authority else "") + (local or "")
        path += (f"?{query}" if query else "") + (f"#{fragment}" if fragment else "")
    offset, length = cur.i64("split offset"), cur.i64("split length")
    cur.i64("file modification time")
    cur.i64("file size")
    for _ in range(cur.count("number of hosts", min_item_size=2)):
        cur.utf("host")
    position = skip = None
    if cur.boolean("reader position present"):
        position, skip = cur.i64("reader offset"), cur.i64("records after offset")
    return {"connector": "file", "split_id": split_id, "path": path, "offset": offset, "length": length,
            "position": position, "records_to_skip": skip}


# by version: the shapes tried, most specific first
_SHAPES = {0: (_kafka,), 1: (_file, _number_sequence)}


def decode_split(version: int, payload: bytes, *, source: str) -> dict[str, Any]:
    """The fields of one serialized split: the first known shape that consumes every byte.

    Returns ``{"connector": "unknown", "problem": ...}`` when no shape fits.
    """
    for shape in _SHAPES.get(version, ()):
        cur = ByteCursor(payload, source=source, error=CorruptStateError)
        try:
            fields = shape(cur)
        except CorruptStateError:
            continue
        if not cur.remaining:
            return fields
    return {"connector": "unknown", "problem": f"a split of serializer version {version} whose {len(payload)} "
                                               "bytes fit no known connector (Kafka, file, number sequence)"}


def _elements(snapshot: FlinkSnapshot, handle: OperatorStateHandle, name: str) -> Iterator[bytes]:
    """Every element (``byte[]``) of the operator list state ``name`` of one handle."""
    entry = next((s for s in handle.states if s.name == name), None)
    if entry is None or handle.delegate is None or not entry.offsets:
        return
    data = read_stream_bytes(snapshot, handle.delegate)
    source = handle.delegate.path or handle.delegate.name or "<inline>"
    compressed = len(data) > OPERATOR_STATE_VERSION_BYTES and data[OPERATOR_STATE_VERSION_BYTES] == 1
    bounds = sorted({o for s in handle.states for o in s.offsets} | {len(data)})
    for offset in entry.offsets:
        end = next(b for b in bounds if b > offset) if offset < len(data) else offset
        chunk = data[offset:end] if not compressed else decompress_framed(
            STREAM_IDENTIFIER + data[offset:end], source=source, what=f"{name} element at byte offset {offset}")
        cur = ByteCursor(chunk, source=f"{source} ({name} at byte offset {offset})", error=CorruptStateError)
        yield cur.take(cur.count("split length"), "split")


def source_splits(snapshot: FlinkSnapshot, op: FlinkOperatorState) -> list[SourceSplit]:
    """The splits every reader subtask of a source operator held (empty for other operators).

    Raises:
        CorruptStateError: An element whose bytes are cut short or whose compression is damaged.
    """
    out: list[SourceSplit] = []
    for sub in op.subtasks:
        for handle in sub.operator_handles:
            for element in _elements(snapshot, handle, SOURCE_READER_STATE):
                cur = ByteCursor(element, source=snapshot.path, error=CorruptStateError)
                version = cur.i32("split serializer version")
                payload = cur.take(cur.count("split length"), "split")
                fields = decode_split(version, payload, source=snapshot.path)
                raw = payload.hex() if fields["connector"] == "unknown" else None
                out.append(SourceSplit(op.label, sub.index, version=version, raw=raw, **fields))
    return out


def snapshot_splits(snapshot: FlinkSnapshot) -> tuple[list[SourceSplit], list[str]]:
    """The splits of every source operator, and a problem line per operator that could not be read."""
    splits: list[SourceSplit] = []
    problems: list[str] = []
    for op in snapshot.metadata.operators:
        try:
            splits += source_splits(snapshot, op)
        except (StatekitError, OSError) as exc:
            problems.append(f"{op.label}: {exc}")
    return splits, problems


def savepoint_get_kafka_offsets(path: str, *, uid: str | None = None,
                                storage_options: dict[str, Any] | None = None) -> dict[tuple[str, int], int]:
    """The offset every Kafka partition's reader resumes at, offline: ``{(topic, partition): offset}``.

    Special offsets stay as Kafka's markers (-2 earliest, -1 latest, -3 committed).

    Args:
        path: A Flink savepoint or checkpoint.
        uid: Only the source operator with this uid (or id); default every source.
        storage_options: fsspec options.

    Raises:
        StatekitError: The snapshot cannot be opened, or its split state is damaged.
    """
    from statekit.flink.snapshot import open_flink_snapshot

    snapshot = open_flink_snapshot(path, storage_options=storage_options)
    ops = [snapshot.metadata.operator(uid)] if uid else list(snapshot.metadata.operators)
    return {(split.topic, split.partition): split.starting_offset
            for op in ops for split in source_splits(snapshot, op)
            if split.connector == "kafka" and split.topic is not None and split.partition is not None
            and split.starting_offset is not None}
