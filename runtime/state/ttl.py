"""State time-to-live: Flink's ``StateTtlConfig`` for the runtime's keyed state.

A state descriptor with TTL (``descriptor.enable_time_to_live(config)``) stores every value
as a pair ``(value, expiry)`` (:data:`Stored`): per entry for value, reducing and aggregating
state, per element for list state, per user key for map state. The TTL handles of this
module wrap the backend's own handles of such a state (or, for a heap backend's value state
with the default update type and visibility, read its table directly); they check expiry against the
backend's TTL clock (:attr:`statekit.runtime.state.backend.KeyedStateBackend.ttl_clock`, epoch
milliseconds, or the config's own ``clock``) and refresh it on create and write (and on
read with ``ON_READ_AND_WRITE``).

Invariants:

* ``expiry`` is epoch milliseconds; an entry is expired when ``expiry <= now``; ``None``
  means it never expires (an entry restored without one).
* A stored entry is a 2-tuple ``(value, expiry)``: a :class:`TtlValue` or a plain tuple (the
  handles write plain tuples, which cost a fraction of a NamedTuple); code here reads it by
  index, never by attribute.
* ``now`` is read from the clock by the access that compares or stamps with it, at most once
  per access, and never kept beyond that access: no cached time can make an expired entry
  readable, and every write's expiry is its own access's ``now + ttl``. The one exception is
  the per-record time: while a keyed process operator processes a record, the heap value
  handles on the backend's ``record_clock`` use ``backend.record_time``, the one reading of that
  clock the operator took for the record, or on the wall clock for the span of consecutive
  records of one input buffer it belongs to (:func:`record_timed_handler`), and it is None again
  when the record (span) is done; expiry is exact with respect to that reading.
* An expired entry found by an access is removed by that access, whatever the visibility;
  ``RETURN_EXPIRED_IF_NOT_CLEANED_UP`` only makes that access still return it.
* In a snapshot the expiry goes to the entry's ``expiry`` column. A list-state entry holds
  one expiry for all its elements: the latest of its elements' (the entry is live while
  one element is); a restore gives each element that expiry.
* A RocksDB value of a TTL state is ``expiry (i64 big-endian, NO_EXPIRY for none) | value
  bytes`` (per element for list state): :mod:`statekit.statefmt.native_state`; a snapshot splits
  it with :func:`statekit.statefmt.native_canonical.strip_ttl_value`.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from statekit.runtime.api.state import AggregatingState, ListState, MapState, ReducingState, ValueState
from statekit.runtime.api.ttl import Clock, StateTtlConfig, UpdateType
from statekit.runtime.exchange.batch_path import with_list_handler
from statekit.statefmt.entries import KeyedColumns, KeyedStateEntry, MapStateEntry
from statekit.statefmt.metadata import StateKind
from statekit.statefmt.native_state import NO_EXPIRY, TTL_EXPIRY
from statekit.statefmt.serializers import Serializer

if TYPE_CHECKING:
    from statekit.runtime.state.backend import KeyedStateBackend

__all__ = [
    "TtlValue",
    "Stored",
    "TtlState",
    "HeapTtlValueState",
    "RecordTimeHeapTtlValueState",
    "ttl_value_state",
    "record_timed_handler",
    "system_clock",
    "ttl_rows",
    "wrap_restored",
    "ttl_serializer",
    "TtlValueState",
    "TtlReducingState",
    "TtlAggregatingState",
    "TtlListState",
    "TtlMapState",
]

_time = time.time


def system_clock() -> int:
    """Wall-clock epoch milliseconds: ``floor(time.time() * 1000)`` (the heap value handle on this
    clock compares and stamps with exactly this value, see :func:`record_timed_handler`)."""
    return int(_time() * 1000.0)


_MUTABLE = (list, dict, set, bytearray)  # handed out as copies; a tuple: a class need not be hashable
_MUTABLE_CLASSES = frozenset(_MUTABLE)  # the same, for a hashed lookup of ``value.__class__``
# Immutable builtin classes whose instances are handed out as they are: for an object whose
# ``type()`` is one of them, ``__class__`` is that class too (none can claim another), so the
# record-time handle's fast read checks ``type(value)`` in here instead of ``value.__class__``.
_PLAIN_CLASSES = frozenset((bool, int, float, complex, str, bytes, tuple, frozenset))


_SPAN_LIMIT = 64  # records one wall-clock reading serves at most (record_timed_handler)


class TtlValue(NamedTuple):
    """A stored value and its expiry (epoch ms; None: never)."""

    value: Any
    expiry: int | None


# What a TTL state stores per entry (per element, per user key): a TtlValue or a plain tuple.
Stored = tuple[Any, "int | None"]


# -- snapshot and restore ---------------------------------------------------------------------


def _expired(expiry: int | None, now: int | None) -> bool:
    """Whether an entry of ``expiry`` is expired at ``now`` (None: nothing is)."""
    return now is not None and expiry is not None and expiry <= now


def _latest(expiries: Iterable[int | None]) -> int | None:
    latest = 0
    for expiry in expiries:
        if expiry is None:
            return None
        latest = max(latest, expiry)
    return latest


def ttl_rows(kind: StateKind, data: dict[Any, Any], drop_at: int | None) -> list[Any] | KeyedColumns:
    """Snapshot entries (with expiry) of a TTL state's ``key -> stored pair`` data (list: a list
    of them; map: a dict of them); entries expired at ``drop_at`` are left out (None: none are)."""
    rows: list[Any] = []
    if kind is StateKind.MAP:
        for key, entries in data.items():
            rows.extend(MapStateEntry(key, user_key, tv[0], None, tv[1])
                        for user_key, tv in entries.items() if not _expired(tv[1], drop_at))
    elif kind is StateKind.LIST:
        for key, elements in data.items():
            live = [tv for tv in elements if not _expired(tv[1], drop_at)]
            if live:
                rows.append(KeyedStateEntry(key, None, [tv[0] for tv in live], _latest(tv[1] for tv in live)))
    else:  # value, reducing, aggregating: columns, no entry object per key
        table = data if drop_at is None else {
            key: tv for key, tv in data.items() if tv[1] is None or tv[1] > drop_at}
        stored = list(table.values())
        return KeyedColumns(list(table), [tv[0] for tv in stored], expiries=[tv[1] for tv in stored])
    return rows


def wrap_restored(kind: StateKind, value: Any, expiry: int | None) -> Stored | list[Stored]:
    """A restored entry's value as a TTL state stores it (list: every element gets ``expiry``)."""
    if kind is StateKind.LIST:
        return [(element, expiry) for element in value]
    return value, expiry


