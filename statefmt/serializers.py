"""Serializers, named in the metadata and looked up here.

Every serializer turns one Python value into bytes and back. All but ``pickle`` are safe on
untrusted input: decoding them never runs code. ``pickle`` is refused on read unless the
caller passes ``trust_pickle=True`` (``--trust-pickle`` on the CLI).
"""

from __future__ import annotations

import json
import pickle
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgpack

from statekit.statefmt.errors import (
    BadInputError,
    SerializationError,
    UntrustedSerializerError,
)
from statekit.statefmt.numpy_support import numpy_or_none

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "Serializer",
    "DEFAULT_SERIALIZER",
    "SERIALIZER_NAMES",
    "get_serializer",
    "serialize_with",
    "deserialize_with",
    "serialize_many",
    "deserialize_many",
    "serialize_column",
    "deserialize_column",
    "encode_list",
    "decode_list",
]

DEFAULT_SERIALIZER = "msgpack"
_INT64 = struct.Struct(">q")


@dataclass(frozen=True)
class Serializer:
    """A named pair of functions between a Python value and bytes."""

    name: str
    serialize: Callable[[Any], bytes]
    deserialize: Callable[[bytes], Any]
    safe: bool = True


def _msgpack_dumps(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]


def _msgpack_loads(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def _json_dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False).encode()


def _utf8_dumps(value: Any) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"expected str, got {type(value).__name__}")
    return value.encode("utf-8")


def _int64_dumps(value: Any) -> bytes:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected int, got {type(value).__name__}")
    return _INT64.pack(value)


def _int64_loads(data: bytes) -> int:
    if len(data) != 8:
        raise ValueError(f"int64 needs 8 bytes, got {len(data)}")
    return int(_INT64.unpack(data)[0])


def _bytes_dumps(value: Any) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"expected bytes, got {type(value).__name__}")
    return bytes(value)


_REGISTRY: dict[str, Serializer] = {
    s.name: s
    for s in (
        Serializer("msgpack", _msgpack_dumps, _msgpack_loads),
        Serializer("json", _json_dumps, lambda b: json.loads(b.decode("utf-8"))),
        Serializer("utf8", _utf8_dumps, lambda b: bytes(b).decode("utf-8")),
        Serializer("int64", _int64_dumps, _int64_loads),
        Serializer("bytes", _bytes_dumps, bytes),
        Serializer(
            "pickle",
            lambda v: pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL),
            pickle.loads,
            safe=False,
        ),
    )
}
SERIALIZER_NAMES = tuple(_REGISTRY)


def get_serializer(
    name: str, *, trust_pickle: bool = False, for_write: bool = False, what: str = "state", source: str | None = None
) -> Serializer:
    """Look up a serializer by its metadata name.

    ``what`` and ``source`` (the snapshot) name the user of the serializer in errors.

    Raises:
        BadInputError: the name is unknown.
        UntrustedSerializerError: the serializer can run code on read and trust was not given.
    """
    serializer = _REGISTRY.get(name)
    if serializer is None:
        raise BadInputError(
            f"unknown serializer {name!r} (known: {', '.join(SERIALIZER_NAMES)})"
        )
    if not serializer.safe and not trust_pickle and not for_write:
        raise UntrustedSerializerError(
            f"{what} uses the {name!r} serializer, which can run arbitrary code when read; "
            "pass --trust-pickle (trust_pickle=True) only for savepoints you trust",
            path=source,
        )
    return serializer


def serialize_with(serializer: Serializer, value: Any, what: str) -> bytes:
    try:
        return serializer.serialize(value)
    except Exception as exc:
        raise SerializationError(
            f"cannot serialize {what} {value!r:.60} with {serializer.name!r}: {exc}"
        ) from exc


def deserialize_with(serializer: Serializer, data: bytes, what: str, source: str | None = None) -> Any:
    try:
        return serializer.deserialize(data)
    except Exception as exc:
        raise SerializationError(
            f"cannot decode {what} with {serializer.name!r}: {exc}", path=source
        ) from exc


