"""verify (library): findings are reported, unreadable metadata is raised."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from statekit.readers.verification import Damage, verify_snapshot
from statekit.statefmt.errors import MetadataError, PathNotFoundError

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
    assert report.to_json() == {"path": str(GOLDEN), "ok": True, "files": 16, "blocks": 12, "bytes": 6488, "damage": []}


def test_a_directory_in_place_of_a_file(sp: Path) -> None:
    target = sp / "source" / "rules" / "00001-of-00002.sks"
    target.unlink()
    target.mkdir()
    report = verify_snapshot(str(sp))
    assert [(d.path, d.key_group) for d in report.damage] == [(str(target), None)]
    assert report.damage[0].message.startswith("cannot be read: [Errno 21] Is a directory")


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