def ttl_serializer(inner: Serializer) -> Serializer:
    """The RocksDB value serializer of a TTL state: ``expiry | inner bytes`` of a stored pair."""
    pack, unpack_from, size = TTL_EXPIRY.pack, TTL_EXPIRY.unpack_from, TTL_EXPIRY.size
    dumps, loads = inner.serialize, inner.deserialize

    def serialize(tv: Stored) -> bytes:
        expiry = tv[1]
        return pack(NO_EXPIRY if expiry is None else expiry) + dumps(tv[0])

    def deserialize(data: bytes) -> Stored:
        (expiry,) = unpack_from(data, 0)
        return loads(data[size:]), None if expiry == NO_EXPIRY else expiry

    return Serializer(f"ttl+{inner.name}", serialize, deserialize, inner.safe)


# -- handles ------------------------------------------------------------------------------------


def _detached(value: Any) -> Any:
    """A mutable value handed out or changed in place: a copy (the stored one may be shared
    with a snapshot in progress)."""
    return copy.deepcopy(value) if value.__class__ in _MUTABLE else value


class _Cleanup:
    """Background cleanup of one state: a cursor over its keys, advanced on accesses."""

    def __init__(self, backend: KeyedStateBackend[Any], state: str, config: StateTtlConfig,
                 purge: Callable[[], None]) -> None:
        self._backend = backend
        self._state = state
        self._per_access = config.incremental_cleanup_size
        self._sweep_every = config.sweep_after_entries
        self._purge = purge
        self._accesses = 0
        self._cursor: Iterator[Any] = iter(())

    def on_access(self) -> None:
        if self._per_access:
            self.step(self._per_access)
        if self._sweep_every:
            self._accesses += 1
            if self._accesses >= self._sweep_every:
                self._accesses = 0
                self.step(self._sweep_every)

    def step(self, count: int) -> None:
        """Check up to ``count`` keys (the current key is restored afterwards)."""
        backend = self._backend
        current = backend.current_key
        try:
            for _ in range(count):
                key = next(self._cursor, _END)
                if key is _END:
                    self._cursor = backend.keys(self._state)  # a listed copy: safe to change the state
                    key = next(self._cursor, _END)
                    if key is _END:
                        return
                backend.current_key = key
                self._purge()
        finally:
            backend.current_key = current


