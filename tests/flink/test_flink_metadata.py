"""Golden and robustness tests of the Flink ``_metadata`` reader (real Flink 2.3 files)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import mmh3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekit.flink import (
    KeyedHandleKind,
    StreamHandleKind,
    is_flink_metadata,
    read_flink_metadata,
)
from statekit.flink.metadata import metadata_version
from statekit.statefmt.errors import MetadataError, UnsupportedVersionError
from statekit.statefmt.keygroups import KeyGroupRange

NAMES = [
    "hashmap/chk-4",
    "rocksdb-incremental/chk-4",
    "rocksdb-incremental-inline0/chk-4",
    "hashmap/savepoint",
    "rocksdb-incremental/savepoint",
    "rocksdb-incremental-inline0/savepoint",
]
SOURCE_ID = "cbc357ccb763df2852fee8c4fc7d55f2"
KEYED_ID = "569cdc4a96621daa7af4c159b985695c"
MAP_ID = "7df19f87deec5680128845fd9a6ca18d"
SINK_ID = "d1d9868dcd7475c232129f1525c5e87e"


def _bytes(golden: Any, name: str) -> bytes:
    return Path(golden[name] / "_metadata").read_bytes()


@pytest.mark.parametrize("name", NAMES)
def test_golden_operators(flink_golden: Any, name: str) -> None:
    meta = read_flink_metadata(_bytes(flink_golden, name), source=name)
    assert meta.version == 6
    assert meta.master_states == ()
    expected = [
        (SOURCE_ID, "Source: Collection Source", None, 1, 1, 0),
        (KEYED_ID, "KEYED PROCESS", "running-count", 1, 128, 1),
        (MAP_ID, "Map, _stream_key_by_map_operator", None, 1, 1, 0),
        (SINK_ID, "Sink: Print to Std. Out", None, 1, 128, 1),
    ]
    got = [
        (op.operator_id, op.name, op.uid, op.parallelism, op.max_parallelism, len(op.subtasks))
        for op in meta.operators
    ]
    assert got == expected
    keyed = meta.operator("running-count")
    assert keyed is meta.operator(KEYED_ID)
    (subtask,) = keyed.subtasks
    assert subtask.index == 0 and not subtask.finished
    assert subtask.managed_keyed_state is not None
    assert subtask.managed_keyed_state.key_group_range == KeyGroupRange(0, 127)
    assert subtask.raw_keyed_state is None
    assert subtask.operator_handles == ()
    assert subtask.input_channel_state == subtask.output_channel_state == ()
    assert all(not op.fully_finished and op.coordinator_state is None for op in meta.operators)


@pytest.mark.parametrize(
    ("name", "checkpoint_id", "kind", "fmt", "handle_kind"),
    [
        ("hashmap/chk-4", 4, "checkpoint", "native", KeyedHandleKind.KEY_GROUPS),
        ("rocksdb-incremental/chk-4", 4, "checkpoint", "native", KeyedHandleKind.INCREMENTAL),
        ("rocksdb-incremental-inline0/chk-4", 4, "checkpoint", "native", KeyedHandleKind.INCREMENTAL),
        ("hashmap/savepoint", 5, "savepoint", "canonical", KeyedHandleKind.SAVEPOINT_KEY_GROUPS),
        ("rocksdb-incremental/savepoint", 5, "savepoint", "canonical", KeyedHandleKind.SAVEPOINT_KEY_GROUPS),
        ("rocksdb-incremental-inline0/savepoint", 5, "savepoint", "canonical", KeyedHandleKind.SAVEPOINT_KEY_GROUPS),
    ],
)
def test_golden_ids_kinds_formats(
    flink_golden: Any, name: str, checkpoint_id: int, kind: str, fmt: str, handle_kind: KeyedHandleKind
) -> None:
    meta = read_flink_metadata(_bytes(flink_golden, name), source=name)
    assert meta.checkpoint_id == checkpoint_id
    assert meta.kind == kind
    assert meta.format == fmt
    handle = meta.operator("running-count").subtasks[0].managed_keyed_state
    assert handle is not None and handle.kind is handle_kind
    props = meta.properties
    assert props is not None and props.problem is None
    if kind == "savepoint":
        assert (props.type_name, props.format_type, props.post_checkpoint_action) == (
            "Savepoint", "CANONICAL", "NONE")
        assert props.flags["forced"] is True
    else:
        assert (props.type_name, props.sharing_files_strategy) == ("Checkpoint", "FORWARD_BACKWARD")
        assert props.flags["discardSubsumed"] is True


def test_operator_id_is_murmur3_128_of_uid(flink_golden: Any) -> None:
    meta = read_flink_metadata(_bytes(flink_golden, "hashmap/savepoint"), source="sp")
    assert mmh3.hash_bytes(b"running-count").hex() == KEYED_ID
    assert meta.operator("running-count").operator_id == KEYED_ID


def test_hashmap_key_group_handles(flink_golden: Any) -> None:
    chk = read_flink_metadata(_bytes(flink_golden, "hashmap/chk-4"), source="chk")
    handle = chk.operator("running-count").subtasks[0].managed_keyed_state
    assert handle is not None and handle.delegate is not None
    assert handle.type_code == 12  # KEY_GROUPS_HANDLE_V2 carries a state handle id
    assert handle.state_handle_id == "e8f58034-3681-4269-b638-1f0813784df9"
    assert handle.delegate.kind is StreamHandleKind.RELATIVE_FILE
    assert handle.delegate.path == "d70b93db-afc9-4190-9432-5d637d8b6f20"
    assert handle.delegate.size == 30213
    assert len(handle.key_group_offsets) == 128
    assert handle.key_group_offsets[0] == 1507
    assert list(handle.key_group_offsets) == sorted(handle.key_group_offsets)

    sp = read_flink_metadata(_bytes(flink_golden, "hashmap/savepoint"), source="sp")
    handle = sp.operator("running-count").subtasks[0].managed_keyed_state
    assert handle is not None and handle.delegate is not None
    assert (handle.type_code, handle.state_handle_id) == (7, None)
    assert (handle.delegate.path, handle.delegate.size) == ("876e98d2-7ba3-4bfd-95bd-4f44843c2c61", 32909)
    assert handle.key_group_offsets[:2] == (1507, 1728)


def test_rocksdb_incremental_handles(flink_golden: Any) -> None:
    meta = read_flink_metadata(_bytes(flink_golden, "rocksdb-incremental-inline0/chk-4"), source="x")
    handle = meta.operator("running-count").subtasks[0].managed_keyed_state
    assert handle is not None and handle.meta is not None
    assert handle.type_code == 11
    assert handle.checkpoint_id == 4
    assert handle.backend_id == "1366a74c-ce55-4c5b-a0f7-a05d28835dc1"
    assert handle.checkpointed_size == 0x8E32
    assert (handle.meta.kind, handle.meta.path, handle.meta.size) == (
        StreamHandleKind.RELATIVE_FILE, "f614e5df-98d0-41c2-b86f-33d39612dead", 1507)
    shared = {s.local_path: s.handle for s in handle.shared}
    private = {s.local_path: s.handle for s in handle.private}
    assert len(shared) == 4 and "000015.sst" in shared
    assert {"CURRENT"} <= set(private) and len(private) == 3
    current = private["CURRENT"]
    assert current is not None and current.kind is StreamHandleKind.FILE and current.size == 16
    assert current.path == (
        "file:/tmp/stackcheck/flink/out_rocksdb_noinline/checkpoints/"
        "41a19bb2434264c1a64f6d54dac65a72/shared/9876836f-e34e-445b-bac8-8ffdc5805b46")

    inline = read_flink_metadata(_bytes(flink_golden, "rocksdb-incremental/chk-4"), source="y")
    handle = inline.operator("running-count").subtasks[0].managed_keyed_state
    assert handle is not None and handle.meta is not None
    assert handle.meta.kind is StreamHandleKind.BYTE_STREAM and handle.meta.size == 1507
    kinds = [s.handle.kind for s in handle.shared + handle.private if s.handle]
    assert StreamHandleKind.BYTE_STREAM in kinds and StreamHandleKind.FILE in kinds


def test_is_flink_metadata(flink_golden: Any) -> None:
    data = _bytes(flink_golden, "hashmap/chk-4")
    assert is_flink_metadata(data[:4]) and is_flink_metadata(data)
    assert metadata_version(data[:8]) == 6
    assert not is_flink_metadata(b"STKMETA\x01") and not is_flink_metadata(b"\x49\x60")
    assert metadata_version(b"STKMETA\x01") is None


@pytest.mark.parametrize("version", [0, 1, 2, 8, 99, -1])
def test_unsupported_version_names_offset_and_path(flink_golden: Any, version: int) -> None:
    data = bytearray(_bytes(flink_golden, "hashmap/chk-4"))
    data[4:8] = struct.pack(">i", version)
    with pytest.raises(UnsupportedVersionError) as info:
        read_flink_metadata(bytes(data), source="/x/chk-4/_metadata")
    assert f"version {version}" in str(info.value)
    assert "byte offset 4" in str(info.value) and "/x/chk-4/_metadata" in str(info.value)


def test_unknown_handle_type_names_offset(flink_golden: Any) -> None:
    data = bytearray(_bytes(flink_golden, "hashmap/savepoint"))
    assert data[0x99] == 7  # the savepoint key-groups handle of running-count
    data[0x99] = 42
    with pytest.raises(MetadataError) as info:
        read_flink_metadata(bytes(data), source="sp/_metadata")
    assert "unknown keyed state handle type 42 at byte offset 153" in str(info.value)
    assert "sp/_metadata" in str(info.value)


def test_not_flink_magic() -> None:
    with pytest.raises(MetadataError, match="not a Flink metadata file"):
        read_flink_metadata(b"STKMETA\x01" + bytes(40), source="x")


@pytest.mark.parametrize("name", NAMES)
def test_truncation_at_every_offset_is_a_metadata_error(flink_golden: Any, name: str) -> None:
    data = _bytes(flink_golden, name)
    for end in range(len(data)):
        with pytest.raises(MetadataError) as info:
            read_flink_metadata(data[:end], source=name)
        assert "byte offset" in str(info.value), end


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=512))
def test_random_bytes_give_metadata_errors(blob: bytes) -> None:
    for data in (blob, bytes.fromhex("4960672d00000006") + blob, bytes.fromhex("4960672d00000003") + blob):
        try:
            read_flink_metadata(data, source="random")
        except MetadataError:
            pass


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(NAMES), edits=st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), min_size=1, max_size=6))
def test_corrupted_golden_bytes_parse_or_give_metadata_errors(
    flink_golden: Any, name: str, edits: list[tuple[int, int]]
) -> None:
    data = bytearray(_bytes(flink_golden, name))
    for position, value in edits:
        data[position % len(data)] = value
    try:
        read_flink_metadata(bytes(data), source=name)
    except MetadataError:
        pass


# ---------------------------------------------------------------- synthetic versions 3..7


class _Out:
    """A tiny Java DataOutputStream for building metadata the fixtures do not cover."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def i8(self, v: int) -> _Out:
        self.buf += struct.pack(">b", v)
        return self

    def i32(self, v: int) -> _Out:
        self.buf += struct.pack(">i", v)
        return self

    def i64(self, v: int) -> _Out:
        self.buf += struct.pack(">q", v)
        return self

    def utf(self, s: str) -> _Out:
        raw = s.encode()
        self.buf += struct.pack(">H", len(raw)) + raw
        return self

    def raw(self, b: bytes) -> _Out:
        self.buf += b
        return self


