"""Java ``hashCode`` of Flink keys, computed from their serialized bytes.

Flink puts a key into key group ``murmurHash(key.hashCode()) % maxParallelism``
(``KeyGroupRangeAssignment``), so changing the max parallelism of a savepoint needs the Java
``hashCode`` of every key. It is computed here straight from the key bytes, by the key
serializer the keyed backend recorded, without building Python values:

    ==========================  =============================================================
    key serializer              Java ``hashCode``
    ==========================  =============================================================
    String                      ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units
    Long / Double               ``(int) (bits ^ (bits >>> 32))`` (Double: ``doubleToLongBits``)
    Integer / Short / Byte      the value; Character: the code unit
    Boolean                     1231 / 1237; Float: ``floatToIntBits``
    Row (``RowSerializer``)     ``31 * kind + a``, ``a = 1``, per field ``a = 31 * a + d(field)``
    Tuple1..25 (``Tuple``)      ``h = f0.hashCode()``, then per field ``h = 31 * h + f.hashCode()``
                                (no null fields: ``TupleSerializer`` writes none); fields of the
                                types above, or tuples
    SQL ``RowData``             ``BinaryRowData.hashCode``: murmur3_32 (seed 42) of the row's
    (``RowDataSerializer``,     bytes as little-endian 4-byte words, then ``fmix(h ^ size)``
    ``BinaryRowDataSerializer``) (``MurmurHashUtils.hashBytesByWords``); the key bytes are the
                                row's size (big-endian int) and its ``size`` bytes
    ==========================  =============================================================

``d`` is Flink's ``RowUtils.deepHashCodeInternal``: 0 for null, ``31 + hashCode`` for a
scalar or a nested row (``Arrays.deepHashCode`` of a one-element array; for ``byte[]``
``31 + Arrays.hashCode``), and for a ``List`` ``1`` folded by ``31 * h + d(element)``, for a
``Map`` ``1 + sum(d(key) ^ d(value))``. PyFlink keys by a one-field ``Row``, so a PyFlink
``String`` key hashes to ``62 + String.hashCode`` (``RowKind.INSERT`` is 0).

Flink SQL keys its operators by ``BinaryRowData`` (the planner's ``BinaryRowDataKeySelector``
projects each input row to a binary row and copies it), and ``RowDataSerializer`` writes a
``BinaryRowData`` as it is, so the hash of the bytes in the savepoint is the hash Flink
assigned the key group from. The hash covers every byte of the row: header, null bits, the
fixed part (whatever the writer left in the unused bytes of a slot) and the variable part.
The one SQL key selector that is not binary, the ``GenericRowData`` one of keyed lookup
joins, writes the same bytes but hashes its fields: such keys would be regrouped wrongly
(statekit cannot tell them apart in a savepoint; the SQL group aggregates, joins and windows
key by binary rows).

Invariant: for every key the serializer wrote, :meth:`KeyHasher.java_hash` equals the Java
``hashCode`` of the key object Flink deserializes from the same bytes (checked against a JVM
and against the key groups of real PyFlink savepoints in the tests). Keys of any other
serializer (POJOs, Kryo, Avro, Scala case classes: user-defined or identity hash codes) have
no hasher.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import mmh3

from statekit.flink.keygroups import flink_murmur_hash
from statekit.flink.serializers import BYTES_CLASS, LIST_CLASS, MAP_CLASS, ROW_CLASS
from statekit.flink.state_meta import BINARY_ROW_DATA_SNAPSHOT, ROW_DATA_SNAPSHOT, TUPLE_SNAPSHOT, SerializerNode
from statekit.statefmt.errors import CorruptStateError

__all__ = ["KeyHasher", "key_hasher", "unhashable_class", "murmur_words", "binary_row_fixed_size", "ROW_DATA_SEED"]

_M = 0xFFFFFFFF
_BASE = "org.apache.flink.api.common.typeutils.base."
_I64, _I32, _I16, _U16 = struct.Struct(">q"), struct.Struct(">i"), struct.Struct(">h"), struct.Struct(">H")
_ROW_KIND_BITS = 2
_CANONICAL_DOUBLE_NAN = 0x7FF8000000000000
_CANONICAL_FLOAT_NAN = 0x7FC00000
ROW_DATA_SEED = 42  # MurmurHashUtils.DEFAULT_SEED

# (data, pos) -> (hashCode as an unsigned 32-bit int, position after the value)
Read = Callable[[bytes, int], tuple[int, int]]


def _long_hash(bits: int) -> int:
    bits &= 0xFFFFFFFFFFFFFFFF
    return (bits ^ (bits >> 32)) & _M


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 35:
            raise ValueError("variable-length integer too long")


def _string(data: bytes, pos: int) -> tuple[int, int]:
    """``StringValue.writeString``: varint length + 1 (0 is null), then code units as varints."""
    length, pos = _varint(data, pos)
    if length == 0:
        raise ValueError("a null String where a key is expected")
    length -= 1
    chars = data[pos:pos + length]
    h = 0
    if len(chars) == length and chars.isascii():  # one byte per code unit: the common case
        for unit in chars:
            h = (31 * h + unit) & _M
        return h, pos + length
    for _ in range(length):
        unit, pos = _varint(data, pos)
        h = (31 * h + unit) & _M
    return h, pos


def _double(data: bytes, pos: int) -> tuple[int, int]:
    bits = _I64.unpack_from(data, pos)[0] & 0xFFFFFFFFFFFFFFFF
    if (bits >> 52) & 0x7FF == 0x7FF and bits & 0xFFFFFFFFFFFFF:  # doubleToLongBits: one NaN
        bits = _CANONICAL_DOUBLE_NAN
    return _long_hash(bits), pos + 8


def _float(data: bytes, pos: int) -> tuple[int, int]:
    bits = _I32.unpack_from(data, pos)[0] & _M
    if (bits >> 23) & 0xFF == 0xFF and bits & 0x7FFFFF:  # floatToIntBits: one NaN
        bits = _CANONICAL_FLOAT_NAN
    return bits, pos + 4


_SCALARS: dict[str, tuple[str, Read]] = {
    "String": ("String", _string),
    "Long": ("Long", lambda d, p: (_long_hash(_I64.unpack_from(d, p)[0]), p + 8)),
    "Int": ("Integer", lambda d, p: (_I32.unpack_from(d, p)[0] & _M, p + 4)),
    "Short": ("Short", lambda d, p: (_I16.unpack_from(d, p)[0] & _M, p + 2)),
    "Byte": ("Byte", lambda d, p: ((d[p] - 256 if d[p] > 127 else d[p]) & _M, p + 1)),
    "Boolean": ("Boolean", lambda d, p: (1231 if d[p] else 1237, p + 1)),
    "Char": ("Character", lambda d, p: (_U16.unpack_from(d, p)[0], p + 2)),
    "Double": ("Double", _double),
    "Float": ("Float", _float),
}
_SCALAR_CLASSES = {_BASE + f"{name}Serializer${name}SerializerSnapshot": value for name, value in _SCALARS.items()}


def _bytes_hash(data: bytes, pos: int) -> tuple[int, int]:
    """``Arrays.hashCode(byte[])`` of a ``BytePrimitiveArraySerializer`` value (int length + bytes)."""
    length = _I32.unpack_from(data, pos)[0]
    pos += 4
    if length < 0 or pos + length > len(data):
        raise ValueError(f"byte array of {length} bytes does not fit")
    h = 1
    for byte in data[pos:pos + length]:
        h = (31 * h + (byte - 256 if byte > 127 else byte)) & _M
    return h, pos + length


def _deep(node: SerializerNode) -> Read | None:
    """``RowUtils.deepHashCodeInternal`` of a non-null row field, list element or map entry."""
    cls = node.snapshot_class
    if cls == LIST_CLASS and len(node.children) == 1:
        return _list(node.children[0])
    if cls == MAP_CLASS and len(node.children) == 2:
        return _map(node.children[0], node.children[1])
    inner = _bytes_hash if cls == BYTES_CLASS else _hash(node)
    if inner is None:
        return None

    def read(data: bytes, pos: int) -> tuple[int, int]:
        h, end = inner(data, pos)
        return (31 + h) & _M, end

    return read


def _list(element_node: SerializerNode) -> Read | None:
    element = _deep(element_node)
    if element is None:
        return None

    def read(data: bytes, pos: int) -> tuple[int, int]:
        size = _I32.unpack_from(data, pos)[0]
        pos += 4
        if size < 0:
            raise ValueError(f"negative list size {size}")
        h = 1
        for _ in range(size):
            e, pos = element(data, pos)
            h = (31 * h + e) & _M
        return h, pos

    return read


def _map(key_node: SerializerNode, value_node: SerializerNode) -> Read | None:
    key, value = _deep(key_node), _deep(value_node)
    if key is None or value is None:
        return None

    def read(data: bytes, pos: int) -> tuple[int, int]:
        size = _I32.unpack_from(data, pos)[0]
        pos += 4
        if size < 0:
            raise ValueError(f"negative map size {size}")
        h = 1
        for _ in range(size):
            k, pos = key(data, pos)
            is_null = data[pos]
            pos += 1
            v = 0
            if not is_null:
                v, pos = value(data, pos)
            h = (h + (k ^ v)) & _M
        return h, pos

    return read


def _row(field_nodes: tuple[SerializerNode, ...]) -> Read | None:
    fields = [_deep(node) for node in field_nodes]
    if not fields or any(f is None for f in fields):
        return None
    readers = [f for f in fields if f is not None]
    mask_bytes = (_ROW_KIND_BITS + len(readers) + 7) // 8
    top = mask_bytes * 8 - 1

    def read(data: bytes, pos: int) -> tuple[int, int]:
        if pos + mask_bytes > len(data):
            raise ValueError("row null mask does not fit")
        mask = int.from_bytes(data[pos:pos + mask_bytes], "big")
        pos += mask_bytes
        kind = (mask >> top & 1) | (mask >> (top - 1) & 1) << 1  # RowKind.toByteValue, bits 0 and 1
        h = 1
        for index, field in enumerate(readers):
            d = 0
            if not mask >> (top - _ROW_KIND_BITS - index) & 1:
                d, pos = field(data, pos)
            h = (31 * h + d) & _M
        return (31 * kind + h) & _M, pos

    return read


def murmur_words(data: bytes | bytearray | memoryview, pos: int, length: int, seed: int = ROW_DATA_SEED) -> int:
    """``MurmurHashUtils.hashBytesByWords`` of ``data[pos:pos + length]`` (``length`` a multiple
    of 4), unsigned: murmur3_32 over little-endian 4-byte words, then ``fmix(h ^ length)`` —
    for whole words exactly the standard murmur3_32 (no tail), so ``mmh3`` computes it."""
    return int(mmh3.hash(bytes(data[pos:pos + length]), seed, signed=False))


def binary_row_fixed_size(arity: int) -> int:
    """``BinaryRowData.calculateFixPartSizeInBytes``: header and null bits (8-byte words), 8 bytes a field."""
    return ((arity + 63 + 8) // 64) * 8 + 8 * arity


def _binary_row(arity: int) -> Read:
    """``BinaryRowData.hashCode`` of a ``(Binary)RowDataSerializer`` value: int size, then the row."""
    fixed = binary_row_fixed_size(arity)

    def read(data: bytes, pos: int) -> tuple[int, int]:
        size = _I32.unpack_from(data, pos)[0]
        pos += 4
        if size < fixed or size % 4:
            raise ValueError(f"a binary row of {size} bytes (a row of {arity} fields takes at least {fixed}, "
                             "in 4-byte words)")
        if pos + size > len(data):
            raise ValueError(f"binary row of {size} bytes does not fit")
        return murmur_words(data, pos, size), pos + size

    return read


def _row_arity(node: SerializerNode) -> int | None:
    """The field count of a SQL row serializer's snapshot, or ``None`` for another class."""
    if node.snapshot_class == ROW_DATA_SNAPSHOT:
        return len(node.logical_types)
    if node.snapshot_class == BINARY_ROW_DATA_SNAPSHOT and node.text is not None and node.text.isdigit():
        return int(node.text)
    return None