def _fast_many(name: str) -> Callable[[list[Any]], list[bytes]] | None:
    """A column-at-a-time encoder for a serializer, or None to go item by item."""
    if name == "msgpack":
        def pack_many(values: list[Any]) -> list[bytes]:
            pack = msgpack.Packer(use_bin_type=True).pack
            return [pack(v) for v in values]
        return pack_many
    if name == "int64":
        def int64_many(values: list[Any]) -> list[bytes]:
            if not all(type(v) is int for v in values):
                raise TypeError("expected int")
            pack = _INT64.pack
            return [pack(v) for v in values]
        return int64_many
    if name == "utf8":
        return lambda values: [str.encode(v, "utf-8") for v in values]
    return None


def serialize_many(serializer: Serializer, values: list[Any], what: str) -> list[bytes]:
    """Serialize a column of values; errors name the first offending value."""
    fast = _fast_many(serializer.name)
    if fast is not None:
        try:
            return fast(values)
        except Exception:  # noqa: BLE001 - redo item by item for a precise message
            pass
    return [serialize_with(serializer, v, what) for v in values]


def deserialize_many(serializer: Serializer, data: list[bytes], what: str, source: str | None = None) -> list[Any]:
    """Deserialize a column of bytes; errors name the serializer and the source."""
    decode = serializer.deserialize
    if serializer.name == "msgpack":
        def decode(b: bytes) -> Any:
            return msgpack.unpackb(b, raw=False, strict_map_key=False)
    try:
        return [decode(b) for b in data]
    except Exception:  # noqa: BLE001 - redo item by item for a precise message
        return [deserialize_with(serializer, b, what, source) for b in data]


# msgpack's header of a str of n UTF-8 bytes, n < 256: fixstr (n < 32) or str 8.
_MSGPACK_STR_HEADERS = [bytes([0xA0 | n]) if n < 32 else bytes([0xD9, n]) for n in range(256)]


def serialize_column(serializer: Serializer, values: list[Any], what: str) -> pa.Array:
    """A column of values serialized into one binary Arrow array (same bytes as
    :func:`serialize_many`). Strings under msgpack or utf8 are encoded by Arrow kernels,
    without a Python call per value; anything else goes value by value."""
    import pyarrow as pa

    if serializer.name in ("msgpack", "utf8") and values and isinstance(values[0], str):
        if serializer.name == "msgpack":
            framed = _msgpack_same_width_strs(values)
            if framed is None:
                framed = _msgpack_fixstrs(values)
            if framed is not None:
                return framed
        try:  # inferred: string only when every value is a str (bytes make it binary, None a null)
            text = pa.array(values)
        except (pa.ArrowException, UnicodeError, OverflowError):
            text = None  # mixed types, or lone surrogates: serialize_many names the value
        if text is not None and text.type == pa.string() and not text.null_count:
            if serializer.name == "utf8":
                return text.cast(pa.binary())
            framed = _msgpack_strings(text)
            if framed is not None:
                return framed
    if serializer.name == "msgpack" and values and values[0].__class__ is int:
        ints = _msgpack_ints(values)
        if ints is not None:
            return ints
    return pa.array(serialize_many(serializer, values, what), pa.binary())


# msgpack's header of an array of n elements, and its size: fixarray, array 16, array 32.
def _msgpack_array_header(n: int) -> bytes:
    if n < 16:
        return bytes([0x90 | n])
    return b"\xdc" + n.to_bytes(2, "big") if n < 1 << 16 else b"\xdd" + n.to_bytes(4, "big")


