"""The JSON contract of every ``--json`` result: one naming policy, data and schema from the types.

A result is a dataclass; its JSON document is generated from its fields, never written by hand:

- every key is a field name as declared (snake_case), in declaration order, unless the class
  renames it (a field whose Python name differs from the name the contract uses for the concept,
  such as ``damage`` of a statekit verify report, shown as ``problems`` like Flink's);
- nested dataclasses become objects, enums their value, tuples and lists arrays, dicts
  objects (keys as strings), paths strings, floats are kept unless rounded by the shape;
- a class states what else it shows in a :class:`JsonShape` class attribute ``json_shape``:
  properties (or methods without arguments) added after the fields (``extra``), fields left out
  (``omit``), fields shown under another name (``rename``), floats rounded (``digits``), fields
  left out when ``None`` (``omit_none``) and tuples of tuples shown as objects with named
  members (``records``);
- a class whose document is another view of it (several parallel fields merged into one list,
  a library summary) declares a ``json_view()`` method: its annotated return value is serialized
  instead of the fields.

:func:`json_data` builds the document; :func:`json_schema` builds its JSON Schema from the same
declarations and the type annotations, so the schema in ``docs/json/`` cannot drift from what
the code prints (``tests/cli/test_json_contract.py``).
"""

from __future__ import annotations

import dataclasses
import enum
import sys
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, ClassVar, Literal, Union, get_args, get_origin

__all__ = ["SCHEMA_VERSION", "JSON_SCHEMA_DIALECT", "JsonShape", "json_data", "json_document", "json_schema"]

# Bumped when a key is renamed or removed or changes its type; adding a key keeps it.
SCHEMA_VERSION = 1
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


@dataclass(frozen=True)
class JsonShape:
    """What a dataclass shows besides its fields (see the module docstring).

    Attributes:
        extra: Properties or argument-less methods added after the fields, in this order.
        omit: Fields left out (internal state, or shown through an ``extra``).
        rename: Field name -> its key in the document.
        digits: Field or extra name -> decimal digits its float is rounded to.
        omit_none: Fields left out when ``None`` (optional members of the document).
        records: Field name -> member names: a tuple of tuples shown as a list of objects.
    """

    extra: tuple[str, ...] = ()
    omit: tuple[str, ...] = ()
    rename: Mapping[str, str] = field(default_factory=dict)
    digits: Mapping[str, int] = field(default_factory=dict)
    omit_none: tuple[str, ...] = ()
    records: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


_PLAIN = JsonShape()


def _shape(cls: type) -> JsonShape:
    shape = getattr(cls, "json_shape", _PLAIN)
    return shape if isinstance(shape, JsonShape) else _PLAIN


def _has_view(obj: object) -> bool:
    return callable(getattr(obj, "json_view", None))


# ------------------------------------------------------------------------------ data


