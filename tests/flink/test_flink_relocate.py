"""Relocating absolute paths in Flink ``_metadata``: only the paths change."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from statekit.flink import StreamHandleKind, read_flink_metadata, relocate_flink_metadata
from statekit.flink.model import FlinkCheckpointMetadata
from statekit.flink.relocate import absolute_paths
from statekit.statefmt.errors import BadInputError, MetadataError


def _meta(golden: Any, name: str) -> bytes:
    return Path(golden[name] / "_metadata").read_bytes()


def _strip(value: Any) -> Any:
    """The model with paths and byte offsets blanked, to compare structure only."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.name in ("offset", "path_offset", "source") or (
                f.name == "size" and isinstance(value, FlinkCheckpointMetadata)
            ):
                changes[f.name] = 0 if isinstance(item, int) else ""
            elif f.name == "path" and getattr(value, "kind", None) is StreamHandleKind.FILE:
                changes[f.name] = ""
            else:
                changes[f.name] = _strip(item)
        return dataclasses.replace(value, **changes)
    if isinstance(value, tuple):
        return tuple(_strip(v) for v in value)
    return value


@pytest.mark.parametrize("name", ["rocksdb-incremental-inline0/chk-4", "rocksdb-incremental/chk-4"])
def test_relocate_round_trip(flink_golden: Any, name: str) -> None:
    data = _meta(flink_golden, name)
    old = "file:/tmp/stackcheck/flink"
    new = "s3://bucket/relocated/ünïcode-\u0000-path"
    moved = relocate_flink_metadata(data, old, new)
    assert moved != data
    before = read_flink_metadata(data, source="before")
    after = read_flink_metadata(moved, source="after")
    paths = absolute_paths(moved)
    assert paths and all(p.startswith(new) for p in paths)
    assert [p.replace(new, old, 1) for p in paths] == absolute_paths(data)
    assert _strip(after) == _strip(before)
    assert after.properties == before.properties
    assert relocate_flink_metadata(moved, new, old) == data  # every other byte is identical


def test_relocated_metadata_changes_only_path_bytes(flink_golden: Any) -> None:
    data = _meta(flink_golden, "rocksdb-incremental-inline0/chk-4")
    old = "file:/tmp/stackcheck/flink/out_rocksdb_noinline"
    same_length = "file:/tmp/STACKCHECK/FLINK/OUT_ROCKSDB_NOINLINE"
    assert len(old) == len(same_length)
    moved = relocate_flink_metadata(data, old, same_length)
    diffs = [i for i, (a, b) in enumerate(zip(data, moved)) if a != b]
    assert len(moved) == len(data) and diffs
    meta = read_flink_metadata(data, source="x")
    spans = [
        range(h.path_offset + 2, h.path_offset + 2 + len(old))
        for _, _, _, h in meta.stream_handles()
        if h.kind is StreamHandleKind.FILE and h.path_offset is not None
    ]
    assert all(any(i in span for span in spans) for i in diffs)


def test_relocate_without_match_or_without_paths_is_identity(flink_golden: Any) -> None:
    data = _meta(flink_golden, "rocksdb-incremental-inline0/chk-4")
    assert relocate_flink_metadata(data, "hdfs://nowhere", "file:/x") == data
    savepoint = _meta(flink_golden, "hashmap/savepoint")
    assert absolute_paths(savepoint) == []
    assert relocate_flink_metadata(savepoint, "file:", "s3://b") == savepoint


def test_relocate_rejects_bad_input(flink_golden: Any) -> None:
    data = _meta(flink_golden, "rocksdb-incremental-inline0/chk-4")
    with pytest.raises(BadInputError):
        relocate_flink_metadata(data, "", "x")
    with pytest.raises(BadInputError, match="65535"):
        relocate_flink_metadata(data, "file:", "x" * 70000)
    with pytest.raises(MetadataError):
        relocate_flink_metadata(data[:-1], "file:", "x")

