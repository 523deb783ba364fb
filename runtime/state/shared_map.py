"""A dict that several handles of one backend may share (window contents and timers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

__all__ = [
    "SharedMap",
]


class SharedMap(dict[Any, Any]):
    """The map of a map-state entry that several entries of one backend hold at once (the one
    timer of every (key, window) pair of a window, :mod:`statekit.runtime.operators.windows.timers`).

    Invariant: never changed in place once an entry holds it; a backend that changes the map of
    an entry holding one first gives that entry a plain copy of its own."""

    __slots__ = ()


