"""Decoding the keyed state of the golden canonical savepoints (hashmap and RocksDB).

The job (``tests/golden/flink-2.3/job.py``) feeds ``key-0 .. key-999`` round-robin, one
count each, so at any savepoint every key holds the same count ``c`` or ``c + 1`` and the
keys holding ``c + 1`` are exactly ``key-0 .. key-(n-1)``: a check that every key and value
was decoded from the right bytes.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from statekit.readers.flink import count_savepoint_entries, open_flink_snapshot
from statekit.readers.flink.entries import decodable_states, read_savepoint_entries
from statekit.statefmt.errors import BadInputError, CorruptStateError, StateNotFoundError

STATE = "python-state-count"
SAVEPOINTS = {  # savepoint -> (count held by the later keys, number of keys one ahead)
    "hashmap/savepoint": (8, 303),
    "rocksdb-incremental/savepoint": (6, 901),
    "rocksdb-incremental-inline0/savepoint": (4, 967),
}


def counts_of(path: Path, **kwargs: Any) -> dict[str, int]:
    entries = list(read_savepoint_entries(open_flink_snapshot(str(path)), "running-count", STATE, **kwargs))
    out: dict[str, int] = {}
    for e in entries:
        assert e.namespace is None and e.user_key is None and e.subtask == 0
        (raw,) = e.value  # PyFlink value state: a one-element list of the Python coder's bytes
        assert len(raw) == 8 and e.key["f0"] not in out
        out[e.key["f0"]] = int.from_bytes(raw, "big", signed=True)
    return out


@pytest.mark.parametrize("name", sorted(SAVEPOINTS))
def test_every_key_and_count_decodes(flink_golden: Any, name: str) -> None:
    low, ahead = SAVEPOINTS[name]
    counts = counts_of(flink_golden[name])
    assert counts == {f"key-{i}": low + 1 if i < ahead else low for i in range(1000)}


def test_entries_agree_with_the_counts_per_key_group(flink_golden: Any) -> None:
    snapshot = open_flink_snapshot(str(flink_golden["hashmap/savepoint"]))
    per_group = count_savepoint_entries(snapshot, "running-count").per_key_group[STATE]
    decoded: dict[int, int] = {}
    for e in read_savepoint_entries(snapshot, "running-count", STATE):
        decoded[e.key_group] = decoded.get(e.key_group, 0) + 1
    assert decoded == per_group
    some = sorted(per_group)[:5]
    only = list(read_savepoint_entries(snapshot, "running-count", STATE, key_groups=some))
    assert {e.key_group for e in only} == set(some) and len(only) == sum(per_group[g] for g in some)


def test_decodable_states_name_what_cannot_be_decoded(flink_golden: Any) -> None:
    snapshot = open_flink_snapshot(str(flink_golden["hashmap/savepoint"]))
    states = decodable_states(snapshot, "running-count")
    assert (states[0].name, states[0].kind, states[0].reason) == (STATE, "list", None)
    assert states[0].decoder is not None
    assert states[0].decoder.spark_schema == (
        "key struct<f0:string>, namespace string, user_key string, value array<binary>, key_group int, subtask int")
    assert [(s.name, s.kind, s.reason) for s in states[1:] if s.decoder is None] == [
        ("_timer_state/processing_user-timers", "timers", "timers state cannot be decoded"),
        ("_timer_state/event_user-timers", "timers", "timers state cannot be decoded"),
    ]
    with pytest.raises(BadInputError, match="timers state cannot be decoded"):
        list(read_savepoint_entries(snapshot, "running-count", "_timer_state/event_user-timers"))
    with pytest.raises(StateNotFoundError, match="no keyed state 'nope'"):
        list(read_savepoint_entries(snapshot, "running-count", "nope"))


def test_checkpoints_are_refused_with_the_handle_kind(flink_golden: Any) -> None:
    snapshot = open_flink_snapshot(str(flink_golden["hashmap/chk-4"]))
    with pytest.raises(BadInputError, match="needs a canonical savepoint"):
        list(read_savepoint_entries(snapshot, "running-count", STATE))


def _copy(flink_golden: Any, tmp_path: Path) -> tuple[Path, Path]:
    target = tmp_path / "sp"
    shutil.copytree(flink_golden["hashmap/savepoint"], target)
    (state_file,) = [p for p in target.iterdir() if p.name != "_metadata"]
    return target, state_file


def test_a_flipped_byte_in_a_key_is_reported_with_file_and_offset(flink_golden: Any, tmp_path: Path) -> None:
    target, state_file = _copy(flink_golden, tmp_path)
    snapshot = open_flink_snapshot(str(target))
    handle = snapshot.metadata.operator("running-count").subtasks[0].managed_keyed_state
    assert handle is not None
    offset = max(handle.key_group_offsets)  # last key group: state id, key length, then the key
    data = bytearray(state_file.read_bytes())
    data[offset + 2 + 4 + 2] = 0xFF  # the string length varint of the first key: now unterminated
    state_file.write_bytes(bytes(data))
    with pytest.raises(CorruptStateError) as failure:
        list(read_savepoint_entries(open_flink_snapshot(str(target)), "running-count", STATE))
    message = str(failure.value)
    assert state_file.name in message and f"entry at byte offset {offset + 2}" in message


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.99])
def test_a_truncated_state_file_is_an_error_not_a_traceback(flink_golden: Any, tmp_path: Path, keep: float) -> None:
    target, state_file = _copy(flink_golden, tmp_path)
    data = state_file.read_bytes()
    state_file.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CorruptStateError, match="truncated"):
        list(read_savepoint_entries(open_flink_snapshot(str(target)), "running-count", STATE))


def test_pyflink_row_string_keys_land_in_the_documented_key_groups(flink_golden: Any) -> None:
    """docs/FLINK.md: a PyFlink Row<String> key's group is murmur(String.hashCode + 62) % M."""
    from statekit.readers.flink.keygroups import compute_key_group_for_key_hash, java_hash_code

    def row_hash(text: str) -> int:
        value = (java_hash_code(text, "string") + 62) & 0xFFFFFFFF
        return value - (1 << 32) if value >= 1 << 31 else value

    for name in SAVEPOINTS:
        entries = list(read_savepoint_entries(open_flink_snapshot(str(flink_golden[name])), "running-count", STATE))
        assert len(entries) == 1000
        assert all(compute_key_group_for_key_hash(row_hash(e.key["f0"]), 128) == e.key_group for e in entries)
