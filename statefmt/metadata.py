"""The ``_metadata`` model: frozen, typed, parsed through one entry point.

``_metadata`` layout (little-endian): ``magic(8) | version u32 | body length u64 | body |
crc32(body) u32`` where the body is UTF-8 JSON (see docs/FORMAT.md). :func:`parse_metadata`
turns every failure into :class:`MetadataError` (or a subclass) naming the source.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from statekit.statefmt import layout
from statekit.statefmt.channel_state import ChannelStateFile
from statekit.statefmt.checksum import crc32, parse_checksum
from statekit.statefmt.errors import MetadataError, StateNotFoundError, UnsupportedVersionError
from statekit.statefmt.job_id import JOB_ID_FORMAT, is_job_id
from statekit.statefmt.keygroups import (
    UPPER_BOUND_MAX_PARALLELISM,
    KeyGroupRange,
    compute_key_group_range_for_operator_index,
)
from statekit.statefmt.native_state import FILE_NAME_PATTERN, NATIVE_FORMATS, NativeFile, NativeKeyedState
from statekit.statefmt.paths import check_relative_path
from statekit.statefmt.serializers import SERIALIZER_NAMES
from statekit.statefmt.value_types import parse_value_type

__all__ = [
    "StateKind",
    "SnapshotKind",
    "SnapshotFormat",
    "StateDescriptor",
    "StateFile",
    "SubtaskState",
    "OperatorMetadata",
    "CheckpointMetadata",
    "parse_metadata",
    "serialize_metadata",
]


class StateKind(str, Enum):
    VALUE = "value"
    LIST = "list"
    MAP = "map"
    REDUCING = "reducing"
    AGGREGATING = "aggregating"
    OPERATOR_LIST = "operator-list"
    UNION = "union"
    BROADCAST = "broadcast"

    @property
    def keyed(self) -> bool:
        return self in _KEYED_KINDS

    @property
    def has_user_key(self) -> bool:
        return self in (StateKind.MAP, StateKind.BROADCAST)


_KEYED_KINDS = {StateKind.VALUE, StateKind.LIST, StateKind.MAP, StateKind.REDUCING, StateKind.AGGREGATING}


class SnapshotKind(str, Enum):
    CHECKPOINT = "checkpoint"
    SAVEPOINT = "savepoint"


class SnapshotFormat(str, Enum):
    CANONICAL = "canonical"
    NATIVE = "native"


@dataclass(frozen=True)
class StateDescriptor:
    """A named state of an operator: its kind, serializers, declared types and TTL."""

    name: str
    kind: StateKind
    value_serializer: str = "msgpack"
    value_type: str | None = None
    user_key_serializer: str | None = None
    user_key_type: str | None = None
    namespace_serializer: str = "msgpack"
    ttl_ms: int | None = None
    # declared type of the namespace; set only for namespaced keyed state (window state: the
    # window as list<int> [start, end], [] for the global window), None for the void namespace
    namespace_type: str | None = None

    @property
    def keyed(self) -> bool:
        return self.kind.keyed

    @property
    def namespaced(self) -> bool:
        """Whether every entry has a (non-void) namespace: the state's ``namespace_type`` is declared."""
        return self.namespace_type is not None


@dataclass(frozen=True)
class StateFile:
    """One subtask's file of one state: relative path, size, checksum, entry count."""

    state: str
    path: str
    size: int
    checksum: str
    entries: int


@dataclass(frozen=True)
class SubtaskState:
    """One subtask of an operator: its key groups, its canonical state files, and (only when
    present) its in-flight records (unaligned checkpoints) and its native keyed state."""

    index: int
    key_group_range: KeyGroupRange
    files: tuple[StateFile, ...] = ()
    channel_state: ChannelStateFile | None = None
    native: NativeKeyedState | None = None

    def file_of(self, state: str) -> StateFile | None:
        return next((f for f in self.files if f.state == state), None)


@dataclass(frozen=True)
class OperatorMetadata:
    uid: str
    name: str
    parallelism: int
    max_parallelism: int
    key_serializer: str | None
    states: tuple[StateDescriptor, ...]
    subtasks: tuple[SubtaskState, ...]

    def state(self, name: str) -> StateDescriptor:
        for descriptor in self.states:
            if descriptor.name == name:
                return descriptor
        known = ", ".join(d.name for d in self.states) or "none"
        raise StateNotFoundError(f"operator {self.uid!r} has no state {name!r} (states: {known})")

    @property
    def keyed(self) -> bool:
        return any(d.keyed for d in self.states)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for s in self.subtasks for f in s.files)


