"""Where a key lands: the key group of a key in statekit and in Flink, and the owning subtask.

statekit hashes the *serialized* key (murmur3_32 of its bytes, see
``statekit.statefmt.keygroups``); Flink hashes the Java ``hashCode`` of the key object
(``MathUtils.murmurHash``, see ``statekit.flink.keygroups``). The same key
therefore lands in different key groups in the two systems. The CLI chooses between
:func:`statekit_key_group` and :func:`flink_key_group` through
``statekit.flink.dispatch.lookup_key_group``.

The key arrives as text (a command-line argument) and is coerced by its key type first.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypeAlias

from statekit.statefmt.errors import BadInputError
from statekit.statefmt.keygroups import (
    compute_key_group_range_for_operator_index,
    compute_operator_index_for_key_group,
)

__all__ = [
    "KEY_TYPES",
    "DEFAULT_MAX_PARALLELISM",
    "KeyValue",
    "KeyGroupLookup",
    "parse_key",
    "statekit_key_group",
    "flink_key_group",
    "with_owning_subtask",
]

KEY_TYPES: tuple[str, ...] = ("string", "int", "long", "short", "byte", "boolean", "char", "double", "float")
JAVA_NAMES = {"string": "String", "int": "Integer", "long": "Long", "short": "Short", "byte": "Byte",
              "boolean": "Boolean", "char": "Character", "double": "Double", "float": "Float"}
DEFAULT_MAX_PARALLELISM = 128

KeyValue: TypeAlias = str | int | float | bool
"""A key read from text: ``str`` (string, char), ``int``, ``float`` or ``bool``."""


@dataclass(frozen=True)
class KeyGroupLookup:
    """Where a key lands.

    Attributes:
        key: The key as given.
        key_type: How it was read (``string``, ``int``, ``long``, ...).
        value: The coerced key.
        engine: ``flink`` (Java ``hashCode``) or ``statekit`` (serialized bytes).
        max_parallelism: Number of key groups.
        key_group: The key group.
        hash: Flink: the Java ``hashCode``; statekit: murmur3_32 of the key bytes.
        murmur_hash: Flink: ``MathUtils.murmurHash(hashCode)``; statekit: ``None``.
        key_serializer: statekit: the serializer of the key bytes; Flink: ``None``.
        key_bytes: statekit: the serialized key, hex; Flink: ``None``.
        parallelism: The parallelism asked about, else ``None``.
        subtask: The subtask owning the key group at ``parallelism``.
        subtask_key_groups: That subtask's key-group range ``(start, end)``, inclusive.
    """

    key: str
    key_type: str
    value: KeyValue
    engine: str
    max_parallelism: int
    key_group: int
    hash: int
    murmur_hash: int | None = None
    key_serializer: str | None = None
    key_bytes: str | None = None
    parallelism: int | None = None
    subtask: int | None = None
    subtask_key_groups: tuple[int, int] | None = None

    @property
    def java_type(self) -> str:
        """The Java class the key is boxed as (Flink)."""
        return JAVA_NAMES.get(self.key_type, self.key_type)


def parse_key(text: str, key_type: str) -> KeyValue:
    """Coerce command-line text to a key of ``key_type``.

    Raises:
        BadInputError: An unknown key type, or text that is not such a value.
    """
    if key_type in ("string", "char"):
        if key_type == "char" and len(text) != 1:
            raise BadInputError(f"a char key is one character, got {text!r}")
        return text
    try:
        if key_type in ("int", "long", "short", "byte"):
            return int(text, 10)
        if key_type in ("double", "float"):
            return float(text)
    except ValueError:
        raise BadInputError(f"key {text!r} is not a {key_type} (--key-type {key_type})") from None
    if key_type == "boolean":
        lowered = text.lower()
        if lowered not in ("true", "false"):
            raise BadInputError(f"a boolean key is true or false, got {text!r}")
        return lowered == "true"
    raise BadInputError(f"unknown key type {key_type!r} (known: {', '.join(KEY_TYPES)})")


def flink_key_group(key: str, key_type: str, max_parallelism: int) -> KeyGroupLookup:
    """Flink's key group of ``key`` read as ``key_type``: murmur hash of its Java ``hashCode``.

    Raises:
        BadInputError: Unreadable key, unknown key type, a value out of the Java type's range.
    """
    from statekit.flink.keygroups import flink_murmur_hash, java_hash_code

    value = parse_key(key, key_type)
    code = java_hash_code(value, key_type)
    murmur = flink_murmur_hash(code)
    return KeyGroupLookup(key, key_type, value, "flink", max_parallelism, murmur % max_parallelism, code,
                          murmur_hash=murmur)


def statekit_key_group(key: str, key_type: str, max_parallelism: int, key_serializer: str) -> KeyGroupLookup:
    """statekit's key group of ``key`` read as ``key_type``: murmur3_32 of its serialized bytes.

    Raises:
        BadInputError: Unreadable key, unknown key type or serializer.
        SerializationError: The serializer cannot encode the key.
    """
    from statekit.statefmt.keygroups import key_hash
    from statekit.statefmt.serializers import get_serializer, serialize_with

    value = parse_key(key, key_type)
    serializer = get_serializer(key_serializer, for_write=True)
    data = serialize_with(serializer, value, "key")
    digest = key_hash(data)
    return KeyGroupLookup(key, key_type, value, "statekit", max_parallelism, digest % max_parallelism, digest,
                          key_serializer=key_serializer, key_bytes=data.hex())


def with_owning_subtask(lookup: KeyGroupLookup, parallelism: int) -> KeyGroupLookup:
    """``lookup`` plus the subtask that owns its key group at ``parallelism`` and that subtask's range."""
    subtask = compute_operator_index_for_key_group(lookup.max_parallelism, parallelism, lookup.key_group)
    kg = compute_key_group_range_for_operator_index(lookup.max_parallelism, parallelism, subtask)
    return replace(lookup, parallelism=parallelism, subtask=subtask, subtask_key_groups=(kg.start, kg.end))
