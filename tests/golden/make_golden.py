"""Regenerate the statekit format golden savepoints under ``tests/golden/statekit-v<N>/``.

    .venv/bin/python tests/golden/make_golden.py          # rewrite the golden files
    .venv/bin/python tests/golden/make_golden.py --check  # exit 1 if today's bytes differ

Everything is pinned (job id, timestamp, values, parallelism, format version), so the
output is the same bytes on every run; ``tests/statefmt/test_golden_v1.py`` and
``test_golden_v2.py`` assert exactly that, and that the reader decodes the committed files
to the expected values. A change of these bytes is a change of the on-disk format: bump
the format version instead of regenerating. Compressed goldens are only read back, never
compared byte for byte (the compressor's output may change between library versions).
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from statekit.statefmt.encoding import WriteFormat, writing_format
from statekit.statefmt.entries import KeyedStateEntry
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

GOLDEN_DIR = Path(__file__).resolve().parent
GOLDEN_ROOT = GOLDEN_DIR / "statekit-v1"
ALL_KINDS = "statekit-0.1-v1-all-kinds"
V2_ROOT = GOLDEN_DIR / "statekit-v2"
V2_ALL_TYPES = "statekit-0.1-v2-all-types"
V2_ALL_TYPES_ZSTD = "statekit-0.1-v2-all-types-zstd"
JOB_ID = "5eed0000000000000000000000000001"
JOB_NAME = "golden-all-kinds"
CREATED_AT_MS = 1_700_000_000_000

COUNT = StateDescriptor("count", StateKind.VALUE, value_type="int")
EVENTS = StateDescriptor("events", StateKind.LIST, value_type="string")
ATTRS = StateDescriptor("attrs", StateKind.MAP, value_type="int", user_key_serializer="utf8", user_key_type="string")
WINDOW_SUM = StateDescriptor("window-sum", StateKind.REDUCING, value_type="float", ttl_ms=60_000)
AVERAGE = StateDescriptor("average", StateKind.AGGREGATING, value_serializer="json",
                          value_type="struct<sum:int,count:int>")
OFFSETS = StateDescriptor("offsets", StateKind.OPERATOR_LIST, value_serializer="int64", value_type="int")
WATERMARKS = StateDescriptor("watermarks", StateKind.UNION, value_type="timestamp")
RULES = StateDescriptor("rules", StateKind.BROADCAST, value_type="json", user_key_serializer="utf8")

# version 2 only: one state per typed value column kind (and an untyped one)
SEEN_AT = StateDescriptor("seen-at", StateKind.VALUE, value_type="timestamp")
ACTIVE = StateDescriptor("active", StateKind.VALUE, value_type="bool")
TAGS = StateDescriptor("tags", StateKind.VALUE, value_type="map<string,int>")
SESSIONS = StateDescriptor("sessions", StateKind.LIST, value_type="struct<id:string,pages:list<int>,raw:bytes>")
BLOB = StateDescriptor("blob", StateKind.VALUE, value_type="bytes", value_serializer="bytes")
ANYTHING = StateDescriptor("anything", StateKind.VALUE)
NOTES = StateDescriptor("notes", StateKind.VALUE, value_type="string")  # compressible: zstd shrinks its block


def keyed_states() -> dict[StateDescriptor, list[Any]]:
    """The keyed operator's data (keys are strings; msgpack key serializer)."""
    return {
        COUNT: [("alice", 3), ("bob", 7), ("carol", -1)],
        EVENTS: [("alice", ["login", "logout"]), ("bob", [])],
        ATTRS: [("alice", "age", 30), ("alice", "score", 12), ("carol", "age", 41)],
        WINDOW_SUM: [
            KeyedStateEntry("alice", [0, 1000], 2.5, CREATED_AT_MS + 60_000),
            KeyedStateEntry("alice", [1000, 2000], 4.0, CREATED_AT_MS + 61_000),
            KeyedStateEntry("bob", [0, 1000], 1.25, None),
        ],
        AVERAGE: [("bob", {"sum": 10, "count": 4})],
    }


def operator_states() -> dict[StateDescriptor, Any]:
    """The source operator's operator state: even-split list, union and broadcast."""
    return {
        OFFSETS: [100, 200, 300],
        WATERMARKS: [CREATED_AT_MS - 5_000],
        RULES: {"threshold": 10, "mode": "strict"},
    }


def typed_states() -> dict[StateDescriptor, list[Any]]:
    """Values of every typed column kind version 2 stores (keys are ints: msgpack ints)."""
    return {
        SEEN_AT: [(1, CREATED_AT_MS), (2, CREATED_AT_MS + 1), (3, None)],
        ACTIVE: [(1, True), (2, False)],
        TAGS: [(1, {"a": 1, "b": None}), (2, {})],
        SESSIONS: [(1, [{"id": "s1", "pages": [1, 2], "raw": b"\x00\xff"}, {"id": "s2", "pages": [], "raw": None}])],
        BLOB: [(1, b"\x01\x02"), (2, b"")],
        ANYTHING: [(1, {"nested": [1, "two", None]}), (2, 3.5)],
        NOTES: [(1, "statekit " * 200)],
    }


def all_kinds_writer() -> SavepointWriter:
    """Two operators covering every state kind, parallelism 2 and max parallelism 4."""
    return (
        SavepointWriter.new_savepoint(max_parallelism=4, job_id=JOB_ID, job_name=JOB_NAME)
        .with_operator("counter", keyed_states(), parallelism=2, name="Counter")
        .with_operator("source", operator_states(), parallelism=2, name="Source")
    )


def write_all_kinds(path: str, storage_options: dict[str, Any] | None = None) -> None:
    """The version 1 golden savepoint (written in format version 1)."""
    with writing_format(WriteFormat(1)):
        all_kinds_writer().write(path, storage_options=storage_options, created_at_ms=CREATED_AT_MS)


def all_types_writer() -> SavepointWriter:
    """Every state kind plus every typed value column: the version 2 golden savepoint."""
    return all_kinds_writer().with_operator("typed", typed_states(), parallelism=1, name="Typed")


def write_all_types(path: str, compression: str = "none") -> None:
    with writing_format(WriteFormat(2, compression)):
        all_types_writer().write(path, created_at_ms=CREATED_AT_MS)


# name -> (folder, writer, compared byte for byte)
GOLDENS: dict[str, tuple[Path, Any, bool]] = {
    ALL_KINDS: (GOLDEN_ROOT, write_all_kinds, True),
    V2_ALL_TYPES: (V2_ROOT, write_all_types, True),
    V2_ALL_TYPES_ZSTD: (V2_ROOT, lambda path: write_all_types(path, "zstd"), False),
}


def files_of(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` by its relative path, with its bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _differences(a: Path, b: Path) -> list[str]:
    files_a = sorted(p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file())
    if files_a != files_b:
        return [f"file lists differ: {files_a} vs {files_b}"]
    return [f for f in files_a if not filecmp.cmp(a / f, b / f, shallow=False)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of rewriting")
    args = parser.parse_args()
    failed = False
    for name, (root, write, exact) in GOLDENS.items():
        target = root / name
        if args.check:
            if not exact:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                write(f"{tmp}/out")
                diff = _differences(Path(tmp) / "out", target)
            print(f"{name}: golden files match" if not diff else f"{name}: golden files differ: {diff}")
            failed = failed or bool(diff)
            continue
        shutil.rmtree(target, ignore_errors=True)
        write(str(target))
        size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
        print(f"wrote {target} ({size} bytes)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