def _msgpack_ints(values: list[Any]) -> pa.Array | None:
    """msgpack framing of a column of Python ints (no bool, each within int64), the bytes
    ``packb`` gives value by value: the whole list packed by one ``packb`` call with its
    array header cut off, each value's length known from its magnitude. None for any other
    column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if set(map(type, values)) != {int}:
        return None
    try:
        offsets_buffer = _numpy_msgpack_int_offsets(values)
        if offsets_buffer is None:
            lengths = _msgpack_int_lengths(pa.array(values, pa.int64()))
            offsets_buffer = pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum(lengths)]).buffers()[1]
    except (pa.ArrowException, OverflowError):
        return None  # beyond int64: value by value
    packed = msgpack.packb(values, use_bin_type=True)
    header = len(_msgpack_array_header(len(values)))
    end = memoryview(offsets_buffer).cast("i")[len(values)]
    if len(packed) - header != end:
        return None  # lengths disagree with the packer: value by value
    return pa.Array.from_buffers(pa.binary(), len(values), [None, offsets_buffer, pa.py_buffer(packed).slice(header)])


def _numpy_msgpack_int_offsets(values: list[int]) -> pa.Buffer | None:
    """The int32 offsets of the msgpack encodings of Python ints (:func:`_msgpack_int_lengths`
    with NumPy); None without NumPy or when they pass 2**31 - 1. OverflowError for a value
    beyond int64."""
    import pyarrow as pa

    np = numpy_or_none()
    if np is None:
        return None
    ints = np.fromiter(values, np.int64, len(values))
    offsets = np.empty(len(values) + 1, np.int64)
    offsets[0] = 0
    lengths = offsets[1:]
    lengths.fill(1)
    for extra, (upper, lower) in _MSGPACK_INT_STEPS:
        lengths += extra * ((ints >= upper) | (ints < lower))
    np.cumsum(lengths, out=lengths)
    if offsets[-1] > _INT32_MAX:
        return None
    return pa.py_buffer(offsets.astype(np.int32))


# Where an int's msgpack encoding grows: ``extra`` bytes more at or above ``upper``, below ``lower``.
_MSGPACK_INT_STEPS = ((1, (1 << 7, -(1 << 5))), (1, (1 << 8, -(1 << 7))), (2, (1 << 16, -(1 << 15))),
                      (4, (1 << 32, -(1 << 31))))


def _msgpack_int_lengths(ints: pa.Array) -> pa.Array:
    """The bytes msgpack packs each int64 into (int32): 1 (fixint, -32..127), else a type
    byte and the smallest of 1, 2, 4, 8 bytes that holds it (unsigned when non-negative)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    total: Any = None
    for extra, (upper, lower) in _MSGPACK_INT_STEPS:
        beyond = pc.or_(pc.greater_equal(ints, pa.scalar(upper, pa.int64())), pc.less(ints, pa.scalar(lower, pa.int64())))
        step = pc.multiply(beyond.cast(pa.int32()), pa.scalar(extra, pa.int32()))
        total = step if total is None else pc.add(total, step)
    return pc.add(total, pa.scalar(1, pa.int32()))


