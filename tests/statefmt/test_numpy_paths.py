"""The NumPy fast paths of snapshot encoding give exactly what the pyarrow-only paths give:
murmur3 of fixed-width keys, msgpack framing of short strings, the version 2 sort order,
the take of short binary values — and, through all of them, the same state-file bytes."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import pairwise
from typing import Any, TypeVar

import mmh3
import numpy
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from statekit.statefmt import layout, numpy_support
from statekit.statefmt.entries import (
    _BY_OBJECT_PROBE,
    StateCodec,
    _by_object,
    _numpy_hash_sort,
    _take_in_slots,
    group_by_key_group,
    hash_sort_indices,
    take_column,
)
from statekit.statefmt.errors import SerializationError
from statekit.statefmt.keygroups import _numpy_fixed_width, key_hash_column
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.statefmt.serializers import (
    _msgpack_fixstrs,
    _msgpack_ints,
    _msgpack_same_width_strs,
    _numpy_msgpack_int_offsets,
    get_serializer,
    serialize_column,
    serialize_many,
)
from statekit.statefmt.statefile import StateFileWriter

T = TypeVar("T")
ASCII = st.characters(min_codepoint=32, max_codepoint=126)


@contextmanager
def numpy_off() -> Iterator[None]:
    """The pyarrow-only paths: :func:`numpy_or_none` answers None."""
    saved = numpy_support._numpy
    numpy_support._numpy = None
    try:
        yield
    finally:
        numpy_support._numpy = saved


def without_numpy(func: Callable[[], T]) -> T:
    with numpy_off():
        return func()


def test_numpy_is_found_and_can_be_turned_off() -> None:
    assert numpy_support.numpy_or_none() is numpy
    with numpy_off():
        assert numpy_support.numpy_or_none() is None
    assert numpy_support.numpy_or_none() is numpy


# ---------------------------------------------------------------- murmur3 of fixed-width keys


@settings(max_examples=150, deadline=None)
@given(st.integers(8, 48).flatmap(lambda w: st.lists(st.binary(min_size=w, max_size=w), min_size=1, max_size=40)),
       st.integers(0, 5))
def test_numpy_murmur3_equals_mmh3(keys: list[bytes], cut: int) -> None:
    column = pa.array(keys, pa.binary())
    for array in (column, column.slice(min(cut, len(keys) - 1))):
        expected = [mmh3.hash(k, 0, signed=False) for k in array.to_pylist()]
        hashed = _numpy_fixed_width(array, len(keys[0]))
        assert hashed is not None and hashed.type == pa.uint32()
        assert hashed.to_pylist() == expected
        assert key_hash_column(array).equals(hashed)
        assert without_numpy(lambda: key_hash_column(array)).equals(hashed)  # noqa: B023


def test_numpy_murmur3_of_the_bench_keys() -> None:
    """msgpack-framed ``key-%08d`` keys: 13 bytes, a tail of one byte."""
    column = serialize_column(get_serializer("msgpack"), [f"key-{i:08d}" for i in range(5000)], "key")
    expected = [mmh3.hash(k, 0, signed=False) for k in column.to_pylist()]
    assert key_hash_column(column).to_pylist() == expected
    assert without_numpy(lambda: key_hash_column(column)).to_pylist() == expected


# ---------------------------------------------------------------- msgpack framing of strings

TEXTS = st.lists(st.one_of(st.text(max_size=12), st.text(max_size=40), st.sampled_from(["", "a\x00b", "\x00", "é" * 15])),
                 min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(TEXTS)
def test_numpy_msgpack_strings_equal_value_by_value(values: list[str]) -> None:
    msgpack_ = get_serializer("msgpack")
    expected = serialize_many(msgpack_, values, "key")
    framed = serialize_column(msgpack_, values, "key")
    framed.validate(full=True)
    assert framed.to_pylist() == expected
    assert without_numpy(lambda: serialize_column(msgpack_, values, "key")).equals(framed)
    direct = _msgpack_fixstrs(values)
    eligible = all("\x00" not in v and len(v.encode()) < 32 for v in values)
    assert (direct is not None) == eligible
    if direct is not None:
        assert direct.to_pylist() == expected


def test_numpy_msgpack_strings_leave_other_columns_to_the_general_path() -> None:
    assert _msgpack_fixstrs(["a", b"b"]) is None  # not every value a str
    assert _msgpack_fixstrs(["a", None]) is None
    assert _msgpack_fixstrs(["a", "\ud800"]) is None  # a lone surrogate: no UTF-8
    assert _msgpack_fixstrs(["a", "x" * 32]) is None  # str 8 header
    assert _msgpack_fixstrs(["a", "x\x00"]) is None
    assert _msgpack_fixstrs(["x" * 31, ""]) is not None


# ---------------------------------------------------------------- version 2 order


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.binary(max_size=2)), min_size=1, max_size=80),
       st.sampled_from([1, 2, 7, 128, 1000, 5000, 32768]), st.booleans())
def test_numpy_sort_equals_the_radix_sort(rows: list[tuple[int, bytes]], max_p: int, spread: bool) -> None:
    """Many equal key hashes (ties, duplicates): the same indices as the radix sort."""
    hashes = [h * (2_654_435_761 if spread else 1) % 2**32 for h, _ in rows]
    table = pa.table({"key_hash": pa.array(hashes, pa.uint32()), "key": pa.array([k for _, k in rows], pa.binary())})
    sorted_ = _numpy_hash_sort(table.column("key_hash").combine_chunks(), max_p)
    assert sorted_ is not None
    order = sorted(range(len(rows)), key=lambda i: (hashes[i] % max_p, hashes[i], i))  # stable
    assert sorted_.to_pylist() == order
    assert hash_sort_indices(table, max_p, ["key"]).equals(
        without_numpy(lambda: hash_sort_indices(table, max_p, ["key"])))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 2**32 - 1), min_size=64, max_size=200), min_size=1, max_size=4),
       st.sampled_from([1, 128, 1000]))
def test_numpy_sort_of_sorted_runs_equals_the_stable_order(runs: list[list[int]], max_p: int) -> None:
    """Keys made of long sorted runs (NumPy's merge sort): the same indices as a stable sort."""
    hashes = [h for run in runs for h in sorted(run)]
    sorted_ = _numpy_hash_sort(pa.array(hashes, pa.uint32()), max_p)
    assert sorted_ is not None
    assert sorted_.to_pylist() == sorted(range(len(hashes)), key=lambda i: (hashes[i] % max_p, hashes[i], i))


# ---------------------------------------------------------------- take of short values


@settings(max_examples=150, deadline=None)
@given(st.lists(st.binary(max_size=16), min_size=1, max_size=60), st.data())
def test_take_in_slots_equals_take(values: list[bytes], data: Any) -> None:
    column = pa.array(values, pa.binary())
    indices = pa.array(data.draw(st.lists(st.integers(0, len(values) - 1), min_size=1, max_size=2 * len(values))),
                       pa.uint32())
    expected = column.take(indices)
    slotted = _take_in_slots(column, indices, max(map(len, values)))
    assert slotted is not None
    slotted.validate(full=True)
    assert slotted.equals(expected)
    taken = take_column(column, indices)
    assert taken.equals(expected)
    assert without_numpy(lambda: take_column(column, indices)).equals(expected)


def test_take_in_slots_refuses_longer_values() -> None:
    column = pa.array([b"x" * 17, b"y"], pa.binary())
    assert _take_in_slots(column, pa.array([1, 0], pa.uint32()), 17) is None
    assert take_column(column, pa.array([1, 0], pa.uint32())).to_pylist() == [b"y", b"x" * 17]


# ---------------------------------------------------------------- whole files, byte for byte


def file_bytes(descriptor: StateDescriptor, rows: list[Any], max_p: int) -> bytes:
    codec = StateCodec(descriptor, "msgpack", for_write=True)
    out = io.BytesIO()
    writer = StateFileWriter(out, layout.FILE_KIND_KEYED, path="t.sks")
    writer.write_blocks(group_by_key_group(codec.encode_keyed_rows(rows), max_p))
    writer.finish()
    return out.getvalue()


KEYS = st.one_of(st.text(max_size=8), st.integers(-(2**40), 2**40), st.sampled_from(["a\x00", "k" * 40]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(KEYS, st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(0, 300))), min_size=1,
                max_size=80), st.sampled_from([None, "int"]), st.sampled_from([7, 128, 4096]))