_END: Any = object()
_MISSING: Any = object()
_ABSENT: Stored = (_MISSING, None)  # what a heap handle reads for a key without an entry
_UNSTAMPED: Any = object()  # a record-time handle's ``_now`` before its first stamped write


class TtlState:
    """What every TTL handle over a backend's own handle shares: the config, the clock, expiry
    checks and cleanup.

    The clock is bound when the handle is made: the config's, else the backend's ``ttl_clock``
    at that time (set it before the first ``get_state``).
    """

    def __init__(self, backend: KeyedStateBackend[Any], state: str, config: StateTtlConfig) -> None:
        self._config = config
        self._ttl = config.ttl_ms
        self._clock: Clock = config.clock or backend.ttl_clock
        self._return_expired = config.return_expired
        self._update_on_read = config.update_on_read
        background = config.incremental_cleanup_size or config.sweep_after_entries
        self._cleanup = _Cleanup(backend, state, config, self.purge) if background else None

    def _now(self) -> int:
        if self._cleanup is not None:
            self._cleanup.on_access()
        return self._clock()

    def _stamp(self, value: Any, now: int) -> Stored:
        return value, now + self._ttl

    def purge(self) -> None:
        """Remove what expired of the current key."""
        raise NotImplementedError


class TtlValueState(TtlState, ValueState[Any]):
    """Value state with TTL over the backend's value handle of stored ``(value, expiry)`` pairs."""

    def __init__(self, backend: KeyedStateBackend[Any], state: str, config: StateTtlConfig,
                 raw: ValueState[Any], default: Any) -> None:
        super().__init__(backend, state, config)
        self._raw = raw
        self._default = default

    def _live(self, now: int) -> Stored | None:
        """The current key's stored pair, None when absent; an expired one is removed (and
        returned only under RETURN_EXPIRED_IF_NOT_CLEANED_UP)."""
        tv: Stored | None = self._raw.value()
        if tv is None:
            return None
        if _expired(tv[1], now):
            self._raw.clear()
            return tv if self._return_expired else None
        if self._update_on_read:
            self._raw.update(self._stamp(tv[0], now))
        return tv

    def value(self) -> Any:
        if self._cleanup is not None:
            self._cleanup.on_access()
        tv: Stored | None = self._raw.value()
        if tv is not None:
            now = self._clock()
            if _expired(tv[1], now):
                self._raw.clear()
                if not self._return_expired:
                    tv = None
            elif self._update_on_read:
                self._raw.update(self._stamp(tv[0], now))
        return _detached(self._default if tv is None else tv[0])

    def update(self, value: Any) -> None:
        if self._cleanup is not None:
            self._cleanup.on_access()
        if value is None:
            self._raw.clear()
        else:
            self._raw.update(self._stamp(value, self._clock()))

    def clear(self) -> None:
        self._raw.clear()

    def purge(self) -> None:
        tv: Stored | None = self._raw.value()
        if tv is not None and _expired(tv[1], self._clock()):
            self._raw.clear()


