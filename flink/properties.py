"""Decode the ``CheckpointProperties`` trailer of metadata v4+ without a JVM.

Flink appends the properties with ``ObjectOutputStream.writeObject``. This module reads
that Java serialization stream as data only — objects become dictionaries of field values,
enum constants their names — and never instantiates or executes anything. It understands
the grammar subset Flink's properties use (objects, class descriptors, strings, enums,
arrays, block data, back-references); anything else yields properties with a ``problem``.

Invariant: a stream that ends early (a truncated file) always raises ``MetadataError``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from statekit.flink.cursor import ByteCursor, decode_modified_utf8
from statekit.flink.layout import JAVA_STREAM_MAGIC
from statekit.flink.model import CheckpointProperties

__all__ = ["read_checkpoint_properties", "read_java_object", "JavaObject", "JavaEnum", "UnsupportedJava"]

TC_NULL = 0x70
TC_REFERENCE = 0x71
TC_CLASSDESC = 0x72
TC_OBJECT = 0x73
TC_STRING = 0x74
TC_ARRAY = 0x75
TC_CLASS = 0x76
TC_BLOCKDATA = 0x77
TC_ENDBLOCKDATA = 0x78
TC_BLOCKDATALONG = 0x7A
TC_LONGSTRING = 0x7C
TC_ENUM = 0x7E
BASE_HANDLE = 0x7E0000

SC_WRITE_METHOD = 0x01
SC_SERIALIZABLE = 0x02
SC_EXTERNALIZABLE = 0x04
SC_BLOCK_DATA = 0x08

_PRIMITIVE_SIZES = {"B": 1, "C": 2, "D": 8, "F": 4, "I": 4, "J": 8, "S": 2, "Z": 1}
MAX_DEPTH = 64


class UnsupportedJava(Exception):
    """A well-formed construct this reader does not decode (not a truncation)."""


@dataclass
class _ClassDesc:
    name: str
    flags: int
    fields: list[tuple[str, str]]  # (type code, field name)
    super_desc: _ClassDesc | None


@dataclass
class JavaObject:
    """A deserialized Java object: its class name and field values (superclass fields too).

    ``written`` holds the objects a class's own ``writeObject`` wrote after its fields (an
    ``ArrayList``'s elements), in order; block data in between is skipped.
    """

    class_name: str
    fields: dict[str, JavaValue] = field(default_factory=dict)
    written: list[JavaValue] = field(default_factory=list)


@dataclass(frozen=True)
class JavaEnum:
    """A Java enum constant."""

    class_name: str
    constant: str


JavaValue = Union[None, bool, int, float, str, JavaObject, JavaEnum, list["JavaValue"], _ClassDesc]  # noqa: UP007 (recursive)


class _JavaStreamReader:
    def __init__(self, cur: ByteCursor) -> None:
        self.cur = cur
        self.handles: list[object] = []

    def _new_handle(self, value: object) -> int:
        self.handles.append(value)
        return len(self.handles) - 1

    def _reference(self) -> object:
        at = self.cur.pos
        handle = self.cur.i32("java back-reference") - BASE_HANDLE
        if not 0 <= handle < len(self.handles):
            raise self.cur.error(f"invalid java back-reference {handle + BASE_HANDLE:#x}", at=at)
        return self.handles[handle]

    def _utf_string(self, length: int) -> str:
        at = self.cur.pos
        text = decode_modified_utf8(self.cur.take(length, "java string"))
        if text is None:
            raise self.cur.error("malformed modified UTF-8 in java string", at=at)
        return str(text)

    def content(self, depth: int) -> JavaValue:
        if depth > MAX_DEPTH:
            raise UnsupportedJava("java object graph too deep")
        at = self.cur.pos
        tc = self.cur.u8("java type code")
        if tc == TC_NULL:
            return None
        if tc == TC_REFERENCE:
            return self._reference()  # type: ignore[return-value]
        if tc == TC_STRING:
            text = self._utf_string(self.cur.u16("java string length"))
            self._new_handle(text)
            return text
        if tc == TC_LONGSTRING:
            length = self.cur.i64("java long string length")
            if length < 0 or length > self.cur.remaining:
                raise self.cur.error("truncated java long string", at=at)
            text = self._utf_string(length)
            self._new_handle(text)
            return text
        if tc == TC_CLASSDESC:
            return self._class_desc_body(depth)
        if tc == TC_OBJECT:
            return self._object(depth)
        if tc == TC_ENUM:
            return self._enum(depth)
        if tc == TC_ARRAY:
            return self._array(depth)
        if tc == TC_CLASS:
            desc = self._class_desc(depth)
            self._new_handle(desc)
            return desc
        raise UnsupportedJava(f"java type code {tc:#x} at byte offset {at}")

    def _class_desc(self, depth: int) -> _ClassDesc | None:
        at = self.cur.pos
        value = self.content(depth + 1)
        if value is not None and not isinstance(value, _ClassDesc):
            raise self.cur.error("expected a java class descriptor", at=at)
        return value

    def _class_desc_body(self, depth: int) -> _ClassDesc:
        name = self._utf_string(self.cur.u16("java class name length"))
        self.cur.i64("java serialVersionUID")
        desc = _ClassDesc(name, 0, [], None)
        self._new_handle(desc)
        desc.flags = self.cur.u8("java class flags")
        for _ in range(self._short_count()):
            code = chr(self.cur.u8("java field type"))
            field_name = self._utf_string(self.cur.u16("java field name length"))
            if code in ("L", "["):
                self.content(depth + 1)  # the field's type signature string
            elif code not in _PRIMITIVE_SIZES:
                raise UnsupportedJava(f"java field type {code!r}")
            desc.fields.append((code, field_name))
        self._annotation(depth)
        desc.super_desc = self._class_desc(depth)
        return desc

    def _short_count(self) -> int:
        at = self.cur.pos
        count = self.cur.i16("java field count")
        if count < 0:
            raise self.cur.error(f"invalid java field count {count}", at=at)
        return int(count)

    def _annotation(self, depth: int) -> list[JavaValue]:
        written: list[JavaValue] = []
        while True:
            at = self.cur.pos
            tc = self.cur.u8("java annotation")
            if tc == TC_ENDBLOCKDATA:
                return written
            if tc == TC_BLOCKDATA:
                self.cur.skip(self.cur.u8("java block length"), "java block data")
            elif tc == TC_BLOCKDATALONG:
                self.cur.skip(self.cur.count("java block length"), "java block data")
            else:
                self.cur.pos = at
                written.append(self.content(depth + 1))

    def _object(self, depth: int) -> JavaObject:
        desc = self._class_desc(depth)
        if desc is None:
            raise UnsupportedJava("java object without class descriptor")
        obj = JavaObject(desc.name)
        self._new_handle(obj)
        chain: list[_ClassDesc] = []
        cursor_desc: _ClassDesc | None = desc
        while cursor_desc is not None:
            chain.append(cursor_desc)
            cursor_desc = cursor_desc.super_desc
        for cls in reversed(chain):
            if cls.flags & SC_EXTERNALIZABLE:
                if not cls.flags & SC_BLOCK_DATA:
                    raise UnsupportedJava(f"externalizable class {cls.name} without block data")
                self._annotation(depth)
                continue
            for code, name in cls.fields:
                obj.fields[name] = self._field_value(code, depth)
            if cls.flags & SC_WRITE_METHOD:
                obj.written.extend(self._annotation(depth))
        return obj

    def _field_value(self, code: str, depth: int) -> JavaValue:
        if code in ("L", "["):
            return self.content(depth + 1)
        raw = self.cur.take(_PRIMITIVE_SIZES[code], "java field value")
        if code == "Z":
            return bool(raw[0])
        if code in ("F", "D"):
            return 0.0  # never needed; keep the stream position right
        return int.from_bytes(raw, "big", signed=code != "C")

    def _enum(self, depth: int) -> JavaEnum:
        desc = self._class_desc(depth)
        handle = self._new_handle(None)
        at = self.cur.pos
        name = self.content(depth + 1)
        if not isinstance(name, str):
            raise self.cur.error("java enum constant is not a string", at=at)
        value = JavaEnum(desc.name if desc else "?", name)
        self.handles[handle] = value
        return value

    def _array(self, depth: int) -> list[JavaValue]:
        desc = self._class_desc(depth)
        values: list[JavaValue] = []
        self._new_handle(values)
        length = self.cur.count("java array length")
        element = desc.name[1:2] if desc else "L"
        if element in _PRIMITIVE_SIZES:
            self.cur.skip(length * _PRIMITIVE_SIZES[element], "java array data")
            return values
        for _ in range(length):
            values.append(self.content(depth + 1))
        return values


def _text(value: JavaValue) -> str | None:
    if isinstance(value, JavaEnum):
        return value.constant
    return value if isinstance(value, str) else None


def _snapshot_type(obj: JavaObject | None) -> str | None:
    if obj is None:
        return None
    simple = obj.class_name.rsplit(".", 1)[-1]
    if simple == "SavepointType":
        return "savepoint"
    if simple == "CheckpointType":
        return "checkpoint"
    return simple


def _to_properties(root: JavaValue) -> CheckpointProperties:
    if not isinstance(root, JavaObject):
        return CheckpointProperties(None, None, None, None, None, problem="trailer is not an object")
    flags = {k: v for k, v in root.fields.items() if isinstance(v, bool)}
    snapshot = root.fields.get("checkpointType")
    snap_obj = snapshot if isinstance(snapshot, JavaObject) else None
    fields = snap_obj.fields if snap_obj else {}
    return CheckpointProperties(
        snapshot_type=_snapshot_type(snap_obj),
        type_name=_text(fields.get("name")),
        format_type=_text(fields.get("formatType")),
        sharing_files_strategy=_text(fields.get("sharingFilesStrategy")),
        post_checkpoint_action=_text(fields.get("postCheckpointAction")),
        flags=flags,
    )


def read_java_object(cur: ByteCursor, what: str) -> JavaValue:
    """Read one Java serialization stream (header, then one object) at the cursor, as data.

    Raises:
        UnsupportedJava: A well-formed construct this reader does not decode.
        StatekitError: (the cursor's error class) when the stream is damaged or ends early.
    """
    at = cur.pos
    if cur.take(len(JAVA_STREAM_MAGIC), f"{what} java serialization header") != JAVA_STREAM_MAGIC:
        raise cur.error(f"{what} does not start with a java serialization header", at=at)
    return _JavaStreamReader(cur).content(0)


def read_checkpoint_properties(cur: ByteCursor) -> CheckpointProperties:
    """Read the Java-serialized ``CheckpointProperties`` at the cursor.

    Raises:
        MetadataError: When the stream is missing, has a wrong header or ends early.
    """
    at = cur.pos
    if cur.remaining == 0:
        raise cur.error("missing checkpoint properties (metadata v4+ ends with them)")
    header = cur.take(len(JAVA_STREAM_MAGIC), "java serialization header")
    if header != JAVA_STREAM_MAGIC:
        raise cur.error("checkpoint properties do not start with a java serialization header", at=at)
    reader = _JavaStreamReader(cur)
    try:
        root = reader.content(0)
    except UnsupportedJava as exc:
        return CheckpointProperties(None, None, None, None, None, problem=str(exc))
    return _to_properties(root)