def _file(o: _Out, path: str, size: int) -> None:
    o.i8(2).i64(size).utf(path)


def _subtask_v(o: _Out, version: int) -> None:
    # managed operator state: two states (split, union) in a relative file
    o.i32(1).i8(4).i32(2)
    o.utf("offsets").i8(0).i32(2).i64(0).i64(10)
    o.utf("union-state").i8(1).i32(1).i64(20)
    o.i8(6).utf("op-state-file").i64(30)
    o.i32(0)  # no raw operator state
    # managed keyed: changelog v2 with a materialized incremental v1 and a bytes increment
    o.i8(14).i32(0).i32(64).i64(99)
    o.i32(1)
    o.i8(5).i64(3).utf("backend").i32(0).i32(64)
    o.i8(1).utf("meta").i32(3).raw(b"abc")
    o.i32(1).utf("000001.sst")
    _file(o, "file:/shared/a.sst", 100)
    o.i32(0)
    o.i32(1)
    o.i8(9).i32(0).i32(64).i64(1).i64(2).i32(1).i32(5).i32(4).raw(b"wxyz").utf("id-bytes")
    o.i64(7).i64(8).utf("id-changelog")
    # raw keyed: legacy key-groups handle over a nested key-groups stream handle
    o.i8(3).i32(64).i32(2).i64(0).i64(5)
    o.i8(3).i32(64).i32(2).i64(0).i64(5)
    _file(o, "file:/raw/kg", 12)
    # channel state: one input, one merged output
    o.i32(1)
    if version >= 6:
        o.i8(1)
    o.i32(0).i32(0).i32(1).i32(2).i64(0).i64(0).i64(8)
    o.i8(6).utf("in-flight").i64(8)
    o.i32(1)
    if version >= 6:
        o.i8(4).i32(0).i64(16)
        o.i8(6).utf("merged-out").i64(16)
        o.i32(3).raw(b"\x01\x02\x03")
    else:
        o.i32(0).i32(0).i32(1).i32(0).i64(4)
        o.i8(6).utf("out-flight").i64(4)
    if version >= 7:
        o.i8(1).i64(41)


