"""``_metadata``: serialize/parse round trip and every way parsing refuses bad bytes."""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekit.statefmt import layout
from statekit.statefmt.errors import MetadataError, StateNotFoundError, UnsafePathError, UnsupportedVersionError
from statekit.statefmt.keygroups import compute_key_group_range_for_operator_index
from statekit.statefmt.metadata import (
    CheckpointMetadata,
    OperatorMetadata,
    SnapshotFormat,
    SnapshotKind,
    StateDescriptor,
    StateFile,
    StateKind,
    SubtaskState,
    parse_metadata,
    serialize_metadata,
)
from statekit.statefmt.paths import check_relative_path

SOURCE = "/snapshots/sp/_metadata"


def make_operator(uid: str = "op", parallelism: int = 2, max_parallelism: int = 8,
                  states: tuple[StateDescriptor, ...] | None = None) -> OperatorMetadata:
    states = states if states is not None else (
        StateDescriptor("count", StateKind.VALUE, value_type="int", ttl_ms=1000),
        StateDescriptor("attrs", StateKind.MAP, user_key_serializer="utf8", user_key_type="string"),
    )
    subtasks = tuple(
        SubtaskState(
            i,
            compute_key_group_range_for_operator_index(max_parallelism, parallelism, i),
            tuple(StateFile(d.name, layout.state_file_path(uid, d.name, i, parallelism), 100 + i, "crc32:0000abcd", i)
                  for d in states),
        )
        for i in range(parallelism)
    )
    keyed = any(d.keyed for d in states)
    return OperatorMetadata(uid, uid.upper(), parallelism, max_parallelism, "msgpack" if keyed else None, states, subtasks)


def make_metadata(*operators: OperatorMetadata, fmt: SnapshotFormat = SnapshotFormat.CANONICAL) -> CheckpointMetadata:
    return CheckpointMetadata(
        job_id="0" * 32, checkpoint_id=7, kind=SnapshotKind.CHECKPOINT, format=fmt, created_at_ms=1_700_000_000_000,
        operators=operators or (make_operator(),), job_name="job", properties={"a": "b"},
    )


def encode_body(body: Any, *, version: int = layout.METADATA_VERSION, magic: bytes = layout.METADATA_MAGIC) -> bytes:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return struct.pack("<8sIQ", magic, version, len(raw)) + raw + struct.pack("<I", zlib.crc32(raw))


def body_of(md: CheckpointMetadata) -> dict[str, Any]:
    data = serialize_metadata(md)
    return json.loads(data[layout.METADATA_HEADER.size:-4])  # type: ignore[no-any-return]


def test_round_trip() -> None:
    md = make_metadata(make_operator("a"), make_operator("b", 3, 128, (StateDescriptor("o", StateKind.UNION),)))
    parsed = parse_metadata(serialize_metadata(md), source=SOURCE)
    assert parsed == md
    assert parsed.properties == {"a": "b"}
    assert parsed.operator("b").key_serializer is None
    assert [f.path for f in parsed.files()][:2] == ["a/count/00000-of-00002.sks", "a/attrs/00000-of-00002.sks"]


def test_a_namespace_type_round_trips_and_is_written_only_when_declared() -> None:
    window = StateDescriptor("window-contents", StateKind.LIST, namespace_type="list<int>")
    md = make_metadata(make_operator("w", 2, 8, (window, StateDescriptor("plain", StateKind.VALUE))))
    parsed = parse_metadata(serialize_metadata(md), source=SOURCE)
    assert parsed == md and parsed.operator("w").state("window-contents").namespaced
    assert not parsed.operator("w").state("plain").namespaced
    states = body_of(md)["operators"][0]["states"]
    assert states[0]["namespace_type"] == "list<int>" and "namespace_type" not in states[1]


def test_layout_of_the_header() -> None:
    data = serialize_metadata(make_metadata())
    magic, version, length = struct.unpack_from("<8sIQ", data)
    assert (magic, version) == (b"STKMETA\x01", 1)
    assert len(data) == 20 + length + 4
    assert struct.unpack_from("<I", data, 20 + length)[0] == zlib.crc32(data[20:20 + length])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 300), st.integers(1, 6), st.sampled_from(list(StateKind))),
        min_size=1, max_size=3,
    ),
    st.sampled_from(list(SnapshotKind)),
    st.text(max_size=10),
)
def test_round_trip_property(shapes: list[tuple[int, int, StateKind]], kind: SnapshotKind, name: str) -> None:
    operators = []
    for i, (max_p, p, state_kind) in enumerate(shapes):
        p = min(p, max_p)
        operators.append(make_operator(f"op-{i} {name}", p, max_p, (StateDescriptor("s", state_kind),)))
    md = make_metadata(*operators)
    md = CheckpointMetadata(md.job_id, md.checkpoint_id, kind, md.format, md.created_at_ms, md.operators, name)
    assert parse_metadata(serialize_metadata(md)) == md


