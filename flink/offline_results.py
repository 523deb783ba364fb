"""The results of the offline commands on Apache Flink snapshots (and the engine-neutral
listing): what ``inspect``, ``verify``, ``dispose`` and ``checkpoints list`` return, rendered by
the CLI and serialized with ``--json``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from statekit.statefmt.json_contract import JsonShape

if TYPE_CHECKING:
    from statekit.flink import (
        FlinkCheckpointEntry,
        FlinkDisposeResult,
        FlinkProblem,
        FlinkSnapshotSummary,
    )
    from statekit.readers.listing import CheckpointListing

__all__ = ["SnapshotListing", "SnapshotList", "FlinkInspection", "FlinkVerifyReport", "FlinkDisposal",
           "FlinkDisposalView"]


@dataclass(frozen=True)
class SnapshotListing:
    """One snapshot directory of a listing that holds Flink snapshots.

    Attributes:
        engine: ``statekit`` or ``flink``: who wrote the snapshot; an incomplete snapshot
            (no ``_metadata``) takes the engine of its siblings, else ``unknown``.
        status: ``complete``, ``incomplete`` (no ``_metadata``) or ``damaged``.
        created_at_ms: Creation time (statekit records it; Flink does not).
        modified: Modification time of ``_metadata`` or the directory (Flink), epoch s.
        age_s: Seconds since creation (statekit) or modification (Flink).
    """

    engine: str
    path: str
    job_id: str
    checkpoint_id: int | None
    status: str
    kind: str
    format: str
    size: int
    created_at_ms: int | None
    modified: float | None
    age_s: float | None
    problem: str = ""

    @classmethod
    def from_statekit(cls, row: CheckpointListing) -> SnapshotListing:
        """A row of the statekit listing."""
        return cls("statekit", row.path, row.job_id, row.checkpoint_id, row.status, row.kind,
                   row.format, row.size, row.created_at_ms, None, row.age_s, row.problem)

    @classmethod
    def from_flink(cls, entry: FlinkCheckpointEntry) -> SnapshotListing:
        """A row of the Flink listing."""
        status = "complete" if entry.complete else "damaged" if entry.error else "incomplete"
        problem = entry.error or ("" if entry.complete else "no _metadata")
        return cls("flink", entry.path, entry.job_id or "", entry.checkpoint_id, status,
                   entry.kind, entry.format or "", entry.size, None, entry.modified,
                   entry.age_seconds, problem)


@dataclass(frozen=True)
class SnapshotList:
    """Every snapshot under a directory that holds Flink snapshots (maybe statekit ones too)."""

    json_shape: ClassVar[JsonShape] = JsonShape(rename={"listings": "snapshots"})

    path: str
    listings: list[SnapshotListing]


@dataclass(frozen=True)
class FlinkInspection:
    """``inspect`` of a Flink snapshot: the library summary, ready for JSON and rendering."""

    summary: FlinkSnapshotSummary

    def operator_states(self, index: int) -> dict[str, str]:
        """Operator (non-keyed) state names of operator ``index`` and their distribution mode."""
        return {s.name: s.mode for s in self.summary.operators[index].operator_states}

    def key_group_ranges(self, index: int) -> list[list[int]]:
        """Flink's key-group range of every subtask of operator ``index`` (by the formula)."""
        return [r.to_list() for r in self.summary.operators[index].key_group_ranges]

    def json_view(self) -> FlinkSnapshotSummary:
        """The summary: every field, with ranges as ``[start, end]`` lists."""
        return self.summary


@dataclass
class FlinkVerifyReport:
    """``verify`` of a Flink snapshot: files present with their recorded sizes, sane offsets.

    Attributes:
        path: The snapshot directory.
        metadata_path: Its ``_metadata``.
        files: Distinct referenced files (relative and absolute).
        bytes: Their recorded sizes, summed.
        inline_bytes: State inlined in ``_metadata`` (nothing to check on disk).
        rocksdb_stores: Subtasks' RocksDB stores whose every entry was read, block checksums verified.
        problems: Everything found wrong; empty when the snapshot is whole.
        moved: A moved checkpoint read in place (said once).
        hint: What to do about the problems, said once (a moved checkpoint whose files are
            not in place: the relocate command).
    """

    json_shape: ClassVar[JsonShape] = JsonShape(extra=("engine", "ok"))

    path: str
    metadata_path: str
    checkpoint_id: int
    files: int = 0
    bytes: int = 0
    inline_bytes: int = 0
    rocksdb_stores: int = 0
    problems: list[FlinkProblem] = field(default_factory=list)
    moved: str | None = None
    hint: str | None = None

    @property
    def ok(self) -> bool:
        """True when nothing is missing, resized, unchecked or inconsistent."""
        return not self.problems

    @property
    def engine(self) -> str:
        """``flink``: the snapshot's engine."""
        return "flink"


@dataclass(frozen=True)
class FlinkDisposal:
    """``dispose`` of a Flink snapshot: what was (or would be) deleted and what was kept."""

    result: FlinkDisposeResult

    @property
    def files(self) -> tuple[str, ...]:
        """Every file deleted or to delete: exclusive files, then unreferenced shared ones."""
        return self.result.plan.delete_files + self.result.plan.delete_shared

    def json_view(self) -> FlinkDisposalView:
        """The plan and the outcome (``files`` and ``bytes`` as for statekit)."""
        plan, result = self.result.plan, self.result
        return FlinkDisposalView(
            path=plan.snapshot, checkpoint_id=plan.checkpoint_id, kind=plan.kind, dry_run=result.dry_run,
            disposed=not result.dry_run and not result.failed, files=self.files, bytes=plan.bytes_to_free,
            delete_files=plan.delete_files, delete_shared=plan.delete_shared, keep_shared=plan.keep_shared,
            keep_exclusive=plan.keep_exclusive, keep_external=plan.keep_external, missing=plan.missing,
            remove_directory=plan.remove_directory, warnings=plan.warnings, deleted=result.deleted,
            failed=result.failed)


@dataclass(frozen=True)
class FlinkDisposalView:
    """``dispose --json`` of a Flink snapshot.

    Attributes:
        files: Every file deleted or to delete; ``bytes`` their sizes (as for statekit).
        keep_shared: Shared files kept, with the checkpoints that still reference them.
        failed: Deletions that failed, with the reason.
    """

    json_shape: ClassVar[JsonShape] = JsonShape(
        extra=("engine",), records={"keep_shared": ("path", "referenced_by"), "failed": ("path", "reason")})

    path: str
    checkpoint_id: int
    kind: str | None
    dry_run: bool
    disposed: bool
    files: tuple[str, ...]
    bytes: int
    delete_files: tuple[str, ...]
    delete_shared: tuple[str, ...]
    keep_shared: tuple[tuple[str, tuple[str, ...]], ...]
    keep_exclusive: tuple[str, ...]
    keep_external: tuple[str, ...]
    missing: tuple[str, ...]
    remove_directory: bool
    warnings: tuple[str, ...]
    deleted: tuple[str, ...]
    failed: tuple[tuple[str, str], ...]

    @property
    def engine(self) -> str:
        """``flink``: the snapshot's engine."""
        return "flink"


