"""`statekit keygroup` (statekit and Flink key groups) and `statekit relocate` (Flink _metadata)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from statekit.cli.main import cli
from statekit.statefmt.keygroups import assign_to_key_group
from statekit.statefmt.serializers import get_serializer

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "flink-2.3"
INLINE0_JOB = "41a19bb2434264c1a64f6d54dac65a72"
INLINE0_OLD_PREFIX = "file:/tmp/stackcheck/flink/out_rocksdb_noinline/checkpoints"
HASHMAP_SAVEPOINT = GOLDEN / "hashmap" / "savepoints" / "savepoint-962f67-bfc4c25148ed"


def run(*args: str) -> Result:
    return CliRunner(env={"COLUMNS": "250"}).invoke(cli, list(args))


def run_json(*args: str, code: int = 0) -> Any:
    result = run("--json", *args)
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def error_line(result: Result, code: int = 2) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("statekit: error: ")
    return line


# ------------------------------------------------------------------ keygroup


@pytest.mark.parametrize(
    ("key", "key_type", "max_parallelism", "key_group"),
    [
        ("0", "int", 128, 94), ("0", "int", 32768, 31198),
        ("42", "int", 128, 29), ("42", "int", 32768, 28189),
        ("-1", "int", 128, 80), ("-1", "int", 32768, 15184),
        ("hello", "string", 128, 35), ("user-1", "string", 128, 121),
    ],
)
def test_keygroup_flink_vectors(key: str, key_type: str, max_parallelism: int, key_group: int) -> None:
    data = run_json("keygroup", "--flink", "--key-type", key_type, "--max-parallelism", str(max_parallelism),
                    "--", key)
    assert (data["engine"], data["key_group"], data["max_parallelism"], data["subtask"]) == (
        "flink", key_group, max_parallelism, None)


def test_keygroup_negative_key_without_double_dash() -> None:
    for args in (["--flink", "--key-type", "int", "--max-parallelism", "128", "-1"],
                 ["-1", "--flink", "--key-type", "int", "-m", "128"],
                 ["--flink", "--key-type", "int", "--max-parallelism", "128", "--", "-1"]):
        data = run_json("keygroup", *args)
        assert (data["value"], data["key_group"]) == (-1, 80), args
    assert run_json("keygroup", "--flink", "--key-type", "long", "-2")["value"] == -2
    assert run_json("keygroup", "--flink", "--key-type", "double", "-2.5")["value"] == -2.5


def test_keygroup_flink_subtask_text_and_json() -> None:
    data = run_json("keygroup", "--flink", "--key-type", "int", "--max-parallelism", "128", "-p", "4", "42")
    assert (data["key_group"], data["parallelism"], data["subtask"], data["subtask_key_groups"]) == (
        29, 4, 0, [0, 31])
    assert (data["hash"], data["key_type"]) == (42, "int")
    result = run("keygroup", "--flink", "--key-type", "string", "-p", "4", "user-1")
    assert result.exit_code == 0
    assert [" ".join(line.split()) for line in result.output.splitlines()] == [
        "key 'user-1' (Java String, hashCode -836031825, murmurHash 1662039673) -> Flink key group 121 of 128",
        "subtask 3 of 4 (key groups 96-127)",
    ]


def test_keygroup_default_max_parallelism_follows_parallelism() -> None:
    assert run_json("keygroup", "--flink", "hello")["max_parallelism"] == 128
    assert run_json("keygroup", "--flink", "-p", "200", "hello")["max_parallelism"] == 512


@pytest.mark.parametrize(("key", "key_type", "value"), [("user-1", "string", "user-1"), ("42", "int", 42),
                                                          ("-7", "long", -7)])
def test_keygroup_statekit(key: str, key_type: str, value: object) -> None:
    data = run_json("keygroup", "--key-type", key_type, "--max-parallelism", "128", "-p", "2", key)
    key_bytes = get_serializer("msgpack").serialize(value)
    assert (data["engine"], data["value"], data["key_bytes"], data["key_serializer"]) == (
        "statekit", value, key_bytes.hex(), "msgpack")
    assert data["key_group"] == assign_to_key_group(key_bytes, 128)
    assert data["subtask"] == data["key_group"] * 2 // 128
    json_bytes = run_json("keygroup", "--key-serializer", "json", key)["key_bytes"]
    assert json_bytes == get_serializer("json").serialize(key).hex()
    result = run("keygroup", "--key-type", key_type, key)
    assert result.exit_code == 0 and f"-> statekit key group {data['key_group']} of 128" in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--flink", "--key-type", "int", "abc"], "'abc' is not a int"),
        (["--flink", "--key-type", "int", "3000000000"], "out of range for a Java int"),
        (["--flink", "-m", "0", "x"], "max parallelism must be in [1, 32768]"),
        (["--flink", "-m", "4", "-p", "8", "x"], "parallelism 8 is larger than max parallelism 4"),
        (["--key-serializer", "nope", "x"], "unknown serializer 'nope'"),
        (["--flink", "--key-type", "boolean", "maybe"], "true or false"),
    ],
)
def test_keygroup_bad_input(args: list[str], needle: str) -> None:
    assert needle in error_line(run("keygroup", *args))


# ------------------------------------------------------------------ relocate


@pytest.fixture
def inline0_root(tmp_path: Path) -> Path:
    root = tmp_path / "checkpoints"
    shutil.copytree(GOLDEN / "rocksdb-incremental-inline0" / "checkpoints", root)
    return root


def test_relocate_then_verify_passes(inline0_root: Path) -> None:
    chk = inline0_root / INLINE0_JOB / "chk-4"
    assert "moved checkpoint" in run_json("verify", str(chk))["moved"]  # read in place
    original = (chk / "_metadata").read_bytes()
    data = run_json("relocate", str(chk), "--from", INLINE0_OLD_PREFIX, "--to", f"file:{inline0_root}",
                    "-o", str(chk / "_metadata"), "--force")
    assert (data["paths"], data["paths_changed"], data["handles_changed"], data["unmatched"]) == (7, 7, 7, [])
    assert data["overwritten"] is True and data["output"] == str(chk / "_metadata")
    assert data["examples"][0]["new"].startswith(f"file:{inline0_root}/{INLINE0_JOB}/shared/")
    assert len((chk / "_metadata").read_bytes()) == len(original) + 7 * (
        len(f"file:{inline0_root}") - len(INLINE0_OLD_PREFIX))
    assert run_json("verify", str(chk)) | {"moved": None} == run_json("verify", str(chk))
    assert run_json("verify", str(chk))["ok"] is True
    assert run("verify", str(chk)).exit_code == 0


def test_relocate_to_a_new_file_or_directory(inline0_root: Path, tmp_path: Path) -> None:
    chk = inline0_root / INLINE0_JOB / "chk-4"
    args = ("--from", INLINE0_OLD_PREFIX, "--to", "s3://bucket/checkpoints")
    result = run("relocate", str(chk / "_metadata"), *args, "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    lines = [" ".join(line.split()) for line in result.output.splitlines()]
    assert lines[0] == f"rewrote 7 of 7 absolute paths (7 file handles) in {chk / '_metadata'}"
    assert lines[1].startswith(f"wrote {tmp_path / 'out' / '_metadata'} (")
    relocated = run_json("inspect", "--no-skew", str(tmp_path / "out"))
    assert relocated["shared_bytes"] == 31714 and relocated["checkpoint_id"] == 4
    # the same output again: refused without --force, nothing changed
    before = (tmp_path / "out" / "_metadata").read_bytes()
    line = error_line(run("relocate", str(chk), *args, "-o", str(tmp_path / "out")))
    assert "already exists; pass --force" in line and str(tmp_path / "out" / "_metadata") in line
    assert (tmp_path / "out" / "_metadata").read_bytes() == before
    data = run_json("relocate", str(chk), *args, "-o", str(tmp_path / "b" / "_metadata"))
    assert data["output"] == str(tmp_path / "b" / "_metadata") and data["overwritten"] is False
    assert (tmp_path / "b" / "_metadata").read_bytes() == before
    assert list((tmp_path / "b").iterdir()) == [tmp_path / "b" / "_metadata"]  # no temp file left


def test_relocate_partial_prefix_warns(inline0_root: Path, tmp_path: Path) -> None:
    chk = inline0_root / INLINE0_JOB / "chk-4"
    prefix = f"{INLINE0_OLD_PREFIX}/{INLINE0_JOB}/shared/f"
    data = run_json("relocate", str(chk), "--from", prefix, "--to", "file:/x/f", "-o", str(tmp_path))
    assert (data["paths"], data["paths_changed"], len(data["unmatched"])) == (7, 1, 6)
    assert data["warnings"] == [f"6 absolute path(s) do not start with {prefix!r} and were kept"]


def test_relocate_refusals(inline0_root: Path, tmp_path: Path) -> None:
    chk = inline0_root / INLINE0_JOB / "chk-4"
    out = tmp_path / "out"
    line = error_line(run("relocate", str(chk), "--from", "file:/elsewhere", "--to", "x", "-o", str(out)))
    assert "no absolute path starts with 'file:/elsewhere'; nothing written" in line
    assert f"start with '{INLINE0_OLD_PREFIX}/{INLINE0_JOB}/shared/'" in line
    line = error_line(run("relocate", str(HASHMAP_SAVEPOINT), "--from", "file:/", "--to", "x", "-o", str(out)))
    assert "has no absolute file paths" in line
    (tmp_path / "file").write_bytes(b"x")
    line = error_line(run("relocate", str(chk), "--from", INLINE0_OLD_PREFIX, "--to", "x",
                          "-o", str(tmp_path / "file")))
    assert "is a file" in line
    statekit_dir = tmp_path / "statekit"
    statekit_dir.mkdir()
    (statekit_dir / "_metadata").write_bytes(b"STKMETA\x01" + bytes(40))
    assert "not an Apache Flink _metadata" in error_line(
        run("relocate", str(statekit_dir), "--from", "a", "--to", "b", "-o", str(out)))
    assert "no such file" in error_line(run("relocate", str(tmp_path / "nope"), "--from", "a", "--to", "b",
                                            "-o", str(out)))
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "_metadata").write_bytes((chk / "_metadata").read_bytes()[:300])
    assert "byte offset" in error_line(run("relocate", str(cut), "--from", "a", "--to", "b", "-o", str(out)))
    assert not out.exists()