def test_files_are_byte_identical_with_and_without_numpy(rows: list[tuple[Any, int]], value_type: str | None,
                                                        max_p: int) -> None:
    descriptor = StateDescriptor("v", StateKind.VALUE, value_type=value_type)
    assert file_bytes(descriptor, rows, max_p) == without_numpy(lambda: file_bytes(descriptor, rows, max_p))


def test_the_bench_shape_is_byte_identical_with_and_without_numpy() -> None:
    """format_bench's rows (fixed-width string keys, int values), typed and msgpack values,
    with duplicates (the last write wins)."""
    rows = [(f"key-{i % 30_000:08d}", i * 7919 % 100_003) for i in range(40_000)]
    for value_type in ("int", None):
        descriptor = StateDescriptor("count", StateKind.VALUE, value_type=value_type)
        for max_p in (128, 1000):
            assert file_bytes(descriptor, rows, max_p) == without_numpy(lambda: file_bytes(descriptor, rows, max_p))  # noqa: B023


def window_rows(keys: int, windows: int, shared: bool) -> tuple[list[Any], list[Any]]:
    """Window-shaped rows: (key, window) -> count and (key, window) -> {timer: True}; with
    ``shared``, every key of a window holds the same namespace and timer objects (as the
    runtime's tables do), else equal copies."""
    contents, timers = [], []
    for w in range(windows):
        namespace, timer = (1_000 * w, 1_000 * w + 1_000), (0, 1_000 * w + 999)
        for k in range(keys):
            ns = namespace if shared else (*namespace,)  # a new, equal tuple
            uk = timer if shared else (*timer,)
            contents.append((f"key-{k * 7919 % 10_000}", ns, k % 17))
            timers.append((f"key-{k * 7919 % 10_000}", ns, uk, True))
    return contents, timers


