"""verify (library): findings are reported, unreadable metadata is raised."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from statekit.readers.verification import Damage, verify_snapshot
from statekit.statefmt.errors import MetadataError, PathNotFoundError
from statekit.statefmt.json_contract import json_data

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "statekit-v1" / "statekit-0.1-v1-all-kinds"


@pytest.fixture
def sp(tmp_path: Path) -> Path:
    shutil.copytree(GOLDEN, tmp_path / "sp")
    return tmp_path / "sp"


def test_progress_callback_sees_every_file() -> None:
    seen: list[tuple[str, int]] = []
    report = verify_snapshot(str(GOLDEN), on_file=lambda path, size: seen.append((path, size)))
    assert report.ok and len(seen) == report.files == 16
    assert sum(size for _, size in seen) == report.bytes == 6488
    assert json_data(report) == {"path": str(GOLDEN), "ok": True, "files": 16, "blocks": 12, "bytes": 6488,
                                 "problems": [], "engine": "statekit"}


def test_a_directory_in_place_of_a_file(sp: Path) -> None:
    target = sp / "source" / "rules" / "00001-of-00002.sks"
    target.unlink()
    target.mkdir()
    report = verify_snapshot(str(sp))
    assert [(d.path, d.key_group) for d in report.damage] == [(str(target), None)]
    assert report.damage[0].message == "is a directory, expected a file"


def test_several_damaged_files_are_all_reported(sp: Path) -> None:
    for relative in ("counter/count/00000-of-00002.sks", "source/offsets/00001-of-00002.sks"):
        (sp / relative).write_bytes(b"")
    report = verify_snapshot(str(sp))
    assert {Path(d.path).relative_to(sp).as_posix() for d in report.damage} == {
        "counter/count/00000-of-00002.sks", "source/offsets/00001-of-00002.sks"}
    assert all(isinstance(d, Damage) and d.key_group is None for d in report.damage)


def test_unreadable_metadata_is_bad_input_not_a_finding(sp: Path) -> None:
    (sp / "_metadata").write_bytes(b"STKMETA\x01")
    with pytest.raises(MetadataError, match="truncated metadata"):
        verify_snapshot(str(sp))
    with pytest.raises(PathNotFoundError):
        verify_snapshot(str(sp / "missing"))


def _put_file(sp: Path, target_subtask: int, uid: str, state: str, source_uid: str, source_state: str,
              source_subtask: int) -> Path:
    """Copy another file over one state file and record its size/checksum in _metadata
    (a consistent-looking snapshot whose file holds the wrong blocks)."""
    import dataclasses

    from statekit.statefmt.metadata import parse_metadata, serialize_metadata

    md = parse_metadata((sp / "_metadata").read_bytes())
    source = md.operator(source_uid).subtasks[source_subtask].file_of(source_state)
    op = md.operator(uid)
    target = op.subtasks[target_subtask].file_of(state)
    assert source is not None and target is not None
    shutil.copy(sp / source.path, sp / target.path)
    files = tuple(dataclasses.replace(f, size=source.size, checksum=source.checksum, entries=source.entries)
                  if f is target else f for f in op.subtasks[target_subtask].files)
    subtasks = tuple(dataclasses.replace(s, files=files) if s.index == target_subtask else s for s in op.subtasks)
    operators = tuple(dataclasses.replace(o, subtasks=subtasks) if o.uid == uid else o for o in md.operators)
    (sp / "_metadata").write_bytes(serialize_metadata(md.with_operators(operators)))
    return sp / target.path


def test_blocks_outside_the_subtask_range(sp: Path) -> None:
    from statekit.readers.savepoint_reader import SavepointReader
    from statekit.statefmt.errors import CorruptStateError

    target = _put_file(sp, 0, "counter", "count", "counter", "count", 1)  # holds key group 3, range [0, 1]
    report = verify_snapshot(str(sp))
    assert [(d.path, d.key_group, d.message) for d in report.damage] == [
        (str(target), 3, "block outside the subtask's key-group range")]
    with pytest.raises(CorruptStateError, match=r"key group 3: block outside the subtask's key-group range \[0, 1\]"):
        list(SavepointReader.read(str(sp)).read_keyed_state("counter", "count"))


def test_a_file_of_the_wrong_kind(sp: Path) -> None:
    from statekit.readers.savepoint_reader import SavepointReader
    from statekit.statefmt.errors import CorruptStateError

    keyed = _put_file(sp, 0, "counter", "count", "source", "offsets", 0)
    operator = _put_file(sp, 1, "source", "rules", "counter", "attrs", 1)
    report = verify_snapshot(str(sp))
    assert [(d.path, d.key_group, d.message) for d in report.damage] == [
        (str(keyed), None, "file kind 2 differs from the state's kind 1 (1 keyed, 2 operator): another state's file"),
        (str(operator), None, "file kind 1 differs from the state's kind 2 (1 keyed, 2 operator): another state's file"),
    ]
    reader = SavepointReader.read(str(sp))
    with pytest.raises(CorruptStateError, match="00000-of-00002.sks: not a keyed state file"):
        list(reader.read_keyed_state("counter", "count"))
    with pytest.raises(CorruptStateError, match="00001-of-00002.sks: not an operator state file"):
        reader.read_broadcast_state("source", "rules")
