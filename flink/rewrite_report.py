"""What a rewrite of a Flink savepoint did, or (``dry_run``) would do: the results of
:func:`statekit.flink.rewrite.rescale_flink_savepoint` and
:func:`statekit.flink.rewrite.modify_flink_savepoint`, ready for JSON and rendering."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from statekit.statefmt.json_contract import JsonShape
from statekit.statefmt.keygroups import KeyGroupRange, subtask_skew

__all__ = ["FlinkSubtaskPlan", "FlinkOperatorPlan", "FlinkRescaleReport", "FlinkOperatorSummary",
           "FlinkModifyReport", "REGROUP", "MAX_PARALLELISM_ONLY", "KEPT", "MERGE", "SPLIT", "REHASH", "rescale_path",
           "RATES"]

REGROUP = "regroup"  # keyed state regrouped into the new key groups
# how entries reach their new key groups (Flink: key group = murmurHash(hashCode) % M)
MERGE = "merge"  # M2 divides M: (h % M) % M2 == h % M2, so key group g goes whole to g % M2; nothing hashed
SPLIT = "split"  # M divides M2: key group g splits into g, g + M, ...; every key hashed
REHASH = "rehash"  # neither: every key hashed
# MB of key-group streams per CPU second of the local engine (bench/flink_rescale_bench.py, 1M keys, 2-core VM)
RATES = {MERGE: 200.0, SPLIT: 75.0, REHASH: 75.0}


def rescale_path(old_max_parallelism: int, max_parallelism: int) -> str:
    """``merge``, ``split`` or ``rehash`` (see :data:`MERGE`)."""
    if old_max_parallelism % max_parallelism == 0:
        return MERGE
    if max_parallelism % old_max_parallelism == 0:
        return SPLIT
    return REHASH
MAX_PARALLELISM_ONLY = "max parallelism"  # no keyed state: only the number changes
KEPT = "kept"  # carried over as it is: already at the new max parallelism, or one set apart (e.g. 1)


@dataclass(frozen=True)
class FlinkSubtaskPlan:
    """The keyed state of one subtask under the new max parallelism.

    Attributes:
        index: The subtask index.
        key_group_range: Its key-group range (Flink's ``computeKeyGroupRangeForOperatorIndex``).
        key_groups: Key groups of the range that hold entries.
        entries: Entries (one per user key of map state, one per timer).
        bytes: Entry bytes in the new stream (without the header).
    """

    index: int
    key_group_range: KeyGroupRange
    key_groups: int
    entries: int
    bytes: int


@dataclass(frozen=True)
class FlinkOperatorPlan:
    """What a rescale does to one operator.

    Attributes:
        label: Its uid, or its id when it has none.
        operator_id: The 32-hex-digit operator id.
        action: ``regroup`` (keyed state), ``max parallelism`` (only the number changes) or
            ``kept`` (carried over as it is: already at the new max parallelism, or a max
            parallelism set apart from the keyed operators', such as 1 of a non-parallel source).
        parallelism: Its parallelism (kept: Flink redistributes state when restoring at another).
        old_max_parallelism / max_parallelism: Before and after.
        states: The keyed states (``regroup``).
        key_type: The key type hashed (``Row<String>``...), for ``regroup``.
        subtasks: Per subtask, the key groups, entries and bytes it holds afterwards.
        path: How entries reach their new key groups (``merge``, ``split``, ``rehash``), for ``regroup``.
        estimated: The subtask figures are estimates (a dry run that read no entries).
        source_bytes: Bytes of the key-group streams to read.
    """

    json_shape: ClassVar[JsonShape] = JsonShape(
        rename={"states": "keyed_states"}, extra=("estimated_seconds", "entries", "bytes", "skew"),
        digits={"estimated_seconds": 3, "skew": 4})

    label: str
    operator_id: str
    action: str
    parallelism: int
    old_max_parallelism: int
    max_parallelism: int
    states: tuple[str, ...] = ()
    key_type: str | None = None
    subtasks: tuple[FlinkSubtaskPlan, ...] = ()
    path: str | None = None
    estimated: bool = False
    source_bytes: int = 0

    @property
    def estimated_seconds(self) -> float | None:
        """CPU seconds of the local engine at the path's measured rate (:data:`RATES`)."""
        if self.path is None:
            return None
        return self.source_bytes / 1e6 / RATES[self.path]

    @property
    def entries(self) -> int:
        """Entries of all subtasks."""
        return sum(s.entries for s in self.subtasks)

    @property
    def bytes(self) -> int:
        """Entry bytes of all subtasks."""
        return sum(s.bytes for s in self.subtasks)

    @property
    def skew(self) -> float:
        """The largest subtask's bytes over the mean (1.0: even; 0 subtasks or bytes: 1.0)."""
        return subtask_skew([s.bytes for s in self.subtasks])


@dataclass
class FlinkRescaleReport:
    """The plan (``dry_run``) or the outcome of a max-parallelism change of a Flink savepoint.

    Attributes:
        source: The savepoint read.
        output: The savepoint written (``None`` for a dry run without ``-o``).
        dry_run: Nothing was written.
        metadata_version: The ``_metadata`` version, kept.
        operators: One plan per operator, in ``_metadata`` order.
        bytes_read: Key-group stream bytes read.
        bytes_written: Bytes written (streams, copied files, ``_metadata``).
        spilled_bytes: Bytes that went through temporary files.
        files_copied: Files carried over unchanged (operator state).
        elapsed_s: Wall time.
    """

    json_shape: ClassVar[JsonShape] = JsonShape(rename={"execution": "engine"}, extra=("format",),
                                                digits={"elapsed_s": 3})

    source: str
    output: str | None
    dry_run: bool
    metadata_version: int
    operators: list[FlinkOperatorPlan] = field(default_factory=list)
    bytes_read: int = 0
    bytes_written: int = 0
    spilled_bytes: int = 0
    files_copied: int = 0
    elapsed_s: float = 0.0
    execution: str = "local"

    @property
    def format(self) -> str:
        """``flink``: the format of the savepoints read and written (``engine``: where it ran)."""
        return "flink"


@dataclass(frozen=True)
class FlinkOperatorSummary:
    """One operator of a modified savepoint.

    Attributes:
        label: Its uid (the new one when renamed), or its id.
        operator_id: Its id (Flink's hash of the new uid when renamed).
        renamed_from: The label it had, when renamed.
        parallelism / max_parallelism: As in the source.
        files: Files its state references.
        bytes: Their recorded sizes plus inlined state.
    """

    label: str
    operator_id: str
    renamed_from: str | None
    parallelism: int
    max_parallelism: int
    files: int
    bytes: int


@dataclass
class FlinkModifyReport:
    """What ``modify`` of a Flink savepoint did (or, ``dry_run``, would do).

    Attributes:
        removed: ``(label, operator id)`` of each removed operator.
        renamed: ``(old label, new uid, new operator id)`` of each renamed operator.
        operators: The operators of the result, in ``_metadata`` order.
    """

    json_shape: ClassVar[JsonShape] = JsonShape(extra=("format",), digits={"elapsed_s": 3},
                                                records={"removed": ("label", "operator_id"),
                                                         "renamed": ("from", "uid", "operator_id")})

    source: str
    output: str | None
    dry_run: bool
    metadata_version: int
    removed: list[tuple[str, str]] = field(default_factory=list)
    renamed: list[tuple[str, str, str]] = field(default_factory=list)
    operators: list[FlinkOperatorSummary] = field(default_factory=list)
    bytes_written: int = 0
    elapsed_s: float = 0.0

    @property
    def format(self) -> str:
        """``flink``: the format of the savepoints read and written."""
        return "flink"
