"""Flink-compatible key groups: Java hashCode + MathUtils.murmurHash."""

from __future__ import annotations

import struct

import mmh3
import pytest
from hypothesis import given
from hypothesis import strategies as st

from statekit.flink.keygroups import (
    assign_key_to_operator_flink,
    assign_to_key_group_flink,
    compute_key_group_range_for_operator_index,
    flink_murmur_hash,
    java_hash_code,
    java_long_hash,
    java_string_hash,
)
from statekit.statefmt.errors import BadInputError


@pytest.mark.parametrize(
    ("key", "key_type", "max_parallelism", "expected"),
    [
        (0, "int", 128, 94),
        (0, "int", 32768, 31198),
        (42, "int", 128, 29),
        (42, "int", 32768, 28189),
        (-1, "int", 128, 80),
        (-1, "int", 32768, 15184),
        ("hello", "string", 128, 35),
        ("user-1", "string", 128, 121),
    ],
)
def test_flink_key_group_vectors(key: object, key_type: str, max_parallelism: int, expected: int) -> None:
    assert assign_to_key_group_flink(key, key_type, max_parallelism) == expected


def test_java_hash_codes() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == -2147483648  # a known Integer.MIN_VALUE hash
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # UTF-16 surrogate pair
    assert java_long_hash(1 << 32) == 1
    assert java_long_hash(-1) == 0
    assert java_hash_code(True, "boolean") == 1231 and java_hash_code(False, "boolean") == 1237
    assert java_hash_code("a", "char") == 97
    assert java_hash_code(1.0, "double") == 1072693248
    assert java_hash_code(1.0, "float") == 1065353216
    assert java_hash_code(7, "short") == 7


def test_murmur_of_min_value_hash_is_defined() -> None:
    assert 0 <= flink_murmur_hash(-(1 << 31)) < (1 << 31)


@given(st.integers(-(1 << 31), (1 << 31) - 1))
def test_murmur_hash_is_murmur3_32_of_le_int(code: int) -> None:
    h = mmh3.hash(struct.pack("<i", code), 0, signed=True)
    expected = h if h >= 0 else (0 if h == -(1 << 31) else -h)
    assert flink_murmur_hash(code) == expected


@given(st.integers(-(1 << 31), (1 << 31) - 1), st.integers(1, 64), st.sampled_from([128, 256, 4096, 32768]))
def test_operator_owning_a_key_holds_its_key_group(code: int, parallelism: int, max_par: int) -> None:
    key_group = assign_to_key_group_flink(code, "int", max_par)
    index = assign_key_to_operator_flink(code, "int", max_par, parallelism)
    assert key_group in compute_key_group_range_for_operator_index(max_par, parallelism, index)


@pytest.mark.parametrize(
    ("key", "key_type"),
    [("x", "int"), (1 << 31, "int"), (1 << 63, "long"), (1, "boolean"), ("ab", "char"), (1, "uuid")],
)
def test_bad_keys_are_bad_input(key: object, key_type: str) -> None:
    with pytest.raises(BadInputError):
        java_hash_code(key, key_type)
