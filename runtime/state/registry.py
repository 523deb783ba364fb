"""The registry of keyed state backends: every place that chooses a backend by name
(``env.set_state_backend``, ``statekit run --state-backend``, the launcher, the state contract
test) reads it. Adding a backend: one :class:`StateBackendEntry` in ``_BUILT_IN`` and its module
``statekit/runtime/state/backend_<name>.py``.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statekit.runtime.state.backend import DEFAULT_STATE_BACKEND, KeyedStateBackend, SubtaskScope
from statekit.statefmt.errors import BadInputError

if TYPE_CHECKING:
    pass

__all__ = [
    "StateBackendEntry",
    "register_state_backend",
    "unregister_state_backend",
    "state_backend_names",
    "state_backend",
    "incremental_backend_names",
    "resolve_state_backend",
    "create_keyed_backend",
]


@dataclass(frozen=True)
class StateBackendEntry:
    """A keyed state backend by name: how to build it and what it needs.

    Attributes:
        name: What users pass (``env.set_state_backend``, ``--state-backend``).
        factory: The :class:`KeyedStateBackend` subclass, or ``"module:attribute"`` naming it
            (imported on first use, so listing the backends imports none of them). It is
            called as ``factory(scope, working_dir=...)``.
        needs_working_dir: Give each execution attempt a local scratch directory (created
            and removed by the job master) as the backend's ``working_dir``.
        requires: An optional package the backend imports; a job refuses to start without it.
        install_hint: How to install ``requires`` (shown in that refusal).
        supports_incremental: The backend takes native incremental checkpoints (its snapshots
            share files between checkpoints in the job's ``shared/``).
    """

    name: str
    factory: str | type[KeyedStateBackend[Any]]
    needs_working_dir: bool = False
    requires: str | None = None
    install_hint: str | None = None
    supports_incremental: bool = False

    def check_incremental(self) -> None:
        """Raise BadInputError unless the backend takes incremental checkpoints (naming those that do)."""
        if not self.supports_incremental:
            able = incremental_backend_names()
            hint = f"use --state-backend {' or '.join(able)}" if able else "no registered backend supports them"
            raise BadInputError(f"incremental checkpoints need a state backend that supports them; "
                                f"{self.name!r} does not ({hint})")

    @property
    def available(self) -> bool:
        """Whether the optional package it requires (if any) is installed."""
        return self.requires is None or importlib.util.find_spec(self.requires) is not None

    def check_available(self) -> None:
        """Raise BadInputError naming the missing package and how to install it."""
        if not self.available:
            raise BadInputError(
                f"state backend {self.name!r} needs the optional package {self.requires!r}, which is not "
                f"installed; {self.install_hint or 'install it'} or choose another state backend"
            )

    def backend_class(self) -> type[KeyedStateBackend[Any]]:
        """The backend class (imported now when ``factory`` names it)."""
        if not isinstance(self.factory, str):
            return self.factory
        module, _, attribute = self.factory.partition(":")
        found = getattr(importlib.import_module(module), attribute)
        assert isinstance(found, type) and issubclass(found, KeyedStateBackend), self.factory
        return found

    def create(self, scope: SubtaskScope, *, working_dir: str | None = None) -> KeyedStateBackend[Any]:
        """A new backend for ``scope``."""
        return self.backend_class()(scope, working_dir=working_dir)


_REGISTRY: dict[str, StateBackendEntry] = {}


def register_state_backend(entry: StateBackendEntry) -> None:
    """Make ``entry`` selectable by its name everywhere a state backend is chosen.

    Raises:
        ValueError: A backend of that name is already registered.
    """
    if entry.name in _REGISTRY:
        raise ValueError(f"state backend {entry.name!r} is already registered")
    _REGISTRY[entry.name] = entry


def unregister_state_backend(name: str) -> None:
    """Remove the backend ``name`` from the registry (no-op when absent)."""
    _REGISTRY.pop(name, None)


def state_backend_names() -> tuple[str, ...]:
    """The registered backend names, in registration order (the default first)."""
    return tuple(_REGISTRY)


def state_backend(name: str) -> StateBackendEntry:
    """The registry entry of ``name``.

    Raises:
        BadInputError: No backend of that name is registered.
    """
    entry = _REGISTRY.get(name)
    if entry is None:
        raise BadInputError(f"unknown state backend {name!r}; use one of {', '.join(_REGISTRY)}")
    return entry


def incremental_backend_names() -> tuple[str, ...]:
    """The registered backends that take incremental checkpoints."""
    return tuple(name for name, entry in _REGISTRY.items() if entry.supports_incremental)


def resolve_state_backend(name: str) -> StateBackendEntry:
    """The registry entry of ``name`` for a job about to start: registered and installed.

    Raises:
        BadInputError: No backend of that name, or the optional package it requires is missing.
    """
    entry = state_backend(name)
    entry.check_available()
    return entry


def create_keyed_backend(name: str, scope: SubtaskScope, *, working_dir: str | None = None) -> KeyedStateBackend[Any]:
    """Instantiate the registered backend ``name`` for ``scope``."""
    return state_backend(name).create(scope, working_dir=working_dir)


# The built-in backends. Adding one: an entry here plus its module runtime/backend_<name>.py.
_BUILT_IN = (
    StateBackendEntry(DEFAULT_STATE_BACKEND, "statekit.runtime.state.backend_hashmap:HashMapKeyedStateBackend"),
    StateBackendEntry(
        "rocksdb", "statekit.runtime.state.backend_rocksdb:RocksDBKeyedStateBackend",
        needs_working_dir=True, requires="rocksdict", install_hint="pip install 'statekit[rocksdb]'",
        supports_incremental=True,
    ),
)
for _entry in _BUILT_IN:
    register_state_backend(_entry)
