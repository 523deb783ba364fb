"""Window state of a statekit window operator, read offline (``inspect``, ``export``, ``diff``).

The runtime's window operator (``statekit.runtime.api.windows``) keeps its window state as keyed
state whose **namespace** is the window, as Flink does: ``[start, end]`` epoch milliseconds
(``[]`` for the global window), declared ``namespace_type="list<int>"``:

* ``window-contents``: list state (``process``: the window's elements) or value state
  (``reduce``: the reduced value; ``aggregate``: the accumulator); no user key;
* ``window-trigger``: map state, user key the trigger's state name, value its value;
* ``_window_timers``: map state, user key ``[domain, timestamp]`` (``list<int>``; domain 0
  event time, 1 processing time), value ``true``: one pending timer of the window.

``window-merging-set`` (merging assigners: the key's windows, a value state without a
namespace) and the operator state ``_watermark`` are ordinary state here.

An operator is a window operator when it declares ``window-contents`` and ``_window_timers``
with ``namespace_type == "list<int>"``, ``_window_timers`` as map state with ``list<int>``
user keys (the runtime declares them so); nothing is recognised from state contents alone.
In a window state, a namespace that is not a window, or a timer user key that is not
``[domain, timestamp]``, is corrupt state (:class:`CorruptStateError`, naming the snapshot).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from statekit.readers.typed_columns import python_values
from statekit.statefmt.errors import CorruptStateError
from statekit.statefmt.json_contract import JsonShape
from statekit.statefmt.metadata import OperatorMetadata, StateDescriptor, StateKind

if TYPE_CHECKING:
    from statekit.readers.savepoint_reader import SavepointReader

__all__ = [
    "WINDOW_CONTENTS_STATE", "WINDOW_TRIGGER_STATE", "WINDOW_TIMERS_STATE", "WINDOW_MERGING_SET_STATE",
    "WINDOW_NAMESPACE_TYPE", "TIMER_DOMAINS", "WINDOW_WATERMARK_STATE",
    "WindowStateView", "TimerView", "WindowInspection",
    "window_state_role", "is_window_operator", "window_of_namespace", "timer_of_user_key", "inspect_windows",
]

WINDOW_CONTENTS_STATE = "window-contents"
WINDOW_TRIGGER_STATE = "window-trigger"
WINDOW_TIMERS_STATE = "_window_timers"
WINDOW_MERGING_SET_STATE = "window-merging-set"
WINDOW_WATERMARK_STATE = "_watermark"  # operator state (union list): each subtask's last watermark
WINDOW_NAMESPACE_TYPE = "list<int>"
TIMER_DOMAINS = ("event_time", "processing_time")
# the window states, in the order inspect shows them, with their role
_ROLES = {WINDOW_CONTENTS_STATE: "contents", WINDOW_TRIGGER_STATE: "trigger", WINDOW_TIMERS_STATE: "timers"}


def _windowed(d: StateDescriptor | None) -> bool:
    """Whether ``d`` is keyed state namespaced by windows."""
    return d is not None and d.keyed and d.namespace_type == WINDOW_NAMESPACE_TYPE


def is_window_operator(op: OperatorMetadata) -> bool:
    """Whether ``op`` declares the window operator's contents and timer states, namespaced by windows."""
    declared = {d.name: d for d in op.states}
    timers = declared.get(WINDOW_TIMERS_STATE)
    return (_windowed(declared.get(WINDOW_CONTENTS_STATE)) and _windowed(timers) and timers is not None
            and timers.kind is StateKind.MAP and timers.user_key_type == WINDOW_NAMESPACE_TYPE)


def window_state_role(op: OperatorMetadata, state: str) -> str | None:
    """``contents``, ``trigger`` or ``timers`` for a window state of a window operator, else None.

    ``window-trigger`` is a window state when declared as map state namespaced by windows."""
    if state not in _ROLES or not is_window_operator(op):
        return None
    d = next((d for d in op.states if d.name == state), None)
    if not _windowed(d) or (state == WINDOW_TRIGGER_STATE and d is not None and d.kind is not StateKind.MAP):
        return None
    return _ROLES[state]


def window_of_namespace(state: str, namespace: Any, path: str | None = None) -> tuple[int, int] | None:
    """The ``(start, end)`` a window state's namespace holds; None for the global window (``[]``).

    Raises:
        CorruptStateError: The namespace is not ``[start, end]`` (ints, ``start < end``) or ``[]``
            (the void namespace included: every entry of a window state has a window).
    """
    if isinstance(namespace, list) and not namespace:
        return None
    if isinstance(namespace, list) and len(namespace) == 2:
        start, end = namespace
        if type(start) is int and type(end) is int and start < end:
            return start, end
    raise CorruptStateError(f"window state {state!r}: namespace {namespace!r} is not a window "
                            f"([start, end] epoch ms with start < end, or [] for the global window)", path=path)


