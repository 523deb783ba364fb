"""The canonical view of a native (incremental RocksDB) checkpoint: read, inspect, diff and
rescale it as if it were the canonical savepoint of the same state."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from statekit.readers.diff import DiffSpec
from statekit.readers.inspection import inspect_snapshot
from statekit.readers.native_view import NativeView, canonical_view
from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.snapshot import open_snapshot
from statekit.statefmt.errors import CorruptStateError
from statekit.statefmt.json_contract import json_data
from statekit.statefmt.metadata import SnapshotFormat
from statekit.writers.diff_output import write_diff
from statekit.writers.rescale import rescale_savepoint

pytest.importorskip("rocksdict")

ROOT = Path(__file__).resolve().parents[2]
WORDS = [f"word{chr(97 + i)}{chr(97 + j)}" for i in range(26) for j in range(8)]


def _launch(*args: str, home: Path, parallelism: int = 2, backend: str = "rocksdb") -> None:
    command = [sys.executable, "-m", "statekit.cli.main", "run", "-p", str(parallelism), "--state-backend", backend,
               *args]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "STATEKIT_HOME": str(home)})
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An incremental RocksDB checkpoint of examples/wordcount.py and the canonical savepoint
    of the same state (the job restored from the checkpoint, with no input left to read)."""
    base = tmp_path_factory.mktemp("native")
    texts = base / "in"
    texts.mkdir()
    for f in range(3):
        lines = (" ".join(WORDS[(f * 7 + i * j) % len(WORDS)] for j in range(12)) for i in range(3000))
        (texts / f"t{f}.txt").write_text("\n".join(lines), encoding="utf-8")
    wordcount = str(ROOT / "examples" / "wordcount.py")
    _launch("--checkpoint-dir", str(base / "chk"), "--checkpoint-interval", "50ms", "--incremental",
            "--externalized-cleanup", "retain", wordcount, "--input", str(texts), "--output", str(base / "out1"), home=base / "home")
    (job_dir,) = (base / "chk").iterdir()
    checkpoint = max(job_dir.glob("chk-*"), key=lambda p: int(p.name[4:]))
    _launch("-s", str(checkpoint), "--savepoint-on-finish", str(base / "sp"), wordcount,
            "--input", str(texts), "--output", str(base / "out2"), home=base / "home")
    (savepoint,) = (base / "sp").iterdir()
    return {"checkpoint": str(checkpoint), "savepoint": str(savepoint), "base": str(base), "texts": str(texts)}


def _counts(reader: SavepointReader) -> dict[Any, Any]:
    return {e.key: e.value for e in reader.read_keyed_state("counter", "count")}


def test_the_checkpoint_is_native_and_incremental(snapshots: dict[str, str]) -> None:
    metadata = open_snapshot(snapshots["checkpoint"]).metadata
    assert metadata.format is SnapshotFormat.NATIVE
    assert any(f.shared for f in metadata.native_files()), "no SST file in the job's shared/"


def test_read_keyed_state_equals_the_canonical_savepoint(snapshots: dict[str, str], private_temp: Path) -> None:
    native = SavepointReader.read(snapshots["checkpoint"])
    expected = _counts(SavepointReader.read(snapshots["savepoint"]))
    assert len(expected) > 100
    assert _counts(native) == expected
    view = native.canonical().snapshot
    assert isinstance(view, NativeView) and view.url == native.path
    assert view.metadata.format is SnapshotFormat.CANONICAL
    assert list(private_temp.iterdir()), "the view keeps its files while it is open"
    view.close()
    assert list(private_temp.iterdir()) == []


def test_inspect_shows_the_sizes_and_entries_of_the_native_state(snapshots: dict[str, str]) -> None:
    inspection = inspect_snapshot(snapshots["checkpoint"])
    assert inspection.format == "native"
    counter = next(o for o in inspection.operators if o.uid == "counter")
    count = next(s for s in counter.states if s.name == "count")
    expected = len(_counts(SavepointReader.read(snapshots["savepoint"])))
    assert count.entries == expected and count.bytes > 0
    assert all(p["bytes"] > 0 for p in count.per_subtask)


def test_diff_against_the_canonical_savepoint_is_equal(snapshots: dict[str, str]) -> None:
    result = write_diff(DiffSpec(snapshots["checkpoint"], snapshots["savepoint"], operator="counter"))
    assert result.equal, json_data(result)
    (state,) = result.states
    assert state.unchanged > 100 and state.changed == state.only_in_a == state.only_in_b == 0


def test_rescale_gives_a_canonical_savepoint_of_the_same_entries(snapshots: dict[str, str], tmp_path: Path) -> None:
    output = tmp_path / "rescaled"
    rescale_savepoint(snapshots["checkpoint"], str(output), parallelism=3)
    rescaled = SavepointReader.read(str(output))
    assert rescaled.metadata.format is SnapshotFormat.CANONICAL
    assert rescaled.operator("counter").parallelism == 3
    assert _counts(rescaled) == _counts(SavepointReader.read(snapshots["savepoint"]))