def json_data(value: Any) -> Any:
    """``value`` as JSON data (dicts, lists, strings, numbers, booleans, ``None``)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value.value if isinstance(value, enum.Enum) else value
    if isinstance(value, enum.Enum):
        return json_data(value.value)
    if _has_view(value) and not isinstance(value, type):
        return json_data(value.json_view())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _dataclass_data(value)
    if isinstance(value, Mapping):
        return {str(json_data(k)) if not isinstance(k, str) else k: json_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_data(v) for v in value]
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _dataclass_data(obj: Any) -> dict[str, Any]:
    shape = _shape(type(obj))
    data: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        if f.name in shape.omit:
            continue
        value = getattr(obj, f.name)
        if value is None and f.name in shape.omit_none:
            continue
        data[shape.rename.get(f.name, f.name)] = _member(shape, f.name, value)
    for name in shape.extra:
        value = getattr(obj, name)
        data[name] = _member(shape, name, value() if callable(value) else value)
    return data


def _member(shape: JsonShape, name: str, value: Any) -> Any:
    if name in shape.records:
        members = shape.records[name]
        return [dict(zip(members, (json_data(v) for v in row), strict=True)) for row in value]
    if name in shape.digits and isinstance(value, float):
        return round(value, shape.digits[name])
    return json_data(value)


def json_document(result: Any) -> dict[str, Any]:
    """The ``--json`` document of a result: ``schema_version`` first, then its data."""
    data = json_data(result)
    if not isinstance(data, dict):
        raise TypeError(f"a --json result must be an object, not {type(data).__name__}")
    return {"schema_version": SCHEMA_VERSION, **data}


# ---------------------------------------------------------------------------- schema


def json_schema(*results: type, title: str | None = None, description: str | None = None) -> dict[str, Any]:
    """The JSON Schema of the ``--json`` document of any of ``results`` (one of them, several:
    ``anyOf``): ``schema_version`` and the members their :func:`json_data` prints, every one
    required unless omitted when ``None``, no others (``additionalProperties: false``)."""
    builder = _SchemaBuilder()
    docs = [builder.document(cls) for cls in results]
    schema: dict[str, Any] = {"$schema": JSON_SCHEMA_DIALECT}
    if title:
        schema["title"] = title
    if description:
        schema["description"] = description
    if len(docs) == 1:
        schema.update(docs[0])
    else:
        schema["anyOf"] = docs
    if builder.defs:
        schema["$defs"] = dict(sorted(builder.defs.items()))
    return schema


def _hints(obj: Any) -> dict[str, Any]:
    module = sys.modules.get(getattr(obj, "__module__", ""), None)
    namespace = dict(vars(module)) if module else {}
    if isinstance(obj, type):
        for klass in reversed(obj.__mro__):
            namespace.update(vars(sys.modules.get(klass.__module__, types.ModuleType("_"))))
    try:
        return typing.get_type_hints(obj, globalns=namespace, include_extras=False)
    except NameError:
        # a name its module imports under TYPE_CHECKING only: import those modules now
        namespace = {**_type_checking_names(module), **namespace}
    try:
        return typing.get_type_hints(obj, globalns=namespace, include_extras=False)
    except NameError as exc:
        raise TypeError(f"{obj!r}: an annotation names something its module does not import at run time "
                        f"({exc}); the JSON schema is built from the annotations") from exc


def _type_checking_names(module: types.ModuleType | None) -> dict[str, Any]:
    """The names ``module`` imports inside ``if TYPE_CHECKING:`` (``from X import Y`` only)."""
    import ast
    import importlib
    import inspect

    if module is None:
        return {}
    names: dict[str, Any] = {}
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            continue
        for stmt in node.body:
            if isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
                source = importlib.import_module(stmt.module)
                names.update({a.asname or a.name: getattr(source, a.name) for a in stmt.names
                              if hasattr(source, a.name)})
    return names


def _doc(obj: Any) -> str | None:
    text = (obj.__doc__ or "").strip()
    if text.startswith(f"{getattr(obj, '__name__', '')}("):
        return None  # the signature dataclasses write for a class without a docstring
    return text.split("\n\n")[0].replace("\n", " ").strip() or None


class _SchemaBuilder:
    def __init__(self) -> None:
        self.defs: dict[str, Any] = {}
        self.names: dict[type, str] = {}  # dataclass -> its name in defs (unique)

    def document(self, cls: type) -> dict[str, Any]:
        while _has_view(cls):
            cls = _view_type(cls)
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"a --json result must be a dataclass, not {cls!r}")
        body = self.object_schema(cls)
        body["properties"] = {"schema_version": {"const": SCHEMA_VERSION}, **body["properties"]}
        body["required"] = ["schema_version", *body["required"]]
        return body

    def object_schema(self, cls: type) -> dict[str, Any]:
        shape = _shape(cls)
        hints = _hints(cls)
        properties: dict[str, Any] = {}
        required: list[str] = []
        for f in dataclasses.fields(cls):
            if f.name in shape.omit or hints.get(f.name) is ClassVar:
                continue
            key = shape.rename.get(f.name, f.name)
            properties[key] = self.member(shape, f.name, hints[f.name])
            if f.name not in shape.omit_none:
                required.append(key)
        for name in shape.extra:
            attr = getattr(cls, name)
            func = attr.fget if isinstance(attr, property) else attr
            properties[name] = self.member(shape, name, _hints(func)["return"])
            required.append(name)
        schema: dict[str, Any] = {"type": "object"}
        doc = _doc(cls)
        if doc:
            schema["description"] = doc
        schema.update(properties=properties, required=required, additionalProperties=False)
        return schema

    def member(self, shape: JsonShape, name: str, tp: Any) -> dict[str, Any]:
        if name in shape.records:
            row = _unwrap_sequence(tp)
            parts = get_args(row) if row is not None else ()
            members = shape.records[name]
            if len(parts) != len(members):
                raise TypeError(f"records of {name!r}: {members} do not match the tuple type {row!r}")
            return {"type": "array", "items": {
                "type": "object", "properties": {m: self.of(t) for m, t in zip(members, parts, strict=True)},
                "required": list(members), "additionalProperties": False}}
        return self.of(tp)

    def of(self, tp: Any) -> dict[str, Any]:
        if tp is Any or tp is object:
            return {}
        if tp is type(None) or tp is None:
            return {"type": "null"}
        if tp is bool:
            return {"type": "boolean"}
        if tp is int:
            return {"type": "integer"}
        if tp is float:
            return {"type": "number"}
        if tp is str or (isinstance(tp, type) and issubclass(tp, PurePath)):
            return {"type": "string"}
        if tp is bytes:
            return {"type": "string", "description": "hex"}
        if isinstance(tp, typing.TypeAliasType if hasattr(typing, "TypeAliasType") else ()):
            return self.of(tp.__value__)
        origin = get_origin(tp)
        if origin in (Union, types.UnionType):
            return _union([self.of(t) for t in get_args(tp)])
        if origin is Literal:
            return {"enum": list(get_args(tp))}
        if origin in (list, tuple, set, frozenset) or (origin is not None and _is_sequence(origin)):
            args = get_args(tp)
            if origin is tuple and args and (len(args) != 2 or args[1] is not Ellipsis):
                return {"type": "array", "prefixItems": [self.of(a) for a in args],
                        "minItems": len(args), "maxItems": len(args)}
            return {"type": "array", "items": self.of(args[0]) if args else {}}
        if origin is not None and _is_mapping(origin):
            args = get_args(tp)
            return {"type": "object", "additionalProperties": self.of(args[1]) if args else {}}
        if tp in (list, tuple):
            return {"type": "array"}
        if tp is dict:
            return {"type": "object"}
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return {"enum": [m.value for m in tp]}
        if isinstance(tp, type) and _has_view(tp):
            return self.of(_view_type(tp))
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            name = self.names.get(tp)
            if name is None:
                name = tp.__name__ if tp.__name__ not in self.defs else f"{tp.__module__}.{tp.__qualname__}"
                self.names[tp] = name
                self.defs[name] = {}  # a placeholder against recursion
                self.defs[name] = self.object_schema(tp)
            return {"$ref": f"#/$defs/{name}"}
        raise TypeError(f"no JSON schema for the type {tp!r}")


def _view_type(cls: type) -> Any:
    return _hints(cls.json_view)["return"]  # type: ignore[attr-defined]


def _is_sequence(origin: Any) -> bool:
    from collections.abc import Sequence

    return isinstance(origin, type) and issubclass(origin, Sequence) and not issubclass(origin, (str, bytes))


def _is_mapping(origin: Any) -> bool:
    return isinstance(origin, type) and issubclass(origin, Mapping)


def _unwrap_sequence(tp: Any) -> Any:
    args = get_args(tp)
    return args[0] if args else None


def _union(options: list[dict[str, Any]]) -> dict[str, Any]:
    simple = [o for o in options if set(o) == {"type"} and isinstance(o["type"], str)]
    if len(simple) == len(options):
        kinds = list(dict.fromkeys(o["type"] for o in simple))
        return {"type": kinds[0] if len(kinds) == 1 else kinds}
    return {"anyOf": options}
