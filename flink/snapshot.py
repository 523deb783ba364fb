"""Flink snapshots by path: open, list, inspect, verify and dispose (the CLI's entry points).

Every function takes a local path or an fsspec URL (``s3://...``) and returns plain frozen
dataclasses for the CLI to render. Paths may name a snapshot directory or its ``_metadata``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from statekit.flink.dispose import (
    FlinkDisposePlan,
    FlinkDisposeResult,
    execute_dispose,
    plan_dispose,
)
from statekit.flink.listing import FlinkCheckpointEntry, list_checkpoints
from statekit.flink.storage import FlinkFileRef, FlinkSnapshot, load_snapshot, referenced_files
from statekit.flink.summary import FlinkSnapshotSummary, summarize_snapshot
from statekit.flink.verify import FlinkProblem, verify_snapshot
from statekit.statefmt.errors import MetadataError

__all__ = [
    "FlinkSnapshot",
    "FlinkFileRef",
    "FlinkCheckpointEntry",
    "FlinkProblem",
    "FlinkDisposePlan",
    "FlinkDisposeResult",
    "FlinkSnapshotSummary",
    "open_flink_snapshot",
    "list_flink_checkpoints",
    "inspect_flink_snapshot",
    "verify_flink_snapshot",
    "flink_referenced_files",
    "plan_flink_dispose",
    "dispose_flink_snapshot",
]

StorageOptions = dict[str, Any] | None
Uids = Sequence[str]


def open_flink_snapshot(path: str, *, storage_options: StorageOptions = None, uids: Uids = (),
                        in_place: bool = True) -> FlinkSnapshot:
    """Open a Flink checkpoint/savepoint directory or its ``_metadata`` file.

    Args:
        path: The snapshot directory or its ``_metadata``, local or an fsspec URL.
        storage_options: fsspec options.
        uids: Operator uids the user knows (metadata v3/v4 records none): every operator
            whose id is Flink's hash of one of them is labelled with it.
        in_place: Read a moved checkpoint's files from its own job directory (see
            :mod:`statekit.flink.storage`); :attr:`FlinkSnapshot.moved` then says from where.

    Raises:
        BadInputError: A uid that names no operator of the snapshot.
        PathNotFoundError: Nothing at ``path``.
        IncompleteCheckpointError: A ``chk-N`` directory without ``_metadata``.
        NotACheckpointError: Not a Flink snapshot (no ``_metadata``, or not Flink's).
        MetadataError: A damaged ``_metadata``; the message names the byte offset.
    """
    return load_snapshot(path, storage_options=storage_options, uids=uids, in_place=in_place)


def list_flink_checkpoints(
    root: str, *, storage_options: StorageOptions = None, now: float | None = None
) -> list[FlinkCheckpointEntry]:
    """Checkpoints and savepoints under a checkpoint root, job directory or savepoints folder."""
    return list(list_checkpoints(root, storage_options=storage_options, now=now))


def inspect_flink_snapshot(
    path: str, *, storage_options: StorageOptions = None, read_state_meta: bool = True, uids: Uids = (),
    compiled_plan: str | None = None,
) -> FlinkSnapshotSummary:
    """Open a snapshot and summarize it (operators, key groups, sizes, state names).

    With ``compiled_plan`` (a Flink SQL ``COMPILE PLAN`` file) the summary also names each
    stateful operator's plan node and accumulator fields, and lists the window aggregates'
    slices and timers (:mod:`statekit.flink.sql_operators`).
    """
    snapshot = load_snapshot(path, storage_options=storage_options, uids=uids, in_place=True)
    summary = summarize_snapshot(snapshot, read_state_meta=read_state_meta)
    if compiled_plan is None:
        return summary
    from dataclasses import replace

    from statekit.flink.compiled_plan import load_compiled_plan
    from statekit.flink.sql_operators import sql_operators

    return replace(summary, sql_operators=sql_operators(snapshot, load_compiled_plan(compiled_plan)))


def flink_referenced_files(path: str, *, storage_options: StorageOptions = None) -> list[FlinkFileRef]:
    """Every file the snapshot's ``_metadata`` references, resolved."""
    return list(referenced_files(load_snapshot(path, storage_options=storage_options)))


def verify_flink_snapshot(path: str, *, storage_options: StorageOptions = None,
                          uids: Uids = ()) -> list[FlinkProblem]:
    """Every problem of a snapshot: missing or resized files, bad offsets, damaged metadata.

    A damaged ``_metadata`` is reported as a problem of kind ``metadata``; a path that is not
    a snapshot at all raises (``NotACheckpointError``, ``PathNotFoundError``).
    """
    try:
        snapshot = load_snapshot(path, storage_options=storage_options, uids=uids, in_place=True)
    except MetadataError as exc:
        return [FlinkProblem("metadata", exc.path or path, str(exc))]
    return list(verify_snapshot(snapshot))


def plan_flink_dispose(path: str, *, storage_options: StorageOptions = None) -> FlinkDisposePlan:
    """What disposing the snapshot at ``path`` would delete and keep (deletes nothing).

    Raises:
        NotACheckpointError: ``path`` is not a readable Flink snapshot: nothing is planned.
    """
    return plan_dispose(load_snapshot(path, storage_options=storage_options))


def dispose_flink_snapshot(
    path: str, dry_run: bool = False, *, storage_options: StorageOptions = None
) -> FlinkDisposeResult:
    """Delete a snapshot's exclusive files and the shared files no retained checkpoint uses.

    Raises:
        NotACheckpointError: ``path`` is not a readable Flink snapshot: nothing is deleted.
        MetadataError: Its ``_metadata`` is damaged: nothing is deleted.
    """
    snapshot = load_snapshot(path, storage_options=storage_options)
    return execute_dispose(snapshot, plan_dispose(snapshot), dry_run=dry_run)
