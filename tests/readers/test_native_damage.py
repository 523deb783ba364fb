"""Damaged files of native keyed state (RocksDB stores of incremental checkpoints and native
savepoints): ``verify`` names them (exit 1); every read, rescale and diff fails naming them
(exit 2) instead of returning stale or missing keys."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.readers.diff import DiffSpec
from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.snapshot import open_snapshot
from statekit.readers.verification import verify_snapshot
from statekit.statefmt.checksum import Crc32
from statekit.statefmt.errors import CorruptStateError
from statekit.statefmt.metadata import serialize_metadata
from statekit.statefmt.native_state import NativeFile
from statekit.writers.diff_output import write_diff
from statekit.writers.rescale import rescale_savepoint

pytest.importorskip("rocksdict")


def _copy(native_snapshots: Any, kind: str, tmp_path: Path) -> Path:
    """A copy of the checkpoint (with its job's shared/) or of the native savepoint."""
    if kind == "checkpoint":
        job = native_snapshots.checkpoint.parent
        shutil.copytree(job, tmp_path / job.name, symlinks=True)
        return tmp_path / job.name / native_snapshots.checkpoint.name
    shutil.copytree(native_snapshots.savepoint, tmp_path / native_snapshots.savepoint.name)
    return tmp_path / native_snapshots.savepoint.name


def _store_file(snapshot_dir: Path, *, sst: bool, shared: bool | None = None) -> tuple[NativeFile, Path]:
    snapshot = open_snapshot(str(snapshot_dir))
    file = next(f for f in snapshot.metadata.native_files()
                if f.name.endswith(".sst") == sst and (shared is None or f.shared == shared) and f.size > 100)
    return file, Path(snapshot.file_path(file.path))


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def _counts(path: Path) -> dict[Any, Any]:
    return {e.key: e.value for e in SavepointReader.read(str(path)).read_keyed_state("counter", "count")}


CASES = [("checkpoint", True, True), ("checkpoint", False, False), ("savepoint", True, False),
         ("savepoint", False, False)]


@pytest.mark.parametrize(("kind", "sst", "shared"), CASES,
                         ids=["checkpoint-shared-sst", "checkpoint-private-file", "savepoint-sst", "savepoint-file"])
def test_a_flipped_byte_in_a_store_file_is_named_by_verify_and_every_reader(
        native_snapshots: Any, tmp_path: Path, kind: str, sst: bool, shared: bool) -> None:
    snapshot = _copy(native_snapshots, kind, tmp_path)
    assert verify_snapshot(str(snapshot)).ok
    file, path = _store_file(snapshot, sst=sst, shared=shared)
    _flip(path, file.size // 2)
    shown = str(path.resolve()) if kind == "savepoint" else str(path)

    report = verify_snapshot(str(snapshot))
    (damage,) = report.damage
    assert Path(damage.path).resolve() == path.resolve() and "differs from the recorded" in damage.message
    runner = CliRunner()
    verified = runner.invoke(cli, ["verify", str(snapshot)])
    assert verified.exit_code == 1 and path.name in verified.output

    with pytest.raises(CorruptStateError, match="differs from the recorded") as failure:
        _counts(snapshot)
    assert path.name in str(failure.value) and "\n" not in str(failure.value)
    with pytest.raises(CorruptStateError, match=path.name):
        rescale_savepoint(str(snapshot), str(tmp_path / "rescaled"), parallelism=3)
    assert not (tmp_path / "rescaled").exists()
    with pytest.raises(CorruptStateError, match=path.name):
        write_diff(DiffSpec(str(snapshot), str(native_snapshots.canonical)))
    for args in (["inspect", str(snapshot)], ["rescale", str(snapshot), "-p", "3", "-o", str(tmp_path / "out")],
                 ["diff", str(snapshot), str(native_snapshots.canonical), "--engine", "local"],
                 ["modify", str(snapshot), "--remove-operator", "source", "-o", str(tmp_path / "out")]):
        result = runner.invoke(cli, args)
        assert result.exit_code == 2, (args, result.output)
        assert shown.rsplit("/", 1)[-1] in result.output, (args, result.output)
    assert not (tmp_path / "out").exists()


def test_a_missing_or_resized_shared_file_is_named(native_snapshots: Any, tmp_path: Path) -> None:
    snapshot = _copy(native_snapshots, "checkpoint", tmp_path)
    file, path = _store_file(snapshot, sst=True, shared=True)
    with open(path, "ab") as stream:
        stream.write(b"\0")
    (damage,) = verify_snapshot(str(snapshot)).damage
    assert damage.path == str(path) and f"differs from the {file.size} bytes recorded" in damage.message
    path.unlink()
    (damage,) = verify_snapshot(str(snapshot)).damage
    assert damage.path == str(path) and damage.message.startswith("missing")


def test_rocksdb_verifies_block_checksums_behind_a_consistent_metadata(native_snapshots: Any, tmp_path: Path) -> None:
    """A store file damaged and its _metadata entry rewritten to match it (so the file's CRC-32
    passes): RocksDB's own block checksums, verified on every read, still refuse it."""
    snapshot_dir = _copy(native_snapshots, "savepoint", tmp_path)
    file, path = _store_file(snapshot_dir, sst=True)
    _flip(path, 10)  # inside the first data block
    running = Crc32()
    running.update(path.read_bytes())
    snapshot = open_snapshot(str(snapshot_dir))
    md = snapshot.metadata
    operators = tuple(replace(op, subtasks=tuple(
        replace(st, native=replace(st.native, files=tuple(
            replace(f, checksum=running.checksum) if f.path == file.path else f for f in st.native.files)))
        if st.native is not None else st for st in op.subtasks)) for op in md.operators)
    (snapshot_dir / "_metadata").write_bytes(serialize_metadata(replace(md, operators=operators)))
    assert verify_snapshot(str(snapshot_dir)).ok  # the file is the one _metadata describes
    with pytest.raises(CorruptStateError, match="block checksum mismatch"):
        _counts(snapshot_dir)


def test_intact_native_snapshots_verify_and_read_like_the_canonical_savepoint(native_snapshots: Any) -> None:
    expected = _counts(native_snapshots.canonical)
    for snapshot in (native_snapshots.checkpoint, native_snapshots.savepoint):
        report = verify_snapshot(str(snapshot))
        natives = {f.path for f in open_snapshot(str(snapshot)).metadata.native_files()}
        assert report.ok and report.files >= len(natives) > 0
        assert _counts(snapshot) == expected