@dataclass(frozen=True)
class CheckpointMetadata:
    job_id: str
    checkpoint_id: int
    kind: SnapshotKind
    format: SnapshotFormat
    created_at_ms: int
    operators: tuple[OperatorMetadata, ...]
    job_name: str = ""
    properties: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    def operator(self, uid: str) -> OperatorMetadata:
        for op in self.operators:
            if op.uid == uid:
                return op
        known = ", ".join(o.uid for o in self.operators) or "none"
        raise StateNotFoundError(f"no operator with uid {uid!r} (operators: {known})")

    def files(self) -> list[StateFile]:
        return [f for op in self.operators for s in op.subtasks for f in s.files]

    def channel_files(self) -> list[ChannelStateFile]:
        """Every channel-state file (in-flight records of an unaligned checkpoint)."""
        return [s.channel_state for op in self.operators for s in op.subtasks if s.channel_state is not None]

    def native_files(self) -> list[NativeFile]:
        """Every file of native keyed state (private and ``../shared/``)."""
        return [f for op in self.operators for s in op.subtasks if s.native is not None for f in s.native.files]

    def with_operators(self, operators: tuple[OperatorMetadata, ...]) -> CheckpointMetadata:
        return replace(self, operators=operators)

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)


# ---------------------------------------------------------------- serialize


def serialize_metadata(metadata: CheckpointMetadata) -> bytes:
    body = json.dumps(_to_json(metadata), separators=(",", ":"), sort_keys=False).encode()
    header = layout.METADATA_HEADER.pack(layout.METADATA_MAGIC, layout.METADATA_VERSION, len(body))
    return header + body + layout.METADATA_TRAILER.pack(crc32(body))


def _to_json(md: CheckpointMetadata) -> dict[str, Any]:
    return {
        "job_id": md.job_id,
        "job_name": md.job_name,
        "checkpoint_id": md.checkpoint_id,
        "kind": md.kind.value,
        "format": md.format.value,
        "created_at_ms": md.created_at_ms,
        "properties": dict(md.properties),
        "operators": [
            {
                "uid": op.uid,
                "name": op.name,
                "parallelism": op.parallelism,
                "max_parallelism": op.max_parallelism,
                "key_serializer": op.key_serializer,
                "states": [_descriptor_json(d) for d in op.states],
                "subtasks": [_subtask_json(st) for st in op.subtasks],
            }
            for op in md.operators
        ],
    }


def _subtask_json(st: SubtaskState) -> dict[str, Any]:
    data: dict[str, Any] = {
        "index": st.index,
        "key_group_range": st.key_group_range.to_list(),
        "files": [{"state": f.state, "path": f.path, "size": f.size, "checksum": f.checksum, "entries": f.entries}
                  for f in st.files],
    }
    if st.channel_state is not None:
        c = st.channel_state
        data["channel_state"] = {"path": c.path, "size": c.size, "checksum": c.checksum, "records": c.records}
    if st.native is not None:
        data["native"] = st.native.to_json()
    return data


def _descriptor_json(d: StateDescriptor) -> dict[str, Any]:
    return {
        "name": d.name,
        "kind": d.kind.value,
        "value_serializer": d.value_serializer,
        "value_type": d.value_type,
        "user_key_serializer": d.user_key_serializer,
        "user_key_type": d.user_key_type,
        "namespace_serializer": d.namespace_serializer,
        "ttl_ms": d.ttl_ms,
        **({"namespace_type": d.namespace_type} if d.namespace_type is not None else {}),
    }


# ---------------------------------------------------------------- parse

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_MAX_TIMESTAMP_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


