"""SavepointWriter: atomic commit, refusals, modification of existing savepoints."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

import statekit.writers.savepoint_writer as savepoint_writer
import statekit.writers.state_writer as state_writer
from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt import layout
from statekit.statefmt.errors import (
    BadInputError,
    CorruptStateError,
    IncompleteCheckpointError,
    StateNotFoundError,
)
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.metadata import StateDescriptor, StateKind, parse_metadata
from statekit.statefmt.statefile import StateFileReader
from statekit.writers.savepoint_writer import SavepointWriter, split_evenly

VALUE = StateDescriptor("v", StateKind.VALUE, value_type="int")
UNION = StateDescriptor("u", StateKind.UNION)


def small_writer(parallelism: int = 2) -> SavepointWriter:
    return (SavepointWriter.new_savepoint(max_parallelism=16, job_id="ab" * 16)
            .with_operator("a", {VALUE: [(i, i) for i in range(20)], UNION: [1, 2]}, parallelism=parallelism)
            .with_operator("b", {VALUE: [(i, -i) for i in range(5)]}, parallelism=1))


@pytest.fixture(params=["local", "memory"])
def out_root(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "local":
        yield str(tmp_path)
        return
    root = f"memory://statekit-writer-{uuid.uuid4().hex}"
    yield root
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


def all_files(root: str) -> list[str]:
    io, path = FileIO.for_path(root)
    if not io.exists(path):
        return []
    found = [f.path for f in io.walk_files(path)]
    if io.is_local:
        found += [str(p) for p in Path(path).rglob("*") if p.is_dir()]
    return found


# ---------------------------------------------------------------- atomic commit


@pytest.mark.parametrize("fail_at", [1, 3, 5])
def test_failure_after_some_files_leaves_nothing(out_root: str, fail_at: int, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}

    def failing(original: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == fail_at:
                raise RuntimeError("injected failure")
            return original(*args, **kwargs)
        return wrapper

    for name in ("write_keyed_file", "write_operator_file"):
        monkeypatch.setattr(savepoint_writer, name, failing(getattr(savepoint_writer, name)))
    with pytest.raises(RuntimeError, match="injected"):
        small_writer().write(f"{out_root}/sp")
    assert all_files(out_root) == []


def test_failure_while_publishing_metadata_leaves_nothing(out_root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(io: FileIO, directory: str, metadata: Any) -> None:
        io.write_atomic(f"{directory}/unrelated-probe", b"x")  # prove cleanup removes everything
        raise OSError("no space left (injected)")

    monkeypatch.setattr(savepoint_writer, "commit_metadata", failing)
    with pytest.raises(OSError, match="injected"):
        small_writer().write(f"{out_root}/sp")
    assert all_files(out_root) == []


def test_metadata_is_published_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    published: list[str] = []
    open_output, write_atomic = FileIO.open_output, FileIO.write_atomic

    def record_output(self: FileIO, path: str) -> Any:
        published.append(os.path.basename(path))
        return open_output(self, path)

    def record_atomic(self: FileIO, path: str, data: bytes) -> None:
        write_atomic(self, path, data)
        published.append(os.path.basename(path))

    monkeypatch.setattr(FileIO, "open_output", record_output)
    monkeypatch.setattr(FileIO, "write_atomic", record_atomic)
    small_writer().write(str(tmp_path / "sp"))
    assert published[-1] == layout.METADATA_FILE and published.count(layout.METADATA_FILE) == 1
    assert len(published) == 2 * 2 + 1 + 1


def test_local_write_goes_through_a_hidden_staging_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    original = state_writer.commit_metadata

    def spy(io: FileIO, directory: str, metadata: Any) -> None:
        seen.append(directory)
        assert not (tmp_path / "sp").exists()  # the final name appears only after _metadata
        original(io, directory, metadata)

    monkeypatch.setattr(savepoint_writer, "commit_metadata", spy)
    small_writer().write(str(tmp_path / "sp"))
    assert os.path.basename(seen[0]).startswith(".sp.inprogress-")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sp"]


def test_a_directory_without_metadata_is_never_read(tmp_path: Path) -> None:
    small_writer().write(str(tmp_path / "chk-1"))
    os.remove(tmp_path / "chk-1" / "_metadata")
    with pytest.raises(IncompleteCheckpointError, match=r"chk-1: incomplete checkpoint: no _metadata"):
        SavepointReader.read(str(tmp_path / "chk-1"))
    with pytest.raises(IncompleteCheckpointError, match="savepoint-abc123-0001: incomplete checkpoint"):
        SavepointReader.read(str(_savepoint_without_metadata(tmp_path)))
    os.remove(tmp_path / "chk-1" / "a" / "v" / "00000-of-00002.sks")  # a half-written chk-N, as after a crash
    with pytest.raises(IncompleteCheckpointError):
        SavepointReader.read(str(tmp_path / "chk-1"))


def _savepoint_without_metadata(tmp_path: Path) -> Path:
    path = tmp_path / "savepoint-abc123-0001"
    (path / "a").mkdir(parents=True)
    (path / "a" / "x.sks").write_bytes(b"partial")
    return path


# ---------------------------------------------------------------- refusals


def test_existing_output_is_refused(out_root: str) -> None:
    small_writer().write(f"{out_root}/sp")
    with pytest.raises(BadInputError, match="output directory exists and is not empty; choose a new path"):
        small_writer().write(f"{out_root}/sp")
    io, path = FileIO.for_path(f"{out_root}/file")
    io.write_atomic(path, b"x")
    with pytest.raises(BadInputError, match="output exists and is a file"):
        small_writer().write(f"{out_root}/file")


def test_existing_empty_directory_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "sp").mkdir()
    small_writer().write(str(tmp_path / "sp"))
    assert (tmp_path / "sp" / "_metadata").is_file()


@pytest.mark.parametrize("max_parallelism", [0, -1, 32769, 100_000])
def test_max_parallelism_outside_bounds(max_parallelism: int) -> None:
    with pytest.raises(BadInputError, match=rf"max parallelism must be in \[1, 32768\], got {max_parallelism}"):
        SavepointWriter.new_savepoint(max_parallelism=max_parallelism)
    with pytest.raises(BadInputError, match=r"max parallelism must be in \[1, 32768\]"):
        SavepointWriter.new_savepoint().with_operator("a", {VALUE: []}, max_parallelism=max_parallelism)


def test_parallelism_larger_than_max_parallelism() -> None:
    with pytest.raises(BadInputError, match="parallelism 9 is larger than max parallelism 8"):
        SavepointWriter.new_savepoint(max_parallelism=8).with_operator("a", {VALUE: []}, parallelism=9)
    with pytest.raises(BadInputError, match="parallelism must be at least 1, got 0"):
        SavepointWriter.new_savepoint().with_operator("a", {VALUE: []}, parallelism=0)


def test_operator_and_state_name_errors() -> None:
    writer = small_writer()
    with pytest.raises(BadInputError, match="operator uid must not be empty"):
        writer.with_operator("", {VALUE: []})
    with pytest.raises(BadInputError, match="operator 'c': duplicate state names"):
        writer.with_operator("c", [(VALUE, []), (VALUE, [])])
    with pytest.raises(StateNotFoundError, match=r"no operator with uid 'x' to remove \(operators: a, b\)"):
        writer.remove_operator("x")
    with pytest.raises(StateNotFoundError, match="no operator with uid 'x' to rename"):
        writer.change_operator_identifier("x", "y")
    with pytest.raises(BadInputError, match="cannot rename 'a' to 'b': that uid exists already"):
        writer.change_operator_identifier("a", "b")
    with pytest.raises(BadInputError, match="operator uid must not be empty"):
        writer.change_operator_identifier("a", "")
    with pytest.raises(StateNotFoundError, match="operator 'a' has no state 'w'"):
        writer.remove_state("a", "w")
    with pytest.raises(StateNotFoundError, match="no operator with uid 'z'"):
        writer.remove_state("z", "v")


# ---------------------------------------------------------------- output


def test_written_metadata(tmp_path: Path) -> None:
    before = int(time.time() * 1000)
    md = small_writer().write(str(tmp_path / "sp"))
    assert before <= md.created_at_ms <= int(time.time() * 1000)
    on_disk = parse_metadata((tmp_path / "sp" / "_metadata").read_bytes())
    assert on_disk == md
    assert md.job_id == "ab" * 16 and md.kind.value == "savepoint" and md.format.value == "canonical"
    assert small_writer().write(str(tmp_path / "pinned"), created_at_ms=42).created_at_ms == 42
    b = md.operator("b")
    assert b.max_parallelism == 16 and b.key_serializer == "msgpack"
    assert [f.path for f in md.operator("a").subtasks[1].files] == ["a/v/00001-of-00002.sks", "a/u/00001-of-00002.sks"]


def test_new_job_ids_are_random_hex() -> None:
    first, second = SavepointWriter.new_savepoint().job_id, SavepointWriter.new_savepoint().job_id
    assert first != second and len(first) == 32 and int(first, 16) >= 0


def test_operator_state_only_operator_has_no_key_serializer(tmp_path: Path) -> None:
    md = SavepointWriter.new_savepoint().with_operator("s", {UNION: [1]}).write(str(tmp_path / "sp"))
    assert md.operator("s").key_serializer is None


def test_replacing_an_operator(tmp_path: Path) -> None:
    writer = small_writer().with_operator("a", {VALUE: [(1, 100)]}, parallelism=1, name="A")
    writer.write(str(tmp_path / "sp"))
    reader = SavepointReader.read(str(tmp_path / "sp"))
    assert reader.operator("a").name == "A"
    assert [e.value for e in reader.read_keyed_state("a", "v")] == [100]


def test_split_evenly() -> None:
    assert split_evenly([1, 2, 3, 4, 5], 3) == [[1, 2], [3, 4], [5]]
    assert split_evenly([], 2) == [[], []]
    assert split_evenly([1], 3) == [[1], [], []]


# ---------------------------------------------------------------- from an existing savepoint


def test_from_existing_savepoint_copies_files_byte_for_byte(tmp_path: Path) -> None:
    small_writer().write(str(tmp_path / "a"))
    copied: list[tuple[str, int]] = []
    SavepointWriter.from_existing_savepoint(str(tmp_path / "a")).write(
        str(tmp_path / "b"), on_file=lambda path, size: copied.append((path, size)))
    old = SavepointReader.read(str(tmp_path / "a")).metadata
    new = SavepointReader.read(str(tmp_path / "b")).metadata
    assert new.operators == old.operators and new.job_id == old.job_id
    assert len(copied) == len(old.files())
    for f in old.files():
        assert (tmp_path / "a" / f.path).read_bytes() == (tmp_path / "b" / f.path).read_bytes()


def test_from_existing_keeps_the_largest_max_parallelism(tmp_path: Path) -> None:
    (SavepointWriter.new_savepoint(max_parallelism=16).with_operator("a", {VALUE: []})
     .with_operator("b", {VALUE: []}, max_parallelism=512).write(str(tmp_path / "sp")))
    assert SavepointWriter.from_existing_savepoint(str(tmp_path / "sp")).max_parallelism == 512


def test_renamed_operator_keeps_a_custom_name(tmp_path: Path) -> None:
    small_writer().with_operator("c", {VALUE: [(1, 1)]}, name="Custom").write(str(tmp_path / "a"))
    writer = SavepointWriter.from_existing_savepoint(str(tmp_path / "a"))
    writer.change_operator_identifier("a", "a2").change_operator_identifier("c", "c2").write(str(tmp_path / "b"))
    md = SavepointReader.read(str(tmp_path / "b")).metadata
    assert [(o.uid, o.name) for o in md.operators] == [("b", "b"), ("a2", "a2"), ("c2", "Custom")]


def test_copy_of_a_damaged_source_fails_and_writes_nothing(tmp_path: Path) -> None:
    small_writer().write(str(tmp_path / "a"))
    damaged = tmp_path / "a" / "a" / "v" / "00001-of-00002.sks"
    data = bytearray(damaged.read_bytes())
    with open(damaged, "rb") as f:
        block = StateFileReader(f, len(data), path=str(damaged)).index[0]
    data[block.offset + 3] ^= 1  # inside a block: the header, footer and index stay intact
    damaged.write_bytes(bytes(data))
    with pytest.raises(CorruptStateError,
                       match=r"00001-of-00002.sks: file checksum mismatch: crc32:\w+ differs from the recorded crc32:\w+"):
        SavepointWriter.from_existing_savepoint(str(tmp_path / "a")).write(str(tmp_path / "b"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]
    damaged.write_bytes(bytes(data[:-5]))
    with pytest.raises(CorruptStateError, match=r"00001-of-00002.sks: size \d+ differs from the \d+ bytes recorded"):
        SavepointWriter.from_existing_savepoint(str(tmp_path / "a")).write(str(tmp_path / "b"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]
