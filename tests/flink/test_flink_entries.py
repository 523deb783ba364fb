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

from statekit.flink import count_savepoint_entries, open_flink_snapshot
from statekit.flink.entries import decodable_states, read_savepoint_entries
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


def test_decodable_states_include_timers(flink_golden: Any) -> None:
    snapshot = open_flink_snapshot(str(flink_golden["hashmap/savepoint"]))
    states = decodable_states(snapshot, "running-count")
    assert (states[0].name, states[0].kind, states[0].reason) == (STATE, "list", None)
    assert states[0].decoder is not None
    assert states[0].decoder.spark_schema == (
        "key struct<f0:string>, namespace string, user_key string, value array<binary>, expiry bigint, "
        "key_group int, subtask int")
    timers = [(s.name, s.kind, s.reason, s.decoder.spark_schema if s.decoder else None) for s in states[1:]]
    schema = ("key struct<f0:string>, namespace string, user_key string, value bigint, expiry bigint, "
              "key_group int, subtask int")
    assert timers == [("_timer_state/processing_user-timers", "timers", None, schema),
                      ("_timer_state/event_user-timers", "timers", None, schema)]
    assert list(read_savepoint_entries(snapshot, "running-count", "_timer_state/event_user-timers")) == []
    with pytest.raises(StateNotFoundError, match="no keyed state 'nope'"):
        list(read_savepoint_entries(snapshot, "running-count", "nope"))


def test_heap_checkpoints_decode_and_changelog_handles_are_refused(flink_golden: Any) -> None:
    from dataclasses import replace

    from statekit.flink.model import KeyedHandleKind

    snapshot = open_flink_snapshot(str(flink_golden["hashmap/chk-4"]))
    counts = counts_of(flink_golden["hashmap/chk-4"])
    low = min(counts.values())
    ahead = sum(1 for c in counts.values() if c == low + 1)
    assert counts == {f"key-{i}": low + 1 if i < ahead else low for i in range(1000)}  # the round-robin feed
    op = snapshot.metadata.operator("running-count")
    handle = op.subtasks[0].managed_keyed_state
    assert handle is not None and handle.kind is KeyedHandleKind.KEY_GROUPS
    changelog = replace(handle, kind=KeyedHandleKind.CHANGELOG)
    ops = tuple(replace(o, subtasks=(replace(o.subtasks[0], managed_keyed_state=changelog),)) if o is op else o
                for o in snapshot.metadata.operators)
    fake = replace(snapshot, metadata=replace(snapshot.metadata, operators=ops))
    with pytest.raises(BadInputError, match="needs a canonical savepoint or RocksDB state .* changelog handle"):
        list(read_savepoint_entries(fake, "running-count", STATE))


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
    from statekit.flink.keygroups import compute_key_group_for_key_hash, java_hash_code

    def row_hash(text: str) -> int:
        value = (java_hash_code(text, "string") + 62) & 0xFFFFFFFF
        return value - (1 << 32) if value >= 1 << 31 else value

    for name in SAVEPOINTS:
        entries = list(read_savepoint_entries(open_flink_snapshot(str(flink_golden[name])), "running-count", STATE))
        assert len(entries) == 1000
        assert all(compute_key_group_for_key_hash(row_hash(e.key["f0"]), 128) == e.key_group for e in entries)


# --------------------------------------------------------------- synthetic headers and entries

_BASE = "org.apache.flink.api.common.typeutils.base."


def _node(name: str, *children: Any) -> Any:
    from statekit.flink.state_meta import SerializerNode

    cls = {"List": _BASE + "ListSerializerSnapshot", "Map": _BASE + "MapSerializerSnapshot",
           "Kryo": "org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializerSnapshot",
           "Void": "org.apache.flink.runtime.state.VoidNamespaceSerializer$VoidNamespaceSerializerSnapshot",
           }.get(name, _BASE + f"{name}Serializer${name}SerializerSnapshot")
    return SerializerNode(cls, tuple(children))


def _meta(kind: str, key: Any, namespace: Any, value: Any) -> Any:
    from statekit.flink.state_meta import FlinkStateMeta, KeyedBackendMeta, SerializerInfo

    def info(role: str, node: Any) -> SerializerInfo:
        return SerializerInfo(role, node.snapshot_class, node.descendants(), node)

    state = FlinkStateMeta("s", kind, "key-value", {"KEYED_STATE_TYPE": kind.upper()},
                           (info("NAMESPACE_SERIALIZER", namespace), info("VALUE_SERIALIZER", value)))
    return KeyedBackendMeta(6, False, info("KEY_SERIALIZER", key), (state,), None)


