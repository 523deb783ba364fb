"""Property: every flipped byte and every truncation of a state file is reported — by
``verify`` (library and CLI: exit 1, file named, key group named when the damage is inside a
block) and by the reader (CorruptStateError) — never a crash, never silent success."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekit.cli.main import cli
from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.verification import verify_snapshot
from statekit.statefmt.errors import CorruptStateError, UnsupportedVersionError
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

VALUE = StateDescriptor("count", StateKind.VALUE, value_type="int")
MAP = StateDescriptor("attrs", StateKind.MAP, user_key_serializer="utf8")
LIST = StateDescriptor("items", StateKind.OPERATOR_LIST)
BROADCAST = StateDescriptor("rules", StateKind.BROADCAST, user_key_serializer="utf8")


class Case(dict[str, Any]):
    def __repr__(self) -> str:
        return f"<savepoint {self['path']}>"


@pytest.fixture(scope="module")
def savepoint(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A savepoint with keyed and operator files; intact bytes and block ranges per file."""
    path = tmp_path_factory.mktemp("damage") / "sp"
    (SavepointWriter.new_savepoint(max_parallelism=16)
     .with_operator("keyed", {VALUE: [(i, i * i) for i in range(40)],
                              MAP: [(i, f"u{j}", j) for i in range(10) for j in range(3)]}, parallelism=2)
     .with_operator("ops", {LIST: list(range(9)), BROADCAST: {"a": 1, "b": [2]}}, parallelism=2)
     .write(str(path)))
    reader = SavepointReader.read(str(path))
    files: dict[str, dict[str, Any]] = {}
    for op in reader.operators:
        for subtask in op.subtasks:
            for f in subtask.files:
                with reader.open_file(f) as state_file:
                    blocks = [(e.offset, e.offset + e.length, e.key_group) for e in state_file.index]
                files[f.path] = {"uid": op.uid, "state": f.state, "keyed": op.state(f.state).keyed,
                                 "data": (path / f.path).read_bytes(), "blocks": blocks}
    return Case(path=path, files=files)


def block_at(blocks: list[tuple[int, int, int]], offset: int) -> int | None:
    return next((kg for start, end, kg in blocks if start <= offset < end), None)


def read_everything(path: Path, uid: str, state: str, keyed: bool) -> None:
    reader = SavepointReader.read(str(path))
    if keyed:
        for _ in reader.read_keyed_state(uid, state):
            pass
    else:
        reader.read_operator_state_per_subtask(uid, state)


damage = st.one_of(
    st.tuples(st.just("flip"), st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 7)),
                                        min_size=1, max_size=3)),
    st.tuples(st.just("truncate"), st.floats(0, 1, exclude_max=True)),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data(), damage)
def test_every_damage_is_reported(savepoint: dict[str, Any], data: st.DataObject, how: tuple[str, Any]) -> None:
    path: Path = savepoint["path"]
    relative = data.draw(st.sampled_from(sorted(savepoint["files"])), label="file")
    info = savepoint["files"][relative]
    original: bytes = info["data"]
    damaged = bytearray(original)
    if how[0] == "flip":
        for (fraction, bit) in how[1]:
            damaged[int(fraction * len(original))] ^= 1 << bit
        offsets = [i for i, (a, b) in enumerate(zip(damaged, original)) if a != b]
        if not offsets:  # two flips of the same bit cancel out
            return
        in_blocks = [block_at(info["blocks"], o) for o in offsets]
        # key groups are named when every damaged byte is inside a block (header, index and
        # footer damage stops the file from being indexed at all)
        groups = set(in_blocks) if None not in in_blocks else set()
    else:
        offsets = [int(how[1] * len(original))]
        damaged = damaged[:offsets[0]]
        groups = set()
    target = path / relative
    target.write_bytes(bytes(damaged))
    try:
        # the library
        report = verify_snapshot(str(path))
        assert not report.ok
        assert {d.path for d in report.damage} == {str(target)}
        assert groups <= {d.key_group for d in report.damage}

        # the command line, in JSON mode
        result = CliRunner().invoke(cli, ["--json", "verify", str(path)])
        assert result.exit_code == 1, result.output
        assert "Traceback" not in result.output
        payload = json.loads(result.stdout)
        assert payload["ok"] is False and {d["path"] for d in payload["problems"]} == {str(target)}

        # the reader
        # a state file of another format version is refused as such (docs/FORMAT.md)
        version_field = how[0] == "flip" and any(8 <= o < 10 for o in offsets)
        expected: tuple[type[Exception], ...] = (CorruptStateError, UnsupportedVersionError) if version_field else (
            CorruptStateError,)
        with pytest.raises(expected) as raised:
            read_everything(path, info["uid"], info["state"], info["keyed"])
        assert str(target) in str(raised.value)
        if groups:
            assert isinstance(raised.value, CorruptStateError) and raised.value.key_group in groups
    finally:
        target.write_bytes(original)


def test_intact_savepoint_reads_and_verifies(savepoint: dict[str, Any]) -> None:
    path: Path = savepoint["path"]
    assert verify_snapshot(str(path)).ok
    for info in savepoint["files"].values():
        read_everything(path, info["uid"], info["state"], info["keyed"])


def test_missing_state_file(savepoint: dict[str, Any], tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "sp"
    shutil.copytree(savepoint["path"], copy)
    (copy / "keyed" / "count" / "00001-of-00002.sks").unlink()
    report = verify_snapshot(str(copy))
    assert [(d.path, d.message) for d in report.damage] == [
        (str(copy / "keyed/count/00001-of-00002.sks"), "missing: named in _metadata but not present")]
    with pytest.raises(Exception) as raised:
        read_everything(copy, "keyed", "count", True)
    assert "00001-of-00002.sks" in str(raised.value)
