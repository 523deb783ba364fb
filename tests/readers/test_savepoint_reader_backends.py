"""Contract tests: the same reader/writer/offline-library behaviour on local disk,
``file://``, ``memory://`` and ``s3://`` (a local moto server)."""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import fsspec
import pytest

from statekit.readers.inspection import inspect_snapshot
from statekit.readers.listing import list_checkpoints
from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.verification import verify_snapshot
from statekit.statefmt.entries import KeyedStateEntry
from statekit.statefmt.errors import (
    BadInputError,
    CorruptStateError,
    IncompleteCheckpointError,
    NotACheckpointError,
    PathNotFoundError,
)
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.disposal import dispose_snapshot
from statekit.writers.savepoint_writer import SavepointWriter

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"


def _load_make_golden() -> ModuleType:
    spec = importlib.util.spec_from_file_location("statekit_make_golden_backends", GOLDEN_DIR / "make_golden.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_golden = _load_make_golden()


@dataclass
class Backend:
    name: str
    root: str
    storage_options: dict[str, Any] | None

    def url(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    @property
    def fs(self) -> Any:
        io, _ = FileIO.for_path(self.root, self.storage_options)
        return io.fs

    def put(self, relative: str, data: bytes) -> None:
        io, path = FileIO.for_path(self.url(relative), self.storage_options)
        io.write_atomic(path, data)

    def read(self, relative: str) -> bytes:
        io, path = FileIO.for_path(self.url(relative), self.storage_options)
        return io.read_bytes(path)

    def exists(self, relative: str) -> bool:
        io, path = FileIO.for_path(self.url(relative), self.storage_options)
        return io.exists(path)


@pytest.fixture(params=["local", "file-url", "memory", pytest.param("s3", marks=pytest.mark.s3)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "local":
        yield Backend("local", str(tmp_path), None)
    elif request.param == "file-url":
        yield Backend("file-url", f"file://{tmp_path}", None)
    elif request.param == "memory":
        root = f"memory://statekit-contract-{uuid.uuid4().hex}"
        yield Backend("memory", root, None)
        fs = fsspec.filesystem("memory")
        if fs.exists(root):
            fs.rm(root, recursive=True)
    else:
        bucket = request.getfixturevalue("s3_bucket")
        yield Backend("s3", bucket, request.getfixturevalue("s3_server")["storage_options"])


class TestReaderWriterContract:
    def write_golden(self, backend: Backend, name: str = "savepoint-golden") -> str:
        url = backend.url(name)
        make_golden.write_all_kinds(url, storage_options=backend.storage_options)
        return url

    def test_round_trip_equals_the_golden_bytes(self, backend: Backend) -> None:
        self.write_golden(backend)
        golden = GOLDEN_DIR / "statekit-v1" / make_golden.ALL_KINDS
        for path in golden.rglob("*"):
            if path.is_file() and path.name != "README.md":
                assert backend.read(f"savepoint-golden/{path.relative_to(golden).as_posix()}") == path.read_bytes()

    def test_read_every_kind(self, backend: Backend) -> None:
        url = self.write_golden(backend)
        reader = SavepointReader.read(url, storage_options=backend.storage_options)
        assert [e.key for e in reader.read_keyed_state("counter", "count")] == ["bob", "alice", "carol"]
        assert list(reader.read_keyed_state("counter", "count", key_groups=[3])) == [
            KeyedStateEntry("carol", None, -1, None)]
        assert reader.read_list_state("source", "offsets") == [100, 200, 300]
        assert reader.read_union_state("source", "watermarks") == [1_699_999_995_000]
        assert reader.read_broadcast_state("source", "rules") == {"threshold": 10, "mode": "strict"}
        assert len(list(reader.read_raw_blocks("counter", "attrs"))) == 2
        # the _metadata file itself opens the snapshot too
        by_metadata = SavepointReader.read(url + "/_metadata", storage_options=backend.storage_options)
        assert by_metadata.metadata == reader.metadata

    def test_job_dir_means_latest_complete_checkpoint(self, backend: Backend) -> None:
        descriptor = StateDescriptor("v", StateKind.VALUE)
        for checkpoint, value in ((1, "one"), (2, "two")):
            SavepointWriter.new_savepoint().with_operator("op", {descriptor: [("k", value)]}).write(
                backend.url("job", f"chk-{checkpoint}"), storage_options=backend.storage_options)
        backend.put("job/chk-3/op/v/00000-of-00001.sks", b"partial")  # incomplete: never read
        reader = SavepointReader.read(backend.url("job"), storage_options=backend.storage_options)
        assert [e.value for e in reader.read_keyed_state("op", "v")] == ["two"]
        with pytest.raises(IncompleteCheckpointError, match="incomplete checkpoint: no _metadata"):
            SavepointReader.read(backend.url("job", "chk-3"), storage_options=backend.storage_options)

    def test_from_existing_savepoint_modifies_and_copies(self, backend: Backend) -> None:
        url = self.write_golden(backend)
        out = backend.url("modified")
        (SavepointWriter.from_existing_savepoint(url, storage_options=backend.storage_options)
         .remove_operator("source")
         .change_operator_identifier("counter", "counter-v2")
         .remove_state("counter-v2", "events")
         .write(out, storage_options=backend.storage_options, created_at_ms=1))
        reader = SavepointReader.read(out, storage_options=backend.storage_options)
        assert [op.uid for op in reader.operators] == ["counter-v2"]
        assert [d.name for d in reader.operator("counter-v2").states] == ["count", "attrs", "window-sum", "average"]
        assert [e.value for e in reader.read_keyed_state("counter-v2", "count")] == [7, 3, -1]
        assert next(f.path for f in reader.metadata.files()) == "counter-v2/count/00000-of-00002.sks"
        assert verify_snapshot(out, storage_options=backend.storage_options).ok

    def test_offline_library_functions(self, backend: Backend) -> None:
        url = self.write_golden(backend)
        report = verify_snapshot(url, storage_options=backend.storage_options)
        assert report.ok and report.files == 16
        inspection = inspect_snapshot(url, storage_options=backend.storage_options)
        assert [o.uid for o in inspection.operators] == ["counter", "source"] and inspection.entries == 20
        listing = list_checkpoints(backend.root, storage_options=backend.storage_options)
        assert [(c.status, c.kind, c.job_id) for c in listing.listings] == [
            ("complete", "savepoint", make_golden.JOB_ID)]
        plan = dispose_snapshot(url, dry_run=True, storage_options=backend.storage_options)
        assert len(plan.files) == 17 and not plan.disposed and backend.exists("savepoint-golden/_metadata")
        assert dispose_snapshot(url, storage_options=backend.storage_options).disposed
        assert not backend.exists("savepoint-golden")

    def test_damage_is_found(self, backend: Backend) -> None:
        url = self.write_golden(backend)
        relative = "savepoint-golden/counter/count/00001-of-00002.sks"
        data = bytearray(backend.read(relative))
        data[40] ^= 0xFF
        backend.put(relative, bytes(data))
        report = verify_snapshot(url, storage_options=backend.storage_options)
        assert not report.ok
        assert {(d.path.endswith("counter/count/00001-of-00002.sks"), d.key_group) for d in report.damage} == {
            (True, None), (True, 3)}
        reader = SavepointReader.read(url, storage_options=backend.storage_options)
        with pytest.raises(CorruptStateError, match="key group 3: block checksum mismatch") as info:
            list(reader.read_keyed_state("counter", "count"))
        assert info.value.key_group == 3 and "counter/count/00001-of-00002.sks" in str(info.value)

    def test_refusals(self, backend: Backend) -> None:
        options = backend.storage_options
        with pytest.raises(PathNotFoundError):
            SavepointReader.read(backend.url("missing"), storage_options=options)
        backend.put("plain/file.txt", b"x")
        with pytest.raises(NotACheckpointError, match="not a checkpoint or savepoint directory"):
            SavepointReader.read(backend.url("plain"), storage_options=options)
        with pytest.raises(NotACheckpointError, match="is a file"):
            SavepointReader.read(backend.url("plain", "file.txt"), storage_options=options)
        with pytest.raises(BadInputError, match="exists and is not empty"):
            SavepointWriter.new_savepoint().write(backend.url("plain"), storage_options=options)

    def test_failed_write_leaves_nothing(self, backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
        import statekit.writers.savepoint_writer as savepoint_writer

        calls = {"n": 0}
        original = savepoint_writer.write_keyed_file

        def failing(*args: Any, **kwargs: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == 4:
                raise OSError("disk full (injected)")
            return original(*args, **kwargs)

        monkeypatch.setattr(savepoint_writer, "write_keyed_file", failing)
        with pytest.raises(OSError, match="injected"):
            self.write_golden(backend, "failed")
        assert calls["n"] == 4
        assert not backend.exists("failed")
        io, root = FileIO.for_path(backend.root, backend.storage_options)
        assert io.walk_files(root) == []
        if io.is_local:
            assert list(Path(root).iterdir()) == []  # no staging directory either