def test_lookup_errors_name_the_known_uids_and_states() -> None:
    md = make_metadata()
    with pytest.raises(StateNotFoundError, match=r"no operator with uid 'x' \(operators: op\)"):
        md.operator("x")
    with pytest.raises(StateNotFoundError, match=r"operator 'op' has no state 'x' \(states: count, attrs\)"):
        md.operator("op").state("x")


# ---------------------------------------------------------------- bytes-level damage


def test_truncated_header() -> None:
    with pytest.raises(MetadataError, match=f"^{SOURCE}: truncated metadata \\(5 bytes\\)$"):
        parse_metadata(b"STKME", source=SOURCE)


def test_bad_magic() -> None:
    data = encode_body(body_of(make_metadata()), magic=b"NOTMAGIC")
    with pytest.raises(MetadataError, match="not a statekit _metadata file \\(bad magic\\)") as info:
        parse_metadata(data, source=SOURCE)
    assert str(info.value).startswith(SOURCE + ": ")


def test_future_version() -> None:
    data = encode_body(body_of(make_metadata()), version=2)
    with pytest.raises(UnsupportedVersionError, match="metadata format version 2 is not supported.*upgrade statekit"):
        parse_metadata(data, source=SOURCE)


@pytest.mark.parametrize("cut", [1, 4, 100])
def test_truncated_body(cut: int) -> None:
    data = serialize_metadata(make_metadata())
    with pytest.raises(MetadataError, match="does not match its header.*truncated or padded"):
        parse_metadata(data[:-cut], source=SOURCE)
    with pytest.raises(MetadataError, match="truncated or padded"):
        parse_metadata(data + b"\x00" * cut, source=SOURCE)


def test_checksum_mismatch() -> None:
    data = bytearray(serialize_metadata(make_metadata()))
    data[40] ^= 0x01
    with pytest.raises(MetadataError, match="metadata checksum mismatch: the file is damaged"):
        parse_metadata(bytes(data), source=SOURCE)


@pytest.mark.parametrize("body", [b"{not json", b"\xff\xfe", b"[1, 2]", b"null", b'"text"'])
def test_malformed_json(body: bytes) -> None:
    with pytest.raises(MetadataError, match="not valid JSON|invalid metadata") as info:
        parse_metadata(encode_body(body), source=SOURCE)
    assert type(info.value) is MetadataError


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_bit_flip_or_truncation_is_a_metadata_error(data: st.DataObject) -> None:
    good = serialize_metadata(make_metadata())
    position = data.draw(st.integers(0, len(good) - 1))
    if data.draw(st.booleans()):
        damaged = good[:position]
    else:
        flipped = bytearray(good)
        flipped[position] ^= 1 << data.draw(st.integers(0, 7))
        damaged = bytes(flipped)
    with pytest.raises(MetadataError):
        parse_metadata(damaged, source=SOURCE)


# ---------------------------------------------------------------- semantic validation


def _mutated(mutate: Callable[[dict[str, Any]], None], fmt: SnapshotFormat = SnapshotFormat.CANONICAL) -> bytes:
    body = body_of(make_metadata(fmt=fmt))
    mutate(body)
    return encode_body(body)


def _op(body: dict[str, Any]) -> dict[str, Any]:
    return body["operators"][0]  # type: ignore[no-any-return]


def _file(body: dict[str, Any]) -> dict[str, Any]:
    return _op(body)["subtasks"][0]["files"][0]  # type: ignore[no-any-return]