def _java_string(text: str) -> bytes:
    assert text.isascii() and len(text) < 127
    return bytes([len(text) + 1]) + text.encode()


def test_map_state_with_variable_key_and_namespace_decodes_the_length_suffixes() -> None:
    import struct

    from statekit.flink.decoding import decode_entry as _decode
    from statekit.flink.decoding import flink_state_decoder

    meta = _meta("map", _node("String"), _node("String"), _node("Map", _node("Int"), _node("Long")))
    decoder = flink_state_decoder(meta, "s", source="f")
    assert decoder.ambiguous_key and decoder.user_key is not None and decoder.user_key.name == "Integer"
    assert decoder.spark_schema.startswith("key string, namespace string, user_key int, value bigint")
    # prefix | key | key length | namespace | namespace length | user key
    key = b"\x05" + _java_string("user") + b"\x05" + _java_string("ns") + b"\x03" + struct.pack(">i", 7)
    entry = _decode(decoder, 5, key, b"\x00" + struct.pack(">q", 99), 1, "f", 0)
    assert (entry.key, entry.namespace, entry.user_key, entry.value) == ("user", "ns", 7, 99)
    assert _decode(decoder, 5, key, b"\x01", 1, "f", 0).value is None  # null map value
    with pytest.raises(CorruptStateError, match="f: 2 key bytes left after the key"):
        _decode(decoder, 5, key + b"\x00\x00", b"\x01", 1, "f", 0)


def test_fixed_length_namespace_means_no_length_suffix() -> None:
    import struct

    from statekit.flink.decoding import decode_entry as _decode
    from statekit.flink.decoding import flink_state_decoder

    decoder = flink_state_decoder(_meta("value", _node("String"), _node("Void"), _node("Long")), "s", source="f")
    assert not decoder.ambiguous_key
    entry = _decode(decoder, 0, b"\x00" + _java_string("k") + b"\x00", struct.pack(">q", -3), 1, "f", 1)
    assert (entry.key, entry.namespace, entry.value, entry.subtask) == ("k", None, -3, 1)


def test_headers_that_cannot_be_decoded_name_the_serializer() -> None:
    from statekit.flink.entries import flink_state_decoder

    kryo = _meta("value", _node("String"), _node("Void"), _node("Kryo"))
    with pytest.raises(BadInputError, match="f: state 's': cannot decode the value serializer .*KryoSerializerSnapshot"):
        flink_state_decoder(kryo, "s", source="f")
    not_a_list = _meta("list", _node("String"), _node("Void"), _node("Long"))
    with pytest.raises(BadInputError, match="list state whose value serializer is .*LongSerializer.*not .*ListSerializer"):
        flink_state_decoder(not_a_list, "s", source="f")
    not_a_map = _meta("map", _node("String"), _node("Void"), _node("List", _node("Long")))
    with pytest.raises(BadInputError, match="map state whose value serializer is .*ListSerializer"):
        flink_state_decoder(not_a_map, "s", source="f")
    with pytest.raises(StateNotFoundError, match="no keyed state 'x' \\(states: s\\)"):
        flink_state_decoder(not_a_map, "x", source="f")


def test_a_wrong_length_suffix_is_damage_and_long_keys_take_two_suffix_bytes() -> None:
    import struct

    from statekit.flink.decoding import decode_entry as _decode
    from statekit.flink.decoding import flink_state_decoder

    decoder = flink_state_decoder(_meta("value", _node("String"), _node("String"), _node("Long")), "s", source="f")
    long_key = b"\x81\x02" + b"k" * 256  # StringValue length 257 -> 256 chars: 258 key bytes
    key = b"\x00" + long_key + bytes([258 & 0xFF, 258 >> 8]) + _java_string("n") + b"\x02"
    assert _decode(decoder, 0, key, struct.pack(">q", 1), 1, "f", 0).key == "k" * 256
    bad = b"\x00" + _java_string("k") + b"\x07" + _java_string("n") + b"\x02"
    with pytest.raises(CorruptStateError, match="length suffix does not match the 2 bytes before it at byte offset 3"):
        _decode(decoder, 0, bad, struct.pack(">q", 1), 1, "f", 0)