def _tuple(field_nodes: tuple[SerializerNode, ...]) -> Read | None:
    """``Tuple2.hashCode`` and its siblings: ``31 * h + hashCode`` over the fields, from ``f0``'s."""
    fields = [_hash(node) for node in field_nodes]
    if not fields or any(f is None for f in fields):
        return None
    readers = [f for f in fields if f is not None]

    def read(data: bytes, pos: int) -> tuple[int, int]:
        h, pos = readers[0](data, pos)
        for field in readers[1:]:
            f, pos = field(data, pos)
            h = (31 * h + f) & _M
        return h, pos

    return read


def _hash(node: SerializerNode) -> Read | None:
    """The ``hashCode`` of a value that Flink accepts as a key, or ``None``."""
    scalar = _SCALAR_CLASSES.get(node.snapshot_class)
    if scalar is not None:
        return scalar[1]
    if node.snapshot_class == ROW_CLASS:
        return _row(node.children)
    if node.snapshot_class == TUPLE_SNAPSHOT:
        return _tuple(node.children)
    arity = _row_arity(node)
    if arity is not None:
        return _binary_row(arity)
    return None


def _name(node: SerializerNode) -> str:
    scalar = _SCALAR_CLASSES.get(node.snapshot_class)
    if scalar is not None:
        return scalar[0]
    if node.snapshot_class in (ROW_CLASS, TUPLE_SNAPSHOT):
        kind = "Row" if node.snapshot_class == ROW_CLASS else f"Tuple{len(node.children)}"
        return f"{kind}<{','.join(_name(child) for child in node.children)}>"
    if node.snapshot_class == ROW_DATA_SNAPSHOT:
        return "RowData<" + ", ".join(t.sql() for t in node.logical_types) + ">"
    if _row_arity(node) is not None:
        return f"BinaryRowData<{node.text} fields>"
    return node.snapshot_class.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class KeyHasher:
    """The Java ``hashCode`` of keys written by one key serializer.

    Attributes:
        name: The key type (``String``, ``Row<String>``, ``RowData<INT NOT NULL>``, ...).
        row_arity: The field count of a SQL ``BinaryRowData`` key, else ``None``.
    """

    name: str
    _read: Read
    row_arity: int | None = None

    def java_hash(self, data: bytes, pos: int, *, where: str) -> tuple[int, int]:
        """``(hashCode, end)`` of the key that starts at ``data[pos]``.

        Raises:
            CorruptStateError: The bytes do not hold a whole key (names ``where``).
        """
        try:
            h, end = self._read(data, pos)
        except (ValueError, IndexError, struct.error) as exc:
            raise CorruptStateError(f"cannot read the {self.name} key at byte {pos} of the composite key: {exc}",
                                    path=where) from None
        if end > len(data):
            raise CorruptStateError(f"the {self.name} key runs past the end of its composite key", path=where)
        return h, end

    def key_group(self, data: bytes, pos: int, max_parallelism: int, *, where: str) -> int:
        """Flink's key group of the key at ``data[pos]``: ``murmurHash(hashCode) % max_parallelism``."""
        return flink_murmur_hash(self.java_hash(data, pos, where=where)[0]) % max_parallelism


def key_hasher(node: SerializerNode | None) -> KeyHasher | None:
    """The hasher of keys written by the serializer of snapshot ``node``, or ``None`` when unsupported."""
    if node is None:
        return None
    read = _hash(node)
    return None if read is None else KeyHasher(_name(node), read, _row_arity(node))


def unhashable_class(node: SerializerNode | None) -> str:
    """The class that keeps :func:`key_hasher` from hashing keys of ``node`` (depth first)."""
    if node is None:
        return "<unknown>"
    if node.snapshot_class == ROW_CLASS and node.children:
        for child in node.children:
            if _deep(child) is None:
                return unhashable_class(child) if child.snapshot_class in (ROW_CLASS, LIST_CLASS, MAP_CLASS) \
                    else child.snapshot_class
    if node.snapshot_class in (LIST_CLASS, MAP_CLASS):
        for child in node.children:
            if _deep(child) is None:
                return unhashable_class(child)
    if node.snapshot_class == TUPLE_SNAPSHOT and node.children:
        for child in node.children:
            if _hash(child) is None:
                return unhashable_class(child)
    return node.snapshot_class
