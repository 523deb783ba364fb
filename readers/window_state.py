"""Window state of a statekit window operator, read offline (``inspect``, ``export``, ``diff``).

The runtime's window operator (``statekit.runtime.windows``) keeps, per key, three keyed map
states whose user key carries the window as ``[start, end]`` epoch milliseconds (``[]`` for
the global window):

* ``window-contents``: user key ``[*window]``, the window's contents;
* ``window-trigger``: user key ``[name, *window]``, a trigger value;
* ``_window_timers``: user key ``[domain, timestamp, *window]`` (domain 0 event time,
  1 processing time), value ``true``: one pending timer.

An operator is a window operator when it declares ``window-contents`` and ``_window_timers``
as map states with ``list<int>`` user keys (the runtime declares them so); nothing is
recognised from state contents alone. A user key of another shape in such a state is
corrupt state (:class:`CorruptStateError`, naming the snapshot).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from statekit.statefmt.errors import CorruptStateError
from statekit.statefmt.metadata import OperatorMetadata, StateKind

if TYPE_CHECKING:
    from statekit.readers.savepoint_reader import SavepointReader

__all__ = [
    "WINDOW_CONTENTS_STATE", "WINDOW_TRIGGER_STATE", "WINDOW_TIMERS_STATE", "TIMER_DOMAINS",
    "WindowStateView", "TimerView", "WindowInspection",
    "window_state_role", "is_window_operator", "window_of_user_key", "inspect_windows",
]

WINDOW_CONTENTS_STATE = "window-contents"
WINDOW_TRIGGER_STATE = "window-trigger"
WINDOW_TIMERS_STATE = "_window_timers"
TIMER_DOMAINS = ("event_time", "processing_time")
# how many leading user-key elements precede the window, per state
_PREFIX = {WINDOW_CONTENTS_STATE: 0, WINDOW_TRIGGER_STATE: 1, WINDOW_TIMERS_STATE: 2}


def is_window_operator(op: OperatorMetadata) -> bool:
    """Whether ``op`` declares the window operator's contents and timer states."""
    declared = {d.name: d for d in op.states}
    for name in (WINDOW_CONTENTS_STATE, WINDOW_TIMERS_STATE):
        d = declared.get(name)
        if d is None or d.kind is not StateKind.MAP or d.user_key_type != "list<int>":
            return False
    return True


def window_state_role(op: OperatorMetadata, state: str) -> str | None:
    """``contents``, ``trigger`` or ``timers`` for a window state of a window operator, else None."""
    if state not in _PREFIX or not is_window_operator(op):
        return None
    if not any(d.name == state and d.kind is StateKind.MAP for d in op.states):
        return None
    return {WINDOW_CONTENTS_STATE: "contents", WINDOW_TRIGGER_STATE: "trigger", WINDOW_TIMERS_STATE: "timers"}[state]


def window_of_user_key(state: str, user_key: Any, path: str | None = None) -> tuple[int, int] | None:
    """The ``(start, end)`` a window state's user key holds; None for the global window.

    Raises:
        CorruptStateError: The user key does not have the shape of ``state``'s user keys.
    """
    prefix = _PREFIX[state]
    if not isinstance(user_key, list) or len(user_key) not in (prefix, prefix + 2):
        raise CorruptStateError(f"window state {state!r}: user key {user_key!r} is not a window key", path=path)
    window = user_key[prefix:]
    if not window:
        return None
    start, end = window
    if type(start) is not int or type(end) is not int or start >= end:
        raise CorruptStateError(f"window state {state!r}: user key {user_key!r} holds no [start, end] window",
                                path=path)
    return start, end


@dataclass(frozen=True)
class WindowStateView:
    """One window state: entries, distinct (key, window) pairs and the windows they cover."""

    state: str
    entries: int
    key_window_pairs: int
    windows: int  # distinct windows (the global window counts once)
    global_window_pairs: int
    earliest_start: int | None  # over time windows; None when there are none
    latest_end: int | None


@dataclass(frozen=True)
class TimerView:
    """The pending timers of one time domain."""

    domain: str
    count: int
    earliest: int | None
    latest: int | None


@dataclass(frozen=True)
class WindowInspection:
    """The window states and pending timers of a window operator."""

    states: list[WindowStateView] = field(default_factory=list)
    timers: list[TimerView] = field(default_factory=list)

    @property
    def pending_timers(self) -> int:
        return sum(t.count for t in self.timers)

    def to_json(self) -> dict[str, Any]:
        return {"states": [asdict(s) for s in self.states], "timers": [asdict(t) for t in self.timers],
                "pending_timers": self.pending_timers}


def inspect_windows(reader: SavepointReader, uid: str) -> WindowInspection | None:
    """The window view of operator ``uid`` (None: not a window operator). Decodes its window states."""
    op = reader.operator(uid)
    if not is_window_operator(op):
        return None
    declared = {d.name for d in op.states}
    states = [_state_view(reader, uid, name) for name in _PREFIX if name in declared]
    return WindowInspection(states, _timer_views(reader, uid))


def _state_view(reader: SavepointReader, uid: str, state: str) -> WindowStateView:
    entries = 0
    pairs: set[tuple[Any, tuple[int, int] | None]] = set()
    windows: set[tuple[int, int] | None] = set()
    for entry in reader.read_keyed_state(uid, state):
        entries += 1
        window = window_of_user_key(state, getattr(entry, "user_key", None), reader.path)
        pairs.add((_hashable(entry.key), window))
        windows.add(window)
    spans = [w for w in windows if w is not None]
    return WindowStateView(
        state=state, entries=entries, key_window_pairs=len(pairs), windows=len(windows),
        global_window_pairs=sum(1 for _, w in pairs if w is None),
        earliest_start=min((w[0] for w in spans), default=None), latest_end=max((w[1] for w in spans), default=None),
    )


def _timer_views(reader: SavepointReader, uid: str) -> list[TimerView]:
    stamps: list[list[int]] = [[], []]
    for entry in reader.read_keyed_state(uid, WINDOW_TIMERS_STATE):
        user_key = getattr(entry, "user_key", None)
        window_of_user_key(WINDOW_TIMERS_STATE, user_key, reader.path)  # a list of 2 or 4 elements
        assert isinstance(user_key, list)
        domain, timestamp = user_key[0], user_key[1]
        if domain not in (0, 1) or type(timestamp) is not int:
            raise CorruptStateError(f"window state {WINDOW_TIMERS_STATE!r}: user key {user_key!r} is not a timer",
                                    path=reader.path)
        stamps[domain].append(timestamp)
    return [TimerView(TIMER_DOMAINS[d], len(s), min(s, default=None), max(s, default=None))
            for d, s in enumerate(stamps)]


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), _hashable(v)) for k, v in value.items()))
    return value
