"""State schema evolution: whether a declared value type may change, and how values migrate.

Flink's ``TypeSerializerSchemaCompatibility`` in statekit's terms: a change from the type a
snapshot declares (``old``) to the type a job declares (``new``) is

* ``compatible_as_is``: every value of ``old`` is already a value of ``new`` (the same type,
  fields reordered, ``int`` <-> ``timestamp``, anything -> ``json``);
* ``compatible_after_migration``: every value of ``old`` becomes a value of ``new`` through
  :func:`migrate_value` (``int`` -> ``float``; struct fields added, filled with null or a
  given default, or removed; list elements, map values and struct fields widened by these
  same rules);
* ``incompatible``: some value of ``old`` has no counterpart in ``new`` (``string`` -> ``int``,
  ``float`` -> ``int``, ``json`` -> a concrete type, a changed map key type).

Invariant: for every ``old``/``new`` whose compatibility is not ``incompatible`` and every
value ``v`` that ``old.check(v)`` accepts, ``new.check(migrate_value(v, old, new))`` accepts
the result (``tests/statefmt/test_type_evolution.py`` checks it with hypothesis).
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from statekit.statefmt.errors import BadInputError, IncompatibleStateError
from statekit.statefmt.value_types import ValueType, parse_value_type

__all__ = [
    "SchemaCompatibility",
    "TypeChange",
    "resolve_type_change",
    "resolve_declared_types",
    "migrate_value",
    "ValueMigration",
]


class SchemaCompatibility(enum.Enum):
    """Flink's ``TypeSerializerSchemaCompatibility`` outcomes."""

    COMPATIBLE_AS_IS = "compatible_as_is"
    COMPATIBLE_AFTER_MIGRATION = "compatible_after_migration"
    INCOMPATIBLE = "incompatible"

    def __and__(self, other: SchemaCompatibility) -> SchemaCompatibility:
        """The weaker of two outcomes (of the parts of one type)."""
        order = list(SchemaCompatibility)
        return order[max(order.index(self), order.index(other))]


@dataclass(frozen=True)
class TypeChange:
    """The outcome of changing ``old`` to ``new``; ``reason`` says why when incompatible."""

    old: ValueType
    new: ValueType
    compatibility: SchemaCompatibility
    reason: str | None = None

    @property
    def compatible(self) -> bool:
        return self.compatibility is not SchemaCompatibility.INCOMPATIBLE

    @property
    def needs_migration(self) -> bool:
        return self.compatibility is SchemaCompatibility.COMPATIBLE_AFTER_MIGRATION


_AS_IS = SchemaCompatibility.COMPATIBLE_AS_IS
_MIGRATE = SchemaCompatibility.COMPATIBLE_AFTER_MIGRATION
_INCOMPATIBLE = SchemaCompatibility.INCOMPATIBLE

# (old primitive, new primitive) pairs that need no or some conversion of the values
_PRIMITIVE_CHANGES: dict[tuple[str, str], SchemaCompatibility] = {
    ("int", "float"): _MIGRATE,
    ("int", "timestamp"): _AS_IS,
    ("timestamp", "int"): _AS_IS,
    ("timestamp", "float"): _MIGRATE,
}


def resolve_declared_types(old: str | None, new: str | None) -> TypeChange:
    """:func:`resolve_type_change` of two declared type strings (None: ``json``)."""
    return resolve_type_change(parse_value_type(old), parse_value_type(new))


def resolve_type_change(old: ValueType, new: ValueType) -> TypeChange:
    """Whether values declared ``old`` can be read as ``new`` (see the module docstring)."""
    compatibility, reason = _resolve(old, new)
    return TypeChange(old, new, compatibility, reason)


def _resolve(old: ValueType, new: ValueType) -> tuple[SchemaCompatibility, str | None]:
    if old == new or new.name == "json":
        return _AS_IS, None
    if old.name == "json":
        return _INCOMPATIBLE, f"json (any value) cannot be narrowed to {new}"
    if old.name != new.name:
        found = _PRIMITIVE_CHANGES.get((old.name, new.name))
        if found is None:
            return _INCOMPATIBLE, f"{old} values cannot be read as {new}"
        return found, None
    if old.name == "list":
        return _within("list element", old.args[0], new.args[0])
    if old.name == "map":
        return _resolve_map(old, new)
    if old.name == "struct":
        return _resolve_struct(old, new)
    return _AS_IS, None  # equal primitive names


