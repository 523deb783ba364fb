"""LocalDisk answers as fsspec's LocalFileSystem does for every operation FileIO uses, and
local paths no longer import fsspec."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fsspec.implementations.local import LocalFileSystem

from statekit.statefmt.fileio import FileIO
from statekit.statefmt.local_disk import LocalDisk

COMPARED = ("name", "size", "type", "islink", "mode", "mtime")


def tree(root: Path) -> Path:
    """Files, nested and empty directories, and symlinks to a file, a directory and nothing."""
    (root / "a" / "b").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "top.bin").write_bytes(b"x" * 10)
    (root / "a" / "one").write_bytes(b"1" * 3)
    (root / "a" / "b" / "two").write_bytes(b"")
    (root / "link-file").symlink_to(root / "top.bin")
    (root / "link-dir").symlink_to(root / "a")
    (root / "dangling").symlink_to(root / "missing")
    os.mkfifo(root / "fifo")
    return root


def same(info: dict[str, Any]) -> dict[str, Any]:
    return {k: info.get(k) for k in COMPARED}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tree(tmp_path / "t")


PATHS = ["", "top.bin", "a", "a/b", "a/b/two", "empty", "link-file", "link-dir", "fifo"]


@pytest.mark.parametrize("relative", PATHS)
def test_info_and_predicates_equal_fsspec(root: Path, relative: str) -> None:
    path = str(root / relative) if relative else str(root)
    ours, theirs = LocalDisk(), LocalFileSystem()
    assert same(ours.info(path)) == same(theirs.info(path))
    for name in ("exists", "isdir", "isfile"):
        assert getattr(ours, name)(path) == getattr(theirs, name)(path), name
    assert ours.size(path) == theirs.size(path)


@pytest.mark.parametrize("relative", ["", "a", "top.bin", "link-dir", "empty"])
def test_ls_and_find_equal_fsspec(root: Path, relative: str) -> None:
    path = str(root / relative) if relative else str(root)
    ours, theirs = LocalDisk(), LocalFileSystem()
    assert (sorted(map(same, ours.ls(path)), key=lambda i: i["name"])
            == sorted(map(same, theirs.ls(path, detail=True)), key=lambda i: i["name"]))
    found, expected = ours.find(path), theirs.find(path, detail=True)
    assert list(found) == list(expected)  # the same names, in the same (sorted) order
    assert {n: same(i) for n, i in found.items()} == {n: same(i) for n, i in expected.items()}


def test_missing_paths_fail_as_in_fsspec(root: Path) -> None:
    missing = str(root / "nope")
    ours, theirs = LocalDisk(), LocalFileSystem()
    assert not ours.exists(missing) and not ours.exists(str(root / "dangling"))
    assert ours.exists(str(root / "dangling")) == theirs.exists(str(root / "dangling"))
    for call in (lambda fs: fs.info(missing), lambda fs: fs.ls(missing), lambda fs: fs.rm_file(missing)):
        with pytest.raises(FileNotFoundError):
            call(ours)
        with pytest.raises(FileNotFoundError):
            call(theirs)
    assert ours.find(missing) == theirs.find(missing, detail=True) == {}


def test_rm_removes_files_and_whole_directories_only_when_recursive(root: Path) -> None:
    disk = LocalDisk()
    with pytest.raises(ValueError, match="recursive=True"):
        disk.rm(str(root / "a"))
    disk.rm(str(root / "link-dir"))  # a symlink to a directory: the link goes, not its target
    assert not (root / "link-dir").exists() and (root / "a" / "one").exists()
    disk.rm(str(root / "a"), recursive=True)
    assert not (root / "a").exists()
    disk.rm(str(root / "top.bin"))
    assert not (root / "top.bin").exists()
    disk.makedirs(str(root / "x" / "y"))
    with pytest.raises(FileExistsError):
        disk.makedirs(str(root / "x" / "y"))
    disk.makedirs(str(root / "x" / "y"), exist_ok=True)


@pytest.mark.parametrize("url", ["rel/dir/", "~/somewhere", "./x/../y", "/abs/p//"])
def test_plain_local_paths_resolve_as_fsspec_resolved_them(url: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    import fsspec

    io, path = FileIO.for_path(url)
    assert isinstance(io.fs, LocalDisk) and io.is_local and io.protocol == "file"
    _, theirs = fsspec.core.url_to_fs(url)
    assert path == (os.path.abspath(theirs).rstrip("/") or "/")


@pytest.mark.parametrize("url", ["file:///tmp/x", "memory://bucket/x", "local:///tmp/y"])
def test_urls_still_go_through_fsspec(url: str) -> None:
    io, _ = FileIO.for_path(url)
    assert not isinstance(io.fs, LocalDisk)
    assert io.is_local == (not url.startswith("memory"))


def test_local_options_still_go_through_fsspec(tmp_path: Path) -> None:
    io, _ = FileIO.for_path(str(tmp_path), {"auto_mkdir": True})
    assert isinstance(io.fs, LocalFileSystem) and io.is_local


def test_a_command_on_local_paths_does_not_import_fsspec(tmp_path: Path) -> None:
    """``statekit bootstrap`` then ``inspect`` and ``verify`` of the result, in fresh interpreters."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(f'{{"key": "k{i}", "value": {i}}}\n' for i in range(50)))
    out = tmp_path / "sp"
    script = (
        "import sys\n"
        "from statekit.cli.main import cli\n"
        "try:\n"
        "    cli(sys.argv[1:], prog_name='statekit')\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "assert 'fsspec' not in sys.modules, 'fsspec imported'\n"
        "assert 'asyncio' not in sys.modules, 'asyncio imported'\n"
    )
    commands = [
        ["bootstrap", "--input", str(rows), "-o", str(out), "--uid", "op", "--state", "s", "--key-column", "key",
         "--value-column", "value"],
        ["inspect", str(out)],
        ["verify", str(out)],
    ]
    for argv in commands:
        done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (argv, done.stderr[-2000:])