def _set(path: Callable[[dict[str, Any]], dict[str, Any]], key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda body: path(body).__setitem__(key, value)


INVALID: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("missing job id", lambda b: b.pop("job_id"), "metadata.job_id is missing"),
    ("job id not a string", _set(lambda b: b, "job_id", 5), "metadata.job_id has the wrong type"),
    ("job id a path", _set(lambda b: b, "job_id", "../../x"),
     "job_id '../../x' is not a job id (32 lower-case hex characters)"),
    ("job id upper case", _set(lambda b: b, "job_id", "AB" * 16), "is not a job id"),
    ("job id with a newline", _set(lambda b: b, "job_id", "ab" * 16 + "\n"), "is not a job id"),
    ("checkpoint id bool", _set(lambda b: b, "checkpoint_id", True), "checkpoint_id must be an integer"),
    ("negative checkpoint id", _set(lambda b: b, "checkpoint_id", -1), "checkpoint_id is negative"),
    ("unknown kind", _set(lambda b: b, "kind", "snapshot"), "kind is 'snapshot', expected one of checkpoint, savepoint"),
    ("unknown format", _set(lambda b: b, "format", "rocks"), "format is 'rocks'"),
    ("operators not a list", _set(lambda b: b, "operators", {}), "metadata.operators has the wrong type"),
    ("operator not an object", _set(lambda b: b, "operators", [1]), "operators[0] is not an object"),
    ("duplicate uids", lambda b: b["operators"].append(b["operators"][0]), "duplicate operator uids"),
    ("parallelism above max", _set(_op, "parallelism", 9), "parallelism 9 outside [1, max parallelism 8]"),
    ("parallelism zero", _set(_op, "parallelism", 0), "parallelism 0 outside"),
    ("max parallelism zero", _set(_op, "max_parallelism", 0), "max parallelism 0 outside [1, 32768]"),
    ("max parallelism too large", _set(_op, "max_parallelism", 32769), "max parallelism 32769 outside [1, 32768]"),
    ("range differs from formula", lambda b: _op(b)["subtasks"][0].__setitem__("key_group_range", [0, 4]),
     "subtask 0: key-group range [0, 4] differs from [0, 3]"),
    ("range malformed", lambda b: _op(b)["subtasks"][0].__setitem__("key_group_range", [0]), "key_group_range must be [start, end]"),
    ("subtasks out of order", lambda b: _op(b)["subtasks"].reverse(), "subtasks must be 0..1 in order"),
    ("missing subtask", lambda b: _op(b)["subtasks"].pop(), "subtasks must be 0..1 in order"),
    ("unknown key serializer", _set(_op, "key_serializer", "avro"), "unknown key serializer 'avro'"),
    ("keyed state without key serializer", _set(_op, "key_serializer", None), "keyed state without a key serializer"),
    ("duplicate state names", lambda b: _op(b)["states"].append(_op(b)["states"][0]), "duplicate state names"),
    ("unknown state kind", lambda b: _op(b)["states"][0].__setitem__("kind", "timer"), "kind is 'timer'"),
    ("unknown value serializer", lambda b: _op(b)["states"][0].__setitem__("value_serializer", "xml"), "unknown serializer 'xml'"),
    ("bad value type", lambda b: _op(b)["states"][0].__setitem__("value_type", "list<"), "invalid value type 'list<'"),
    ("non-positive ttl", lambda b: _op(b)["states"][0].__setitem__("ttl_ms", 0), "ttl_ms must be positive"),
    ("bad namespace type", lambda b: _op(b)["states"][0].__setitem__("namespace_type", "list<"),
     "invalid value type 'list<'"),
    ("namespace with a ttl", lambda b: _op(b)["states"][0].update(namespace_type="list<int>", ttl_ms=5),
     "only keyed state without a TTL has a namespace_type"),
    ("file of undeclared state", _set(_file, "state", "ghost"), "file for undeclared state 'ghost'"),
    ("two files for one state", lambda b: _op(b)["subtasks"][0]["files"].append(_file(b)), "two files for one state"),
    ("negative size", _set(_file, "size", -1), "negative size or entry count"),
    ("unknown checksum", _set(_file, "checksum", "md5:abc"), "unknown checksum 'md5:abc'"),
    ("short checksum", _set(_file, "checksum", "crc32:abc"), "unknown checksum 'crc32:abc'"),
]


@pytest.mark.parametrize(("mutate", "cause"), [(m, c) for _, m, c in INVALID], ids=[n for n, _, _ in INVALID])
def test_invalid_metadata(mutate: Callable[[dict[str, Any]], None], cause: str) -> None:
    with pytest.raises(MetadataError) as info:
        parse_metadata(_mutated(mutate), source=SOURCE)
    message = str(info.value)
    assert message.startswith(f"{SOURCE}: invalid metadata: ") and cause in message
    assert "\n" not in message
    assert info.value.exit_code == 2


UNSAFE = ["../escape.sks", "a/../../b.sks", "a/../b.sks", "/etc/passwd", "s3://bucket/key.sks", "file:///x.sks",
          "C:/x.sks", "a//b.sks", "./a.sks", "a/./b.sks", "a\\b.sks", "a\x00b", "", "../shared/x.sks"]


@pytest.mark.parametrize("path", UNSAFE)
def test_unsafe_paths_are_refused(path: str) -> None:
    with pytest.raises(UnsafePathError) as info:
        parse_metadata(_mutated(_set(_file, "path", path)), source=SOURCE)
    assert str(info.value).startswith(f"{SOURCE}: unsafe file path {path!r} in metadata: ")


def test_shared_paths_only_in_native_format() -> None:
    native = parse_metadata(_mutated(_set(_file, "path", "../shared/abc.sks"), SnapshotFormat.NATIVE))
    assert native.files()[0].path == "../shared/abc.sks"
    for path in ("../shared/../x.sks", "../shared/a/../../x.sks", "../other/x.sks", "../shared/"):
        with pytest.raises(UnsafePathError):
            parse_metadata(_mutated(_set(_file, "path", path), SnapshotFormat.NATIVE))


@pytest.mark.parametrize("path", ["a.sks", "op/state/00000-of-00002.sks", "%2E%2E/x.sks", "a..b/c"])
def test_safe_paths(path: str) -> None:
    assert check_relative_path(path) == path


def test_state_file_path_components_cannot_escape() -> None:
    assert layout.state_file_path("..", "s", 0, 1) == "%2E%2E/s/00000-of-00001.sks"
    assert layout.state_file_path("a/b", "../c", 1, 2) == "a%2Fb/..%2Fc/00001-of-00002.sks"
    check_relative_path(layout.state_file_path("a/b", "../c", 1, 2))
