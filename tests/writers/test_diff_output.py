"""``diff -o`` on the local engine: written by ``writers.diff_output``, whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgpack
import pytest

from statekit.readers import diff as diff_module
from statekit.readers.diff import DiffSpec
from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.errors import BadInputError, CorruptStateError, PathNotFoundError
from statekit.statefmt.keygroups import assign_to_key_group
from statekit.statefmt.layout import STAGING_DIR_PATTERN
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.diff_output import write_diff
from statekit.writers.savepoint_writer import SavepointWriter

COUNT = StateDescriptor("count", StateKind.VALUE, value_type="int")


def savepoint(path: Path, rows: range, changed: range = range(0)) -> str:
    data = [(f"k{i}", i + (1000 if i in changed else 0)) for i in rows]
    SavepointWriter.new_savepoint(128).with_operator("counter", {COUNT: data}, parallelism=2).write(str(path))
    return str(path)


def test_the_output_is_staged_under_the_shared_staging_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = savepoint(tmp_path / "a", range(100)), savepoint(tmp_path / "b", range(100), changed=range(10))
    seen: list[list[str]] = []
    real = diff_module.DifferenceSink.add

    def add(self: Any, rows: Any) -> None:
        seen.append(sorted(os.listdir(tmp_path)))
        real(self, rows)

    monkeypatch.setattr(diff_module.DifferenceSink, "add", add)
    result = write_diff(DiffSpec(a, b, output=str(tmp_path / "out")))
    assert result.output == str(tmp_path / "out") and result.states[0].changed == 10
    staging = [name for name in seen[0] if name not in ("a", "b")]
    assert len(staging) == 1 and STAGING_DIR_PATTERN.match(staging[0]).group("name") == "out"  # type: ignore[union-attr]
    assert sorted(os.listdir(tmp_path)) == ["a", "b", "out"]


def test_a_failed_diff_leaves_no_output(tmp_path: Path) -> None:
    a, b = savepoint(tmp_path / "a", range(200)), savepoint(tmp_path / "b", range(200), changed=range(50))
    file = next(f for st in SavepointReader.read(b).operator("counter").subtasks for f in st.files if f.entries)
    changed = {assign_to_key_group(msgpack.packb(f"k{i}"), 128) for i in range(50)}
    with SavepointReader.read(b).open_file(file) as state_file:  # a block that differs: the diff reads it
        block = [e for e in state_file.index if e.key_group in changed][-1]
    with open(Path(b) / file.path, "r+b") as f:  # one flipped byte inside it: a bad CRC
        f.seek(block.offset + block.length // 2)
        byte = f.read(1)
        f.seek(block.offset + block.length // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CorruptStateError):
        write_diff(DiffSpec(a, b, output=str(tmp_path / "out")))
    assert sorted(os.listdir(tmp_path)) == ["a", "b"]


def test_inputs_are_checked_before_the_output_is_touched(tmp_path: Path) -> None:
    a = savepoint(tmp_path / "a", range(5))
    with pytest.raises(PathNotFoundError):
        write_diff(DiffSpec(a, str(tmp_path / "missing"), output=str(tmp_path / "out")))
    with pytest.raises(BadInputError, match="the output's parent directory does not exist"):
        write_diff(DiffSpec(a, a, output=str(tmp_path / "no" / "out")))
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadInputError, match="output exists and is a file"):
        write_diff(DiffSpec(a, a, output=str(tmp_path / "file")))
    assert sorted(os.listdir(tmp_path)) == ["a", "file"]
