"""Flink-compatible key groups: Java ``hashCode`` + ``MathUtils.murmurHash``.

Flink assigns a key to ``murmurHash(key.hashCode()) % maxParallelism``
(``KeyGroupRangeAssignment.assignToKeyGroup``), so the key group depends on the Java
``hashCode`` of the key object, not on its serialized bytes (unlike statekit's own format).
The ranges and operator indexes are the same arithmetic as ``statekit.statefmt.keygroups``.

Invariant: for every 32-bit ``code``, :func:`flink_murmur_hash` equals Java's
``MathUtils.murmurHash(code)``: murmur3_32 (seed 0) of the int's 4 little-endian bytes,
made non-negative (``Integer.MIN_VALUE`` maps to 0).
"""

from __future__ import annotations

import math
import struct
from typing import Literal

from statekit.statefmt.errors import BadInputError
from statekit.statefmt.keygroups import (
    KeyGroupRange,
    check_parallelism,
    compute_default_max_parallelism,
    compute_key_group_range_for_operator_index,
    compute_operator_index_for_key_group,
)

__all__ = [
    "KeyType",
    "KEY_TYPES",
    "java_string_hash",
    "java_long_hash",
    "java_hash_code",
    "flink_murmur_hash",
    "compute_key_group_for_key_hash",
    "assign_to_key_group_flink",
    "assign_key_to_operator_flink",
    "compute_operator_index_for_key_group",
    "compute_key_group_range_for_operator_index",
    "compute_default_max_parallelism",
    "KeyGroupRange",
]

KeyType = Literal["string", "int", "long", "short", "byte", "boolean", "char", "double", "float"]
KEY_TYPES: tuple[str, ...] = ("string", "int", "long", "short", "byte", "boolean", "char", "double", "float")

_MASK32 = 0xFFFFFFFF
_INT_RANGES = {"int": 32, "long": 64, "short": 16, "byte": 8}


def _to_int32(value: int) -> int:
    value &= _MASK32
    return value - (1 << 32) if value & 0x80000000 else value


def _rotl32(value: int, shift: int) -> int:
    return ((value << shift) | (value >> (32 - shift))) & _MASK32


def java_string_hash(text: str) -> int:
    """Java ``String.hashCode()``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units."""
    h = 0
    utf16 = text.encode("utf-16-be", errors="surrogatepass")
    for (unit,) in struct.iter_unpack(">H", utf16):
        h = (31 * h + unit) & _MASK32
    return _to_int32(h)


def java_long_hash(value: int) -> int:
    """Java ``Long.hashCode()``: ``(int) (value ^ (value >>> 32))``."""
    bits = value & 0xFFFFFFFFFFFFFFFF
    return _to_int32(bits ^ (bits >> 32))


def _double_hash(value: float) -> int:
    bits = 0x7FF8000000000000 if math.isnan(value) else struct.unpack(">q", struct.pack(">d", value))[0]
    return java_long_hash(bits)


def _float_hash(value: float) -> int:
    if math.isnan(value):
        return 0x7FC00000
    return int(struct.unpack(">i", struct.pack(">f", value))[0])


def _checked_int(key: object, key_type: str) -> int:
    if isinstance(key, bool) or not isinstance(key, int):
        raise BadInputError(f"a {key_type} key must be an int, got {type(key).__name__}")
    bits = _INT_RANGES[key_type]
    if not -(1 << (bits - 1)) <= key < (1 << (bits - 1)):
        raise BadInputError(f"{key} is out of range for a Java {key_type}")
    return key


def java_hash_code(key: object, key_type: KeyType | str) -> int:
    """The Java ``hashCode()`` of ``key`` boxed as the Java type ``key_type``.

    Args:
        key: A Python value: ``str`` for string/char, ``int`` for int/long/short/byte,
            ``bool`` for boolean, ``float`` for double/float.
        key_type: One of :data:`KEY_TYPES`.

    Raises:
        BadInputError: An unknown key type, or a value that does not fit it.
    """
    if key_type == "string":
        if not isinstance(key, str):
            raise BadInputError(f"a string key must be a str, got {type(key).__name__}")
        return java_string_hash(key)
    if key_type in ("int", "short", "byte"):
        return _checked_int(key, key_type)
    if key_type == "long":
        return java_long_hash(_checked_int(key, key_type))
    if key_type == "boolean":
        if not isinstance(key, bool):
            raise BadInputError(f"a boolean key must be a bool, got {type(key).__name__}")
        return 1231 if key else 1237
    if key_type == "char":
        if not isinstance(key, str) or len(key.encode("utf-16-be", errors="surrogatepass")) != 2:
            raise BadInputError("a char key must be a single UTF-16 code unit")
        return ord(key)
    if key_type in ("double", "float"):
        if isinstance(key, bool) or not isinstance(key, (int, float)):
            raise BadInputError(f"a {key_type} key must be a float, got {type(key).__name__}")
        return _double_hash(float(key)) if key_type == "double" else _float_hash(float(key))
    raise BadInputError(f"unknown key type {key_type!r} (known: {', '.join(KEY_TYPES)})")


def flink_murmur_hash(code: int) -> int:
    """Flink's ``MathUtils.murmurHash(int)``: a non-negative 31-bit hash of a Java int."""
    k = (code & _MASK32) * 0xCC9E2D51 & _MASK32
    k = _rotl32(k, 15)
    k = k * 0x1B873593 & _MASK32
    k = _rotl32(k, 13)
    k = (k * 5 + 0xE6546B64) & _MASK32
    k ^= 4
    k ^= k >> 16
    k = k * 0x85EBCA6B & _MASK32
    k ^= k >> 13
    k = k * 0xC2B2AE35 & _MASK32
    k ^= k >> 16
    signed = _to_int32(k)
    if signed >= 0:
        return signed
    return 0 if signed == -(1 << 31) else -signed


def compute_key_group_for_key_hash(key_hash: int, max_parallelism: int) -> int:
    """``murmurHash(keyHash) % maxParallelism`` (Flink's ``computeKeyGroupForKeyHash``)."""
    check_parallelism(1, max_parallelism)
    return flink_murmur_hash(key_hash) % max_parallelism


def assign_to_key_group_flink(key: object, key_type: KeyType | str, max_parallelism: int) -> int:
    """The key group Flink assigns ``key`` (a Java ``key_type``) with ``max_parallelism``.

    Example:
        >>> assign_to_key_group_flink(42, "int", 128)
        29
    """
    return compute_key_group_for_key_hash(java_hash_code(key, key_type), max_parallelism)


def assign_key_to_operator_flink(
    key: object, key_type: KeyType | str, max_parallelism: int, parallelism: int
) -> int:
    """The subtask index that owns ``key`` (Flink's ``assignKeyToParallelOperator``)."""
    check_parallelism(parallelism, max_parallelism)
    key_group = assign_to_key_group_flink(key, key_type, max_parallelism)
    return int(compute_operator_index_for_key_group(max_parallelism, parallelism, key_group))