class HeapTtlValueState(ValueState[Any]):
    """Value state with TTL read and written straight in a heap backend's table.

    The common config only (:func:`ttl_value_state` chooses it): ON_CREATE_AND_WRITE,
    NEVER_RETURN_EXPIRED, no background cleanup; it behaves as :class:`TtlValueState` with
    that config, without its second handle layer and per-access config checks.

    Invariant: ``table`` maps each key to a stored ``(value, expiry)`` pair, which is replaced,
    never changed in place, so a snapshot's shallow copy of the table stays as it was; a
    mutable value is handed out as a copy for the same reason.
    """

    __slots__ = ("_backend", "_clock", "_default", "_table", "_ttl")

    def __init__(self, backend: KeyedStateBackend[Any], table: dict[Any, Stored], ttl_ms: int,
                 clock: Clock, default: Any) -> None:
        self._backend = backend
        self._table = table
        self._ttl = ttl_ms
        self._clock = clock
        self._default = default

    def value(self) -> Any:
        key = self._backend.current_key
        value, expiry = self._table.get(key, _ABSENT)
        if expiry is not None and expiry <= self._clock():
            del self._table[key]  # expired: this read removes it
            value = _MISSING
        if value is _MISSING:
            value = self._default
        return copy.deepcopy(value) if value.__class__ in _MUTABLE else value

    def update(self, value: Any) -> None:
        if value is None:
            self._table.pop(self._backend.current_key, None)
        else:
            self._table[self._backend.current_key] = value, self._clock() + self._ttl

    def clear(self) -> None:
        self._table.pop(self._backend.current_key, None)


class RecordTimeHeapTtlValueState(HeapTtlValueState):
    """:class:`HeapTtlValueState` on the per-record time of its backend (the handle's clock is the
    backend's ``record_clock``).

    ``now`` is ``backend.record_time`` while a record is processed (one reading of the clock by
    :func:`record_timed_handler`, the same for every access of that record), else the handle's
    clock, read by the access. A write stamps ``now + ttl``, computed once per ``now`` object:
    ``_expiry`` is the stamp of ``_now``, the record time of the last stamped write (the record
    handler hands out one int object per millisecond; any other object is a new ``now``; ``_now``
    is never None, so a write outside a record always reads the clock).

    Fast paths: a read during a record of a live entry whose value is of a builtin immutable
    class (:data:`_PLAIN_CLASSES`) is one lookup, one comparison and one class check
    (:meth:`value`); a write during a record whose time was stamped before is one tuple
    (:meth:`update`). Everything else (no entry, an expired entry, no record time, an
    entry without expiry, a mutable value, a new record time, ``None``) takes the general path,
    which is :class:`HeapTtlValueState`'s with the record time as ``now``.
    """

    __slots__ = ("_expiry", "_now")

    def __init__(self, backend: KeyedStateBackend[Any], table: dict[Any, Stored], ttl_ms: int,
                 clock: Clock, default: Any) -> None:
        super().__init__(backend, table, ttl_ms, clock, default)
        self._now: object = _UNSTAMPED
        self._expiry = 0

    def value(self) -> Any:
        backend = self._backend
        tv = self._table.get(backend.current_key)
        if tv is not None:
            try:
                if tv[1] > backend.record_time and type(tv[0]) in _PLAIN_CLASSES:  # type: ignore[operator]
                    return tv[0]  # live at the record time and immutable: handed out as it is
            except TypeError:  # no record time, no expiry, or a class its metaclass makes unhashable
                pass
        return self._read(tv)

    def _read(self, tv: Stored | None) -> Any:
        """:meth:`value` of the current key, whose stored pair is ``tv`` (None: no entry)."""
        if tv is None:
            value = self._default
        else:
            value, expiry = tv
            if expiry is not None:
                now = self._backend.record_time
                if expiry <= (self._clock() if now is None else now):
                    del self._table[self._backend.current_key]  # expired: this read removes it
                    value = self._default
        try:
            if value.__class__ in _MUTABLE_CLASSES:
                return copy.deepcopy(value)
        except TypeError:  # a class its metaclass makes unhashable is none of them
            pass
        return value

    def update(self, value: Any) -> None:
        backend = self._backend
        if backend.record_time is self._now and value is not None:
            self._table[backend.current_key] = value, self._expiry
        else:
            self._write(value)

    def _write(self, value: Any) -> None:
        """:meth:`update` off its fast path: ``None``, a new record time, or no record time."""
        backend = self._backend
        if value is None:
            self._table.pop(backend.current_key, None)
            return
        now = backend.record_time
        if now is None:
            expiry = self._clock() + self._ttl  # outside a record: this access's own reading
        else:
            self._now = now
            self._expiry = expiry = now + self._ttl
        self._table[backend.current_key] = value, expiry


