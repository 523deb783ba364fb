"""Golden files of format v1: today's writer produces the committed bytes, and the reader
decodes the committed bytes to the expected values."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.entries import KeyedStateEntry, MapStateEntry
from statekit.statefmt.metadata import SnapshotFormat, SnapshotKind

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"
ALL_KINDS = GOLDEN_DIR / "statekit-v1" / "statekit-0.1-v1-all-kinds"


def load_make_golden() -> ModuleType:
    spec = importlib.util.spec_from_file_location("statekit_make_golden", GOLDEN_DIR / "make_golden.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def files_of(root: Path) -> dict[str, bytes]:
    return load_make_golden().files_of(root)  # type: ignore[no-any-return]


def test_the_writer_produces_the_golden_bytes(tmp_path: Path) -> None:
    make_golden = load_make_golden()
    make_golden.write_all_kinds(str(tmp_path / "out"))
    produced = files_of(tmp_path / "out")
    golden = {name: data for name, data in files_of(ALL_KINDS).items() if name != "README.md"}
    assert sorted(produced) == sorted(golden)
    for name, data in golden.items():
        assert produced[name] == data, f"{name} differs from the golden bytes: the on-disk format changed"


def test_golden_files_stay_small() -> None:
    assert sum(len(d) for d in files_of(ALL_KINDS).values()) < 16_000


@pytest.fixture(scope="module")
def reader() -> SavepointReader:
    return SavepointReader.read(str(ALL_KINDS))


def test_golden_metadata(reader: SavepointReader) -> None:
    md = reader.metadata
    assert (md.job_id, md.job_name, md.checkpoint_id, md.created_at_ms) == (
        "5eed0000000000000000000000000001", "golden-all-kinds", 0, 1_700_000_000_000)
    assert md.kind is SnapshotKind.SAVEPOINT and md.format is SnapshotFormat.CANONICAL
    assert [(op.uid, op.name, op.parallelism, op.max_parallelism, op.key_serializer) for op in md.operators] == [
        ("counter", "Counter", 2, 4, "msgpack"), ("source", "Source", 2, 4, None)]
    counter = md.operator("counter")
    assert [(d.name, d.kind.value, d.value_serializer, d.value_type, d.ttl_ms) for d in counter.states] == [
        ("count", "value", "msgpack", "int", None),
        ("events", "list", "msgpack", "string", None),
        ("attrs", "map", "msgpack", "int", None),
        ("window-sum", "reducing", "msgpack", "float", 60_000),
        ("average", "aggregating", "json", "struct<sum:int,count:int>", None),
    ]
    assert counter.state("attrs").user_key_serializer == "utf8"
    assert [s.key_group_range.to_list() for s in counter.subtasks] == [[0, 1], [2, 3]]
    assert [(f.path, f.entries) for f in counter.subtasks[0].files][:2] == [
        ("counter/count/00000-of-00002.sks", 2), ("counter/events/00000-of-00002.sks", 2)]


def test_golden_keyed_values(reader: SavepointReader) -> None:
    def read(state: str) -> list[object]:
        return list(reader.read_keyed_state("counter", state))

    # inside a key group, entries are in key-byte order (msgpack: 'bob' 0xa3 < 'alice' 0xa5)
    assert read("count") == [
        KeyedStateEntry("bob", None, 7, None), KeyedStateEntry("alice", None, 3, None),
        KeyedStateEntry("carol", None, -1, None)]
    assert read("events") == [
        KeyedStateEntry("bob", None, [], None), KeyedStateEntry("alice", None, ["login", "logout"], None)]
    assert read("attrs") == [
        MapStateEntry("alice", "age", 30, None, None), MapStateEntry("alice", "score", 12, None, None),
        MapStateEntry("carol", "age", 41, None, None)]
    assert read("window-sum") == [
        KeyedStateEntry("bob", [0, 1000], 1.25, None),
        KeyedStateEntry("alice", [0, 1000], 2.5, 1_700_000_060_000),
        KeyedStateEntry("alice", [1000, 2000], 4.0, 1_700_000_061_000)]
    assert read("average") == [KeyedStateEntry("bob", None, {"sum": 10, "count": 4}, None)]
    assert [(sub, kg) for sub, kg, _ in reader.read_keyed_batches("counter", "count")] == [(0, 0), (1, 3)]
    assert list(reader.read_keyed_state("counter", "count", key_groups=[3])) == [KeyedStateEntry("carol", None, -1, None)]


def test_golden_operator_values(reader: SavepointReader) -> None:
    assert reader.read_operator_state_per_subtask("source", "offsets") == [[100, 200], [300]]
    assert reader.read_list_state("source", "offsets") == [100, 200, 300]
    assert reader.read_union_state("source", "watermarks") == [1_699_999_995_000]
    assert reader.read_broadcast_state("source", "rules") == {"threshold": 10, "mode": "strict"}
    assert reader.read_operator_state_per_subtask("source", "rules") == [
        [("mode", "strict"), ("threshold", 10)]] * 2


def test_golden_verifies_clean() -> None:
    from statekit.readers.verification import verify_snapshot

    report = verify_snapshot(str(ALL_KINDS))
    assert report.ok and (report.files, report.blocks, report.bytes) == (16, 12, 6488)
