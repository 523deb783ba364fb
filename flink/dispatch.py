"""The CLI's one seam to the snapshot readers: statekit or Apache Flink, chosen by magic bytes.

``list``, ``inspect``, ``verify``, ``dispose`` and ``keygroup`` reach the readers only
through this module, and ``diff`` asks :func:`diff_flink` first. Each function returns a
typed result (a union naming both engines' result types); ``statekit.cli.render`` holds
the renderer of every one of them.

A path is a *Flink snapshot* when the ``_metadata`` it names starts with Flink's magic
number ``0x4960672d``: the file itself, a snapshot directory holding it, or (inspect and
verify only, as for statekit snapshots) a job directory whose latest complete ``chk-N``
holds it. Everything else goes to the statekit readers unchanged. ``dispose`` never
resolves a job directory: it deletes only what the path names.

Listing a directory lists statekit snapshots as before; when Flink snapshots are among
them (or only Flink snapshots are there), the result is a :class:`SnapshotList` whose rows
say which engine wrote each snapshot.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from statekit.flink.key_group_lookup import (
    DEFAULT_MAX_PARALLELISM,
    KEY_TYPES,
    KeyGroupLookup,
    flink_key_group,
    statekit_key_group,
    with_owning_subtask,
)
from statekit.flink.offline_results import (
    FlinkDisposal,
    FlinkInspection,
    FlinkVerifyReport,
    SnapshotList,
    SnapshotListing,
)
from statekit.flink.snapshot_kind import FLINK_MAGIC, flink_snapshot_path, read_head
from statekit.readers.progress import Advance as Progress
from statekit.statefmt import layout
from statekit.statefmt.errors import BadInputError, NotACheckpointError, StatekitError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.keygroups import check_parallelism, compute_default_max_parallelism

if TYPE_CHECKING:
    from statekit.flink.rewrite import OperatorRegroup
    from statekit.flink.rewrite_report import FlinkModifyReport, FlinkRescaleReport
    from statekit.readers.diff import SavepointDiff
    from statekit.readers.inspection import SnapshotInspection
    from statekit.readers.listing import CheckpointList
    from statekit.readers.progress import ProgressFactory
    from statekit.readers.verification import VerifyReport
    from statekit.writers.disposal import DisposalPlan, RunningJobProbe
    from statekit.writers.rescale import RescaleReport
    from statekit.writers.savepoint_modification import ModifyReport

__all__ = [
    "KEY_TYPES",
    "list_any",
    "inspect_any",
    "verify_any",
    "dispose_any",
    "diff_flink",
    "lookup_key_group",
    "rescale_any",
    "modify_any",
    "KeyGroupLookup",
]



# ----------------------------------------------------------------------------- detection








# ----------------------------------------------------------------------------- listing






def _flink_rows(url: str) -> list[SnapshotListing]:
    from statekit.flink import list_flink_checkpoints

    try:
        return [SnapshotListing.from_flink(e) for e in list_flink_checkpoints(url)]
    except StatekitError:
        return []


def _is_flink_dir(url: str) -> bool:
    """True when the directory's ``_metadata`` starts with Flink's magic number."""
    io, path = FileIO.for_path(url)
    try:
        return read_head(io, posixpath.join(path, layout.METADATA_FILE), 4) == FLINK_MAGIC
    except (OSError, StatekitError):
        return False


def list_any(url: str) -> CheckpointList | SnapshotList:
    """Checkpoints and savepoints under ``url``: statekit's listing, with Flink rows filled in.

    Returns:
        The statekit ``CheckpointList`` when no Flink snapshot is there, else a
        :class:`SnapshotList`.
    """
    from statekit.readers.listing import list_checkpoints

    try:
        native = list_checkpoints(url)
    except NotACheckpointError as exc:
        rows = _flink_rows(url)
        if not rows:
            raise exc
        io, path = FileIO.for_path(url)
        return SnapshotList(io.url(path), rows)
    if not any(row.status == "flink" for row in native.listings):
        return native
    flink = {row.path: row for row in _flink_rows(url)}
    native_paths = {row.path for row in native.listings}
    merged: list[SnapshotListing] = []
    for row in native.listings:
        if row.status != "flink":
            merged.append(SnapshotListing.from_statekit(row))
        elif row.path in flink:
            merged.append(flink[row.path])
        else:  # below the depth the Flink listing scans: list the snapshot itself
            merged += _flink_rows(row.path)
    merged += [row for path, row in flink.items()
               if path not in native_paths and (row.status != "damaged" or _is_flink_dir(path))]
    merged = _with_incomplete_engines(merged)
    merged.sort(key=lambda r: (r.job_id, r.kind, r.checkpoint_id or -1, r.path))
    return SnapshotList(native.path, merged)


def _with_incomplete_engines(rows: list[SnapshotListing]) -> list[SnapshotListing]:
    """Incomplete rows (no ``_metadata``) take the engine of their complete siblings.

    A staging folder (``.<name>.inprogress-<hex>``) is statekit's whatever its siblings are.
    """
    from statekit.readers.inventory import is_in_progress_dir

    engines: dict[str, set[str]] = {}
    for row in rows:
        if row.status != "incomplete":
            engines.setdefault(posixpath.dirname(row.path), set()).add(row.engine)
    out = []
    for row in rows:
        if row.status == "incomplete" and not is_in_progress_dir(posixpath.basename(row.path)):
            found = engines.get(posixpath.dirname(row.path), set())
            row = replace(row, engine=next(iter(found)) if len(found) == 1 else "unknown")
        out.append(row)
    return out


# ----------------------------------------------------------------------------- inspect








def _no_uids(uids: tuple[str, ...], url: str) -> None:
    if uids:
        raise BadInputError("--uid labels the operators of Apache Flink snapshots; statekit snapshots "
                            "record their uids", path=url)


def inspect_any(url: str, *, skew: bool = True, uids: tuple[str, ...] = (),
                compiled_plan: str | None = None) -> SnapshotInspection | FlinkInspection:
    """Inspect a statekit or Flink snapshot.

    Args:
        url: Snapshot directory, ``_metadata`` file or job directory.
        skew: statekit: compute the key-group skew view. Flink: read the keyed state names
            from the state streams (``False`` reads nothing but ``_metadata``).
        uids: Flink only: operator uids to label operators with (``--uid``).
        compiled_plan: Flink SQL only: the job's compiled plan (``--compiled-plan``).
    """
    flink = flink_snapshot_path(url)
    if flink is not None:
        from statekit.flink import inspect_flink_snapshot

        return FlinkInspection(inspect_flink_snapshot(flink, read_state_meta=skew, uids=uids,
                                                      compiled_plan=compiled_plan))
    _no_uids(uids, url)
    if compiled_plan is not None:
        raise BadInputError("--compiled-plan names the nodes of an Apache Flink SQL snapshot", path=url)
    from statekit.readers.inspection import inspect_snapshot

    return inspect_snapshot(url, skew=skew)


# ----------------------------------------------------------------------------- verify




def _verify_flink(url: str, on_file: Progress | None, uids: tuple[str, ...]) -> FlinkVerifyReport:
    from statekit.flink.storage import load_snapshot, moved_note, referenced_files
    from statekit.flink.verify import moved_hint, rocksdb_stores, verify_snapshot

    snapshot = load_snapshot(url, uids=uids, in_place=True)
    report = FlinkVerifyReport(snapshot.path, snapshot.metadata_path, snapshot.checkpoint_id,
                               moved=moved_note(snapshot))
    report.problems = verify_snapshot(snapshot)
    report.rocksdb_stores = len(rocksdb_stores(snapshot))
    report.hint = moved_hint(snapshot, report.problems)
    seen: set[object] = set()
    for ref in referenced_files(snapshot):
        key = ref.key or ref.location
        if key in seen:
            continue
        seen.add(key)
        report.files += 1
        report.bytes += ref.size
        if on_file is not None:
            on_file(ref.url, ref.size)
    report.inline_bytes = sum(
        h.size for _, _, _, h in snapshot.metadata.stream_handles() if h.is_inline)
    return report


def verify_any(url: str, *, on_file: Progress | None = None,
               uids: tuple[str, ...] = ()) -> VerifyReport | FlinkVerifyReport:
    """Verify a statekit snapshot (every checksum) or a Flink one (every file and size).

    Args:
        url: Snapshot directory, ``_metadata`` file or job directory.
        on_file: Called with each file checked and its size.
        uids: Flink only: operator uids to label operators with in the problems (``--uid``).

    Returns:
        statekit's report, or :class:`FlinkVerifyReport`; both say ``ok``.

    Raises:
        MetadataError: A damaged ``_metadata`` (bad input, exit 2), naming the byte offset.
    """
    flink = flink_snapshot_path(url)
    if flink is not None:
        return _verify_flink(flink, on_file, uids)
    _no_uids(uids, url)
    from statekit.readers.verification import verify_snapshot

    return verify_snapshot(url, on_file=on_file)


# ----------------------------------------------------------------------------- dispose




def dispose_any(url: str, *, dry_run: bool = False, force: bool = False,
                running: RunningJobProbe | None = None) -> DisposalPlan | FlinkDisposal:
    """Dispose of a statekit or Flink snapshot (only the directory or ``_metadata`` named).

    Nothing is opened before the path is checked: a snapshot path that is itself a
    symbolic link, or a ``_metadata`` that is one, is refused first.

    Args:
        url: A snapshot directory, its ``_metadata``, or a statekit staging folder.
        dry_run: Only report what would be deleted: exactly what a real run deletes.
        force: Dispose a statekit staging folder (``.<name>.inprogress-<hex>``) even though it
            changed within the last 10 minutes, or a checkpoint of a running statekit job
            (keeping its shared files); Flink snapshots are never staged.
        running: Who runs a statekit job (``(job id, job directory)``), besides its lock file.

    Raises:
        BadInputError: A symbolic link, or a file the snapshot cannot account for: nothing
            is deleted.
        StatekitError: A deletion failed part-way (the message names it and what is left).
    """
    from statekit.readers.inventory import refuse_linked_path

    io, path = FileIO.for_path(url)
    refuse_linked_path(io, path)
    refuse_linked_path(io, posixpath.join(path, layout.METADATA_FILE))
    flink = flink_snapshot_path(url, allow_job_dir=False)
    if flink is None:
        from statekit.writers.disposal import dispose_snapshot

        return dispose_snapshot(url, dry_run=dry_run, force=force, running=running)
    from statekit.flink import dispose_flink_snapshot

    result = dispose_flink_snapshot(flink, dry_run)
    if result.failed:
        where, reason = result.failed[0]
        done = len(result.deleted)
        if done == 0:
            raise StatekitError(f"dispose failed, nothing deleted: {where}: {reason}", path=result.plan.snapshot)
        raise StatekitError(
            f"dispose incomplete: deleted {done} file(s), then {where}: {reason}; _metadata went first, "
            "so nothing restores from what is left: delete the rest by hand",
            path=result.plan.snapshot,
        )
    return FlinkDisposal(result)


# ----------------------------------------------------------------------------- diff


def diff_flink(a: str, b: str, *, operator: str | None = None, state: str | None = None, keys: bool = False,
               limit: int = 20, output: str | None = None, engine: str = "local", uids: tuple[str, ...] = (),
               value_types: dict[str, str] | None = None) -> SavepointDiff | None:
    """Diff two Apache Flink snapshots, or ``None`` when neither is one (statekit's diff runs then).

    Raises:
        BadInputError: Only one side is a Flink snapshot; Flink options (``--uid``,
            ``--value-type``) for statekit snapshots; ``-o`` or ``--engine spark`` for Flink ones.
    """
    flink_a, flink_b = flink_snapshot_path(a), flink_snapshot_path(b)
    if flink_a is None and flink_b is None:
        if uids or value_types:
            raise BadInputError("--uid and --value-type apply to Apache Flink snapshots", path=a)
        return None
    if flink_a is None or flink_b is None:
        raise BadInputError("one snapshot is Apache Flink's and the other statekit's: diff compares two of a kind",
                            path=a if flink_a is None else b)
    if output is not None or engine != "local":
        raise BadInputError("a diff of Flink snapshots runs on the local engine and lists differences with "
                            "--keys; -o and --engine spark apply to statekit snapshots", path=a)
    from statekit.flink.diff import FlinkDiffRequest, diff_flink_snapshots

    request = FlinkDiffRequest(operator, state, keys, limit, value_types)
    return diff_flink_snapshots(flink_a, flink_b, request, uids=uids)


# ----------------------------------------------------------------------------- keygroup


def lookup_key_group(
    key: str,
    *,
    key_type: str = "string",
    flink: bool = False,
    max_parallelism: int | None = None,
    parallelism: int | None = None,
    key_serializer: str = "msgpack",
) -> KeyGroupLookup:
    """The key group of ``key`` in statekit or Flink and, with ``parallelism``, the subtask that owns it.

    Args:
        key: The key as text.
        key_type: How to read ``key``: one of :data:`KEY_TYPES`.
        flink: Compute Flink's key group (Java ``hashCode`` of a ``key_type`` object)
            instead of statekit's (murmur3_32 of the key serialized by ``key_serializer``).
        max_parallelism: Number of key groups; default Flink's default for
            ``parallelism`` (at least 128), or 128.
        parallelism: Also compute the owning subtask at this parallelism.
        key_serializer: statekit only: the serializer of the operator's keys.

    Raises:
        BadInputError: Unreadable key, unknown key type or serializer, bad parallelism.
        SerializationError: The serializer cannot encode the key.

    Example:
        >>> lookup_key_group("42", key_type="int", flink=True).key_group
        29
    """
    if max_parallelism is None:
        max_parallelism = (compute_default_max_parallelism(parallelism) if parallelism
                           else DEFAULT_MAX_PARALLELISM)
    check_parallelism(parallelism if parallelism is not None else 1, max_parallelism)
    lookup = (flink_key_group(key, key_type, max_parallelism) if flink
              else statekit_key_group(key, key_type, max_parallelism, key_serializer))
    return lookup if parallelism is None else with_owning_subtask(lookup, parallelism)


# ----------------------------------------------------------------------------- rescale, modify


def rescale_any(path: str, output: str | None, *, parallelism: int | None = None,
                operator_parallelism: Mapping[str, int] | None = None, max_parallelism: int | None = None,
                dry_run: bool = False, spill_dir: str | None = None, memory_budget: int = 96 << 20,
                progress: ProgressFactory | None = None, exact_plan: bool = False,
                flink_regroup: OperatorRegroup | None = None,
                execution: str = "local") -> RescaleReport | FlinkRescaleReport:
    """Rescale a statekit savepoint, or change the max parallelism of a canonical Flink savepoint.

    ``flink_regroup`` runs a Flink rescale's regrouping elsewhere (``statekit.spark.engine``
    passes the Spark one; ``execution`` names it in the report); ``exact_plan`` makes a Flink
    dry run read and hash every key.

    A Flink savepoint keeps its parallelism: Flink redistributes its keyed and operator state
    when a job restores it at another one, so ``-p``/``--operator`` are refused for it.

    Raises:
        BadInputError: ``-p``/``--operator`` or no ``--max-parallelism`` for a Flink savepoint,
            and everything :func:`statekit.writers.rescale.rescale_savepoint` or
            :func:`statekit.flink.rewrite.rescale_flink_savepoint` refuses.
    """
    flink = flink_snapshot_path(path, allow_job_dir=False)
    if flink is None:
        from statekit.writers.rescale import rescale_savepoint

        return rescale_savepoint(path, output, parallelism=parallelism, operator_parallelism=operator_parallelism,
                                 max_parallelism=max_parallelism, dry_run=dry_run, spill_dir=spill_dir,
                                 memory_budget=memory_budget, progress=progress)
    if parallelism is not None or operator_parallelism:
        raise BadInputError("-p/--operator: Flink redistributes keyed and operator state itself when a job restores a "
                            "savepoint at another parallelism (up to its max parallelism); rescale of a Flink "
                            "savepoint changes --max-parallelism only", path=path)
    if max_parallelism is None:
        raise BadInputError("give --max-parallelism M: the new number of key groups of the Flink savepoint", path=path)
    from statekit.flink.rewrite import rescale_flink_savepoint

    return rescale_flink_savepoint(flink, output, max_parallelism=max_parallelism, dry_run=dry_run,
                                   exact_plan=exact_plan, spill_dir=spill_dir, memory_budget=memory_budget,
                                   progress=progress, regroup=flink_regroup, execution=execution)


def modify_any(path: str, output: str | None, *, remove_operators: tuple[str, ...] = (),
               rename_uids: tuple[tuple[str, str], ...] = (), remove_states: tuple[tuple[str, str], ...] = (),
               dry_run: bool = False, progress: ProgressFactory | None = None) -> ModifyReport | FlinkModifyReport:
    """Remove operators (or states) and rename uids of a statekit or Flink savepoint.

    Raises:
        BadInputError: ``--remove-state`` for a Flink savepoint, and everything
            :func:`statekit.writers.savepoint_modification.modify_savepoint` or
            :func:`statekit.flink.rewrite.modify_flink_savepoint` refuses.
    """
    flink = flink_snapshot_path(path, allow_job_dir=False)
    if flink is None:
        from statekit.writers.savepoint_modification import modify_savepoint

        return modify_savepoint(path, output, remove_operators=remove_operators, rename_uids=rename_uids,
                                remove_states=remove_states, dry_run=dry_run, progress=progress)
    if remove_states:
        raise BadInputError("--remove-state: a Flink savepoint's keyed states share one stream per subtask, which "
                            "modify does not rewrite; remove the whole operator, or drop the state in the job "
                            "(Flink ignores state no descriptor asks for)", path=path)
    from statekit.flink.rewrite import modify_flink_savepoint

    return modify_flink_savepoint(flink, output, remove_operators=remove_operators, rename_uids=rename_uids,
                                  dry_run=dry_run, progress=progress)
