"""Crafted snapshots are data: special files, links out of the snapshot, oversized or lying
metadata are refused with exit 2 (or reported by verify with exit 1) — never a hang, an
unbounded read, a traceback, or an output that fails verify.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.verification import verify_snapshot
from statekit.statefmt import layout
from statekit.statefmt.errors import BadInputError, CorruptStateError, MetadataError, UnsafePathError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

COUNT = StateDescriptor("count", StateKind.VALUE, value_type="int")
OFFSETS = StateDescriptor("offsets", StateKind.OPERATOR_LIST, value_type="int")
COMMANDS = (["inspect"], ["verify"], ["rescale", "-p", "3", "-o", "{out}"], ["diff", "{path}", "{base}"])


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("untrusted") / "base"
    (SavepointWriter.new_savepoint(max_parallelism=128)
     .with_operator("counter", {COUNT: [(f"k{i}", i) for i in range(300)]}, parallelism=2)
     .with_operator("src", {OFFSETS: [1, 2, 3]}, parallelism=2)
     .write(str(path)))
    return path


def _body(path: Path) -> dict[str, Any]:
    data = (path / "_metadata").read_bytes()
    _, _, length = layout.METADATA_HEADER.unpack_from(data)
    body: dict[str, Any] = json.loads(data[layout.METADATA_HEADER.size:layout.METADATA_HEADER.size + length])
    return body


def _wrap(path: Path, body: dict[str, Any] | bytes) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    header = layout.METADATA_HEADER.pack(layout.METADATA_MAGIC, layout.METADATA_VERSION, len(raw))
    (path / "_metadata").write_bytes(header + raw + struct.pack("<I", zlib.crc32(raw)))


def _variant(base: Path, tmp_path: Path, change: Callable[[Path, dict[str, Any]], bool | None]) -> Path:
    path = tmp_path / "sp"
    shutil.copytree(base, path)
    body = _body(path)
    if change(path, body) is not False:
        _wrap(path, body)
    return path


def _first_keyed(body: dict[str, Any]) -> dict[str, Any]:
    file: dict[str, Any] = body["operators"][0]["subtasks"][0]["files"][0]
    return file


def _run(args: list[str], path: Path, base: Path, tmp_path: Path) -> tuple[int, str]:
    """The command in a child process with a time limit (a hang fails the test, not the run)."""
    argv = [a.format(out=tmp_path / "out", path=path, base=base) for a in args]
    if args[0] != "diff":
        argv.insert(1, str(path))
    proc = subprocess.run([sys.executable, "-m", "statekit.cli.main", *argv], capture_output=True,
                          text=True, timeout=60)
    return proc.returncode, proc.stderr


def _link_to_dev_zero(path: Path, body: dict[str, Any]) -> bool:
    target = path / _first_keyed(body)["path"]
    target.unlink()
    target.symlink_to("/dev/zero")
    return False


def _fifo(path: Path, body: dict[str, Any]) -> bool:
    target = path / _first_keyed(body)["path"]
    target.unlink()
    os.mkfifo(target)
    return False


def _link_outside(path: Path, body: dict[str, Any]) -> bool:
    target = path / _first_keyed(body)["path"]
    outside = path.parent / "outside.sks"
    shutil.move(str(target), outside)
    target.symlink_to(outside)
    return False


@pytest.mark.parametrize("change,cause", [
    (_link_to_dev_zero, "leads outside the snapshot directory"),
    (_fifo, "not a regular file (a FIFO)"),
    (_link_outside, "leads outside the snapshot directory"),
], ids=["dev-zero", "fifo", "link-outside"])
def test_special_state_files_are_refused_by_every_command(base: Path, tmp_path: Path, change: Any, cause: str) -> None:
    path = _variant(base, tmp_path, change)
    for args in COMMANDS:
        code, err = _run(list(args), path, base, tmp_path)
        if args == ["verify"]:
            assert code == 1, (args, err)
        else:
            assert code == 2 and cause in err and err.count("\n") == 1, (args, code, err)
        assert not (tmp_path / "out").exists()


def test_verify_names_the_special_file(base: Path, tmp_path: Path) -> None:
    path = _variant(base, tmp_path, _fifo)
    report = verify_snapshot(str(path))
    assert [d.message for d in report.damage] == ["not a regular file (a FIFO); refusing to read it"]
    assert report.damage[0].path.endswith("counter/count/00000-of-00002.sks")


@pytest.mark.parametrize("make", ["dev-zero", "directory", "fifo"])
def test_a_special_metadata_file_is_refused(base: Path, tmp_path: Path, make: str) -> None:
    path = tmp_path / "savepoint-x"
    shutil.copytree(base, path)
    meta = path / "_metadata"
    meta.unlink()
    {"dev-zero": lambda: meta.symlink_to("/dev/zero"), "directory": meta.mkdir,
     "fifo": lambda: os.mkfifo(meta)}[make]()
    for args in (["inspect"], ["verify"], ["dispose", "--dry-run"], ["checkpoints", "list"]):
        target = path.parent if args[0] == "checkpoints" else path
        proc = subprocess.run([sys.executable, "-m", "statekit.cli.main", *args, str(target)],
                              capture_output=True, text=True, timeout=60)
        if args[0] == "checkpoints":
            assert proc.returncode == 0 and ("damaged" in proc.stdout or "incomplete" in proc.stdout), proc
        else:
            assert proc.returncode == 2 and "_metadata" in proc.stderr and proc.stderr.count("\n") == 1, (args, proc)


def test_a_huge_sparse_metadata_is_refused_from_its_size(base: Path, tmp_path: Path) -> None:
    path = tmp_path / "sp"
    shutil.copytree(base, path)
    with open(path / "_metadata", "r+b") as f:
        f.truncate(4 << 30)
    code, err = _run(["inspect"], path, base, tmp_path)
    assert code == 2 and "4294967296 bytes is more than the 268435456 bytes" in err


def test_read_bytes_checks_the_limit_before_reading(tmp_path: Path) -> None:
    io, path = FileIO.for_path(str(tmp_path / "f"))
    Path(path).write_bytes(b"x" * 100)
    assert io.read_bytes(path, limit=100) == b"x" * 100
    with pytest.raises(BadInputError, match="100 bytes is more than the 99 bytes"):
        io.read_bytes(path, limit=99)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(BadInputError, match="a FIFO"):
        io.open_input(str(tmp_path / "fifo"))  # would block without the type check
    with pytest.raises(BadInputError, match="is a directory"):
        io.open_input(str(tmp_path))


def test_check_inside_resolves_links(tmp_path: Path) -> None:
    io, root = FileIO.for_path(str(tmp_path / "root"))
    os.makedirs(root)
    (tmp_path / "root" / "inner").write_bytes(b"")
    (tmp_path / "root" / "in-link").symlink_to(tmp_path / "root" / "inner")
    (tmp_path / "root" / "out-link").symlink_to(tmp_path)
    assert io.check_inside(f"{root}/in-link", root) == f"{root}/in-link"
    with pytest.raises(UnsafePathError, match="leads outside"):
        io.check_inside(f"{root}/out-link/x", root)


def test_keyed_state_pointing_at_an_operator_file_is_refused_by_rescale_and_diff(base: Path, tmp_path: Path) -> None:
    def swap(path: Path, body: dict[str, Any]) -> None:
        keyed = _first_keyed(body)
        operator = body["operators"][1]["subtasks"][0]["files"][0]
        shutil.copy(path / operator["path"], path / keyed["path"])
        keyed.update(size=operator["size"], checksum=operator["checksum"], entries=operator["entries"])

    path = _variant(base, tmp_path, swap)
    assert not verify_snapshot(str(path)).ok
    for args in (["rescale", "-p", "3", "-o", "{out}"], ["rescale", "-p", "2", "--max-parallelism", "256", "-o", "{out}"],
                 ["diff", "{path}", "{base}"]):
        code, err = _run(list(args), path, base, tmp_path)
        assert code == 2 and "not a keyed state file (file kind 2): another state's file" in err, (args, err)
        assert not (tmp_path / "out").exists()


def test_recorded_entry_counts_are_checked_not_trusted(base: Path, tmp_path: Path) -> None:
    def zero(path: Path, body: dict[str, Any]) -> None:
        for subtask in body["operators"][0]["subtasks"]:
            for file in subtask["files"]:
                file["entries"] = 0

    path = _variant(base, tmp_path, zero)
    report = verify_snapshot(str(path))
    assert not report.ok and all("_metadata records 0" in d.message for d in report.damage)
    assert len(report.damage) == 2
    with pytest.raises(CorruptStateError, match="_metadata records 0"):
        list(SavepointReader.read(str(path)).read_keyed_state("counter", "count"))
    code, err = _run(["diff", "{path}", "{base}"], path, base, tmp_path)
    assert code == 2 and "_metadata records 0" in err


def test_only_in_one_side_counts_come_from_the_files(base: Path, tmp_path: Path) -> None:
    def lie(path: Path, body: dict[str, Any]) -> None:
        body["operators"][0]["subtasks"][0]["files"][0]["entries"] += 5

    path = _variant(base, tmp_path, lie)
    other = tmp_path / "empty"
    SavepointWriter.new_savepoint(max_parallelism=128).with_operator("src", {OFFSETS: [1, 2, 3]}, parallelism=2).write(str(other))
    result = CliRunner().invoke(cli, ["diff", str(path), str(other)])
    assert result.exit_code == 2 and "_metadata records" in result.output


@pytest.mark.parametrize("mutate,message", [
    (lambda body: body.update(created_at_ms=2 ** 63), "created_at_ms does not fit in 64 bits"),
    (lambda body: body.update(created_at_ms=-1), "created_at_ms -1 is not a time between 1970 and 9999"),
    (lambda body: body.update(created_at_ms=10 ** 15), "is not a time between 1970 and 9999"),
    (lambda body: _first_keyed(body).update(size=2 ** 64), "size does not fit in 64 bits"),
    (lambda body: body["operators"][0]["subtasks"][1]["files"].__setitem__(0, dict(_first_keyed(body))),
     "is named twice"),
], ids=["ts-2^63", "ts-negative", "ts-year-33658", "size-2^64", "file-twice"])
def test_out_of_range_metadata_is_bad_input(base: Path, tmp_path: Path, mutate: Any, message: str) -> None:
    path = _variant(base, tmp_path, lambda _p, body: mutate(body))
    for args in (["inspect"], ["verify"], ["--json", "inspect"]):
        result = CliRunner().invoke(cli, [*args, str(path)])
        assert result.exit_code == 2 and message in result.output, (args, result.output)


def test_deeply_nested_metadata_is_bad_input_and_one_damaged_row(base: Path, tmp_path: Path) -> None:
    folder = tmp_path / "dir"
    shutil.copytree(base, folder / "savepoint-good")
    nested = folder / "savepoint-nested"
    shutil.copytree(base, nested)
    body = json.dumps(_body(nested)).encode().replace(b'"job_name": ""', b'"job_name": ' + b"[" * 100_000 + b"]" * 100_000)
    _wrap(nested, body)
    with pytest.raises(MetadataError, match="nests too deeply"):
        SavepointReader.read(str(nested))
    result = CliRunner().invoke(cli, ["--json", "checkpoints", "list", str(folder)])
    assert result.exit_code == 0, result.output
    rows = {Path(r["path"]).name: r["status"] for r in json.loads(result.output)["snapshots"]}
    assert rows == {"savepoint-good": "complete", "savepoint-nested": "damaged"}


def test_a_savepoint_may_not_name_the_shared_directory(base: Path, tmp_path: Path) -> None:
    def native(path: Path, body: dict[str, Any]) -> None:
        body["format"] = "native"
        _first_keyed(body)["path"] = "../shared/x.sks"

    path = _variant(base, tmp_path, native)
    result = CliRunner().invoke(cli, ["inspect", str(path)])
    assert result.exit_code == 2 and "unsafe file path '../shared/x.sks'" in result.output


def test_a_long_path_and_a_directory_path_are_bad_input(base: Path, tmp_path: Path) -> None:
    for path in (str(tmp_path / ("a" * 5000)), str(base / "counter"), str(base / "counter" / "count")):
        for args in (["inspect"], ["verify"], ["dispose", "--dry-run"], ["rescale", "-p", "2", "-o", str(tmp_path / "o")]):
            result = CliRunner().invoke(cli, [*args, path])
            assert result.exit_code == 2, (args, path, result.output)
            assert "Traceback" not in result.output and result.output.count("\n") == 1


def test_a_full_disk_during_rescale_is_exit_2_and_leaves_no_output(base: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from statekit.writers import state_writer

    original = state_writer.write_block_runs
    calls = []

    def full(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out"))
        return original(*args, **kwargs)

    monkeypatch.setattr("statekit.writers.rescale.write_block_runs", full)
    result = CliRunner().invoke(cli, ["rescale", str(base), "-p", "3", "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"statekit: error: {tmp_path / 'out'}: No space left on device"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_inspect_of_many_operators_prints_three_tables_not_two_per_operator(tmp_path: Path) -> None:
    """Text inspect of 10,000 operators took 36 s (two rich tables per operator, ~2 ms a row);
    above PER_OPERATOR_TABLES operators it prints one table each of operators, states and
    subtasks, in plain aligned text above RICH_TABLE_ROWS rows."""
    from statekit.cli.renderers.markup import RICH_TABLE_ROWS
    from statekit.cli.renderers.snapshots import PER_OPERATOR_TABLES

    writer = SavepointWriter.new_savepoint(max_parallelism=128)
    operators = RICH_TABLE_ROWS + 1
    for i in range(operators):
        writer = writer.with_operator(f"op-{i}", {COUNT: [(f"k{i}", i)]}, parallelism=1)
    writer.write(str(tmp_path / "sp"))
    assert operators > PER_OPERATOR_TABLES
    result = CliRunner().invoke(cli, ["inspect", "--no-skew", str(tmp_path / "sp")])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [line for line in lines if line in ("Operators", "States", "Subtasks")] == ["Operators", "States", "Subtasks"]
    assert "Operator 'op-0'" not in result.output and "┃" not in result.output
    assert sum(line.startswith(f"op-{operators - 1} ") for line in lines) == 3
