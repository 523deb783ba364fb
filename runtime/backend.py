"""Keyed state backends: the seam between state handles and storage.

A backend holds the keyed state of one operator subtask. The runtime sets
``current_key`` before each record; handles read and write the state of that key.
A snapshot has a synchronous part (:meth:`KeyedStateBackend.snapshot`, called at the
barrier in the task thread) and an asynchronous part (:meth:`KeyedSnapshot.write`, run
on a snapshot thread while processing continues). Files are written only through
``statekit.writers.state_writer``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statekit.statefmt import layout
from statekit.statefmt.entries import StateCodec, group_by_key_group
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.keygroups import KeyGroupRange
from statekit.statefmt.metadata import StateDescriptor, StateFile, StateKind
from statekit.writers.state_writer import write_keyed_file

if TYPE_CHECKING:
    from statekit.runtime.checkpoint_storage import CheckpointStorageLocation
    from statekit.runtime.state import State, StateDescriptorBase

__all__ = [
    "KeyedStateBackend",
    "KeyedSnapshot",
    "SubtaskScope",
    "create_keyed_backend",
    "write_keyed_rows",
    "hashable",
    "check_compatible",
    "BACKEND_NAMES",
]

BACKEND_NAMES = ("hashmap", "rocksdb")


@dataclass(frozen=True)
class SubtaskScope:
    """Which operator subtask a backend serves."""

    uid: str
    subtask: int
    parallelism: int
    max_parallelism: int
    key_serializer: str
    key_group_range: KeyGroupRange


class KeyedSnapshot(ABC):
    """The asynchronous part of a keyed snapshot."""

    @abstractmethod
    def write(self, location: CheckpointStorageLocation) -> list[StateFile]:
        """Write one file per non-empty state into ``location``; return them."""

    @abstractmethod
    def release(self) -> None:
        """Give up the snapshot (after writing or when the checkpoint is aborted)."""


class KeyedStateBackend(ABC):
    """Keyed state of one operator subtask."""

    current_key: Any

    def __init__(self, scope: SubtaskScope) -> None:
        self.scope = scope
        self.current_key = None

    @abstractmethod
    def get_state(self, descriptor: StateDescriptorBase) -> State:
        """The handle of ``descriptor`` (created, or bound to restored state of that name)."""

    @abstractmethod
    def restore_state(self, descriptor: StateDescriptor, entries: Iterable[Any]) -> None:
        """Load restored entries (``KeyedStateEntry``/``MapStateEntry``) of one state."""

    @abstractmethod
    def descriptors(self) -> list[StateDescriptor]:
        """Every state this backend holds (registered or restored), in name order."""

    @abstractmethod
    def snapshot(self) -> KeyedSnapshot:
        """The synchronous part of a snapshot: a consistent view of every state."""

    @abstractmethod
    def keys(self, state: str) -> Iterator[Any]:
        """The keys that have a value in ``state``."""

    def close(self) -> None:
        """Release resources."""


def create_keyed_backend(name: str, scope: SubtaskScope, *, working_dir: str | None = None) -> KeyedStateBackend:
    """Instantiate the backend named ``name`` (``hashmap`` or ``rocksdb``)."""
    if name == "hashmap":
        from statekit.runtime.backend_hashmap import HashMapKeyedStateBackend

        return HashMapKeyedStateBackend(scope)
    if name == "rocksdb":
        from statekit.runtime.backend_rocksdb import RocksDBKeyedStateBackend

        backend: KeyedStateBackend = RocksDBKeyedStateBackend(scope, working_dir=working_dir)
        return backend
    raise BadInputError(f"unknown state backend {name!r}; use one of {', '.join(BACKEND_NAMES)}")


def check_compatible(restored: StateDescriptor, declared: StateDescriptor, uid: str) -> None:
    """Refuse a declared state whose kind or serializers differ from the restored one."""
    if restored.kind is not declared.kind:
        raise BadInputError(
            f"operator {uid!r}: state {declared.name!r} was restored as {restored.kind.value} state "
            f"but the job declares {declared.kind.value} state; rename the state or migrate it "
            "offline (statekit modify)"
        )
    for field in ("value_serializer", "user_key_serializer"):
        old, new = getattr(restored, field), getattr(declared, field)
        if old is not None and new is not None and old != new:
            raise BadInputError(
                f"operator {uid!r}: state {declared.name!r} was written with the {old!r} serializer "
                f"but the job declares {new!r}; keep the serializer or migrate the state offline"
            )


def write_keyed_rows(
    location: CheckpointStorageLocation,
    scope: SubtaskScope,
    descriptor: StateDescriptor,
    rows: list[Any],
) -> StateFile | None:
    """Encode rows of one state, group them by key group, write one file (None if no rows)."""
    if not rows:
        return None
    codec = StateCodec(descriptor, scope.key_serializer, for_write=True, trust_pickle=True)
    table = codec.encode_keyed_rows(rows)
    relative = layout.state_file_path(scope.uid, descriptor.name, scope.subtask, scope.parallelism)
    return write_keyed_file(
        location.io, location.directory, relative, descriptor.name,
        group_by_key_group(table, scope.max_parallelism),
    )


def hashable(value: Any) -> Any:
    """Decoded keys as dict keys: msgpack arrays (lists) become tuples, recursively."""
    if isinstance(value, list):
        return tuple(hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((hashable(k), hashable(v)) for k, v in value.items()))
    return value


def rows_of(kind: StateKind, data: dict[Any, Any]) -> list[Any]:
    """Rows for ``StateCodec.encode_keyed_rows`` from a key -> value (or user-key map) dict."""
    if kind is StateKind.MAP:
        return [(key, user_key, value) for key, entries in data.items() for user_key, value in entries.items()]
    return list(data.items())


__all__ += ["rows_of"]