def _within(what: str, old: ValueType, new: ValueType) -> tuple[SchemaCompatibility, str | None]:
    compatibility, reason = _resolve(old, new)
    return compatibility, (f"{what}: {reason}" if reason else None)


def _resolve_map(old: ValueType, new: ValueType) -> tuple[SchemaCompatibility, str | None]:
    if old.args[0] != new.args[0] and new.args[0].name != "json":
        return _INCOMPATIBLE, f"map key type {old.args[0]} -> {new.args[0]}: keys cannot change type"
    return _within("map value", old.args[1], new.args[1])


def _resolve_struct(old: ValueType, new: ValueType) -> tuple[SchemaCompatibility, str | None]:
    old_fields = dict(zip(old.fields, old.args))
    new_fields = dict(zip(new.fields, new.args))
    result = _AS_IS if set(old_fields) == set(new_fields) else _MIGRATE
    for name in sorted(set(old_fields) & set(new_fields)):
        compatibility, reason = _within(f"field {name}", old_fields[name], new_fields[name])
        if reason:
            return compatibility, reason
        result = result & compatibility
    return result, None


def migrate_value(value: Any, old: ValueType, new: ValueType, defaults: Mapping[str, Any] | None = None) -> Any:
    """``value`` (a value of ``old``) as a value of ``new``; the change must be compatible.

    ``defaults``: values of struct fields that ``new`` adds at its top level (else null).

    Raises:
        IncompatibleStateError: ``old`` -> ``new`` is incompatible.
        BadInputError: A default for a field ``new`` does not add, or that does not fit its type.
    """
    change = resolve_type_change(old, new)
    if not change.compatible:
        raise IncompatibleStateError(f"cannot migrate {old} to {new}: {change.reason}")
    return ValueMigration(old, new, defaults).apply(value)


class ValueMigration:
    """Migrates many values of one compatible change (resolved once, applied per value).

    ``defaults`` fill struct fields that ``new`` adds at its top level; a non-null value keeps
    its own fields, a null value stays null.
    """

    def __init__(self, old: ValueType, new: ValueType, defaults: Mapping[str, Any] | None = None) -> None:
        self.old = old
        self.new = new
        self.defaults = dict(defaults or {})
        _check_defaults(old, new, self.defaults)
        self.as_is = resolve_type_change(old, new).compatibility is _AS_IS and not self.defaults

    def apply(self, value: Any) -> Any:
        """``value`` of ``old`` as a value of ``new`` (None stays None)."""
        if self.as_is:
            return value
        converted = _convert(value, self.old, self.new)
        if self.defaults and converted is not None:
            converted.update(copy.deepcopy(self.defaults))  # only added fields: _convert left them null
        return converted


def _check_defaults(old: ValueType, new: ValueType, defaults: Mapping[str, Any]) -> None:
    if not defaults:
        return
    added = [n for n in new.fields if n not in old.fields] if old.name == new.name == "struct" else []
    for name, value in defaults.items():
        if name not in added:
            raise BadInputError(f"default for {name!r}: {new} adds no field {name!r} to {old} "
                                f"(fields added: {', '.join(added) or 'none'})")
        reason = dict(zip(new.fields, new.args))[name].check(value)
        if reason:
            raise BadInputError(f"default for {name!r}: {reason}")


def _convert(value: Any, old: ValueType, new: ValueType) -> Any:
    if value is None or old == new or new.name == "json":
        return value
    if new.name == "float":
        return float(value)
    if new.name == "list":
        return [_convert(v, old.args[0], new.args[0]) for v in value]
    if new.name == "map":
        return {k: _convert(v, old.args[1], new.args[1]) for k, v in value.items()}
    if new.name == "struct":
        old_fields = dict(zip(old.fields, old.args))
        return {
            name: _convert(value.get(name), old_fields[name], field_type) if name in old_fields else None
            for name, field_type in zip(new.fields, new.args)
        }
    return value
