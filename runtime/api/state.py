"""The user-facing state API: descriptors and state handles.

A descriptor names a state, its value serializer (``msgpack`` unless told) and the
declared type of its values (the ``statekit.statefmt.value_types`` grammar), and maps to
the on-disk :class:`statekit.statefmt.metadata.StateDescriptor`. Handles are obtained from
the runtime context (keyed state, scoped to the current key) or from the operator state
store (operator list, union list and broadcast state).

Contract (as in Flink's heap backend): values handed to ``update``/``add``/``put`` must
not be mutated afterwards; containers returned by ``ListState.get`` and the map views are
owned by the state and may be changed only through the handle.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.statefmt.serializers import get_serializer
from statekit.statefmt.value_types import parse_value_type

if TYPE_CHECKING:
    from statekit.runtime.api.ttl import StateTtlConfig

__all__ = [
    "StateDescriptorBase",
    "ValueStateDescriptor",
    "ListStateDescriptor",
    "MapStateDescriptor",
    "ReducingStateDescriptor",
    "AggregatingStateDescriptor",
    "State",
    "ValueState",
    "ListState",
    "MapState",
    "ReducingState",
    "AggregatingState",
    "BroadcastState",
    "ReadOnlyBroadcastState",
]

T = TypeVar("T")


@dataclass(frozen=True)
class StateDescriptorBase:
    """Common fields of every state descriptor.

    Attributes:
        name: State name (unique within its operator).
        value_type: Declared type of the values (``int``, ``string``, ``list<int>``,
            ``struct<a:int,b:string>``...); ``None`` means any value (``json``).
        serializer: Name of the value serializer (``msgpack``, ``json``, ``utf8``, ``int64``,
            ``bytes``, ``pickle``).
        ttl_config: The state's time to live (keyed state only; see :meth:`enable_time_to_live`).
        namespace_type: Declared type of the namespace of a namespaced keyed state (window
            state: ``list<int>``); its handles are scoped to (current key, current namespace)
            and have ``set_current_namespace``. ``None``: the void namespace.
    """

    name: str
    value_type: str | None = None
    serializer: str = "msgpack"
    ttl_config: StateTtlConfig | None = field(default=None, kw_only=True, compare=False, repr=False)
    namespace_type: str | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a state descriptor needs a non-empty name")
        get_serializer(self.serializer, for_write=True)
        parse_value_type(self.value_type)
        parse_value_type(self.namespace_type)

    @property
    def kind(self) -> StateKind:
        """The keyed state kind this descriptor creates."""
        raise NotImplementedError

    def enable_time_to_live(self, ttl_config: StateTtlConfig) -> None:
        """Give the keyed state a time to live (Flink's ``enableTimeToLive``); call it before the
        first ``get_state`` of the descriptor. Operator state ignores it, as in Flink."""
        object.__setattr__(self, "ttl_config", ttl_config)

    def _ttl_ms(self, kind: StateKind | None) -> int | None:
        return self.ttl_config.ttl_ms if self.ttl_config is not None and kind is None else None

    def to_metadata(self, kind: StateKind | None = None) -> StateDescriptor:
        """The on-disk descriptor (``kind`` overrides for operator list/union state)."""
        return StateDescriptor(
            name=self.name,
            kind=kind or self.kind,
            value_serializer=self.serializer,
            value_type=self.value_type,
            ttl_ms=self._ttl_ms(kind),
            namespace_type=self.namespace_type if kind is None else None,
        )


@dataclass(frozen=True)
class ValueStateDescriptor(StateDescriptorBase):
    """A single value per key; ``default`` is returned while none is set."""

    default: Any = None

    @property
    def kind(self) -> StateKind:
        return StateKind.VALUE


@dataclass(frozen=True)
class ListStateDescriptor(StateDescriptorBase):
    """A list of elements per key (keyed), or per subtask (operator list/union state).

    ``value_type`` is the type of one element.
    """

    @property
    def kind(self) -> StateKind:
        return StateKind.LIST


@dataclass(frozen=True)
class MapStateDescriptor(StateDescriptorBase):
    """A map per key (keyed map state) or per subtask (broadcast state)."""

    key_type: str | None = None
    key_serializer: str = "msgpack"

    def __post_init__(self) -> None:
        super().__post_init__()
        get_serializer(self.key_serializer, for_write=True)
        parse_value_type(self.key_type)

    @property
    def kind(self) -> StateKind:
        return StateKind.MAP

    def to_metadata(self, kind: StateKind | None = None) -> StateDescriptor:
        return StateDescriptor(
            name=self.name,
            kind=kind or self.kind,
            value_serializer=self.serializer,
            value_type=self.value_type,
            user_key_serializer=self.key_serializer,
            user_key_type=self.key_type,
            ttl_ms=self._ttl_ms(kind),
            namespace_type=self.namespace_type if kind is None else None,
        )


@dataclass(frozen=True)
class ReducingStateDescriptor(StateDescriptorBase):
    """A value per key folded with ``reduce_function(accumulated, new)``."""

    reduce_function: Callable[[Any, Any], Any] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.reduce_function is None:
            raise ValueError(f"reducing state {self.name!r} needs a reduce_function")

    @property
    def kind(self) -> StateKind:
        return StateKind.REDUCING


@dataclass(frozen=True)
class AggregatingStateDescriptor(StateDescriptorBase):
    """An accumulator per key driven by an aggregate function.

    ``aggregate_function`` has ``create_accumulator()``, ``add(value, accumulator)`` and
    ``get_result(accumulator)`` (a :class:`statekit.runtime.api.functions.AggregateFunction`);
    ``value_type`` declares the accumulator's type (what is stored).
    """

    aggregate_function: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        for method in ("create_accumulator", "add", "get_result"):
            if not callable(getattr(self.aggregate_function, method, None)):
                raise ValueError(
                    f"aggregating state {self.name!r} needs an aggregate_function with {method}()"
                )

    @property
    def kind(self) -> StateKind:
        return StateKind.AGGREGATING


class State(ABC):
    """A state handle."""

    @abstractmethod
    def clear(self) -> None:
        """Remove the value (of the current key, for keyed state)."""

    def set_current_namespace(self, namespace: Any) -> None:
        """Scope the handle to ``namespace`` of the current key (namespaced keyed state only,
        Flink's ``InternalKvState.setCurrentNamespace``; the window operator's windows)."""
        raise TypeError(f"{type(self).__name__} has no namespace: declare the state with a namespace_type")


class ValueState(State, Generic[T]):
    """One value per key."""

    @abstractmethod
    def value(self) -> T | None:
        """The value of the current key (the descriptor's default when unset)."""

    @abstractmethod
    def update(self, value: T | None) -> None:
        """Set the value of the current key (``None`` clears it)."""


class ListState(State, Generic[T]):
    """A list of elements (per key, or per subtask for operator state)."""

    @abstractmethod
    def get(self) -> list[T]:
        """The elements (an empty list when none); change them only through this handle."""

    @abstractmethod
    def add(self, value: T) -> None:
        """Append one element."""

    @abstractmethod
    def add_all(self, values: Iterable[T]) -> None:
        """Append elements."""

    @abstractmethod
    def update(self, values: Iterable[T]) -> None:
        """Replace all elements."""

    def __iter__(self) -> Iterator[T]:
        return iter(self.get())


class MapState(State, Generic[T]):
    """A map from user keys to values, per key."""

    @abstractmethod
    def get(self, user_key: Any) -> T | None:
        """The value of ``user_key`` or None."""

    @abstractmethod
    def put(self, user_key: Any, value: T) -> None:
        """Set the value of ``user_key``."""

    @abstractmethod
    def put_all(self, entries: dict[Any, T]) -> None:
        """Set several entries."""

    @abstractmethod
    def remove(self, user_key: Any) -> None:
        """Remove ``user_key`` (no-op when absent)."""

    @abstractmethod
    def contains(self, user_key: Any) -> bool:
        """Whether ``user_key`` is present."""

    @abstractmethod
    def items(self) -> list[tuple[Any, T]]:
        """A snapshot list of (user key, value) pairs."""

    def keys(self) -> list[Any]:
        """A snapshot list of the user keys."""
        return [k for k, _ in self.items()]

    def values(self) -> list[T]:
        """A snapshot list of the values."""
        return [v for _, v in self.items()]

    def is_empty(self) -> bool:
        """Whether the map has no entries."""
        return not self.items()


class ReducingState(State, Generic[T]):
    """A value folded by a reduce function."""

    @abstractmethod
    def get(self) -> T | None:
        """The reduced value or None."""

    @abstractmethod
    def add(self, value: T) -> None:
        """Fold ``value`` into the state."""


class AggregatingState(State, Generic[T]):
    """An accumulator driven by an aggregate function."""

    @abstractmethod
    def get(self) -> Any:
        """``get_result(accumulator)``, or None when nothing was added."""

    @abstractmethod
    def add(self, value: T) -> None:
        """``accumulator = add(value, accumulator)``."""


class ReadOnlyBroadcastState(ABC):
    """Broadcast state as the non-broadcast side sees it."""

    @abstractmethod
    def get(self, key: Any) -> Any:
        """The value of ``key`` or None."""

    @abstractmethod
    def contains(self, key: Any) -> bool:
        """Whether ``key`` is present."""

    @abstractmethod
    def items(self) -> list[tuple[Any, Any]]:
        """A snapshot list of (key, value) pairs."""


class BroadcastState(ReadOnlyBroadcastState):
    """Broadcast state (a map, the same on every subtask) as the broadcast side sees it."""

    @abstractmethod
    def put(self, key: Any, value: Any) -> None:
        """Set the value of ``key``."""

    @abstractmethod
    def remove(self, key: Any) -> None:
        """Remove ``key``."""

    @abstractmethod
    def clear(self) -> None:
        """Remove every entry."""
