"""``statefmt.checksum``: the CRC-32 statekit writes is zlib's, whichever implementation computes
it (ISA-L where the ``isal`` package is installed), over every buffer kind it is handed."""

from __future__ import annotations

import zlib

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekit.statefmt import checksum
from statekit.statefmt.checksum import Crc32, crc32, crc32_combine


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=5000), start=st.integers(0, 0xFFFFFFFF), cut=st.integers(0, 5000))
def test_crc32_is_zlibs_for_any_bytes_and_start_value(data: bytes, start: int, cut: int) -> None:
    expected = zlib.crc32(data, start) & 0xFFFFFFFF
    assert crc32(data, start) == expected
    assert crc32(memoryview(data), start) == expected
    assert crc32(pa.py_buffer(data), start) == expected
    head, tail = data[:cut], data[cut:]
    running = Crc32()
    running.update(head)
    running.combine(zlib.crc32(tail), len(tail))
    assert running.value & 0xFFFFFFFF == zlib.crc32(data) == crc32_combine(crc32(head), crc32(tail), len(tail))


def test_large_buffers_agree_with_zlib() -> None:
    data = bytes(range(256)) * 70_000  # 17.9 MB: the vectorized paths of both
    assert crc32(data) == zlib.crc32(data)
    assert crc32(memoryview(data)[3:-5], 7) == zlib.crc32(memoryview(data)[3:-5], 7)


def test_isal_is_used_where_installed() -> None:
    isal_zlib = pytest.importorskip("isal.isal_zlib")
    assert checksum._crc32 is isal_zlib.crc32


def test_without_isal_zlib_computes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "isal.isal_zlib", None)  # an import of it raises ImportError
    assert checksum._fastest_crc32() is zlib.crc32


@settings(max_examples=300, deadline=None)
@given(crc1=st.integers(0, 0xFFFFFFFF), crc2=st.integers(0, 0xFFFFFFFF), length=st.integers(0, 1 << 40))
def test_crc32_combine_is_the_same_with_and_without_isal(crc1: int, crc2: int, length: int) -> None:
    pytest.importorskip("isal.isal_zlib")
    fast = crc32_combine(crc1, crc2, length)
    saved = checksum._combine
    checksum._combine = None
    try:
        assert crc32_combine(crc1, crc2, length) == fast
    finally:
        checksum._combine = saved


def test_without_isal_combine_falls_back_to_the_arithmetic(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "isal.isal_zlib", None)
    assert checksum._native_crc32_combine() is None
