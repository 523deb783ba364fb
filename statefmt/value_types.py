"""Declared value types: what a state's values are, so readers can decode to typed columns.

Grammar (whitespace ignored)::

    type   := "int" | "float" | "string" | "bool" | "bytes" | "timestamp" | "json"
            | "list<" type ">" | "map<" type "," type ">" | "struct<" field ("," field)* ">"
    field  := name ":" type

Aliases: ``long``/``int64``/``bigint`` = ``int``; ``double`` = ``float``; ``str`` = ``string``.
Types nest at most :data:`MAX_DEPTH` levels deep.
``json`` means "any value": typed readers show it as a JSON string. Timestamps are epoch
milliseconds (int) in the value and an Arrow ``timestamp[ms, UTC]`` in columns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import chain
from typing import Any

from statekit.statefmt.errors import BadInputError

__all__ = ["ValueType", "parse_value_type", "to_arrow_type", "ANY", "MAX_DEPTH"]

# Types nest at most this deep (``list<list<int>>`` is 2): a declared type, and a value's
# structure, are bounded, so nothing that parses, checks or converts them runs out of stack.
MAX_DEPTH = 32

_ALIASES = {
    "int": "int", "long": "int", "int64": "int", "bigint": "int", "integer": "int",
    "float": "float", "double": "float",
    "string": "string", "str": "string",
    "bool": "bool", "boolean": "bool",
    "bytes": "bytes", "binary": "bytes",
    "timestamp": "timestamp",
    "json": "json", "any": "json",
}
_TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|[<>,:])")


@dataclass(frozen=True)
class ValueType:
    """A parsed declared type. ``name`` is a primitive name, ``list``, ``map`` or ``struct``."""

    name: str
    args: tuple[ValueType, ...] = ()
    fields: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.name == "list":
            return f"list<{self.args[0]}>"
        if self.name == "map":
            return f"map<{self.args[0]},{self.args[1]}>"
        if self.name == "struct":
            inner = ",".join(f"{n}:{t}" for n, t in zip(self.fields, self.args))
            return f"struct<{inner}>"
        return self.name

    def check_many(self, values: list[Any]) -> str | None:
        """Why some value of ``values`` does not fit (the first such), or None."""
        if self.name == "json":
            return None
        exact = _EXACT_TYPES.get(self.name)
        if exact is not None and set(map(type, values)).issubset(exact):
            return None
        if self.name == "list" and set(map(type, values)).issubset(_LIST_TYPES):
            element = _EXACT_TYPES.get(self.args[0].name)  # lists of simple elements: by type alone
            if element is not None and set(map(type, chain.from_iterable(v for v in values if v is not None))).issubset(
                    element):
                return None
        for value in values:
            reason = self.check(value)
            if reason:
                return reason
        return None

    def check(self, value: Any) -> str | None:
        """Why ``value`` does not fit this type, or None when it does (None always fits)."""
        if value is None or self.name == "json":
            return None
        simple = _SIMPLE_CHECKS.get(self.name)
        if simple is not None:
            return None if simple(value) else f"expected {self.name}, got {type(value).__name__}"
        if self.name == "list":
            if not isinstance(value, (list, tuple)):
                return f"expected list, got {type(value).__name__}"
            return next((r for r in (self.args[0].check(v) for v in value) if r), None)
        if self.name == "map":
            if not isinstance(value, dict):
                return f"expected map, got {type(value).__name__}"
            for k, v in value.items():
                reason = self.args[0].check(k) or self.args[1].check(v)
                if reason:
                    return reason
            return None
        if not isinstance(value, dict):
            return f"expected struct (dict), got {type(value).__name__}"
        unknown = set(value) - set(self.fields)
        if unknown:
            return f"unknown struct fields {sorted(map(str, unknown))}"
        for name, field_type in zip(self.fields, self.args):
            reason = field_type.check(value.get(name))
            if reason:
                return f"{name}: {reason}"
        return None


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_SIMPLE_CHECKS = {
    "int": _is_int,
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
    "bytes": lambda v: isinstance(v, (bytes, bytearray)),
    "timestamp": _is_int,
}

_LIST_TYPES = (list, tuple, type(None))
_EXACT_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int, type(None)),
    "timestamp": (int, type(None)),
    "float": (float, int, type(None)),
    "string": (str, type(None)),
    "bool": (bool, type(None)),
    "bytes": (bytes, type(None)),
}

ANY = ValueType("json")


def parse_value_type(text: str | None) -> ValueType:
    """Parse a declared type string; None or empty means ``json`` (any value)."""
    if text is None or not text.strip():
        return ANY
    tokens = _tokenize(text)
    parsed, pos = _parse(tokens, 0, text, 0)
    if pos != len(tokens):
        raise BadInputError(f"invalid value type {_shown(text)}: unexpected {tokens[pos]!r}")
    return parsed


def _tokenize(text: str) -> list[str]:
    tokens, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if not match:
            raise BadInputError(f"invalid value type {_shown(text)} at character {pos}")
        tokens.append(match.group(1))
        pos = match.end()
    return tokens


def _expect(tokens: list[str], pos: int, token: str, text: str) -> int:
    if pos >= len(tokens) or tokens[pos] != token:
        raise BadInputError(f"invalid value type {_shown(text)}: expected {token!r}")
    return pos + 1


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 200 else f"{text[:200]!r}... ({len(text)} characters)"


def _parse(tokens: list[str], pos: int, text: str, depth: int) -> tuple[ValueType, int]:
    if pos >= len(tokens):
        raise BadInputError(f"invalid value type {_shown(text)}: ends early")
    word = tokens[pos].lower()
    pos += 1
    if word in _ALIASES:
        return ValueType(_ALIASES[word]), pos
    if word not in ("list", "array", "map", "struct"):
        raise BadInputError(f"invalid value type {_shown(text)}: unknown type {tokens[pos - 1]!r}")
    if depth >= MAX_DEPTH:
        raise BadInputError(f"invalid value type {_shown(text)}: nested more than {MAX_DEPTH} levels deep")
    pos = _expect(tokens, pos, "<", text)
    if word in ("list", "array"):
        element, pos = _parse(tokens, pos, text, depth + 1)
        return ValueType("list", (element,)), _expect(tokens, pos, ">", text)
    if word == "map":
        key, pos = _parse(tokens, pos, text, depth + 1)
        pos = _expect(tokens, pos, ",", text)
        value, pos = _parse(tokens, pos, text, depth + 1)
        return ValueType("map", (key, value)), _expect(tokens, pos, ">", text)
    names: list[str] = []
    types: list[ValueType] = []
    while True:
        if pos >= len(tokens) or not re.match(r"[A-Za-z_]", tokens[pos]):
            raise BadInputError(f"invalid value type {_shown(text)}: expected a field name")
        names.append(tokens[pos])
        pos = _expect(tokens, pos + 1, ":", text)
        field_type, pos = _parse(tokens, pos, text, depth + 1)
        types.append(field_type)
        if pos < len(tokens) and tokens[pos] == ",":
            pos += 1
            continue
        break
    if len(set(names)) != len(names):
        raise BadInputError(f"invalid value type {_shown(text)}: duplicate field names")
    return ValueType("struct", tuple(types), tuple(names)), _expect(tokens, pos, ">", text)


def to_arrow_type(value_type: ValueType) -> Any:
    """The Arrow type of a declared type (``json`` becomes a JSON string column)."""
    import pyarrow as pa

    simple = {
        "int": pa.int64(), "float": pa.float64(), "string": pa.string(), "bool": pa.bool_(),
        "bytes": pa.binary(), "timestamp": pa.timestamp("ms", tz="UTC"), "json": pa.string(),
    }
    if value_type.name in simple:
        return simple[value_type.name]
    if value_type.name == "list":
        return pa.list_(to_arrow_type(value_type.args[0]))
    if value_type.name == "map":
        return pa.map_(to_arrow_type(value_type.args[0]), to_arrow_type(value_type.args[1]))
    return pa.struct(
        [pa.field(n, to_arrow_type(t)) for n, t in zip(value_type.fields, value_type.args)]
    )
