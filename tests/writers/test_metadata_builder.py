"""``SnapshotMetadataBuilder``: what it builds parses back, and keeps its invariants."""

from __future__ import annotations

import pytest

from statekit.statefmt.job_id import is_job_id
from statekit.statefmt.keygroups import compute_key_group_range_for_operator_index
from statekit.statefmt.metadata import (
    CheckpointMetadata,
    SnapshotFormat,
    SnapshotKind,
    StateDescriptor,
    StateFile,
    StateKind,
    parse_metadata,
    serialize_metadata,
)
from statekit.writers.metadata_builder import SnapshotMetadataBuilder, operator_metadata, subtask_states

COUNT = StateDescriptor("count", StateKind.VALUE, value_type="int")
OFFSETS = StateDescriptor("offsets", StateKind.OPERATOR_LIST, value_type="int")


def files(state: str, parallelism: int) -> list[list[StateFile]]:
    return [[StateFile(state, f"op/{state}/{i:05d}-of-{parallelism:05d}.sks", 10 + i, "crc32:0000abcd", i)]
            for i in range(parallelism)]


@pytest.mark.parametrize("max_parallelism, parallelism", [(128, 3), (7, 7), (32768, 5), (1, 1)])
def test_subtasks_own_flinks_key_group_ranges(max_parallelism: int, parallelism: int) -> None:
    subtasks = subtask_states(max_parallelism, parallelism, [[] for _ in range(parallelism)])
    assert [s.index for s in subtasks] == list(range(parallelism))
    assert [s.key_group_range for s in subtasks] == [
        compute_key_group_range_for_operator_index(max_parallelism, parallelism, i) for i in range(parallelism)]


def test_a_key_serializer_only_with_keyed_state() -> None:
    common = dict(name="op", parallelism=2, max_parallelism=16, key_serializer="msgpack")
    assert operator_metadata("a", states=[COUNT], files=files("count", 2), **common).key_serializer == "msgpack"
    assert operator_metadata("b", states=[OFFSETS], files=files("offsets", 2), **common).key_serializer is None


def test_what_it_builds_parses_back() -> None:
    op = operator_metadata("op", name="Op", parallelism=3, max_parallelism=128, key_serializer="msgpack",
                           states=[COUNT], files=files("count", 3))
    header = SnapshotMetadataBuilder("ab" * 16, job_name="wc", checkpoint_id=7, kind=SnapshotKind.CHECKPOINT,
                                     properties={"producer": "test"})
    built = header.build([op], created_at_ms=1234)
    parsed = parse_metadata(serialize_metadata(built))
    assert parsed == built and parsed.properties == {"producer": "test"}
    assert (parsed.kind, parsed.format, parsed.checkpoint_id, parsed.created_at_ms) == (
        SnapshotKind.CHECKPOINT, SnapshotFormat.CANONICAL, 7, 1234)


def test_a_new_savepoint_gets_a_fresh_job_id_and_the_time() -> None:
    first, second = SnapshotMetadataBuilder.new_job(), SnapshotMetadataBuilder.new_job()
    assert is_job_id(first.job_id) and first.job_id != second.job_id
    before = CheckpointMetadata.now_ms()
    built = first.build([])
    assert before <= built.created_at_ms <= CheckpointMetadata.now_ms()
    assert (built.kind, built.checkpoint_id, built.job_name, built.properties) == (SnapshotKind.SAVEPOINT, 0, "", {})


def test_continuing_keeps_the_job_and_adds_properties() -> None:
    source = SnapshotMetadataBuilder("cd" * 16, job_name="wc", checkpoint_id=9, kind=SnapshotKind.CHECKPOINT,
                                     properties={"producer": "runtime", "a": "1"}).build([])
    derived = SnapshotMetadataBuilder.continuing(source, {"a": "2", "statekit.rescaled-from": "/sp"}).build([])
    assert (derived.job_id, derived.job_name, derived.checkpoint_id) == ("cd" * 16, "wc", 9)
    assert derived.kind is SnapshotKind.SAVEPOINT
    assert derived.properties == {"producer": "runtime", "a": "2", "statekit.rescaled-from": "/sp"}
    assert source.properties == {"producer": "runtime", "a": "1"}, "the source is not changed"
    fresh = SnapshotMetadataBuilder.continuing(None, {"statekit.bootstrapped": "op/s"}).build([])
    assert is_job_id(fresh.job_id) and fresh.properties == {"statekit.bootstrapped": "op/s"}