@pytest.mark.parametrize("shared", [True, False])
def test_window_state_is_byte_identical_with_and_without_numpy_and_shared_objects(shared: bool) -> None:
    """Namespaces and timer user keys shared by thousands of rows are serialized once per
    object (:func:`_by_object`), and block offsets rebased with NumPy: the same bytes as
    without NumPy, and as equal but unshared objects, each serialized on its own."""
    contents, timers = window_rows(3_000, 3, shared)
    value = StateDescriptor("window-contents", StateKind.VALUE, namespace_type="list<int>")
    timer = StateDescriptor("_window_timers", StateKind.MAP, value_type="bool", user_key_type="list<int>",
                            namespace_type="list<int>")
    for descriptor, rows in ((value, contents), (timer, timers)):
        for max_p in (128, 1000):
            data = file_bytes(descriptor, rows, max_p)
            assert data == without_numpy(lambda: file_bytes(descriptor, rows, max_p))  # noqa: B023
            unshared = window_rows(3_000, 3, False)[0 if descriptor is value else 1]
            assert data == file_bytes(descriptor, unshared, max_p)


@pytest.mark.parametrize("numpy_on", [True, False])
def test_by_object_finds_distinct_objects_in_order_of_first_appearance(numpy_on: bool) -> None:
    a, b, c = (1, 2), (True, 2), (*(1, 2),)  # equal tuples, three objects: never merged by equality
    values = [b, a, b, c, a, None, c] * 40
    found = _by_object(values) if numpy_on else without_numpy(lambda: _by_object(values))
    assert found is not None
    distinct, positions = found
    assert [id(v) for v in distinct] == [id(b), id(a), id(c), id(None)]
    assert positions.type == pa.int32()
    assert [distinct[i] is v for i, v in zip(positions.to_pylist(), values)] == [True] * len(values)


@pytest.mark.parametrize("numpy_on", [True, False])
def test_by_object_declines_mostly_distinct_columns(numpy_on: bool) -> None:
    run = (lambda f: f()) if numpy_on else without_numpy
    assert run(lambda: _by_object([(i,) for i in range(100)])) is None
    few = [(i % 25,) for i in range(100)]  # 100 objects, all distinct (a tuple per row)
    assert run(lambda: _by_object(few)) is None
    shared = [("x",), ("y",)]
    assert run(lambda: _by_object([shared[i % 2] for i in range(100)])) is not None
    # a long column whose first values are mostly distinct is declined from its start alone
    long = [(i,) for i in range(_BY_OBJECT_PROBE)] + [shared[0]] * (8 * _BY_OBJECT_PROBE)
    assert run(lambda: _by_object(long)) is None
    assert _by_object([]) == ([], _by_object([])[1]) and len(_by_object([])[1]) == 0  # type: ignore[index]


