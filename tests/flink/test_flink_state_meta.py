"""Keyed state names from the keyed backend meta information of real Flink 2.3 state."""

from __future__ import annotations

from typing import Any

import pytest

from statekit.flink import read_keyed_backend_meta
from statekit.statefmt.errors import CorruptStateError

PYTHON_STATE = ("python-state-count", "list")
TIMERS = [("_timer_state/processing_user-timers", "timers"), ("_timer_state/event_user-timers", "timers")]
HEADER = 1507  # the first key-group offset in every golden keyed stream


def _header(golden: Any, name: str, file: str) -> bytes:
    return bytes((golden[name] / file).read_bytes()[:HEADER])


@pytest.mark.parametrize(
    ("name", "file", "order"),
    [
        ("hashmap/savepoint", "876e98d2-7ba3-4bfd-95bd-4f44843c2c61", [PYTHON_STATE, *TIMERS]),
        ("hashmap/chk-4", "d70b93db-afc9-4190-9432-5d637d8b6f20", [PYTHON_STATE, *TIMERS]),
        ("rocksdb-incremental-inline0/chk-4", "f614e5df-98d0-41c2-b86f-33d39612dead", [*TIMERS, PYTHON_STATE]),
    ],
)
def test_state_names_and_kinds(flink_golden: Any, name: str, file: str, order: list[tuple[str, str]]) -> None:
    meta = read_keyed_backend_meta(_header(flink_golden, name, file), source=file)
    assert meta.version == 6 and meta.compressed is False and meta.problem is None
    assert meta.header_size == HEADER
    assert [(s.name, s.kind) for s in meta.states] == order
    assert meta.key_serializer is not None
    assert meta.key_serializer.short_name == "RowSerializer"
    assert meta.key_serializer.nested == (
        "org.apache.flink.api.common.typeutils.base.StringSerializer$StringSerializerSnapshot",)
    by_name = {s.name: s for s in meta.states}
    count = by_name["python-state-count"]
    assert count.backend_type == "key-value" and count.options == {"KEYED_STATE_TYPE": "LIST"}
    assert [(s.key, s.short_name) for s in count.serializers] == [
        ("VALUE_SERIALIZER", "ListSerializer"), ("NAMESPACE_SERIALIZER", "VoidNamespaceSerializer")]
    assert "BytePrimitiveArraySerializer" in count.serializers[0].nested[0]
    timers = by_name["_timer_state/event_user-timers"]
    assert timers.backend_type == "priority-queue" and timers.problem is None


def test_unknown_serializer_is_flagged_and_reading_continues(flink_golden: Any) -> None:
    data = _header(flink_golden, "hashmap/savepoint", "876e98d2-7ba3-4bfd-95bd-4f44843c2c61")
    known = b"org.apache.flink.api.common.typeutils.base.ListSerializerSnapshot"
    unknown = b"com.example.SomeFancySerializer$SomeFancySerializerSnapshot".ljust(len(known), b"X")
    assert len(known) == len(unknown)
    # an unknown class whose content is not a composite snapshot cannot be skipped
    tampered = data.replace(known + b"\x00\x00\x00\x03\x00\x0d\xe7\x04", unknown + b"\x00\x00\x00\x01\x00\x0d\xe7\x04")
    assert tampered != data
    meta = read_keyed_backend_meta(tampered, source="sp")
    assert [(s.name, s.kind) for s in meta.states] == [PYTHON_STATE, *TIMERS]
    flagged = meta.states[0]
    assert flagged.problem is not None and "SomeFancySerializer" in flagged.problem
    assert meta.states[1].problem is None and meta.states[2].problem is None
    assert meta.header_size is None


def test_unknown_key_serializer_still_lists_states(flink_golden: Any) -> None:
    data = _header(flink_golden, "hashmap/savepoint", "876e98d2-7ba3-4bfd-95bd-4f44843c2c61")
    row = b"org.apache.flink.api.java.typeutils.runtime.RowSerializer$RowSerializerSnapshot"
    other = b"org.example.KeyTypeSerializer$PojoSnapshot".ljust(len(row), b"Z")
    assert len(row) == len(other)
    tampered = data.replace(row + b"\x00\x00\x00\x03", other + b"\x00\x00\x00\x07", 1)
    meta = read_keyed_backend_meta(tampered, source="sp")
    assert meta.problem is not None and "key serializer" in meta.problem
    assert [(s.name, s.kind) for s in meta.states] == [PYTHON_STATE, *TIMERS]


def test_truncated_header_is_corrupt_state(flink_golden: Any) -> None:
    data = _header(flink_golden, "hashmap/savepoint", "876e98d2-7ba3-4bfd-95bd-4f44843c2c61")
    for end in range(0, len(data), 7):
        try:
            meta = read_keyed_backend_meta(data[:end], source="cut")
        except CorruptStateError as exc:
            assert "byte offset" in str(exc)
        else:  # a cut inside an unskippable part may still list the states before it
            assert len(meta.states) < 3 or meta.header_size is None


def test_unsupported_proxy_version_is_reported() -> None:
    meta = read_keyed_backend_meta(b"\x00\x00\x00\x05\x00", source="old")
    assert meta.states == () and meta.problem is not None and "version 5" in meta.problem
