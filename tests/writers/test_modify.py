"""``modify_savepoint``: remove operators and states, rename uids; copies verified, never decoded."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.verification import verify_snapshot
from statekit.statefmt.errors import BadInputError, CorruptStateError, StateNotFoundError
from statekit.statefmt.json_contract import json_data
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_modification import modify_savepoint, parse_rename, parse_state_ref
from statekit.writers.savepoint_writer import SavepointWriter

COUNT = StateDescriptor("count", StateKind.VALUE, value_type="int")
SEEN = StateDescriptor("seen", StateKind.MAP)
OFFSETS = StateDescriptor("offsets", StateKind.OPERATOR_LIST)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("modify") / "sp")
    writer = SavepointWriter.new_savepoint(128)
    writer.with_operator("source", {OFFSETS: [1, 2, 3]}, parallelism=2)
    writer.with_operator("counter", {COUNT: [(f"w{i}", i) for i in range(100)],
                                     SEEN: [(f"w{i}", "x", True) for i in range(10)]}, parallelism=2)
    writer.with_operator("sink", {OFFSETS: [7]}, parallelism=1)
    writer.write(path)
    return path


def test_remove_rename_and_remove_state_in_one_call(source: str, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    report = modify_savepoint(source, out, remove_operators=["sink"], rename_uids=[("counter", "counter-v2")],
                              remove_states=[("counter", "seen")])
    reader = SavepointReader.read(out)
    assert [op.uid for op in reader.operators] == ["source", "counter-v2"]
    assert [d.name for d in reader.operator("counter-v2").states] == ["count"]
    assert sorted(e.value for e in reader.read_keyed_state("counter-v2", "count")) == list(range(100))
    assert all(f.path.startswith("counter-v2/") for s in reader.operator("counter-v2").subtasks for f in s.files)
    assert verify_snapshot(out).ok
    assert [(o.uid, o.renamed_from, o.states) for o in report.operators] == [
        ("source", None, ("offsets",)), ("counter-v2", "counter", ("count",))]
    assert json_data(report)["renamed"] == [{"from": "counter", "uid": "counter-v2"}]
    original = SavepointReader.read(source).operator("counter").subtasks[0].file_of("count")
    copied = reader.operator("counter-v2").subtasks[0].file_of("count")
    assert original is not None and copied is not None and original.checksum == copied.checksum


def test_renames_apply_together_so_uids_can_swap(source: str, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    modify_savepoint(source, out, rename_uids=[("source", "sink"), ("sink", "source")])
    reader = SavepointReader.read(out)
    assert reader.read_list_state("sink", "offsets") == [1, 2, 3]
    assert reader.read_list_state("source", "offsets") == [7]


def test_dry_run_reports_and_writes_nothing(source: str, tmp_path: Path) -> None:
    report = modify_savepoint(source, str(tmp_path / "out"), remove_operators=["source"], dry_run=True)
    real = modify_savepoint(source, str(tmp_path / "real"), remove_operators=["source"])
    assert not (tmp_path / "out").exists()
    assert [json_data(o) for o in report.operators] == [json_data(o) for o in real.operators]


@pytest.mark.parametrize("operations, error, message", [
    ({"remove_operators": ["nope"]}, StateNotFoundError,
     "--remove-operator nope: the savepoint has no operator with uid 'nope' (operators: 'source', 'counter', 'sink')"),
    ({"rename_uids": [("nope", "x")]}, StateNotFoundError, "--rename-uid nope=x: the savepoint has no operator"),
    ({"remove_states": [("counter", "nope")]}, StateNotFoundError,
     "--remove-state counter/nope: operator 'counter' has no state 'nope' (states: 'count', 'seen')"),
    ({"rename_uids": [("counter", "sink")]}, BadInputError, "uid 'sink' is taken by another operator"),
    ({"rename_uids": [("counter", "a"), ("sink", "a")]}, BadInputError, "two operators renamed to the same uid"),
    ({"remove_operators": ["sink"], "rename_uids": [("sink", "x")]}, BadInputError, "is also removed"),
    ({}, BadInputError, "nothing to do"),
])
def test_bad_operations_say_what_exists(source: str, tmp_path: Path, operations: dict[str, object],
                                        error: type[Exception], message: str) -> None:
    with pytest.raises(error) as failure:
        modify_savepoint(source, str(tmp_path / "out"), **operations)  # type: ignore[arg-type]
    assert message in str(failure.value) and str(failure.value).startswith(source)
    assert not (tmp_path / "out").exists()


def test_a_damaged_file_fails_the_copy_atomically(tmp_path: Path) -> None:
    path = str(tmp_path / "sp")
    writer = SavepointWriter.new_savepoint(128)
    writer.with_operator("counter", {COUNT: [(f"w{i}", i) for i in range(100)]}, parallelism=1)
    writer.with_operator("other", {OFFSETS: [1]})
    writer.write(path)
    file = SavepointReader.read(path).operator("counter").subtasks[0].file_of("count")
    assert file is not None
    full = Path(path, file.path)
    data = bytearray(full.read_bytes())
    with SavepointReader.read(path).open_file(file) as state_file:
        block = state_file.index[0]
    data[block.offset + block.length // 2] ^= 1  # inside a block: only the whole-file CRC sees it before a read
    full.write_bytes(bytes(data))
    with pytest.raises(CorruptStateError, match="file checksum mismatch"):
        modify_savepoint(path, str(tmp_path / "out"), remove_operators=["other"])
    assert sorted(os.listdir(tmp_path)) == ["sp"]


def test_option_parsing() -> None:
    assert parse_rename("a=b=c") == ("a", "b=c")
    assert parse_state_ref("ns/op/state") == ("ns/op", "state")
    for bad in ("a", "=b", "a="):
        with pytest.raises(BadInputError, match="expected OLD=NEW"):
            parse_rename(bad)
    with pytest.raises(BadInputError, match="expected UID/STATE"):
        parse_state_ref("state")


def test_swapped_subtask_files_are_refused_before_anything_is_written(source: str, tmp_path: Path) -> None:
    """Subtask 0's metadata names subtask 1's file (with its size and checksum) and the other way
    round: every copied byte matches its recorded CRC, but the files hold other key groups."""
    import json
    import shutil
    import struct
    import zlib

    copy = tmp_path / "sp"
    shutil.copytree(source, copy)
    data = (copy / "_metadata").read_bytes()
    header = struct.Struct("<8sIQ")
    _, version, length = header.unpack_from(data)
    body = json.loads(data[header.size:header.size + length])
    counter = next(op for op in body["operators"] if op["uid"] == "counter")
    first, second = counter["subtasks"]
    first["files"], second["files"] = second["files"], first["files"]
    raw = json.dumps(body).encode()
    (copy / "_metadata").write_bytes(data[:8] + struct.pack("<IQ", version, len(raw)) + raw
                                     + struct.pack("<I", zlib.crc32(raw)))
    assert not verify_snapshot(str(copy)).ok
    with pytest.raises(CorruptStateError, match="block outside the subtask's key-group range"):
        modify_savepoint(str(copy), str(tmp_path / "out"), remove_operators=["sink"])
    assert sorted(os.listdir(tmp_path)) == ["sp"]


def test_a_damaged_header_byte_is_refused(source: str, tmp_path: Path) -> None:
    """A byte no block CRC covers (the header's reserved bytes): the whole-file CRC refuses it."""
    import shutil

    copy = tmp_path / "sp"
    shutil.copytree(source, copy)
    file = SavepointReader.read(str(copy)).operator("counter").subtasks[1].file_of("count")
    assert file is not None
    full = copy / file.path
    data = bytearray(full.read_bytes())
    data[11] ^= 1
    full.write_bytes(bytes(data))
    with pytest.raises(CorruptStateError, match=str(full)):
        modify_savepoint(str(copy), str(tmp_path / "out"), rename_uids=[("counter", "c2")])
    assert sorted(os.listdir(tmp_path)) == ["sp"]


@pytest.mark.parametrize("kind", ["checkpoint", "savepoint"])
def test_native_operators_are_copied_from_the_canonical_view(native_snapshots: Any, tmp_path: Path,
                                                            kind: str) -> None:
    from statekit.statefmt.metadata import SnapshotFormat

    snapshot = getattr(native_snapshots, kind)
    out = str(tmp_path / "out")
    modify_savepoint(str(snapshot), out, remove_operators=["source"])
    assert verify_snapshot(out).ok
    reader = SavepointReader.read(out)
    assert reader.metadata.format is SnapshotFormat.CANONICAL
    expected = SavepointReader.read(str(native_snapshots.canonical))
    assert ({e.key: e.value for e in reader.read_keyed_state("counter", "count")}
            == {e.key: e.value for e in expected.read_keyed_state("counter", "count")})