def _synthetic(version: int) -> bytes:
    o = _Out().i32(0x4960672D).i32(version).i64(42)
    o.i32(1).i32(0xC96B1696 - (1 << 32))
    inner = _Out().i32(3).utf("hook").i32(2).raw(b"hi").buf
    o.i32(len(inner)).raw(bytes(inner))
    o.i32(2)
    for index, (uid, finished_op) in enumerate((("op-a", False), ("", True))):
        if version >= 5:
            o.utf(f"name-{index}").utf(uid)
        o.raw(bytes(range(16)) if index == 0 else bytes(16)).i32(2).i32(128)
        if finished_op:
            o.i8(0).i32(-1)
            continue
        o.i8(1).utf("coordinator").i32(2).raw(b"co")
        o.i32(2).i32(-2)  # subtask 1 finished
        o.i32(0)
        _subtask_v(o, version)
    if version >= 4:
        o.raw(bytes.fromhex("aced0005") + b"\x70")  # a null object: properties unknown
    return bytes(o.buf)


@pytest.mark.parametrize("version", [3, 4, 5, 6, 7])
def test_synthetic_versions_and_handle_kinds(version: int) -> None:
    data = _synthetic(version)
    meta = read_flink_metadata(data, source=f"v{version}")
    assert (meta.version, meta.checkpoint_id) == (version, 42)
    (master,) = meta.master_states
    assert (master.name, master.version, master.size) == ("hook", 3, 2)
    op, done = meta.operators
    assert op.operator_id == bytes(range(16)).hex()
    assert (op.name, op.uid) == (("name-0", "op-a") if version >= 5 else (None, None))
    assert done.fully_finished and done.subtasks == () and done.uid is None
    assert op.coordinator_state is not None and op.coordinator_state.data == b"co"
    finished, sub = op.subtasks
    assert finished.finished and finished.index == 1 and op.finished_subtasks == (1,)
    assert sub.index == 0
    assert sub.managed_operator_state is not None
    states = sub.managed_operator_state.states
    assert [(s.name, s.mode.value, s.offsets) for s in states] == [
        ("offsets", "split", (0, 10)), ("union-state", "union", (20,))]
    keyed = sub.managed_keyed_state
    assert keyed is not None and keyed.kind is KeyedHandleKind.CHANGELOG
    assert (keyed.checkpoint_id, keyed.materialization_id, keyed.checkpointed_size) == (8, 7, 99)
    inc, inc_bytes = keyed.nested
    assert inc.kind is KeyedHandleKind.INCREMENTAL and inc.checkpointed_size is None
    assert inc.shared[0].local_path == "000001.sst"
    assert (inc_bytes.change_count, inc_bytes.change_bytes) == (1, 4)
    raw = sub.raw_keyed_state
    assert raw is not None and raw.delegate is not None
    assert raw.delegate.kind is StreamHandleKind.KEY_GROUPS
    assert [leaf.path for leaf in raw.delegate.leaves()] == ["file:/raw/kg"]
    assert len(sub.input_channel_state) == len(sub.output_channel_state) == 1
    assert sub.output_channel_state[0].merged is (version >= 6)
    assert sub.ref_checkpoint_id == (41 if version >= 7 else None)
    roles = sorted({role for _, _, role, _ in meta.stream_handles()})
    assert roles == ["channel", "coordinator", "data", "meta", "operator", "shared"]
    if version >= 4:
        assert meta.properties is not None and meta.properties.snapshot_type is None
    else:
        assert meta.properties is None
    for end in range(len(data)):
        with pytest.raises(MetadataError):
            read_flink_metadata(data[:end], source="cut")