def ttl_value_state(backend: KeyedStateBackend[Any], state: str, config: StateTtlConfig,
                    raw: ValueState[Any], default: Any, table: dict[Any, Stored] | None) -> ValueState[Any]:
    """The TTL handle of a value state: straight on ``table`` (the backend's heap table of the
    state, or None) when the config allows, else over the backend's handle ``raw``.

    The first heap handle of a backend makes its clock the backend's ``record_clock``; the heap
    handles on that clock take the per-record time (:class:`RecordTimeHeapTtlValueState`).
    """
    plain = (config.update_type is UpdateType.ON_CREATE_AND_WRITE and not config.return_expired
             and not config.incremental_cleanup_size and not config.sweep_after_entries)
    if table is None or not plain:
        return TtlValueState(backend, state, config, raw, default)
    clock = config.clock or backend.ttl_clock
    if backend.record_clock is None:
        backend.record_clock = clock
    if clock is backend.record_clock:
        return RecordTimeHeapTtlValueState(backend, table, config.ttl_ms, clock, default)
    return HeapTtlValueState(backend, table, config.ttl_ms, clock, default)


def _first_second_of(ms: int) -> float:
    """The least float ``t`` with ``int(t * 1000.0) >= ms`` (``ms >= 1``).

    ``t -> int(t * 1000.0)`` is monotone (a rounded product by a positive constant, then
    truncation), so the floats of one millisecond form an interval; its bound is within a few
    ulps of ``ms / 1000`` and found by stepping from there.
    """
    t = ms / 1000.0
    while int(t * 1000.0) >= ms:  # ends above 0.0, whose reading is 0
        t = math.nextafter(t, 0.0)
    while int(t * 1000.0) < ms:
        t = math.nextafter(t, math.inf)
    return t


def _millisecond_window(t: float) -> tuple[int, float, float]:
    """``(ms, lo, hi)``: ``ms = int(t * 1000.0)`` (:func:`system_clock` at ``t``) and the floats
    ``[lo, hi)`` whose reading is ``ms`` (they hold ``t``); before the first millisecond after the
    epoch, where ``int`` rounds toward zero, the window is empty and every reading computes ``ms``."""
    ms = int(t * 1000.0)
    if ms <= 0:
        return ms, 0.0, 0.0
    return ms, _first_second_of(ms), _first_second_of(ms + 1)


