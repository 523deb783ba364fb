"""The results of the offline commands on Apache Flink snapshots (and the engine-neutral
listing): what ``inspect``, ``verify``, ``dispose`` and ``checkpoints list`` return, rendered by
the CLI and serialized with ``--json``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from statekit.statefmt.errors import StatekitError

if TYPE_CHECKING:
    from statekit.flink import (
        FlinkCheckpointEntry,
        FlinkDisposeResult,
        FlinkProblem,
        FlinkSnapshotSummary,
    )
    from statekit.readers.listing import CheckpointListing
    from statekit.statefmt.keygroups import KeyGroupRange

__all__ = ["SnapshotListing", "SnapshotList", "FlinkInspection", "FlinkVerifyReport", "FlinkDisposal"]


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

    def to_json(self) -> dict[str, Any]:
        """The row as JSON data."""
        return asdict(self)

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

    path: str
    listings: list[SnapshotListing]

    def to_json(self) -> dict[str, Any]:
        """``{"path", "snapshots": [...]}``, like the statekit listing plus ``engine``."""
        return {"path": self.path, "snapshots": [row.to_json() for row in self.listings]}


def _range(kg: KeyGroupRange | None) -> list[int] | None:
    return None if kg is None else [kg.start, kg.end]


def _formula_ranges(max_parallelism: int, parallelism: int) -> list[list[int]]:
    from statekit.statefmt.keygroups import compute_key_group_range_for_operator_index

    try:
        return [_range(compute_key_group_range_for_operator_index(max_parallelism, parallelism, i)) or []
                for i in range(parallelism)]
    except (StatekitError, ValueError, ZeroDivisionError):
        return []


@dataclass(frozen=True)
class FlinkInspection:
    """``inspect`` of a Flink snapshot: the library summary, ready for JSON and rendering."""

    summary: FlinkSnapshotSummary

    def operator_states(self, index: int) -> dict[str, str]:
        """Operator (non-keyed) state names of operator ``index`` and their distribution mode."""
        op = self.summary.operators[index]
        return {s.name: s.mode for sub in op.subtasks for s in sub.operator_states}

    def key_group_ranges(self, index: int) -> list[list[int]]:
        """Flink's key-group range of every subtask of operator ``index`` (by the formula)."""
        op = self.summary.operators[index]
        return _formula_ranges(op.max_parallelism, op.parallelism)

    def to_json(self) -> dict[str, Any]:
        """Every field of the summary, with ranges as ``[start, end]`` lists."""
        s = self.summary
        return {
            "engine": "flink",
            "path": s.path,
            "metadata_path": s.metadata_path,
            "metadata_version": s.metadata_version,
            "checkpoint_id": s.checkpoint_id,
            "kind": s.kind,
            "format": s.format,
            "master_states": s.master_states,
            "metadata_bytes": s.metadata_bytes,
            "bytes": s.bytes,
            "inline_bytes": s.inline_bytes,
            "file_bytes": s.file_bytes,
            "shared_bytes": s.shared_bytes,
            "moved": s.moved,
            "operators": [self._operator_json(i) for i in range(len(s.operators))],
        }

    def _operator_json(self, index: int) -> dict[str, Any]:
        op = self.summary.operators[index]
        return {
            "label": op.label,
            "uid": op.uid,
            "operator_id": op.operator_id,
            "name": op.name,
            "parallelism": op.parallelism,
            "max_parallelism": op.max_parallelism,
            "key_group_ranges": self.key_group_ranges(index),
            "fully_finished": op.fully_finished,
            "coordinator_bytes": op.coordinator_bytes,
            "bytes": op.bytes,
            "inline_bytes": op.inline_bytes,
            "file_bytes": op.file_bytes,
            "shared_bytes": op.shared_bytes,
            "operator_states": [{"name": n, "mode": m} for n, m in self.operator_states(index).items()],
            "keyed_states": [
                {
                    "name": st.name,
                    "kind": st.kind,
                    "backend_type": st.backend_type,
                    "options": dict(st.options),
                    "serializers": [
                        {"key": ser.key, "snapshot_class": ser.snapshot_class, "short_name": ser.short_name,
                         "nested": list(ser.nested)}
                        for ser in st.serializers
                    ],
                    "problem": st.problem,
                }
                for st in op.keyed_states
            ],
            "keyed_state_problem": op.keyed_state_problem,
            "source_splits": [split.to_json() for split in op.splits],
            "source_splits_problem": op.splits_problem,
            "subtasks": [
                {
                    "index": sub.index,
                    "finished": sub.finished,
                    "key_group_range": _range(sub.key_group_range),
                    "keyed_handle": sub.keyed_handle,
                    "bytes": sub.bytes,
                    "inline_bytes": sub.inline_bytes,
                    "file_bytes": sub.file_bytes,
                    "shared_bytes": sub.shared_bytes,
                    "operator_states": [asdict(o) for o in sub.operator_states],
                    "channel_state_handles": sub.channel_state_handles,
                    "channel_state_bytes": sub.channel_state_bytes,
                }
                for sub in op.subtasks
            ],
        }


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

    def to_json(self) -> dict[str, Any]:
        """The report as JSON data."""
        return {"engine": "flink", "path": self.path, "metadata_path": self.metadata_path,
                "checkpoint_id": self.checkpoint_id, "ok": self.ok, "files": self.files,
                "bytes": self.bytes, "inline_bytes": self.inline_bytes, "rocksdb_stores": self.rocksdb_stores,
                "problems": [asdict(p) for p in self.problems], "moved": self.moved, "hint": self.hint}


@dataclass(frozen=True)
class FlinkDisposal:
    """``dispose`` of a Flink snapshot: what was (or would be) deleted and what was kept."""

    result: FlinkDisposeResult

    @property
    def files(self) -> tuple[str, ...]:
        """Every file deleted or to delete: exclusive files, then unreferenced shared ones."""
        return self.result.plan.delete_files + self.result.plan.delete_shared

    def to_json(self) -> dict[str, Any]:
        """The plan and the outcome as JSON data (``files`` and ``bytes`` as for statekit)."""
        plan, result = self.result.plan, self.result
        return {
            "engine": "flink",
            "path": plan.snapshot,
            "checkpoint_id": plan.checkpoint_id,
            "kind": plan.kind,
            "dry_run": result.dry_run,
            "disposed": not result.dry_run and not result.failed,
            "files": list(self.files),
            "bytes": plan.bytes_to_free,
            "delete_files": list(plan.delete_files),
            "delete_shared": list(plan.delete_shared),
            "keep_shared": [{"path": p, "referenced_by": list(refs)} for p, refs in plan.keep_shared],
            "keep_exclusive": list(plan.keep_exclusive),
            "keep_external": list(plan.keep_external),
            "missing": list(plan.missing),
            "remove_directory": plan.remove_directory,
            "warnings": list(plan.warnings),
            "deleted": list(result.deleted),
            "failed": [{"path": p, "reason": r} for p, r in result.failed],
        }


