"""Bad input through the CLI: exit 2 (1 for found damage), ONE line on stderr naming the
path and the cause, nothing on stdout, never a traceback."""

from __future__ import annotations

import json
import shutil
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from statekit.cli.main import cli
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "statekit-v1" / "statekit-0.1-v1-all-kinds"
OFFLINE = [["inspect"], ["verify"], ["dispose"], ["dispose", "--dry-run"]]


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def assert_one_line_error(result: Result, path: Path | str, cause: str, exit_code: int = 2) -> None:
    assert result.exit_code == exit_code, result.output
    assert "Traceback" not in result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"statekit: error: {path}"), lines[0]
    assert cause in lines[0], lines[0]


@pytest.fixture
def sp(tmp_path: Path) -> Path:
    copy = tmp_path / "savepoint-golden"
    shutil.copytree(GOLDEN, copy)
    return copy


# ---------------------------------------------------------------- paths


@pytest.mark.parametrize("command", OFFLINE + [["checkpoints", "list"]], ids=" ".join)
def test_missing_path(command: list[str], tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    cause = "no such directory" if command[0] == "checkpoints" else "no such file or directory"
    assert_one_line_error(run(*command, str(missing)), missing, cause)


@pytest.mark.parametrize("command", OFFLINE + [["checkpoints", "list"]], ids=" ".join)
def test_a_file_instead_of_a_directory(command: list[str], tmp_path: Path) -> None:
    file = tmp_path / "notes.txt"
    file.write_text("x")
    assert_one_line_error(run(*command, str(file)), file, "is a file")


@pytest.mark.parametrize("command", OFFLINE + [["checkpoints", "list"]], ids=" ".join)
def test_a_directory_that_is_not_a_checkpoint(command: list[str], tmp_path: Path) -> None:
    (tmp_path / "photos" / "2024").mkdir(parents=True)
    (tmp_path / "photos" / "a.jpg").write_bytes(b"x")
    cause = "no checkpoints or savepoints here" if command[0] == "checkpoints" else "not a checkpoint or savepoint directory"
    assert_one_line_error(run(*command, str(tmp_path / "photos")), tmp_path / "photos", cause)
    assert (tmp_path / "photos" / "a.jpg").exists()


@pytest.mark.parametrize("command", [["inspect"], ["verify"]], ids=" ".join)
def test_an_incomplete_checkpoint(command: list[str], sp: Path) -> None:
    chk = sp.parent / "chk-9"
    sp.rename(chk)
    (chk / "_metadata").unlink()
    assert_one_line_error(run(*command, str(chk)), chk, "incomplete checkpoint: no _metadata")


# ---------------------------------------------------------------- damaged state files


def test_truncated_state_file(sp: Path) -> None:
    target = sp / "counter" / "count" / "00000-of-00002.sks"
    target.write_bytes(target.read_bytes()[:300])
    # inspect reads the index of every keyed file: the reader refuses it (exit 2)
    assert_one_line_error(run("inspect", str(sp)), target, "size 300 differs from the 668 bytes recorded in _metadata")
    # verify reports it as damage (exit 1) naming the file
    result = run("verify", str(sp))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"  {target}: size 300 differs from the recorded 668" in result.stdout.splitlines()


def test_bit_flipped_state_file(sp: Path, tmp_path: Path) -> None:
    target = sp / "counter" / "count" / "00001-of-00002.sks"
    data = bytearray(target.read_bytes())
    data[100] ^= 0x10
    target.write_bytes(bytes(data))
    result = run("--json", "verify", str(sp))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert {(d["path"], d["key_group"]) for d in json.loads(result.stdout)["problems"]} == {
        (str(target), None), (str(target), 3)}
    # a command that reads the blocks (rescale) stops with the reader's error: file and key group
    out = tmp_path / "rescaled"
    assert_one_line_error(run("rescale", str(sp), "-p", "1", "-o", str(out)), target,
                          "key group 3: block checksum mismatch")
    assert not out.exists()


# ---------------------------------------------------------------- _metadata


def rewrite_metadata(sp: Path, mutate: Callable[[dict[str, Any]], None] | None = None, *, raw: bytes | None = None,
                     version: int = 1, magic: bytes = b"STKMETA\x01") -> Path:
    path = sp / "_metadata"
    data = path.read_bytes()
    if raw is None:
        (length,) = struct.unpack_from("<Q", data, 12)
        body = json.loads(data[20:20 + length])
        if mutate:
            mutate(body)
        raw = json.dumps(body).encode()
    path.write_bytes(struct.pack("<8sIQ", magic, version, len(raw)) + raw + struct.pack("<I", zlib.crc32(raw)))
    return path


def _first_file(body: dict[str, Any]) -> dict[str, Any]:
    return body["operators"][0]["subtasks"][0]["files"][0]  # type: ignore[no-any-return]


METADATA_DAMAGE: list[tuple[str, Callable[[Path], Path], str]] = [
    ("malformed JSON", lambda sp: rewrite_metadata(sp, raw=b'{"job_id": '), "metadata body is not valid JSON"),
    ("bad magic", lambda sp: rewrite_metadata(sp, magic=b"XXXXXXXX"), "not a statekit"),
    ("future version", lambda sp: rewrite_metadata(sp, version=7),
     "metadata format version 7 is not supported (this statekit reads version 1); upgrade statekit"),
    ("bad checksum", lambda sp: _flip_metadata(sp, 60), "metadata checksum mismatch: the file is damaged"),
    ("truncated", lambda sp: _truncate_metadata(sp), "does not match its header"),
    ("dotdot path", lambda sp: rewrite_metadata(sp, lambda b: _first_file(b).__setitem__("path", "../../etc/passwd")),
     "unsafe file path '../../etc/passwd' in metadata: must not contain '..'"),
    ("absolute path", lambda sp: rewrite_metadata(sp, lambda b: _first_file(b).__setitem__("path", "/etc/passwd")),
     "unsafe file path '/etc/passwd' in metadata: absolute paths and URLs are not allowed"),
    ("other scheme", lambda sp: rewrite_metadata(sp, lambda b: _first_file(b).__setitem__("path", "s3://bucket/x.sks")),
     "unsafe file path 's3://bucket/x.sks' in metadata: absolute paths and URLs are not allowed"),
    ("parallelism above max", lambda sp: rewrite_metadata(sp, lambda b: b["operators"][0].__setitem__("parallelism", 5)),
     "invalid metadata: operator 'counter': parallelism 5 outside [1, max parallelism 4]"),
    ("max parallelism zero", lambda sp: rewrite_metadata(sp, lambda b: b["operators"][0].__setitem__("max_parallelism", 0)),
     "invalid metadata: operator 'counter': max parallelism 0 outside [1, 32768]"),
    ("max parallelism too large",
     lambda sp: rewrite_metadata(sp, lambda b: b["operators"][0].__setitem__("max_parallelism", 32769)),
     "invalid metadata: operator 'counter': max parallelism 32769 outside [1, 32768]"),
]


def _flip_metadata(sp: Path, position: int) -> Path:
    path = sp / "_metadata"
    data = bytearray(path.read_bytes())
    data[position] ^= 0x01
    path.write_bytes(bytes(data))
    return path


def _truncate_metadata(sp: Path) -> Path:
    path = sp / "_metadata"
    path.write_bytes(path.read_bytes()[:-10])
    return path


@pytest.mark.parametrize("command", OFFLINE, ids=" ".join)
@pytest.mark.parametrize(("damage", "cause"), [(d, c) for _, d, c in METADATA_DAMAGE], ids=[n for n, _, _ in METADATA_DAMAGE])
def test_bad_metadata(command: list[str], damage: Callable[[Path], Path], cause: str, sp: Path) -> None:
    metadata = damage(sp)
    assert_one_line_error(run(*command, str(sp)), metadata, cause)
    assert metadata.exists()  # dispose refused


def test_bad_metadata_is_listed_as_damaged(sp: Path) -> None:
    rewrite_metadata(sp, version=7)
    result = run("--json", "checkpoints", "list", str(sp.parent))
    assert result.exit_code == 0
    [row] = json.loads(result.stdout)["snapshots"]
    assert row["status"] == "damaged" and "version 7 is not supported" in row["problem"]


# ---------------------------------------------------------------- pickle, parallelism


def test_pickle_without_trust(tmp_path: Path) -> None:
    descriptor = StateDescriptor("p", StateKind.VALUE, value_serializer="pickle")
    for name, value in (("a", 1), ("b", 2)):
        SavepointWriter.new_savepoint().with_operator("op", {descriptor: [("k", {value})]}).write(str(tmp_path / name))
    result = run("diff", str(tmp_path / "a"), str(tmp_path / "b"), "--keys")
    assert_one_line_error(result, tmp_path / "a", "state 'p' uses the 'pickle' serializer, which can run arbitrary code "
                                                  "when read; pass --trust-pickle")
    trusted = run("--json", "diff", str(tmp_path / "a"), str(tmp_path / "b"), "--keys", "--trust-pickle")
    assert trusted.exit_code == 1 and "Traceback" not in trusted.output  # different, and decoded


@pytest.mark.parametrize(
    ("options", "cause"),
    [
        (["-p", "5", "--max-parallelism", "4"], "parallelism 5 is larger than max parallelism 4"),
        (["-p", "2", "--max-parallelism", "0"], "max parallelism must be in [1, 32768], got 0"),
        (["-p", "2", "--max-parallelism", "40000"], "max parallelism must be in [1, 32768], got 40000"),
    ],
)
def test_parallelism_refused_by_the_writer(options: list[str], cause: str, sp: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert_one_line_error(run("rescale", str(sp), *options, "-o", str(out)), sp, cause)
    assert not out.exists()


# ---------------------------------------------------------------- the error mapper itself


def test_verbose_shows_the_traceback(tmp_path: Path) -> None:
    result = run("--verbose", "inspect", str(tmp_path / "nope"))
    assert result.exit_code == 2
    assert "Traceback" in result.stderr and "PathNotFoundError" in result.stderr
    assert result.stderr.splitlines()[-1] == f"statekit: error: {tmp_path / 'nope'}: no such file or directory"


def test_an_internal_error_is_exit_3_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import statekit.flink.dispatch as dispatch

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(dispatch, "inspect_any", broken)
    result = run("inspect", str(GOLDEN))
    assert result.exit_code == 3 and "Traceback" not in result.output
    assert result.stderr == ("statekit: error: internal error: RuntimeError: boom second line (a bug in statekit; "
                             "rerun with --verbose for the traceback)\n")


def test_exit_codes_are_documented() -> None:
    result = run("--help")
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert "Exit codes: 0 ok, 1 a failed check (verify damage, diff differences, failed job), 2 bad input, 3 internal error" in text
