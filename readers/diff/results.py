"""The results of a diff: structural changes, example key differences, per-state counts, the whole :class:`SavepointDiff`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from statekit.statefmt.json_contract import JsonShape

__all__ = ["StructuralChange", "KeyDifference", "StateDiff", "SavepointDiff", "LAYOUT_CHANGES"]

LAYOUT_CHANGES = ("parallelism_changed", "max_parallelism_changed", "name_changed")


@dataclass(frozen=True)
class StructuralChange:
    """One difference of the savepoints' shape."""

    json_shape: ClassVar[JsonShape] = JsonShape(extra=("layout",))

    change: str
    operator_uid: str
    state_name: str | None = None
    field: str | None = None
    a: Any = None
    b: Any = None

    @property
    def layout(self) -> bool:
        """Parallelism, max parallelism and names: listed, but the state is the same."""
        return self.change in LAYOUT_CHANGES


@dataclass(frozen=True)
class KeyDifference:
    """One differing entry, decoded (values as JSON-compatible Python values)."""

    change: str
    key: Any
    namespace: Any
    user_key: Any
    value_a: Any
    value_b: Any
    window: list[int] | None = None  # [start, end] a window state's namespace holds (readers.window_state)


@dataclass(frozen=True)
class StateDiff:
    """Data diff of one state: counts of entries by outcome."""

    operator_uid: str
    state_name: str
    kind: str
    status: str  # compared | removed | added | incomparable
    only_in_a: int = 0
    only_in_b: int = 0
    changed: int = 0
    unchanged: int = 0
    key_groups_skipped: int = 0
    key_groups_compared: int = 0
    reason: str | None = None
    examples: tuple[KeyDifference, ...] = ()

    @property
    def differs(self) -> bool:
        return self.status == "incomparable" or bool(self.only_in_a or self.only_in_b or self.changed)


@dataclass(frozen=True)
class SavepointDiff:
    """The whole diff; ``equal`` is what the exit code reports."""

    json_shape: ClassVar[JsonShape] = JsonShape(extra=("equal", "totals"))

    a: str
    b: str
    engine: str
    structural: tuple[StructuralChange, ...]
    states: tuple[StateDiff, ...]
    output: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def equal(self) -> bool:
        return not any(not c.layout for c in self.structural) and not any(s.differs for s in self.states)

    def totals(self) -> dict[str, int]:
        return {k: sum(getattr(s, k) for s in self.states) for k in ("only_in_a", "only_in_b", "changed", "unchanged")}
