"""Serializers: round trips of every registered serializer, errors, and the pickle guard."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekit.statefmt.errors import BadInputError, SerializationError, UntrustedSerializerError
from statekit.statefmt.serializers import (
    SERIALIZER_NAMES,
    decode_list,
    deserialize_many,
    deserialize_with,
    encode_list,
    get_serializer,
    serialize_many,
    serialize_with,
)

FAST = settings(max_examples=60, deadline=None)

_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False) | st.text(max_size=20)
msgpack_values = st.recursive(
    _scalars | st.binary(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
ROUND_TRIPS: dict[str, st.SearchStrategy[Any]] = {
    "msgpack": msgpack_values,
    "json": json_values,
    "utf8": st.text(max_size=50),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "bytes": st.binary(max_size=64),
    "pickle": msgpack_values | st.tuples(st.integers(), st.text(max_size=5)) | st.frozensets(st.integers(), max_size=4),
}


def test_every_registered_serializer_has_a_round_trip_test() -> None:
    assert set(ROUND_TRIPS) == set(SERIALIZER_NAMES)


@pytest.mark.parametrize("name", sorted(ROUND_TRIPS))
def test_round_trip(name: str) -> None:
    serializer = get_serializer(name, trust_pickle=True)

    @FAST
    @given(ROUND_TRIPS[name])
    def check(value: Any) -> None:
        data = serialize_with(serializer, value, "value")
        assert isinstance(data, bytes)
        assert deserialize_with(serializer, data, "value") == value
        # the column-at-a-time paths agree with the item-at-a-time ones
        assert serialize_many(serializer, [value, value], "value") == [data, data]
        assert deserialize_many(serializer, [data], "value") == [value]

    check()


@FAST
@given(st.lists(st.binary(max_size=16), max_size=8))
def test_list_frame_round_trip(elements: list[bytes]) -> None:
    assert decode_list(encode_list(elements)) == elements


@FAST
@given(st.lists(st.binary(max_size=16), min_size=1, max_size=8), st.data())
def test_truncated_list_frame_is_refused(elements: list[bytes], data: st.DataObject) -> None:
    frame = encode_list(elements)
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises(ValueError):
        decode_list(frame[:cut])
    with pytest.raises(ValueError, match="trailing"):
        decode_list(frame + b"\x00")


def test_msgpack_is_the_default_and_safe() -> None:
    serializer = get_serializer("msgpack")
    assert serializer.safe
    assert serializer.deserialize(serializer.serialize({"a": [1, b"x"]})) == {"a": [1, b"x"]}


def test_json_is_canonical() -> None:
    assert get_serializer("json").serialize({"b": 1, "a": [1, 2]}) == b'{"a":[1,2],"b":1}'


def test_int64_is_big_endian_signed() -> None:
    assert get_serializer("int64").serialize(-2) == b"\xff" * 7 + b"\xfe"


@pytest.mark.parametrize(
    ("name", "value", "cause"),
    [
        ("utf8", 5, "expected str"),
        ("int64", "5", "expected int"),
        ("int64", True, "expected int"),
        ("int64", 2**63, "int64"),
        ("bytes", "abc", "expected bytes"),
        ("json", float("nan"), "json"),
        ("json", {1: object()}, "json"),
        ("msgpack", object(), "msgpack"),
    ],
)
def test_unserializable_values_raise_serialization_error(name: str, value: Any, cause: str) -> None:
    serializer = get_serializer(name)
    with pytest.raises(SerializationError, match=cause):
        serialize_with(serializer, value, "value")
    with pytest.raises(SerializationError, match=cause):
        serialize_many(serializer, [value], "value")


@pytest.mark.parametrize(
    ("name", "data"),
    [("int64", b"\x00\x01"), ("utf8", b"\xff\xfe"), ("json", b"{not json"), ("msgpack", b"\xc1")],
)
def test_undecodable_bytes_raise_serialization_error(name: str, data: bytes) -> None:
    serializer = get_serializer(name)
    with pytest.raises(SerializationError, match=f"cannot decode value with {name!r}"):
        deserialize_with(serializer, data, "value", source="/sp/_metadata")
    with pytest.raises(SerializationError, match="/sp/_metadata"):
        deserialize_many(serializer, [data], "value", source="/sp/_metadata")


def test_unknown_serializer_is_bad_input() -> None:
    with pytest.raises(BadInputError, match="unknown serializer 'avro'.*known: msgpack"):
        get_serializer("avro")


def test_pickle_is_refused_on_read_without_trust() -> None:
    with pytest.raises(UntrustedSerializerError) as info:
        get_serializer("pickle")
    message = str(info.value)
    assert "can run arbitrary code" in message and "--trust-pickle" in message and "trust_pickle=True" in message
    assert info.value.exit_code == 2


def test_pickle_is_allowed_to_write_and_with_trust_to_read() -> None:
    writer = get_serializer("pickle", for_write=True)
    assert not writer.safe
    data = writer.serialize({"x": (1, 2)})
    assert data == pickle.dumps({"x": (1, 2)}, protocol=pickle.HIGHEST_PROTOCOL)
    assert get_serializer("pickle", trust_pickle=True).deserialize(data) == {"x": (1, 2)}


def test_only_pickle_is_unsafe() -> None:
    unsafe = [name for name in SERIALIZER_NAMES if not get_serializer(name, trust_pickle=True).safe]
    assert unsafe == ["pickle"]
