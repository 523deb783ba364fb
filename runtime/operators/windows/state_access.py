"""Window state by explicit ``(key, window)`` pairs: the window operator's per-record access.

A namespaced state handle is scoped to the backend's current key and the handle's current
namespace; the window operator instead builds the pair ``(key, window)`` once per record and
addresses its contents and timer states with it. A backend whose namespaced handles have a
``by_pair()`` (the hashmap backend: the pair is its tables' own key) serves the pair directly;
any other is served through the handle (:class:`HandleValues`, :class:`HandleMaps`), which sets
the current key and namespace first — the same reads and writes, one call more.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

from statekit.runtime.api.state import MapState, ValueState
from statekit.runtime.state.backend import KeyedStateBackend
from statekit.runtime.state.shared_map import SharedMap

__all__ = [
    "ValueAccess",
    "MapAccess",
    "HandleValues",
    "HandleMaps",
    "values_by_pair",
    "maps_by_pair",
    "Pair",
]

Pair = tuple[Any, Any]


class ValueAccess(Protocol):
    """A namespaced value state by ``(key, namespace)``; None stands for no value."""

    def get(self, pair: Pair) -> Any: ...

    def put(self, pair: Pair, value: Any) -> None: ...

    def pop(self, pair: Pair) -> Any: ...


class MapAccess(Protocol):
    """A namespaced map state by ``(key, namespace)``."""

    def put(self, pair: Pair, user_key: Any, value: Any) -> None: ...

    def put_shared(self, pair: Pair, shared: SharedMap) -> None:
        """Set the entries of ``shared`` in the map of ``pair`` (a backend may let the pair hold
        ``shared`` itself, see :class:`~statekit.runtime.state.shared_map.SharedMap`)."""

    def remove(self, pair: Pair, user_key: Any) -> None: ...

    def clear(self, pair: Pair) -> None: ...


class HandleValues:
    """:class:`ValueAccess` through a namespaced value-state handle (sets the backend's current key)."""

    __slots__ = ("_backend", "_handle")

    def __init__(self, backend: KeyedStateBackend[Any], handle: ValueState[Any]) -> None:
        self._backend = backend
        self._handle = handle

    def get(self, pair: Pair) -> Any:
        self._backend.current_key = pair[0]
        self._handle.set_current_namespace(pair[1])
        return self._handle.value()

    def put(self, pair: Pair, value: Any) -> None:
        self._backend.current_key = pair[0]
        self._handle.set_current_namespace(pair[1])
        self._handle.update(value)

    def pop(self, pair: Pair) -> Any:
        value = self.get(pair)
        if value is not None:
            self._handle.clear()
        return value


class HandleMaps:
    """:class:`MapAccess` through a namespaced map-state handle (sets the backend's current key)."""

    __slots__ = ("_backend", "_handle")

    def __init__(self, backend: KeyedStateBackend[Any], handle: MapState[Any]) -> None:
        self._backend = backend
        self._handle = handle

    def _scope(self, pair: Pair) -> MapState[Any]:
        self._backend.current_key = pair[0]
        self._handle.set_current_namespace(pair[1])
        return self._handle

    def put(self, pair: Pair, user_key: Any, value: Any) -> None:
        self._scope(pair).put(user_key, value)

    def put_shared(self, pair: Pair, shared: SharedMap) -> None:
        self._scope(pair).put_all(shared)

    def remove(self, pair: Pair, user_key: Any) -> None:
        self._scope(pair).remove(user_key)

    def clear(self, pair: Pair) -> None:
        self._scope(pair).clear()


def values_by_pair(backend: KeyedStateBackend[Any], handle: ValueState[Any]) -> ValueAccess:
    """The backend's own pair access of a namespaced value state, else one through the handle."""
    by_pair = getattr(handle, "by_pair", None)
    return cast(ValueAccess, by_pair()) if callable(by_pair) else HandleValues(backend, handle)


def maps_by_pair(backend: KeyedStateBackend[Any], handle: MapState[Any]) -> MapAccess:
    """The backend's own pair access of a namespaced map state, else one through the handle."""
    by_pair = getattr(handle, "by_pair", None)
    return cast(MapAccess, by_pair()) if callable(by_pair) else HandleMaps(backend, handle)