def record_timed_handler(backend: KeyedStateBackend[Any], selector: Callable[[Any], Any],
                         process: Callable[[Any, Any, Any], None], ctx: Any, out: Any) -> Callable[[Any], None] | None:
    """A keyed operator's record handler that supplies the per-record TTL time, or None when the
    backend has no heap TTL handle taking it (``record_clock`` is None).

    Per record: the key is set, ``backend.record_time`` is one reading of ``record_clock``,
    ``process(value, ctx, out)`` runs, and ``record_time`` is None again, also when it raises:
    timers and any other access outside a record read the clock themselves. The time belongs to
    this backend, which one task owns.

    On the wall clock the reading is :func:`system_clock`'s value ``int(t * 1000.0)`` for ``t =
    time.time()``, taken inline without the multiplication: the seconds ``[lo, hi)`` that give one
    millisecond ``ms`` (:func:`_millisecond_window`) are computed once per millisecond, when ``t``
    leaves them (also backwards), and every record of that millisecond gets its one int object.

    The wall-clock handler also takes a whole input buffer (its whole-buffer variant, :func:`~statekit.runtime.exchange.batch_path.list_handler`, which a
    task calls instead of one call per record): there one reading serves a span of consecutive
    records (a clock reading costs about as much as a small record's state access). The span
    starts at one record and adapts within each buffer: it doubles, up to :data:`_SPAN_LIMIT`,
    after a span whose next reading is still in the same millisecond, and is divided by ``d``
    after one that took ``d >= 2`` milliseconds; readings of different buffers are never
    compared (the task may wait between them). A record's time is therefore the reading taken
    before the first record of its span: behind the clock by at most the time the records
    before it in its span took (under a millisecond while records take the same time).
    """
    clock = backend.record_clock
    if clock is None:
        return None
    if clock is not system_clock:
        def handle(value: Any) -> None:
            backend.current_key = selector(value)
            backend.record_time = clock()
            try:
                process(value, ctx, out)
            finally:
                backend.record_time = None

        return handle
    lo = hi = 0.0  # an empty window: the first record computes its millisecond
    ms = 0

    def handle_on_wall_clock(value: Any) -> None:
        nonlocal lo, hi, ms
        backend.current_key = selector(value)
        now = _time()
        if not lo <= now < hi:
            ms, lo, hi = _millisecond_window(now)
        backend.record_time = ms
        try:
            process(value, ctx, out)
        finally:
            backend.record_time = None

    span = 1  # records one reading serves in handle_all (persists across buffers)

    def handle_all(values: list[Any]) -> None:
        nonlocal lo, hi, ms, span
        start, n = 0, len(values)
        served: int | None = None  # the millisecond of this buffer's previous reading
        while start < n:
            now = _time()
            if not lo <= now < hi:
                ms, lo, hi = _millisecond_window(now)
            if served is not None:
                took = ms - served
                if took <= 0:
                    span = min(2 * span, _SPAN_LIMIT)
                elif took > 1:
                    span = max(1, span // took)
            served = ms
            end = start + span
            backend.record_time = ms
            try:
                for value in (values if not start and end >= n else values[start:end]):
                    backend.current_key = selector(value)
                    process(value, ctx, out)
            finally:
                backend.record_time = None
            start = end

    with_list_handler(handle_on_wall_clock, handle_all)
    return handle_on_wall_clock


class TtlReducingState(TtlValueState, ReducingState[Any]):
    """Reducing state with TTL: the reduced value is one stored pair, refreshed by every add."""

    def __init__(self, backend: KeyedStateBackend[Any], state: str, config: StateTtlConfig,
                 raw: ValueState[Any], reduce: Callable[[Any, Any], Any]) -> None:
        super().__init__(backend, state, config, raw, None)
        self._reduce = reduce

    def get(self) -> Any:
        return self.value()

    def add(self, value: Any) -> None:
        now = self._now()
        tv = self._live(now)
        current = None if tv is None or _expired(tv[1], now) else tv[0]
        self._raw.update(self._stamp(value if current is None else self._reduce(current, value), now))


class TtlAggregatingState(TtlValueState, AggregatingState[Any]):
    """Aggregating state with TTL: the accumulator is one stored pair, refreshed by every add."""

    def __init__(self, backend: KeyedStateBackend[Any], state: str, config: StateTtlConfig,
                 raw: ValueState[Any], function: Any) -> None:
        super().__init__(backend, state, config, raw, None)
        self._function = function

    def get(self) -> Any:
        tv = self._live(self._now())
        return None if tv is None else self._function.get_result(_detached(tv[0]))

    def add(self, value: Any) -> None:
        now = self._now()
        tv = self._live(now)
        if tv is None or _expired(tv[1], now):
            accumulator = self._function.create_accumulator()
        else:
            accumulator = _detached(tv[0])
        self._raw.update(self._stamp(self._function.add(value, accumulator), now))


class TtlListState(TtlState, ListState[Any]):
    """List state with TTL per element over the backend's list handle of stored pairs."""

    def __init__(self, backend: KeyedStateBackend[Any], state: str, config: StateTtlConfig,
                 raw: ListState[Any]) -> None:
        super().__init__(backend, state, config)
        self._raw = raw

    def get(self) -> list[Any]:
        now = self._now()
        elements: list[Stored] = list(self._raw.get())
        live = [tv for tv in elements if not _expired(tv[1], now)]
        if self._update_on_read and live:
            self._raw.update([self._stamp(tv[0], now) for tv in live])
        elif len(live) != len(elements):
            self._raw.update(live)
        return [tv[0] for tv in (elements if self._return_expired else live)]

    def add(self, value: Any) -> None:
        self._raw.add(self._stamp(value, self._now()))

    def add_all(self, values: Iterable[Any]) -> None:
        now = self._now()
        self._raw.add_all([self._stamp(v, now) for v in values])

    def update(self, values: Iterable[Any]) -> None:
        now = self._now()
        self._raw.update([self._stamp(v, now) for v in values])

    def clear(self) -> None:
        self._raw.clear()

    def purge(self) -> None:
        elements: list[Stored] = list(self._raw.get())
        now = self._clock()
        live = [tv for tv in elements if not _expired(tv[1], now)]
        if len(live) != len(elements):
            self._raw.update(live)


class TtlMapState(TtlState, MapState[Any]):
    """Map state with TTL per user key over the backend's map handle of stored pairs."""

    def __init__(self, backend: KeyedStateBackend[Any], state: str, config: StateTtlConfig,
                 raw: MapState[Any]) -> None:
        super().__init__(backend, state, config)
        self._raw = raw

    def get(self, user_key: Any) -> Any:
        now = self._now()
        tv: Stored | None = self._raw.get(user_key)
        if tv is None:
            return None
        if _expired(tv[1], now):
            self._raw.remove(user_key)
            return tv[0] if self._return_expired else None
        if self._update_on_read:
            self._raw.put(user_key, self._stamp(tv[0], now))
        return tv[0]

    def put(self, user_key: Any, value: Any) -> None:
        self._raw.put(user_key, self._stamp(value, self._now()))

    def put_all(self, entries: dict[Any, Any]) -> None:
        now = self._now()
        self._raw.put_all({k: self._stamp(v, now) for k, v in entries.items()})

    def remove(self, user_key: Any) -> None:
        self._now()
        self._raw.remove(user_key)

    def contains(self, user_key: Any) -> bool:
        now = self._now()
        tv: Stored | None = self._raw.get(user_key)
        if tv is None:
            return False
        if _expired(tv[1], now):
            self._raw.remove(user_key)
            return self._return_expired
        return True

    def items(self) -> list[tuple[Any, Any]]:
        now = self._now()
        result = []
        for user_key, tv in self._raw.items():
            if _expired(tv[1], now):
                self._raw.remove(user_key)
                if not self._return_expired:
                    continue
            elif self._update_on_read:
                self._raw.put(user_key, self._stamp(tv[0], now))
            result.append((user_key, tv[0]))
        return result

    def is_empty(self) -> bool:
        return not self.items()

    def clear(self) -> None:
        self._raw.clear()

    def purge(self) -> None:
        now = self._clock()
        for user_key, tv in self._raw.items():
            if _expired(tv[1], now):
                self._raw.remove(user_key)


_time = time.time