def test_a_damaged_shared_file_fails_and_leaves_no_scratch(snapshots: dict[str, str], tmp_path: Path,
                                                           private_temp: Path) -> None:
    job = Path(snapshots["checkpoint"]).parent
    copy = tmp_path / "job"
    shutil.copytree(job, copy, symlinks=True)
    snapshot = open_snapshot(str(copy / Path(snapshots["checkpoint"]).name))
    shared = next(f for f in snapshot.metadata.native_files() if f.shared)
    with open(snapshot.file_path(shared.path), "ab") as stream:
        stream.write(b"x")
    with pytest.raises(CorruptStateError, match="size"):
        canonical_view(snapshot)
    assert list(private_temp.iterdir()) == []
    assert os.path.getsize(snapshot.file_path(shared.path)) == shared.size + 1  # the snapshot was not touched


@pytest.mark.spark
def test_export_reads_the_native_state(snapshots: dict[str, str], tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    import pyarrow.dataset as ds
    from click.testing import CliRunner

    from statekit.cli.main import cli

    out = tmp_path / "export"
    result = CliRunner().invoke(cli, ["export", snapshots["checkpoint"], "-o", str(out), "--operator", "counter",
                                      "--state", "count", "--master", "local[1]", "--json"])
    assert result.exit_code == 0, result.output
    table = ds.dataset(str(out / "operator_uid=counter" / "state_name=count"), format="parquet").to_table()
    exported = dict(zip(table.column("key").to_pylist(), table.column("value").to_pylist()))
    assert exported == _counts(SavepointReader.read(snapshots["savepoint"]))


def test_a_hashmap_job_restores_the_native_checkpoint_at_a_new_parallelism(snapshots: dict[str, str],
                                                                          tmp_path: Path) -> None:
    _launch("-s", snapshots["checkpoint"], "--savepoint-on-finish", str(tmp_path / "sp"),
            str(ROOT / "examples" / "wordcount.py"), "--input", snapshots["texts"], "--output", str(tmp_path / "out"),
            home=tmp_path / "home", parallelism=3, backend="hashmap")
    (savepoint,) = (tmp_path / "sp").iterdir()
    restored = SavepointReader.read(str(savepoint))
    assert restored.operator("counter").parallelism == 3
    assert _counts(restored) == _counts(SavepointReader.read(snapshots["savepoint"]))


def _ttl_savepoints(tmp_path: Path) -> tuple[str, str]:
    """(native, canonical) savepoints of one RocksDB backend holding TTL value, list and map state."""
    from statekit.runtime.api.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
    from statekit.runtime.api.ttl import ManualClock, StateTtlConfig
    from statekit.runtime.checkpoint.storage import SnapshotOutput
    from statekit.runtime.state.backend import SnapshotRequest, SubtaskScope
    from statekit.runtime.state.registry import create_keyed_backend
    from statekit.statefmt.fileio import FileIO
    from statekit.statefmt.keygroups import KeyGroupRange
    from statekit.statefmt.metadata import CheckpointMetadata, OperatorMetadata, SnapshotKind, SubtaskState
    from statekit.writers.state_writer import commit_metadata

    clock = ManualClock(1_000_000)
    backend = create_keyed_backend("rocksdb", SubtaskScope("op", 0, 1, 128, "msgpack", KeyGroupRange(0, 127)))
    backend.ttl_clock = clock
    try:
        handles = []
        for descriptor in (ValueStateDescriptor("v", "int"), ListStateDescriptor("l", "int"),
                           MapStateDescriptor("m", "int")):
            descriptor.enable_time_to_live(StateTtlConfig.new_builder(100).build())
            handles.append(backend.get_state(descriptor))
        value, listed, mapped = handles
        for phase in (0, 1):
            for i in range(20):
                backend.current_key = f"k{i}"
                if i % 2 == phase:
                    value.update(i)  # type: ignore[attr-defined]
                    mapped.put("u", i)  # type: ignore[attr-defined]
                listed.add(phase)  # type: ignore[attr-defined]
            clock.advance(50)
        paths = []
        for fmt in (SnapshotFormat.NATIVE, SnapshotFormat.CANONICAL):
            io, path = FileIO.for_path(str(tmp_path / fmt.value))
            location = SnapshotOutput(io, path)
            if fmt is SnapshotFormat.NATIVE:
                native = backend.native_snapshot(SnapshotRequest(1, native=True))
                assert native is not None
                subtask = SubtaskState(0, KeyGroupRange(0, 127), native=native.write_native(location))
            else:
                native = backend.snapshot()  # type: ignore[assignment]
                subtask = SubtaskState(0, KeyGroupRange(0, 127), tuple(native.write(location)))  # type: ignore[attr-defined]
            native.release()
            op = OperatorMetadata("op", "op", 1, 128, "msgpack", tuple(backend.descriptors()), (subtask,))
            commit_metadata(io, path, CheckpointMetadata("ab" * 16, 1, SnapshotKind.SAVEPOINT, fmt,
                                                         CheckpointMetadata.now_ms(), (op,)))
            paths.append(path)
        return paths[0], paths[1]
    finally:
        backend.close()


def test_ttl_states_read_with_their_expiry(tmp_path: Path) -> None:
    native, canonical = _ttl_savepoints(tmp_path)
    assert open_snapshot(native).metadata.format is SnapshotFormat.NATIVE
    for state in ("v", "l", "m"):
        got = sorted(map(tuple, SavepointReader.read(native).read_keyed_state("op", state)))
        expected = sorted(map(tuple, SavepointReader.read(canonical).read_keyed_state("op", state)))
        assert got == expected and len(got) == 20 and all(e[-1] is not None for e in got), state
