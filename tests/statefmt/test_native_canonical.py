"""Store entries of the native RocksDB layout to canonical keyed tables (what a runtime snapshot
and the offline canonical view of a native snapshot both build): namespaces, user keys, TTL values."""

from __future__ import annotations

import pytest

from statekit.statefmt.errors import CorruptStateError
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.statefmt.native_canonical import native_keyed_table, strip_ttl_value
from statekit.statefmt.native_state import NO_EXPIRY, TTL_EXPIRY, namespace_bytes
from statekit.statefmt.serializers import decode_list, encode_list


def ttl(expiry: int | None, value: bytes) -> bytes:
    return TTL_EXPIRY.pack(NO_EXPIRY if expiry is None else expiry) + value


def test_a_namespaced_map_states_rest_of_key_splits_into_namespace_and_user_key() -> None:
    descriptor = StateDescriptor("m", StateKind.MAP, user_key_serializer="msgpack", namespace_type="list<int>")
    table = native_keyed_table([(b"k1", namespace_bytes(b"ns-a") + b"uk", b"v1"),
                                (b"k2", namespace_bytes(b"") + b"", b"v2")], descriptor, None, "/snap")
    assert table is not None
    assert table.column("key").to_pylist() == [b"k1", b"k2"]
    assert table.column("namespace").to_pylist() == [b"ns-a", b""]
    assert table.column("user_key").to_pylist() == [b"uk", b""]
    assert table.column("value").to_pylist() == [b"v1", b"v2"]


def test_a_plain_value_state_keeps_the_void_namespace_and_no_user_key() -> None:
    table = native_keyed_table([(b"k", b"", b"v")], StateDescriptor("v", StateKind.VALUE), None, "/snap")
    assert table is not None
    assert table.column("namespace").to_pylist() == [b""] and table.column("user_key").to_pylist() == [None]


@pytest.mark.parametrize("rest", [b"", b"\x00\x00", b"\x00\x00\x00\x05abc"])
def test_a_store_key_without_a_whole_namespace_is_corrupt_state(rest: bytes) -> None:
    descriptor = StateDescriptor("window-contents", StateKind.VALUE, namespace_type="list<int>")
    with pytest.raises(CorruptStateError) as failure:
        native_keyed_table([(b"k", rest, b"v")], descriptor, None, "/snap")
    message = str(failure.value)
    assert message.startswith("/snap") and "state 'window-contents'" in message and "\n" not in message


def test_ttl_values_split_and_entries_expired_at_the_drop_time_are_left_out() -> None:
    descriptor = StateDescriptor("t", StateKind.VALUE, ttl_ms=10)
    entries = [(b"a", b"", ttl(100, b"x")), (b"b", b"", ttl(None, b"y")), (b"c", b"", ttl(50, b"z"))]
    kept = native_keyed_table(entries, descriptor, 60, "/snap")
    assert kept is not None
    assert list(zip(kept.column("key").to_pylist(), kept.column("value").to_pylist(),
                    kept.column("expiry").to_pylist())) == [(b"a", b"x", 100), (b"b", b"y", None)]
    everything = native_keyed_table(entries, descriptor, None, "/snap")  # the offline view drops nothing
    assert everything is not None and everything.column("expiry").to_pylist() == [100, None, 50]
    assert native_keyed_table([(b"c", b"", ttl(50, b"z"))], descriptor, 60, "/snap") is None


def test_a_ttl_list_keeps_its_live_elements_and_their_latest_expiry() -> None:
    stored = encode_list([ttl(30, b"old"), ttl(90, b"new"), ttl(70, b"mid")])
    stripped = strip_ttl_value(StateKind.LIST, stored, 50)
    assert stripped is not None
    value, expiry = stripped
    assert decode_list(value) == [b"new", b"mid"] and expiry == 90
    forever = strip_ttl_value(StateKind.LIST, encode_list([ttl(30, b"a"), ttl(None, b"b")]), None)
    assert forever is not None and forever[1] is None  # one element never expires: nor does the entry
    assert strip_ttl_value(StateKind.LIST, stored, 100) is None