def parse_metadata(data: bytes, *, source: str | None = None) -> CheckpointMetadata:
    """Parse ``_metadata`` bytes; the only entry point from bytes to the model.

    Raises:
        UnsupportedVersionError: a statekit metadata file of another format version.
        UnsafePathError: a file path escapes the checkpoint directory.
        MetadataError: anything else malformed, truncated or inconsistent.
    """
    header_size = layout.METADATA_HEADER.size
    if len(data) < header_size:
        raise MetadataError(f"truncated metadata ({len(data)} bytes)", path=source)
    magic, version, body_len = layout.METADATA_HEADER.unpack_from(data, 0)
    if magic != layout.METADATA_MAGIC:
        raise MetadataError("not a statekit _metadata file (bad magic)", path=source)
    if version != layout.METADATA_VERSION:
        raise UnsupportedVersionError(
            f"metadata format version {version} is not supported (this statekit reads "
            f"version {layout.METADATA_VERSION}); upgrade statekit",
            path=source,
        )
    end = header_size + body_len
    if len(data) != end + layout.METADATA_TRAILER.size:
        raise MetadataError(
            f"metadata size {len(data)} does not match its header (expected "
            f"{end + layout.METADATA_TRAILER.size}): truncated or padded",
            path=source,
        )
    body = data[header_size:end]
    (expected_crc,) = layout.METADATA_TRAILER.unpack_from(data, end)
    if crc32(body) != expected_crc:
        raise MetadataError("metadata checksum mismatch: the file is damaged", path=source)
    try:
        raw = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise MetadataError(f"metadata body is not valid JSON: {exc}", path=source) from exc
    except RecursionError:
        raise MetadataError("metadata body nests too deeply to be statekit metadata", path=source) from None
    return _Parser(source).checkpoint(raw)


