"""FileIO: atomic publication, URLs, and typed errors over fsspec."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest

from statekit.statefmt.errors import BadInputError, PathNotFoundError
from statekit.statefmt.fileio import FileIO


@pytest.fixture(params=["local", "memory"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "local":
        yield str(tmp_path)
        return
    url = f"memory://statekit-fileio-{uuid.uuid4().hex}"
    yield url
    fs = fsspec.filesystem("memory")
    if fs.exists(url):
        fs.rm(url, recursive=True)


def test_write_atomic_and_read(root: str) -> None:
    io, path = FileIO.for_path(f"{root}/a/b/file")
    io.write_atomic(path, b"one")
    io.write_atomic(path, b"two")
    assert io.read_bytes(path) == b"two" and io.size(path) == 3 and io.isfile(path)
    assert [f.name for f in io.list_dir(io.join(*path.rsplit("/", 1)[:1]))] == ["file"]


def test_open_output_appears_only_on_clean_exit(root: str) -> None:
    io, path = FileIO.for_path(f"{root}/out.sks")
    with pytest.raises(RuntimeError), io.open_output(path) as out:
        out.write(b"half")
        raise RuntimeError("crash")
    assert not io.exists(path)
    if io.is_local:
        assert os.listdir(os.path.dirname(path)) == []  # no temp file left behind
    with io.open_output(path) as out:
        out.write(b"whole")
    assert io.read_bytes(path) == b"whole"


def test_open_scratch_writes_in_place_for_its_owner_to_remove(root: str) -> None:
    io, directory = FileIO.for_path(f"{root}/staging")
    path = io.join(directory, "000001")
    with io.open_scratch(path) as out:  # the directory is created; no temporary name
        out.write(b"fragment")
    assert io.read_bytes(path) == b"fragment"
    assert [f.name for f in io.list_dir(directory)] == ["000001"]
    io.rm(directory, recursive=True)
    assert not io.exists(directory)


def test_local_write_atomic_leaves_no_temp_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    io, path = FileIO.for_path(str(tmp_path / "f"))

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("rename failed (injected)")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="injected"):
        io.write_atomic(path, b"data")
    assert os.listdir(tmp_path) == []


def test_typed_errors(tmp_path: Path) -> None:
    io, path = FileIO.for_path(str(tmp_path / "missing"))
    with pytest.raises(PathNotFoundError, match="missing: no such file"):
        io.read_bytes(path)
    with pytest.raises(PathNotFoundError):
        io.open_input(path)
    with pytest.raises(PathNotFoundError, match="no such directory"):
        io.list_dir(path)
    io, path = FileIO.for_path(str(tmp_path))
    with pytest.raises(BadInputError, match="is a directory, expected a file"):
        io.read_bytes(path)
    with pytest.raises(BadInputError, match="empty path"):
        FileIO.for_path("")
    with pytest.raises(BadInputError, match="nosuchscheme://x: cannot open filesystem"):
        FileIO.for_path("nosuchscheme://x")


def test_urls(tmp_path: Path) -> None:
    io, path = FileIO.for_path(f"file://{tmp_path}/x/")
    assert io.is_local and path == f"{tmp_path}/x" and io.url(path) == path
    _, relative = FileIO.for_path("relative/dir")
    assert relative == os.path.abspath("relative/dir")
    memory, mpath = FileIO.for_path("memory://bucket/key")
    assert not memory.is_local and memory.url(mpath).startswith("memory://") and mpath.endswith("bucket/key")


def test_copy_between_filesystems(tmp_path: Path) -> None:
    local, src = FileIO.for_path(str(tmp_path / "src"))
    local.write_atomic(src, b"x" * 1000)
    url = f"memory://statekit-copy-{uuid.uuid4().hex}"
    memory, dst = FileIO.for_path(f"{url}/dst")
    try:
        memory.copy_file(local, src, dst, chunk_size=64)
        assert memory.read_bytes(dst) == b"x" * 1000 and memory.du(memory.join(*dst.rsplit("/", 1)[:1])) == 1000
    finally:
        fsspec.filesystem("memory").rm(url, recursive=True)


@pytest.mark.s3
def test_s3_open_output_and_write_atomic(s3_bucket: str, s3_server: dict[str, object]) -> None:
    options = s3_server["storage_options"]
    assert isinstance(options, dict)
    io, path = FileIO.for_path(f"{s3_bucket}/dir/out.sks", options)
    with pytest.raises(RuntimeError), io.open_output(path) as out:
        out.write(b"x" * (6 << 20))  # beyond one multipart chunk
        raise RuntimeError("crash")
    assert not io.exists(path)
    with io.open_output(path) as out:
        out.write(b"whole")
    io.write_atomic(io.join(s3_bucket.removeprefix("s3://"), "dir", "_metadata"), b"meta")
    assert io.read_bytes(path) == b"whole" and io.url(path) == f"{s3_bucket}/dir/out.sks"
    assert sorted(f.name for f in io.list_dir(io.join(s3_bucket.removeprefix("s3://"), "dir"))) == ["_metadata", "out.sks"]
