"""Flink SQL's logical types, as the serializer snapshots of SQL state record them.

``RowDataSerializer``'s snapshot (``RowDataSerializerSnapshot`` v3) writes the row's field
types as ``LogicalType`` objects, each with ``InstantiationUtil.serializeObject`` — one Java
serialization stream per field. They are read here as data only (never instantiated):

    LogicalType            isNullable, typeRoot (LogicalTypeRoot: VARCHAR, BIGINT, ...)
    CharType..VarBinaryType length          DecimalType precision, scale
    TimeType, TimestampType, LocalZonedTimestampType, ZonedTimestampType  precision
    ArrayType, MultisetType elementType     MapType keyType, valueType
    RowType                fields: a list of RowField(name, type, description)

A type this module does not model keeps its root and class (``RAW``, intervals,
structured types...): the decoders refuse it, naming it by :meth:`LogicalType.sql`.
"""

from __future__ import annotations

from dataclasses import dataclass

from statekit.flink.cursor import ByteCursor
from statekit.flink.properties import JavaEnum, JavaObject, JavaValue, UnsupportedJava, read_java_object

__all__ = ["LogicalType", "read_logical_type"]

_LENGTH_ROOTS = frozenset({"CHAR", "VARCHAR", "BINARY", "VARBINARY"})
_PRECISION_ROOTS = frozenset({"TIME_WITHOUT_TIME_ZONE", "TIMESTAMP_WITHOUT_TIME_ZONE",
                              "TIMESTAMP_WITH_LOCAL_TIME_ZONE", "TIMESTAMP_WITH_TIME_ZONE"})
_SQL_NAMES = {"INTEGER": "INT", "TIME_WITHOUT_TIME_ZONE": "TIME", "TIMESTAMP_WITHOUT_TIME_ZONE": "TIMESTAMP",
              "TIMESTAMP_WITH_LOCAL_TIME_ZONE": "TIMESTAMP_LTZ", "TIMESTAMP_WITH_TIME_ZONE": "TIMESTAMP_TZ"}
MAX_VARCHAR = 2147483647


@dataclass(frozen=True)
class LogicalType:
    """One SQL type: Flink's ``LogicalTypeRoot`` name and what its class adds.

    Attributes:
        root: The ``LogicalTypeRoot`` constant (``VARCHAR``, ``DECIMAL``, ``ROW``...).
        nullable: ``isNullable``.
        precision: The length of CHAR/VARCHAR/BINARY/VARBINARY, the precision of DECIMAL and
            the time types; else ``None``.
        scale: DECIMAL's scale.
        children: ARRAY/MULTISET: the element; MAP: key and value; ROW: the fields.
        names: ROW's field names.
        java_class: The class the type was read from (names a type not modelled here).
    """

    root: str
    nullable: bool = True
    precision: int | None = None
    scale: int | None = None
    children: tuple[LogicalType, ...] = ()
    names: tuple[str, ...] = ()
    java_class: str = ""

    def sql(self) -> str:
        """The type in Flink SQL's spelling (``STRING``, ``DECIMAL(38, 2)``, ``ROW<`a` INT>``)."""
        root = self.root
        if root == "VARCHAR" and self.precision == MAX_VARCHAR:
            text = "STRING"
        elif root == "VARBINARY" and self.precision == MAX_VARCHAR:
            text = "BYTES"
        elif root == "DECIMAL":
            text = f"DECIMAL({self.precision}, {self.scale})"
        elif root in _LENGTH_ROOTS or root in _PRECISION_ROOTS:
            text = f"{_SQL_NAMES.get(root, root)}({self.precision})"
        elif root in ("ARRAY", "MULTISET"):
            text = f"{root}<{self.children[0].sql()}>"
        elif root == "MAP":
            text = f"MAP<{self.children[0].sql()}, {self.children[1].sql()}>"
        elif root == "ROW":
            text = "ROW<" + ", ".join(f"`{n}` {t.sql()}" for n, t in zip(self.names, self.children)) + ">"
        elif self.java_class and not self.java_class.startswith(_LOGICAL):
            text = f"{root} ({self.java_class})"
        else:
            text = _SQL_NAMES.get(root, root)
        return text if self.nullable else f"{text} NOT NULL"


_LOGICAL = "org.apache.flink.table.types.logical."


def _int(obj: JavaObject, name: str) -> int | None:
    value = obj.fields.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _elements(value: JavaValue) -> list[JavaValue]:
    """The elements of a serialized ``java.util`` list (``ArrayList``, unmodifiable views)."""
    if isinstance(value, list):
        return value
    if isinstance(value, JavaObject):
        if value.class_name == "java.util.ArrayList":
            return list(value.written)
        for inner in ("list", "c"):  # Collections$UnmodifiableList / UnmodifiableCollection
            if inner in value.fields:
                return _elements(value.fields[inner])
    raise UnsupportedJava(f"a list of row fields of class {getattr(value, 'class_name', type(value).__name__)}")


def _type(value: JavaValue, depth: int = 0) -> LogicalType:
    if not isinstance(value, JavaObject) or depth > 32:
        raise UnsupportedJava("a logical type that is not an object")
    root_value = value.fields.get("typeRoot")
    if not isinstance(root_value, JavaEnum):
        raise UnsupportedJava(f"{value.class_name} without a type root")
    root, nullable = root_value.constant, value.fields.get("isNullable") is not False
    if root in _LENGTH_ROOTS:
        return LogicalType(root, nullable, _int(value, "length"), java_class=value.class_name)
    if root == "DECIMAL":
        return LogicalType(root, nullable, _int(value, "precision"), _int(value, "scale"), java_class=value.class_name)
    if root in _PRECISION_ROOTS:
        return LogicalType(root, nullable, _int(value, "precision"), java_class=value.class_name)
    if root in ("ARRAY", "MULTISET"):
        return LogicalType(root, nullable, children=(_type(value.fields.get("elementType"), depth + 1),),
                           java_class=value.class_name)
    if root == "MAP":
        key, val = _type(value.fields.get("keyType"), depth + 1), _type(value.fields.get("valueType"), depth + 1)
        return LogicalType(root, nullable, children=(key, val), java_class=value.class_name)
    if root == "ROW" and value.class_name == _LOGICAL + "RowType":
        fields = [f for f in _elements(value.fields.get("fields")) if isinstance(f, JavaObject)]
        names = tuple(str(f.fields.get("name")) for f in fields)
        return LogicalType(root, nullable, children=tuple(_type(f.fields.get("type"), depth + 1) for f in fields),
                           names=names, java_class=value.class_name)
    return LogicalType(root, nullable, java_class=value.class_name)


def read_logical_type(cur: ByteCursor) -> LogicalType:
    """One Java-serialized ``LogicalType`` at the cursor (its own serialization stream).

    Raises:
        UnsupportedJava: A stream this reader cannot follow (the caller cannot skip it).
        StatekitError: (the cursor's error class) when the bytes are damaged or end early.
    """
    return _type(read_java_object(cur, "logical type"))