def _msgpack_same_width_strs(values: list[Any]) -> pa.Array | None:
    """msgpack framing of a column of ``str`` of one UTF-8 length under 256 (fixed-width
    keys): the whole list packed by one ``packb`` call, its array header cut off, then
    every ``width``-th byte checked to start the expected str header — msgpack's first
    byte names its type and length, so if the value at ``i * width`` is a str of
    ``width`` bytes in all, the next value starts at ``(i + 1) * width``: every value is
    such a str, packed as :func:`serialize_many` packs it. None (without NumPy, for other
    columns) when the first, middle and last values differ in length or the check fails."""
    import pyarrow as pa

    np = numpy_or_none()
    n = len(values)
    if np is None or not n:
        return None
    length = len(values[0]) if isinstance(values[0], str) else -1
    if not all(isinstance(v, str) and len(v) == length for v in (values[n // 2], values[-1])):
        return None
    try:
        packed = msgpack.packb(values, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):  # a value msgpack does not pack (or no UTF-8)
        return None
    header = len(_msgpack_array_header(n))
    width, extra = divmod(len(packed) - header, n)
    expected = _MSGPACK_STR_HEADERS[width - 1] if width - 1 < 32 else (
        _MSGPACK_STR_HEADERS[width - 2] if 32 <= width - 2 < 256 else None)
    if extra or expected is None or n * width > _INT32_MAX:
        return None
    rows = np.frombuffer(packed, np.uint8, n * width, header).reshape(n, width)
    if not all(bool((rows[:, i] == byte).all()) for i, byte in enumerate(expected)):
        return None
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(packed).slice(header)])


def _msgpack_fixstrs(values: list[Any]) -> pa.Array | None:
    """msgpack framing of a column of ``str`` of fewer than 32 UTF-8 bytes each (one fixstr
    header byte per value), with NumPy: every value joined behind a NUL byte in one
    ``join`` and one ``encode``, then each NUL — one per value exactly when no value holds
    one — replaced by its value's header. None without NumPy, for a value that is no
    ``str``, holds a NUL or a lone surrogate, or is 32 bytes or longer (the general path)."""
    import pyarrow as pa

    np = numpy_or_none()
    if np is None:
        return None
    try:
        encoded = "\x00".join(values).encode("utf-8")
    except (TypeError, UnicodeError):
        return None
    n = len(values)
    size = len(encoded) + 1
    if size > _INT32_MAX:
        return None
    data = np.empty(size, np.uint8)
    data[0] = 0
    data[1:] = np.frombuffer(encoded, np.uint8)
    starts = np.flatnonzero(data == 0)  # the NUL before each value (and any NUL inside one)
    if len(starts) != n:
        return None
    offsets = np.empty(n + 1, np.int32)
    offsets[:n] = starts
    offsets[n] = size
    lengths = np.diff(offsets) - 1
    if int(lengths.max()) >= 32:
        return None
    data[starts] = lengths.astype(np.uint8) | np.uint8(0xA0)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


_INT32_MAX = (1 << 31) - 1


def _msgpack_strings(text: pa.Array) -> pa.Array | None:
    """msgpack ``str`` framing of a string column (None when a string has 256+ bytes)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lengths = pc.binary_length(text)
    bounds = pc.min_max(lengths).as_py()
    shortest, longest = bounds["min"] or 0, bounds["max"] or 0
    if longest >= len(_MSGPACK_STR_HEADERS):
        return None
    if len(text) and shortest == longest:  # one length (fixed-width keys): one header for all
        return pc.binary_replace_slice(text.cast(pa.binary()), start=0, stop=0,
                                       replacement=_MSGPACK_STR_HEADERS[longest])
    headers = pc.take(pa.array(_MSGPACK_STR_HEADERS, pa.binary()), lengths)
    return pc.binary_join_element_wise(headers, text.cast(pa.binary()), pa.scalar(b"", pa.binary()))


def deserialize_column(serializer: Serializer, column: Any, what: str, source: str | None = None) -> list[Any]:
    """The values of a binary column (nulls stay None): msgpack is unpacked in one pass over
    the column's data buffer, utf8 is an Arrow cast, int64 one ``struct.unpack``."""
    import pyarrow as pa

    if hasattr(column, "combine_chunks"):
        column = column.combine_chunks()
    if not column.null_count and len(column):
        view = _data_view(column)
        if serializer.name == "msgpack":
            values: list[Any] | None = _msgpack_fixstr_values(column)
            if values is None:
                values = _msgpack_int_values(view, column)
            if values is None:
                values = _unpack_all(view, column)
            if values is not None:
                return values
        elif serializer.name == "int64" and len(view) == 8 * len(column):
            return list(struct.unpack(f">{len(column)}q", view))
        elif serializer.name == "utf8":
            try:
                return column.cast(pa.string()).to_pylist()  # type: ignore[no-any-return]
            except pa.ArrowInvalid:
                pass
    raw = column.to_pylist()
    present = [b for b in raw if b is not None]
    decoded = iter(deserialize_many(serializer, present, what, source))
    return [None if b is None else next(decoded) for b in raw]


def _msgpack_fixstr_values(column: Any) -> list[str] | None:
    """The strings of a column whose every value is a msgpack fixstr (header 0xa0 | length,
    the usual short key), decoded by Arrow kernels; None for any other column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lengths = pc.binary_length(column)
    if (pc.min(lengths).as_py() or 0) < 1 or (pc.max(lengths).as_py() or 0) > 32:
        return None
    first = pa.Array.from_buffers(pa.uint8(), len(column), [None, pc.binary_slice(column, 0, 1).buffers()[2]])
    header_ok = pc.equal(first, pc.add(pc.subtract(lengths, 1).cast(pa.uint8()), pa.scalar(0xA0, pa.uint8())))
    if not pc.all(header_ok).as_py():
        return None
    try:
        return pc.binary_slice(column, 1, 33).cast(pa.string()).to_pylist()  # type: ignore[no-any-return]
    except pa.ArrowInvalid:
        return None  # not UTF-8: the unpacker names the value


def _msgpack_int_values(view: memoryview, column: Any) -> list[int] | None:
    """The ints of a column whose every value is one msgpack int exactly as long as its type
    byte says (checked by Arrow kernels, so no value can run into its neighbour), unpacked
    by one ``unpackb`` of the data buffer behind an array header; None for any other column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(column)
    if (pc.min(pc.binary_length(column)).as_py() or 0) < 1:
        return None
    first = pa.Array.from_buffers(pa.uint8(), n, [None, pc.binary_slice(column, 0, 1).buffers()[2]])
    fixint = pc.or_(pc.less(first, pa.scalar(0x80, pa.uint8())), pc.greater_equal(first, pa.scalar(0xE0, pa.uint8())))
    typed = pc.and_(pc.greater_equal(first, pa.scalar(0xCC, pa.uint8())), pc.less_equal(first, pa.scalar(0xD3, pa.uint8())))
    if not pc.all(pc.or_(fixint, typed)).as_py():
        return None
    # 0xcc..0xcf (uint 8..64) and 0xd0..0xd3 (int 8..64): 1 + (1 << (type byte & 3)) bytes
    sized = pc.add(pc.shift_left(pa.scalar(1, pa.int32()), pc.bit_wise_and(first, pa.scalar(3, pa.uint8())).cast(pa.int32())),
                   pa.scalar(1, pa.int32()))
    expected = pc.if_else(fixint, pa.scalar(1, pa.int32()), sized)
    if not pc.all(pc.equal(expected, pc.binary_length(column))).as_py():
        return None
    try:
        values = msgpack.unpackb(_msgpack_array_header(n) + view, raw=False, strict_map_key=False)
    except Exception:  # noqa: BLE001 - any failure: decode value by value
        return None
    return values if isinstance(values, list) and len(values) == n else None


def _unpack_all(view: memoryview, column: Any) -> list[Any] | None:
    """Every value of a msgpack column unpacked from its data buffer in one pass, or None
    unless each value ends exactly where the column's offsets say (a malformed value must
    not swallow its neighbour: the caller then decodes value by value and names it)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=max(len(view), 1))
    values: list[Any] = []
    ends: list[int] = []
    add_value, add_end, tell = values.append, ends.append, unpacker.tell
    try:
        unpacker.feed(view)
        for value in unpacker:
            add_value(value)
            add_end(tell())
    except Exception:  # noqa: BLE001 - any failure: decode value by value
        return None
    if len(values) != len(column):
        return None
    offsets = pa.Array.from_buffers(pa.int32(), len(column) + 1, [None, column.buffers()[1]], offset=column.offset)
    expected = pc.subtract(offsets.slice(1), offsets[0])
    return values if pa.array(ends, pa.int32()).equals(expected.cast(pa.int32())) else None


def _data_view(column: Any) -> memoryview:
    """The concatenated bytes of a null-free binary column."""
    _, offsets, data = column.buffers()
    positions = memoryview(offsets).cast("i")
    first, last = positions[column.offset], positions[column.offset + len(column)]
    return memoryview(data)[first:last] if data is not None else memoryview(b"")


# List state: one entry per (key, namespace) holding all elements, framed as
# u32 count, then per element u32 length + element bytes (big-endian).
_U32 = struct.Struct(">I")


def encode_list(elements: list[bytes]) -> bytes:
    parts = [_U32.pack(len(elements))]
    for element in elements:
        parts.append(_U32.pack(len(element)))
        parts.append(element)
    return b"".join(parts)


def decode_list(data: bytes) -> list[bytes]:
    view = memoryview(data)
    if len(view) < 4:
        raise ValueError("list frame shorter than its count")
    (count,) = _U32.unpack_from(view, 0)
    pos, out = 4, []
    for _ in range(count):
        if pos + 4 > len(view):
            raise ValueError("list frame truncated")
        (length,) = _U32.unpack_from(view, pos)
        pos += 4
        if pos + length > len(view):
            raise ValueError("list element truncated")
        out.append(bytes(view[pos:pos + length]))
        pos += length
    if pos != len(view):
        raise ValueError("trailing bytes after list frame")
    return out
