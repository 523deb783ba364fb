"""Key groups: Flink's KeyGroupRangeAssignment formulas, exact vectors and properties."""

from __future__ import annotations

import itertools

import mmh3
import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekit.statefmt.errors import BadInputError
from statekit.statefmt.keygroups import (
    KeyGroupRange,
    assign_key_to_parallel_operator,
    assign_to_key_group,
    check_parallelism,
    compute_default_max_parallelism,
    compute_key_group_range_for_operator_index,
    compute_operator_index_for_key_group,
    key_hash,
)


def test_ranges_for_max_parallelism_128_and_parallelism_3() -> None:
    ranges = [compute_key_group_range_for_operator_index(128, 3, i) for i in range(3)]
    assert [r.to_list() for r in ranges] == [[0, 42], [43, 85], [86, 127]]


@pytest.mark.parametrize(
    ("parallelism", "expected"),
    [(1, 128), (85, 128), (86, 256), (1000, 2048), (30000, 32768), (32768, 32768)],
)
def test_default_max_parallelism(parallelism: int, expected: int) -> None:
    assert compute_default_max_parallelism(parallelism) == expected


def test_default_max_parallelism_refuses_zero() -> None:
    with pytest.raises(BadInputError, match="at least 1"):
        compute_default_max_parallelism(0)


def test_key_group_is_murmur3_of_the_serialized_key() -> None:
    key = msgpack.packb("alice")
    assert key_hash(key) == mmh3.hash(key, 0, signed=False)
    assert assign_to_key_group(key, 128) == mmh3.hash(key, 0, signed=False) % 128
    # a fixed vector: stable across processes and Python versions
    assert key_hash(b"") == 0
    assert key_hash(b"hello") == 0x248BFA47
    assert assign_to_key_group(b"hello", 128) == 0x248BFA47 % 128


def test_key_to_subtask_goes_through_its_key_group() -> None:
    for key in (b"a", b"b", b"\x00\x01", b"statekit"):
        kg = assign_to_key_group(key, 256)
        assert assign_key_to_parallel_operator(key, 256, 7) == kg * 7 // 256


def test_key_group_range_container() -> None:
    r = KeyGroupRange(3, 6)
    assert len(r) == 4 and list(r) == [3, 4, 5, 6]
    assert 3 in r and 6 in r and 7 not in r and "3" not in r
    assert len(KeyGroupRange(5, 4)) == 0 and list(KeyGroupRange(5, 4)) == []
    assert r.intersection(KeyGroupRange(5, 10)) == KeyGroupRange(5, 6)
    assert len(r.intersection(KeyGroupRange(7, 10))) == 0


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 32768).flatmap(lambda m: st.tuples(st.just(m), st.integers(1, min(m, 512)))))
def test_ranges_partition_all_key_groups(mp: tuple[int, int]) -> None:
    max_parallelism, parallelism = mp
    ranges = [compute_key_group_range_for_operator_index(max_parallelism, parallelism, i) for i in range(parallelism)]
    assert ranges[0].start == 0 and ranges[-1].end == max_parallelism - 1
    for previous, current in itertools.pairwise(ranges):
        assert current.start == previous.end + 1
    assert all(len(r) >= 1 for r in ranges)
    sizes = {len(r) for r in ranges}
    assert max(sizes) - min(sizes) <= 1
    for index, r in enumerate(ranges):
        for kg in {r.start, r.end, (r.start + r.end) // 2}:
            assert compute_operator_index_for_key_group(max_parallelism, parallelism, kg) == index


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 300).flatmap(lambda m: st.tuples(st.just(m), st.integers(1, m))))
def test_every_key_group_maps_back_to_its_own_subtask(mp: tuple[int, int]) -> None:
    max_parallelism, parallelism = mp
    owners = [compute_operator_index_for_key_group(max_parallelism, parallelism, kg) for kg in range(max_parallelism)]
    for index in range(parallelism):
        r = compute_key_group_range_for_operator_index(max_parallelism, parallelism, index)
        assert [kg for kg, owner in enumerate(owners) if owner == index] == list(r)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=64), st.integers(1, 32768))
def test_every_key_lands_in_a_valid_key_group(key: bytes, max_parallelism: int) -> None:
    kg = assign_to_key_group(key, max_parallelism)
    assert 0 <= kg < max_parallelism
    assert kg == assign_to_key_group(bytes(key), max_parallelism)


@pytest.mark.parametrize(
    ("parallelism", "max_parallelism", "message"),
    [
        (4, 3, "parallelism 4 is larger than max parallelism 3"),
        (1, 0, r"max parallelism must be in \[1, 32768\], got 0"),
        (1, 32769, r"max parallelism must be in \[1, 32768\], got 32769"),
        (1, -5, "max parallelism must be in"),
        (0, 128, "parallelism must be at least 1, got 0"),
        (-1, 128, "parallelism must be at least 1"),
    ],
)
def test_check_parallelism_errors(parallelism: int, max_parallelism: int, message: str) -> None:
    with pytest.raises(BadInputError, match=message):
        check_parallelism(parallelism, max_parallelism)


def test_check_parallelism_accepts_the_bounds() -> None:
    check_parallelism(1, 1)
    check_parallelism(32768, 32768)
    check_parallelism(1, 32768)


def test_range_for_an_operator_index_outside_parallelism() -> None:
    with pytest.raises(BadInputError, match=r"operator index 3 is outside \[0, 2\]"):
        compute_key_group_range_for_operator_index(128, 3, 3)
    with pytest.raises(BadInputError):
        compute_key_group_range_for_operator_index(128, 3, -1)
    with pytest.raises(BadInputError, match="larger than max parallelism"):
        compute_key_group_range_for_operator_index(2, 3, 0)