def timer_of_user_key(user_key: Any, path: str | None = None) -> tuple[int, int]:
    """The ``(domain, timestamp)`` of a ``_window_timers`` user key (domain 0 event time, 1 processing time).

    Raises:
        CorruptStateError: The user key is not ``[0 or 1, timestamp]``.
    """
    if isinstance(user_key, list) and len(user_key) == 2:
        domain, timestamp = user_key
        if type(domain) is int and domain in (0, 1) and type(timestamp) is int:
            return domain, timestamp
    raise CorruptStateError(f"window state {WINDOW_TIMERS_STATE!r}: user key {user_key!r} is not a timer "
                            f"([domain, timestamp], domain 0 event time or 1 processing time)", path=path)


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

    json_shape: ClassVar[JsonShape] = JsonShape(extra=("pending_timers",))

    states: list[WindowStateView] = field(default_factory=list)
    timers: list[TimerView] = field(default_factory=list)
    # per subtask, the watermark it had reached when it snapshotted (None: none yet, or not recorded)
    watermarks: list[int | None] = field(default_factory=list)

    @property
    def pending_timers(self) -> int:
        return sum(t.count for t in self.timers)


def inspect_windows(reader: SavepointReader, uid: str) -> WindowInspection | None:
    """The window view of operator ``uid`` (None: not a window operator).

    Reads the window states' keys and namespaces (each distinct namespace decoded once) and
    decodes the timers' user keys; values are never decoded."""
    op = reader.operator(uid)
    if not is_window_operator(op):
        return None
    states = [_state_view(reader, uid, name) for name in _ROLES if window_state_role(op, name)]
    return WindowInspection(states, _timer_views(reader, uid), _watermarks(reader, op))


def _watermarks(reader: SavepointReader, op: OperatorMetadata) -> list[int | None]:
    """Each subtask's snapshotted watermark (the operator state ``_watermark``: one int or none)."""
    if not any(d.name == WINDOW_WATERMARK_STATE and not d.keyed for d in op.states):
        return [None] * len(op.subtasks)
    parts = reader.read_operator_state_per_subtask(op.uid, WINDOW_WATERMARK_STATE)
    found: list[int | None] = []
    for part in parts:
        values = [v for v in part if type(v) is int]
        if len(values) != len(part):
            raise CorruptStateError(f"operator {op.uid!r}: state {WINDOW_WATERMARK_STATE!r} holds {part!r}, "
                                    f"not a watermark (epoch ms)", path=reader.path)
        found.append(max(values) if values else None)
    return found


def _state_view(reader: SavepointReader, uid: str, state: str) -> WindowStateView:
    codec = reader.codec(uid, state)
    entries = 0
    pairs: set[tuple[bytes, bytes]] = set()  # (key, namespace) as stored: equal bytes, equal values
    window_of: dict[bytes, tuple[int, int] | None] = {}
    for _, _, batch in reader.read_keyed_batches(uid, state):
        entries += batch.num_rows
        namespaces = batch.column("namespace").to_pylist()
        for raw in set(namespaces).difference(window_of):
            window_of[raw] = window_of_namespace(state, codec.decode_namespace(raw), reader.path)
        pairs.update(zip(batch.column("key").to_pylist(), namespaces))
    windows = set(window_of.values())
    spans = [w for w in windows if w is not None]
    return WindowStateView(
        state=state, entries=entries, key_window_pairs=len(pairs), windows=len(windows),
        global_window_pairs=sum(1 for _, raw in pairs if window_of[raw] is None),
        earliest_start=min((w[0] for w in spans), default=None), latest_end=max((w[1] for w in spans), default=None),
    )


def _timer_views(reader: SavepointReader, uid: str) -> list[TimerView]:
    codec = reader.codec(uid, WINDOW_TIMERS_STATE)
    assert codec.user_key is not None  # map state (is_window_operator)
    stamps: list[list[int]] = [[], []]
    for _, _, batch in reader.read_keyed_batches(uid, WINDOW_TIMERS_STATE):
        for user_key in python_values(batch.column("user_key"), codec.user_key, "user key", reader.path):
            domain, timestamp = timer_of_user_key(user_key, reader.path)
            stamps[domain].append(timestamp)
    return [TimerView(TIMER_DOMAINS[d], len(s), min(s, default=None), max(s, default=None))
            for d, s in enumerate(stamps)]