def test_user_key_type_errors_name_the_first_bad_user_key_in_row_order() -> None:
    """Shared user keys are checked once per object; the error is the one checking every row gives."""
    descriptor = StateDescriptor("m", StateKind.MAP, value_type="bool", user_key_type="list<int>")
    good, bad1, bad2 = (1, 2), (1.5, 2), (1, "y")  # bad2 comes first in row order
    rows = [(f"k{i}", [good, bad2, bad1][min(i // 50, 2)], True) for i in range(150)]
    codec = StateCodec(descriptor, "msgpack", for_write=True)
    with pytest.raises(SerializationError) as shared_error:
        codec.encode_keyed_rows(rows)
    unshared = [(k, (*u,), v) for k, u, v in rows]  # equal tuples, one object per row
    with pytest.raises(SerializationError) as row_error:
        codec.encode_keyed_rows(unshared)
    assert str(shared_error.value) == str(row_error.value)
    assert str(shared_error.value).endswith("expected int, got str")


# ---------------------------------------------------------------- msgpack framing of ints

BOUNDARIES = [0, -1, -32, -33, 127, 128, -128, -129, 255, 256, -32768, -32769, 65535, 65536, -(2**31), -(2**31) - 1,
              2**32 - 1, 2**32, 2**63 - 1, -(2**63)]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(BOUNDARIES), st.integers(-(2**63), 2**63 - 1)), min_size=1, max_size=60))
def test_numpy_msgpack_ints_equal_value_by_value(values: list[int]) -> None:
    msgpack_ = get_serializer("msgpack")
    offsets = _numpy_msgpack_int_offsets(values)
    assert offsets is not None
    ends = memoryview(offsets).cast("i").tolist()
    assert [b - a for a, b in pairwise(ends)] == [len(b) for b in serialize_many(msgpack_, values, "value")]
    framed = serialize_column(msgpack_, values, "value")
    assert framed.to_pylist() == serialize_many(msgpack_, values, "value")
    assert without_numpy(lambda: serialize_column(msgpack_, values, "value")).equals(framed)


def test_numpy_msgpack_ints_beyond_int64_go_value_by_value() -> None:
    msgpack_ = get_serializer("msgpack")
    for values in ([2**63, 1], [1, 2**64 - 1]):  # beyond int64, within msgpack (uint64)
        assert _msgpack_ints(values) is None
        assert serialize_column(msgpack_, values, "value").to_pylist() == serialize_many(msgpack_, values, "value")


@settings(max_examples=200, deadline=None)
@example(["x" * 31, "y" * 31], [], 0)
@example(["x" * 32, "y" * 32], [7], 1)
@example(["é" * 16], [], 0)
@example(["x" * 255], [], 0)
@example(["x" * 256], [], 0)
@example(["", ""], [b""], 1)
@given(st.integers(0, 300).flatmap(lambda w: st.lists(st.text(ASCII, min_size=w, max_size=w), min_size=1, max_size=30)),
       st.lists(st.one_of(st.integers(-3, 3), st.binary(max_size=3), st.text(max_size=3), st.none()), max_size=3),
       st.integers(0, 30))
def test_numpy_same_width_strings_equal_value_by_value(values: list[str], intruders: list[Any], at: int) -> None:
    """Fixed-width strings (one header for all; str 8 from 32 bytes on), and the same with
    values of other types or lengths mixed in: the bytes ``serialize_many`` gives."""
    msgpack_ = get_serializer("msgpack")
    mixed = values[:at] + intruders + values[at:]
    for column in (values, mixed):
        try:
            expected = serialize_many(msgpack_, column, "key")
        except Exception:  # noqa: BLE001 - None is no msgpack key: refused either way
            continue
        direct = _msgpack_same_width_strs(column)
        if direct is not None:
            assert direct.to_pylist() == expected
        assert serialize_column(msgpack_, column, "key").to_pylist() == expected
        assert without_numpy(lambda: serialize_column(msgpack_, column, "key")).to_pylist() == expected  # noqa: B023
    width = len(values[0].encode())
    assert (_msgpack_same_width_strs(values) is not None) == (width < 256)


def test_pooled_arrays_are_writable_and_exactly_sized() -> None:
    for n in (0, 1, 1000):
        array = numpy_support.pooled_empty(numpy, n, numpy.uint32)
        assert array.shape == (n,) and array.dtype == numpy.uint32 and array.flags.writeable
        array[:] = 7
        assert int(array.sum()) == 7 * n