class _Parser:
    """Validates the JSON body field by field; every failure is a MetadataError."""

    def __init__(self, source: str | None) -> None:
        self.source = source

    def fail(self, message: str) -> MetadataError:
        return MetadataError(f"invalid metadata: {message}", path=self.source)

    def get(self, obj: Any, key: str, kind: type | tuple[type, ...], where: str, optional: bool = False) -> Any:
        if not isinstance(obj, dict):
            raise self.fail(f"{where} is not an object")
        if key not in obj or obj[key] is None:
            if optional:
                return None
            raise self.fail(f"{where}.{key} is missing")
        value = obj[key]
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise self.fail(f"{where}.{key} must be an integer")
        if kind is int and not _INT64_MIN <= value <= _INT64_MAX:
            raise self.fail(f"{where}.{key} does not fit in 64 bits")
        if not isinstance(value, kind):
            raise self.fail(f"{where}.{key} has the wrong type")
        if isinstance(value, str):
            self.text(value, f"{where}.{key}")
        return value

    def text(self, value: str, where: str) -> str:
        """A string that is valid Unicode text (JSON's \\ud800 escapes can smuggle in lone surrogates)."""
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise self.fail(f"{where} is not valid Unicode text (a lone surrogate)") from None
        return value

    def enum(self, enum_type: type[Enum], value: str, where: str) -> Any:
        try:
            return enum_type(value)
        except ValueError:
            allowed = ", ".join(str(m.value) for m in enum_type)
            raise self.fail(f"{where} is {value!r}, expected one of {allowed}") from None

    def checkpoint(self, raw: Any) -> CheckpointMetadata:
        fmt = self.enum(SnapshotFormat, self.get(raw, "format", str, "metadata"), "format")
        kind = self.enum(SnapshotKind, self.get(raw, "kind", str, "metadata"), "kind")
        # only a native checkpoint shares files with its siblings (../shared/); a savepoint
        # is self-contained
        shared = fmt is SnapshotFormat.NATIVE and kind is SnapshotKind.CHECKPOINT
        operators = self.get(raw, "operators", list, "metadata")
        parsed = tuple(self.operator(op, i, shared) for i, op in enumerate(operators))
        if fmt is SnapshotFormat.CANONICAL and any(st.native for op in parsed for st in op.subtasks):
            raise self.fail("a canonical snapshot holds native keyed state (format must be native)")
        uids = [op.uid for op in parsed]
        if len(set(uids)) != len(uids):
            raise self.fail("duplicate operator uids")
        paths = [f.path for op in parsed for st in op.subtasks for f in st.files]
        paths += [st.channel_state.path for op in parsed for st in op.subtasks if st.channel_state is not None]
        # a shared file may be named by several subtasks' stores; a private one only once
        paths += [f.path for op in parsed for st in op.subtasks if st.native for f in st.native.files if not f.shared]
        if len(set(paths)) != len(paths):
            twice = next(p for p in paths if paths.count(p) > 1)
            raise self.fail(f"file {twice!r} is named twice (every state file belongs to one state of one subtask)")
        created_at_ms = self.get(raw, "created_at_ms", int, "metadata")
        if not 0 <= created_at_ms <= _MAX_TIMESTAMP_MS:
            raise self.fail(f"created_at_ms {created_at_ms} is not a time between 1970 and 9999")
        checkpoint_id = self.get(raw, "checkpoint_id", int, "metadata")
        if checkpoint_id < 0:
            raise self.fail("checkpoint_id is negative")
        properties = self.get(raw, "properties", dict, "metadata", optional=True) or {}
        job_id = self.get(raw, "job_id", str, "metadata")
        if not is_job_id(job_id):  # it names directories (<checkpoint-dir>/<job-id>/, the registry)
            raise self.fail(f"job_id {job_id[:80]!r} is not a job id ({JOB_ID_FORMAT})")
        return CheckpointMetadata(
            job_id=job_id,
            job_name=self.get(raw, "job_name", str, "metadata", optional=True) or "",
            checkpoint_id=checkpoint_id,
            kind=kind,
            format=fmt,
            created_at_ms=created_at_ms,
            operators=parsed,
            properties={self.text(str(k), "metadata.properties"): self.text(str(v), "metadata.properties")
                        for k, v in properties.items()},
        )

    def operator(self, raw: Any, i: int, shared: bool) -> OperatorMetadata:
        where = f"operators[{i}]"
        uid = self.get(raw, "uid", str, where)
        where = f"operator {uid!r}"
        parallelism = self.get(raw, "parallelism", int, where)
        max_parallelism = self.get(raw, "max_parallelism", int, where)
        if not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
            raise self.fail(f"{where}: max parallelism {max_parallelism} outside [1, 32768]")
        if not 1 <= parallelism <= max_parallelism:
            raise self.fail(
                f"{where}: parallelism {parallelism} outside [1, max parallelism {max_parallelism}]"
            )
        key_serializer = self.get(raw, "key_serializer", str, where, optional=True)
        if key_serializer is not None and key_serializer not in SERIALIZER_NAMES:
            raise self.fail(f"{where}: unknown key serializer {key_serializer!r}")
        states = tuple(self.descriptor(d, where) for d in self.get(raw, "states", list, where))
        names = [d.name for d in states]
        if len(set(names)) != len(names):
            raise self.fail(f"{where}: duplicate state names")
        if any(d.keyed for d in states) and key_serializer is None:
            raise self.fail(f"{where}: keyed state without a key serializer")
        keyed = {d.name for d in states if d.keyed}
        subtasks = tuple(
            self.subtask(s, where, set(names), shared, keyed) for s in self.get(raw, "subtasks", list, where)
        )
        if [s.index for s in subtasks] != list(range(parallelism)):
            raise self.fail(f"{where}: subtasks must be 0..{parallelism - 1} in order")
        for st in subtasks:
            expected = compute_key_group_range_for_operator_index(max_parallelism, parallelism, st.index)
            if st.key_group_range != expected:
                raise self.fail(
                    f"{where} subtask {st.index}: key-group range {st.key_group_range.to_list()} "
                    f"differs from {expected.to_list()}"
                )
        return OperatorMetadata(
            uid=uid,
            name=self.get(raw, "name", str, where, optional=True) or uid,
            parallelism=parallelism,
            max_parallelism=max_parallelism,
            key_serializer=key_serializer,
            states=states,
            subtasks=subtasks,
        )

    def descriptor(self, raw: Any, where: str) -> StateDescriptor:
        name = self.get(raw, "name", str, f"{where} state")
        where = f"{where} state {name!r}"
        serializers = {}
        for key in ("value_serializer", "user_key_serializer", "namespace_serializer"):
            value = self.get(raw, key, str, where, optional=True)
            if value is not None and value not in SERIALIZER_NAMES:
                raise self.fail(f"{where}: unknown serializer {value!r}")
            serializers[key] = value
        types = {}
        for key in ("value_type", "user_key_type", "namespace_type"):
            value = self.get(raw, key, str, where, optional=True)
            if value is not None:
                try:
                    parse_value_type(value)
                except Exception as exc:  # noqa: BLE001 - any parse failure is malformed metadata
                    raise self.fail(f"{where}: {exc}") from None
            types[key] = value
        ttl = self.get(raw, "ttl_ms", int, where, optional=True)
        if ttl is not None and ttl <= 0:
            raise self.fail(f"{where}: ttl_ms must be positive")
        kind = self.enum(StateKind, self.get(raw, "kind", str, where), f"{where} kind")
        if types["namespace_type"] is not None and (not kind.keyed or ttl is not None):
            raise self.fail(f"{where}: only keyed state without a TTL has a namespace_type")
        return StateDescriptor(
            name=name,
            kind=kind,
            value_serializer=serializers["value_serializer"] or "msgpack",
            value_type=types["value_type"],
            user_key_serializer=serializers["user_key_serializer"],
            user_key_type=types["user_key_type"],
            namespace_serializer=serializers["namespace_serializer"] or "msgpack",
            ttl_ms=ttl,
            namespace_type=types["namespace_type"],
        )

    def subtask(self, raw: Any, where: str, states: set[str], shared: bool, keyed: set[str]) -> SubtaskState:
        index = self.get(raw, "index", int, f"{where} subtask")
        where = f"{where} subtask {index}"
        kg = self.get(raw, "key_group_range", list, where)
        if len(kg) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in kg):
            raise self.fail(f"{where}: key_group_range must be [start, end]")
        files = tuple(self.file(f, where, states, shared) for f in self.get(raw, "files", list, where))
        if len({f.state for f in files}) != len(files):
            raise self.fail(f"{where}: two files for one state")
        channel = self.get(raw, "channel_state", dict, where, optional=True)
        native = self.get(raw, "native", dict, where, optional=True)
        return SubtaskState(
            index=index, key_group_range=KeyGroupRange(kg[0], kg[1]), files=files,
            channel_state=None if channel is None else self.channel_file(channel, where),
            native=None if native is None else self.native(native, where, shared, keyed, {f.state for f in files}),
        )

    def channel_file(self, raw: Any, where: str) -> ChannelStateFile:
        where = f"{where} channel_state"
        path = check_relative_path(self.get(raw, "path", str, where), source=self.source)
        size, records = self.get(raw, "size", int, where), self.get(raw, "records", int, where)
        if size < 0 or records < 0:
            raise self.fail(f"{where}: negative size or record count")
        return ChannelStateFile(path, size, self.checksum(raw, where), records)

    def checksum(self, raw: Any, where: str) -> str:
        checksum: str = self.get(raw, "checksum", str, where)
        try:
            parse_checksum(checksum)
        except ValueError:
            raise self.fail(f"{where}: unknown checksum {checksum!r}") from None
        return checksum

    def native(self, raw: Any, where: str, shared: bool, keyed: set[str], canonical: set[str]) -> NativeKeyedState:
        where = f"{where} native"
        fmt = self.get(raw, "format", str, where)
        if fmt not in NATIVE_FORMATS:
            raise self.fail(f"{where}: unknown native format {fmt!r} (known: {', '.join(NATIVE_FORMATS)})")
        ids = self.get(raw, "state_ids", dict, where)
        state_ids = tuple(sorted((str(n), i) for n, i in ids.items()))
        for name, state_id in state_ids:
            if name not in keyed or name in canonical:
                raise self.fail(f"{where}: state id for {name!r}, which is not a keyed state held natively")
            if isinstance(state_id, bool) or not isinstance(state_id, int) or not 0 <= state_id < 1 << 16:
                raise self.fail(f"{where}: state id of {name!r} must be an integer in [0, 65535]")
        if len({i for _, i in state_ids}) != len(state_ids):
            raise self.fail(f"{where}: two states share a state id")
        files = tuple(self.native_file(f, where, shared) for f in self.get(raw, "files", list, where))
        if len({f.name for f in files}) != len(files):
            raise self.fail(f"{where}: two files of one name")
        return NativeKeyedState(fmt, state_ids, files)

    def native_file(self, raw: Any, where: str, shared: bool) -> NativeFile:
        name = self.get(raw, "name", str, f"{where} file")
        if not FILE_NAME_PATTERN.match(name):
            raise self.fail(f"{where}: file name {name!r} is not a plain file name")
        path = check_relative_path(self.get(raw, "path", str, f"{where} file"), allow_shared=shared,
                                   source=self.source)
        size = self.get(raw, "size", int, f"{where} file")
        if size < 0:
            raise self.fail(f"{where}: negative file size")
        return NativeFile(name, path, size, self.checksum(raw, f"{where} file {name!r}"))

    def file(self, raw: Any, where: str, states: set[str], shared: bool) -> StateFile:
        state = self.get(raw, "state", str, f"{where} file")
        if state not in states:
            raise self.fail(f"{where}: file for undeclared state {state!r}")
        path = check_relative_path(
            self.get(raw, "path", str, f"{where} file"),
            allow_shared=shared,
            source=self.source,
        )
        size = self.get(raw, "size", int, f"{where} file")
        entries = self.get(raw, "entries", int, f"{where} file")
        if size < 0 or entries < 0:
            raise self.fail(f"{where}: negative size or entry count")
        checksum = self.get(raw, "checksum", str, f"{where} file")
        try:
            parse_checksum(checksum)
        except ValueError:
            raise self.fail(f"{where}: unknown checksum {checksum!r}") from None
        return StateFile(state=state, path=path, size=size, checksum=checksum, entries=entries)
