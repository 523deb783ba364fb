"""What a diff compares (:class:`DiffSpec`) and where its differing rows go (:class:`DifferenceOutput`)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["DiffSpec", "DifferenceWriter", "DifferenceOutput"]


@dataclass(frozen=True)
class DiffSpec:
    """One diff of savepoint ``a`` (before) with ``b`` (after), whichever engine runs it.

    Attributes:
        a, b: Savepoint/checkpoint paths or URLs.
        operator, state: Restrict the diff to one operator and/or state name.
        keys: Decode and return up to ``limit`` differing entries per state.
        limit: How many differing entries per state ``keys`` returns (not negative).
        output: A new directory for every differing entry, Hive-partitioned by
            ``operator_uid`` and ``state_name`` (written by the engine's writer:
            ``statekit.writers.diff_output`` locally, Spark on Spark).
        trust_pickle: Allow decoding pickle state (for ``keys``/``output``).
        storage_options: fsspec options for both savepoints and the output.
    """

    a: str
    b: str
    operator: str | None = None
    state: str | None = None
    keys: bool = False
    limit: int = 20
    output: str | None = None
    trust_pickle: bool = False
    storage_options: dict[str, Any] | None = None


class DifferenceWriter(Protocol):
    """Takes the differing entries of one state, as tables of :func:`diff_arrow_schema`'s columns."""

    def write_table(self, table: pa.Table) -> None: ...


class DifferenceOutput(Protocol):
    """Where the differing entries of a diff go: one writer per state, opened by the diff."""

    def state_writer(self, uid: str, state: str) -> AbstractContextManager[DifferenceWriter]: ...
