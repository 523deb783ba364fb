"""Diff skips key groups whose blocks are byte-equal (by index CRC-32) without decoding them:
the answer must be the one a full, decoding diff gives."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekit.readers.diff import DiffSpec, SavepointDiff
from statekit.readers.diff import aligned as aligned_module
from statekit.statefmt.encoding import WriteFormat, writing_format
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.diff_output import write_diff
from statekit.writers.savepoint_writer import SavepointWriter


def write(path: Path, states: dict[StateDescriptor, Any], parallelism: int = 2) -> str:
    writer = SavepointWriter.new_savepoint(16)
    writer.with_operator("op", states, parallelism=parallelism)
    writer.write(str(path))
    return str(path)


def summary(result: SavepointDiff) -> list[tuple[Any, ...]]:
    return [(s.operator_uid, s.state_name, s.status, s.only_in_a, s.only_in_b, s.changed, s.unchanged)
            for s in result.states]


def full_diff(a: str, b: str, monkeypatch: pytest.MonkeyPatch) -> SavepointDiff:
    with monkeypatch.context() as m:
        m.setattr(aligned_module, "_same_block", lambda x, y: False)
        return write_diff(DiffSpec(a, b))


def test_equal_bytes_under_other_headers_are_not_skipped(tmp_path: Path) -> None:
    # float 0.0 and int 0 are the same eight zero bytes in a typed value column
    a = write(tmp_path / "a", {StateDescriptor("n", StateKind.VALUE, value_type="float"): [(f"k{i}", 0.0) for i in range(40)]})
    b = write(tmp_path / "b", {StateDescriptor("n", StateKind.VALUE, value_type="int"): [(f"k{i}", 0) for i in range(40)]})
    (s,) = write_diff(DiffSpec(a, b)).states
    assert (s.changed, s.unchanged, s.key_groups_skipped) == (40, 0, 0)


def test_a_version_1_and_a_version_2_copy_compare_equal_entry_by_entry(tmp_path: Path) -> None:
    rows = [(f"k{i}", i) for i in range(60)]
    count = StateDescriptor("count", StateKind.VALUE, value_type="int")
    with writing_format(WriteFormat(version=1)):
        a = write(tmp_path / "a", {count: rows})
    b = write(tmp_path / "b", {count: rows})
    (s,) = write_diff(DiffSpec(a, b)).states
    assert (s.changed, s.unchanged, s.key_groups_skipped) == (0, 60, 0)


def test_skipped_key_groups_are_never_decoded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from statekit.statefmt.encoding import BlockCodec

    count = StateDescriptor("count", StateKind.VALUE, value_type="int")
    a = write(tmp_path / "a", {count: [(f"k{i}", i) for i in range(300)]})
    b = write(tmp_path / "b", {count: [(f"k{i}", i + (i == 7)) for i in range(300)]})
    decoded: list[int | None] = []
    original = BlockCodec.decode

    def counting(self: BlockCodec, data: bytes, *, path: str, key_group: int | None = None) -> Any:
        decoded.append(key_group)
        return original(self, data, path=path, key_group=key_group)

    monkeypatch.setattr(BlockCodec, "decode", counting)
    (s,) = write_diff(DiffSpec(a, b)).states
    assert (s.changed, s.unchanged, s.key_groups_compared) == (1, 299, 1)
    assert len(decoded) == 2 and len(set(decoded)) == 1  # the changed key group, once per side


rows_strategy = st.dictionaries(st.integers(0, 60), st.integers(-3, 3), max_size=40)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=rows_strategy, edits=rows_strategy, removed=st.sets(st.integers(0, 60), max_size=10),
       compression=st.sampled_from(["none", "zstd"]), typed=st.booleans())
def test_skipping_equal_blocks_gives_the_full_diff(before: dict[int, int], edits: dict[int, int], removed: set[int],
                                                   compression: str, typed: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    after = {k: v for k, v in {**before, **edits}.items() if k not in removed}
    count = StateDescriptor("count", StateKind.VALUE, value_type="int" if typed else None)
    tags = StateDescriptor("tags", StateKind.MAP, value_type="int", user_key_type="string")

    def states(rows: dict[int, int]) -> dict[StateDescriptor, Any]:
        return {count: [(f"k{k}", v) for k, v in rows.items()],
                tags: [(f"k{k}", f"t{v}", k) for k, v in rows.items()]}

    with tempfile.TemporaryDirectory(prefix="statekit-diff-skip-") as directory:
        root = Path(directory)
        with writing_format(WriteFormat(compression=compression)):
            a, b = write(root / "a", states(before)), write(root / "b", states(after))
        skipping = write_diff(DiffSpec(a, b))
        assert summary(skipping) == summary(full_diff(a, b, monkeypatch))
    unchanged_groups = sum(s.key_groups_skipped for s in skipping.states)
    if before == after and before:
        assert unchanged_groups > 0 and all(s.key_groups_compared == 0 for s in skipping.states)


def _first_block(path: Path, relative: str) -> tuple[Path, Any]:
    from statekit.statefmt.statefile import StateFileReader

    file = path / relative
    with open(file, "rb") as stream:
        return file, StateFileReader(stream, file.stat().st_size, path=str(file)).index[0]


@pytest.mark.parametrize("side", ["a", "b"])
def test_a_damaged_block_is_never_skipped_as_unchanged(tmp_path: Path, side: str) -> None:
    """A copy whose block bytes were damaged (its index intact): the equal index entries do not make
    it "unchanged" — the block is read and checked, and the diff fails naming the file and key group."""
    import shutil

    from click.testing import CliRunner

    from statekit.cli.main import cli
    from statekit.statefmt.errors import CorruptStateError

    count = StateDescriptor("count", StateKind.VALUE, value_type="int")
    a = write(tmp_path / "a", {count: [(f"k{i}", i) for i in range(200)]})
    b = str(tmp_path / "b")
    shutil.copytree(a, b)
    damaged, block = _first_block(tmp_path / side, "op/count/00000-of-00002.sks")
    data = bytearray(damaged.read_bytes())
    data[block.offset + block.length // 2] ^= 0x01
    damaged.write_bytes(bytes(data))
    with pytest.raises(CorruptStateError, match=f"key group {block.key_group}: block checksum mismatch") as failure:
        write_diff(DiffSpec(a, b))
    assert str(failure.value).startswith(str(damaged))
    result = CliRunner().invoke(cli, ["diff", a, b, "--engine", "local"])
    assert result.exit_code == 2 and str(damaged) in result.output


def test_a_damaged_header_is_refused_before_any_block_is_skipped(tmp_path: Path) -> None:
    """A byte of a file that no block checksum covers (the header's reserved bytes): the file's
    CRC-32 in _metadata, as its header, index and footer give it, refuses it on open."""
    import shutil

    from statekit.statefmt.errors import CorruptStateError

    count = StateDescriptor("count", StateKind.VALUE, value_type="int")
    a = write(tmp_path / "a", {count: [(f"k{i}", i) for i in range(200)]})
    b = str(tmp_path / "b")
    shutil.copytree(a, b)
    damaged = tmp_path / "b" / "op/count/00000-of-00002.sks"
    data = bytearray(damaged.read_bytes())
    data[11] ^= 0x01  # a reserved header byte
    damaged.write_bytes(bytes(data))
    with pytest.raises(CorruptStateError, match="header, index or footer damaged"):
        write_diff(DiffSpec(a, b))
