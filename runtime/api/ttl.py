"""State time-to-live as a job declares it: Flink's ``StateTtlConfig`` (built with
``StateTtlConfig.new_builder(ttl_ms)``), its update type and visibility, and a manual clock for
tests. The TTL handles that enforce it live in :mod:`statekit.runtime.state.ttl`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

__all__ = [
    "Clock",
    "ManualClock",
    "UpdateType",
    "StateVisibility",
    "StateTtlConfig",
    "StateTtlConfigBuilder",
]

Clock = Callable[[], int]


class ManualClock:
    """A clock that moves only when told (tests, and replays with explicit time)."""

    def __init__(self, now_ms: int = 0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


class UpdateType(Enum):
    """When an entry's expiry is set to ``now + ttl``."""

    ON_CREATE_AND_WRITE = "on_create_and_write"
    ON_READ_AND_WRITE = "on_read_and_write"


class StateVisibility(Enum):
    """Whether an expired entry not yet removed is still returned (once: the read removes it)."""

    NEVER_RETURN_EXPIRED = "never_return_expired"
    RETURN_EXPIRED_IF_NOT_CLEANED_UP = "return_expired_if_not_cleaned_up"


@dataclass(frozen=True)
class StateTtlConfig:
    """A state's TTL and how expired entries are hidden and removed.

    Attributes:
        ttl_ms: Time to live in milliseconds (positive).
        update_type: When the expiry is refreshed.
        state_visibility: Whether expired entries not yet removed are returned.
        cleanup_full_snapshot: Canonical snapshots (savepoints, full checkpoints) leave out
            entries expired at the snapshot's synchronous part; the live state keeps them
            until accessed or swept. Native (RocksDB) checkpoints copy the store as it is.
        incremental_cleanup_size: Every access of the state also checks this many keys of
            it (a cursor over all keys, restarted when done) and removes what expired; 0: off.
        sweep_after_entries: Every this many accesses of the state, a sweep checks this
            many keys (the stand-in for Flink's RocksDB compaction filter, which rocksdict
            cannot install); 0: off.
        clock: The TTL clock of this state (epoch ms); None: the backend's ``ttl_clock``.
    """

    ttl_ms: int
    update_type: UpdateType = UpdateType.ON_CREATE_AND_WRITE
    state_visibility: StateVisibility = StateVisibility.NEVER_RETURN_EXPIRED
    cleanup_full_snapshot: bool = False
    incremental_cleanup_size: int = 0
    sweep_after_entries: int = 0
    clock: Clock | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.ttl_ms, int) or self.ttl_ms <= 0:
            raise ValueError(f"a state TTL must be a positive number of milliseconds, got {self.ttl_ms!r}")
        if self.incremental_cleanup_size < 0 or self.sweep_after_entries < 0:
            raise ValueError("TTL cleanup sizes must not be negative")

    @staticmethod
    def new_builder(ttl_ms: int) -> StateTtlConfigBuilder:
        """A builder of a config with TTL ``ttl_ms`` (milliseconds)."""
        return StateTtlConfigBuilder(StateTtlConfig(ttl_ms))

    @property
    def return_expired(self) -> bool:
        return self.state_visibility is StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP

    @property
    def update_on_read(self) -> bool:
        return self.update_type is UpdateType.ON_READ_AND_WRITE


class StateTtlConfigBuilder:
    """Flink's ``StateTtlConfig.Builder`` in Python spelling; every setter returns the builder."""

    def __init__(self, config: StateTtlConfig) -> None:
        self._config = config

    def _set(self, **changes: Any) -> StateTtlConfigBuilder:
        self._config = replace(self._config, **changes)
        return self

    def set_ttl(self, ttl_ms: int) -> StateTtlConfigBuilder:
        return self._set(ttl_ms=ttl_ms)

    def set_update_type(self, update_type: UpdateType) -> StateTtlConfigBuilder:
        return self._set(update_type=UpdateType(update_type))

    def update_ttl_on_create_and_write(self) -> StateTtlConfigBuilder:
        return self.set_update_type(UpdateType.ON_CREATE_AND_WRITE)

    def update_ttl_on_read_and_write(self) -> StateTtlConfigBuilder:
        return self.set_update_type(UpdateType.ON_READ_AND_WRITE)

    def set_state_visibility(self, visibility: StateVisibility) -> StateTtlConfigBuilder:
        return self._set(state_visibility=StateVisibility(visibility))

    def never_return_expired(self) -> StateTtlConfigBuilder:
        return self.set_state_visibility(StateVisibility.NEVER_RETURN_EXPIRED)

    def return_expired_if_not_cleaned_up(self) -> StateTtlConfigBuilder:
        return self.set_state_visibility(StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP)

    def cleanup_full_snapshot(self) -> StateTtlConfigBuilder:
        return self._set(cleanup_full_snapshot=True)

    def cleanup_incrementally(self, cleanup_size: int) -> StateTtlConfigBuilder:
        if cleanup_size <= 0:
            raise ValueError(f"cleanup_incrementally needs a positive cleanup size, got {cleanup_size}")
        return self._set(incremental_cleanup_size=cleanup_size)

    def cleanup_in_rocksdb_compact_filter(self, query_time_after_num_entries: int = 1000) -> StateTtlConfigBuilder:
        """A bounded sweep every ``query_time_after_num_entries`` accesses (see the module doc)."""
        if query_time_after_num_entries <= 0:
            raise ValueError("cleanup_in_rocksdb_compact_filter needs a positive entry count")
        return self._set(sweep_after_entries=query_time_after_num_entries)

    def disable_cleanup_in_background(self) -> StateTtlConfigBuilder:
        return self._set(incremental_cleanup_size=0, sweep_after_entries=0)

    def set_ttl_clock(self, clock: Clock) -> StateTtlConfigBuilder:
        return self._set(clock=clock)

    def build(self) -> StateTtlConfig:
        return self._config


