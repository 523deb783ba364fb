"""Will it restore? A snapshot compared with a job, per operator uid and per state.

The comparison (Flink's restore rules, checked ahead of time):

* operators: a snapshot uid with state that the job lacks is *dropped* (refused unless
  ``allow_non_restored_state``); a job uid the snapshot lacks is *new* (starts empty);
* keyed operators: the key serializer may not change; the max parallelism (key-group count)
  may not change (offline: ``statekit rescale --max-parallelism``), and the new parallelism
  may not exceed it; a new parallelism redistributes key groups;
* states: a state the job declares and the snapshot lacks is *new*; a snapshot state the job
  does not declare (when it starts) is *undeclared*: restored and carried into later
  snapshots unchanged; a declared state keeps its kind and serializers, and its declared
  value type may change only as ``statekit.statefmt.type_evolution`` allows (migrated on
  restore when needed); a map key type may not change; a TTL change is reported;
* operator state is redistributed by its mode when the parallelism changes.

:func:`check_job_file` is ``statekit check``; :func:`check_before_restore` runs the same
comparison in the job master before a restore, so an incompatible restore fails before any
task starts with the same lines.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from statekit.runtime.checkpoint.restore import missing_operator_message
from statekit.runtime.jobmaster.state_probe import DeclaredOperator, declared_states
from statekit.statefmt.errors import BadInputError, IncompatibleStateError
from statekit.statefmt.json_contract import JsonShape
from statekit.statefmt.metadata import CheckpointMetadata, OperatorMetadata, StateDescriptor, StateKind
from statekit.statefmt.type_evolution import SchemaCompatibility, TypeChange, resolve_declared_types

if TYPE_CHECKING:
    from statekit.runtime.checkpoint.restore import RestorePlan
    from statekit.runtime.dataflow.environment import StreamEnvironment
    from statekit.runtime.dataflow.run_options import RunOptions

__all__ = [
    "OperatorMapping",
    "StateStatus",
    "OperatorVerdict",
    "StateVerdict",
    "StateMigration",
    "CompatibilityReport",
    "compare",
    "check_any",
    "check_job_file",
    "check_flink_uids",
    "check_before_restore",
]


class OperatorMapping(enum.Enum):
    MAPPED = "mapped"
    NEW = "new"
    DROPPED = "dropped"


class StateStatus(enum.Enum):
    SAME = "same"
    NEW = "new"
    UNDECLARED = "undeclared"
    DROPPED = "dropped"
    MIGRATED = "migrated"
    INCOMPATIBLE = "incompatible"


@dataclass(frozen=True)
class OperatorVerdict:
    """One operator uid: where it is, its parallelism before/after, what a restore does to it."""

    uid: str
    mapping: OperatorMapping
    old_parallelism: int | None
    new_parallelism: int | None
    max_parallelism: int | None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class StateVerdict:
    """One state of one uid: snapshot and job descriptors and the outcome."""

    json_shape: ClassVar[JsonShape] = JsonShape(omit=("old", "new"),
                                                extra=("old_kind", "new_kind", "old_type", "new_type"))

    uid: str
    state: str
    status: StateStatus
    old: StateDescriptor | None
    new: StateDescriptor | None
    type_compatibility: SchemaCompatibility | None = None
    changes: tuple[str, ...] = ()

    @property
    def old_kind(self) -> str | None:
        return self.old.kind.value if self.old else None

    @property
    def new_kind(self) -> str | None:
        return self.new.kind.value if self.new else None

    @property
    def old_type(self) -> str | None:
        return self.old.value_type if self.old else None

    @property
    def new_type(self) -> str | None:
        return self.new.value_type if self.new else None


@dataclass(frozen=True)
class StateMigration:
    """A state whose values migrate on restore from ``old.value_type`` to ``new.value_type``."""

    uid: str
    old: StateDescriptor
    new: StateDescriptor


@dataclass(frozen=True)
class CompatibilityReport:
    """``statekit check``'s result: compatible when ``reasons`` is empty."""

    json_shape: ClassVar[JsonShape] = JsonShape(omit=("migrations",), extra=("compatible",))

    snapshot: str
    job: str
    operators: tuple[OperatorVerdict, ...]
    states: tuple[StateVerdict, ...]
    reasons: tuple[str, ...]
    migrations: tuple[StateMigration, ...] = ()

    @property
    def compatible(self) -> bool:
        return not self.reasons

    def migration_map(self) -> dict[tuple[str, str], StateDescriptor]:
        """(uid, state) -> the job's descriptor, for every state migrated on restore."""
        return {(m.uid, m.old.name): m.new for m in self.migrations}

    def raise_if_incompatible(self) -> None:
        """Raises IncompatibleStateError: one line per reason."""
        if self.reasons:
            raise IncompatibleStateError("\n".join(self.reasons))


@dataclass
class _Comparison:
    path: str
    allow_non_restored_state: bool
    operators: list[OperatorVerdict] = field(default_factory=list)
    states: list[StateVerdict] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    migrations: list[StateMigration] = field(default_factory=list)


def compare(metadata: CheckpointMetadata, path: str, job: list[DeclaredOperator], *, job_path: str = "",
            allow_non_restored_state: bool = False) -> CompatibilityReport:
    """Compare the snapshot ``metadata`` (at ``path``) with the operators of a job."""
    c = _Comparison(path, allow_non_restored_state)
    by_uid = {op.uid: op for op in job}
    for op in metadata.operators:
        declared = by_uid.get(op.uid)
        if declared is None:
            _dropped(c, op)
        else:
            _mapped(c, op, declared)
    known = {op.uid for op in metadata.operators}
    for declared in job:
        if declared.uid not in known:
            note = "not in the snapshot: starts without state" if declared.states else "stateless"
            c.operators.append(OperatorVerdict(declared.uid, OperatorMapping.NEW, None, declared.parallelism,
                                               declared.max_parallelism, (note,)))
            c.states.extend(StateVerdict(declared.uid, d.name, StateStatus.NEW, None, d) for d in declared.states)
    return CompatibilityReport(path, job_path, tuple(c.operators), tuple(c.states), tuple(c.reasons),
                               tuple(c.migrations))


def _dropped(c: _Comparison, op: OperatorMetadata) -> None:
    notes: tuple[str, ...] = ("stateless",)
    if op.states:
        notes = ()
        if c.allow_non_restored_state:
            notes = ("its state is skipped (--allow-non-restored-state)",)
        else:
            c.reasons.append(missing_operator_message(c.path, op.uid))
    c.operators.append(OperatorVerdict(op.uid, OperatorMapping.DROPPED, op.parallelism, None,
                                       op.max_parallelism, notes))
    c.states.extend(StateVerdict(op.uid, d.name, StateStatus.DROPPED, d, None) for d in op.states)


def _mapped(c: _Comparison, op: OperatorMetadata, job: DeclaredOperator) -> None:
    max_parallelism = _check_keys(c, op, job)
    notes = list(_redistribution(op, job, max_parallelism))
    c.operators.append(OperatorVerdict(op.uid, OperatorMapping.MAPPED, op.parallelism, job.parallelism,
                                       max_parallelism, tuple(notes)))
    native = any(st.native is not None for st in op.subtasks)
    for old in op.states:
        c.states.append(_state(c, op.uid, old, job.state(old.name), native=native and old.keyed))
    names = {d.name for d in op.states}
    c.states.extend(StateVerdict(op.uid, d.name, StateStatus.NEW, None, d) for d in job.states if d.name not in names)


def _check_keys(c: _Comparison, op: OperatorMetadata, job: DeclaredOperator) -> int:
    """The max parallelism the operator restores with; reasons for key changes."""
    if not op.keyed:
        return job.max_parallelism
    keyed = next(d for d in op.states if d.keyed)
    if not job.keyed:
        c.reasons.append(f"operator {op.uid!r} has keyed state {keyed.name!r} in the snapshot but is not keyed "
                         "in the job; key the stream (key_by) or drop the state offline")
    elif op.key_serializer is not None and job.key_serializer != op.key_serializer:
        c.reasons.append(f"operator {op.uid!r}: key serializer changed from {op.key_serializer!r} to "
                         f"{job.key_serializer!r}; keys written by one cannot be found by the other")
    restored = op.max_parallelism
    if job.explicit_max_parallelism and job.max_parallelism != restored:
        c.reasons.append(
            f"operator {op.uid!r}: max parallelism {job.max_parallelism} differs from {restored}, the max "
            f"parallelism its keyed state in {c.path} was written with; keep {restored} or change it offline "
            "with `statekit rescale --max-parallelism`")
    elif job.parallelism > restored:
        c.reasons.append(
            f"operator {op.uid!r}: parallelism {job.parallelism} exceeds max parallelism {restored} of its keyed "
            f"state in {c.path}; lower -p or raise the key-group count offline with "
            f"`statekit rescale --max-parallelism M` (M >= {job.parallelism})")
    return restored


def _redistribution(op: OperatorMetadata, job: DeclaredOperator, max_parallelism: int) -> list[str]:
    if op.parallelism == job.parallelism:
        return []
    notes = [f"rescale {op.parallelism} -> {job.parallelism}"]
    if op.keyed:
        notes.append(f"keyed state: {max_parallelism} key groups redistributed by key-group ranges")
    for d in op.states:
        if d.kind is StateKind.OPERATOR_LIST:
            notes.append(f"{d.name}: list state elements split evenly over {job.parallelism} subtasks")
        elif d.kind is StateKind.UNION:
            notes.append(f"{d.name}: union list state, every subtask gets all elements")
        elif d.kind is StateKind.BROADCAST:
            notes.append(f"{d.name}: broadcast state, every subtask gets a copy")
    return notes


def _state(c: _Comparison, uid: str, old: StateDescriptor, new: StateDescriptor | None, *,
           native: bool = False) -> StateVerdict:
    if new is None:
        return StateVerdict(uid, old.name, StateStatus.UNDECLARED, old, None,
                            changes=("not declared when the job starts: restored and kept unchanged",))
    where = f"state {uid}/{old.name}"
    change = resolve_declared_types(old.value_type, new.value_type)
    reasons = _layout_reasons(where, old, new) + _type_reasons(where, change, native)
    changes = _changes(old, new, change.compatibility)
    if reasons:
        c.reasons.extend(reasons)
        return StateVerdict(uid, old.name, StateStatus.INCOMPATIBLE, old, new, change.compatibility,
                            changes + tuple(reasons))
    if change.needs_migration:
        c.migrations.append(StateMigration(uid, old, new))
        return StateVerdict(uid, old.name, StateStatus.MIGRATED, old, new, change.compatibility, changes)
    return StateVerdict(uid, old.name, StateStatus.SAME, old, new, change.compatibility, changes)


def _layout_reasons(where: str, old: StateDescriptor, new: StateDescriptor) -> list[str]:
    """Why the stored bytes of ``old`` cannot be read as ``new``: kind, serializers, map key type."""
    reasons = []
    if old.kind is not new.kind:
        reasons.append(f"{where}: kind changed from {old.kind.value} to {new.kind.value}")
    if old.value_serializer != new.value_serializer:
        reasons.append(f"{where}: value serializer changed from {old.value_serializer!r} to {new.value_serializer!r}")
    if old.user_key_serializer and new.user_key_serializer and old.user_key_serializer != new.user_key_serializer:
        reasons.append(f"{where}: map key serializer changed from {old.user_key_serializer!r} to "
                       f"{new.user_key_serializer!r}")
    if old.namespace_type != new.namespace_type:
        reasons.append(f"{where}: namespace type changed from {old.namespace_type or 'none'} to "
                       f"{new.namespace_type or 'none'}; a state's namespace cannot change")
    key_change = resolve_declared_types(old.user_key_type, new.user_key_type) if new.kind.has_user_key else None
    if key_change is not None and key_change.compatibility is not SchemaCompatibility.COMPATIBLE_AS_IS:
        reasons.append(f"{where}: map key type changed from {key_change.old} to {key_change.new}; keys cannot "
                       "change type")
    return reasons


def _type_reasons(where: str, change: TypeChange, native: bool) -> list[str]:
    """Why the declared value type cannot change as ``change`` says (``native``: RocksDB state)."""
    if not change.compatible:
        return [f"{where}: declared type changed from {change.old} to {change.new}, which is incompatible "
                f"({change.reason})"]
    if change.needs_migration and native:
        return [f"{where}: declared type {change.old} -> {change.new} needs a migration, which native keyed "
                "state (a RocksDB checkpoint) does not get on restore; restore from a canonical savepoint "
                "of the job, or migrate one offline with `statekit migrate`"]
    return []


def _changes(old: StateDescriptor, new: StateDescriptor, compatibility: SchemaCompatibility) -> tuple[str, ...]:
    changes = []
    if (old.value_type or "json") != (new.value_type or "json") and compatibility is not SchemaCompatibility.INCOMPATIBLE:
        changes.append(f"declared type {old.value_type or 'json'} -> {new.value_type or 'json'}: "
                       f"{compatibility.value}")
    if old.ttl_ms != new.ttl_ms:
        changes.append(f"TTL {_ttl(old.ttl_ms)} -> {_ttl(new.ttl_ms)} (expiry is stored per entry: entries "
                       "restored keep theirs)")
    return tuple(changes)


def _ttl(ttl_ms: int | None) -> str:
    return "none" if ttl_ms is None else f"{ttl_ms} ms"


def check_job_file(snapshot_path: str, job_path: str, options: RunOptions) -> CompatibilityReport:
    """``statekit check``: capture the job of ``job_path`` (not run) and compare it with the snapshot.

    Raises:
        StatekitError: The snapshot or the job cannot be opened (bad input).
    """
    from statekit.readers.snapshot import open_snapshot
    from statekit.runtime.dataflow.job_capture import capture_job_file, resolve_graph

    snapshot = open_snapshot(snapshot_path)
    captured = capture_job_file(job_path, options)
    job = declared_states(resolve_graph(captured.env, options))
    return compare(snapshot.metadata, snapshot.url, job, job_path=job_path,
                   allow_non_restored_state=options.allow_non_restored_state)


def check_any(snapshot_path: str, job_path: str | None, options: RunOptions, uids: tuple[str, ...] = ()) -> CompatibilityReport:
    """``statekit check``: a statekit snapshot against a job script, or an Apache Flink snapshot
    against the uids of the new Flink job.

    Raises:
        BadInputError: A statekit snapshot without a job script, a Flink snapshot with one.
    """
    from statekit.flink.snapshot_kind import flink_snapshot_path

    if flink_snapshot_path(snapshot_path) is not None:
        if job_path is not None:
            raise BadInputError("an Apache Flink snapshot is checked against the uids of the new Flink job "
                                "(--uid, repeatable), not a statekit JOB.py", path=snapshot_path)
        return check_flink_uids(snapshot_path, uids, parallelism=options.parallelism,
                                allow_non_restored_state=options.allow_non_restored_state)
    if job_path is None:
        raise BadInputError("give the job script (JOB.py) to check this snapshot against", path=snapshot_path)
    if uids:
        raise BadInputError("--uid labels the operators of an Apache Flink snapshot; this is a statekit snapshot: "
                            "the job script gives the uids", path=snapshot_path)
    return check_job_file(snapshot_path, job_path, options)


def check_flink_uids(snapshot_path: str, uids: tuple[str, ...], *, parallelism: int | None = None,
                     allow_non_restored_state: bool = False) -> CompatibilityReport:
    """The part of ``statekit check`` an Apache Flink snapshot allows: its operators against the
    uids of the new Flink job (Flink's operator id is the hash of a uid, ``statekit.flink.uids``).

    An operator with state whose id is no given uid's hash is *dropped* (refused unless
    ``allow_non_restored_state``, Flink's message naming its id); a uid that names no operator
    is *new*; ``parallelism`` above a mapped operator's max parallelism is refused. States
    are not compared: a Flink job's state descriptors are not known offline.

    Raises:
        BadInputError: No uid given.
        StatekitError: The snapshot cannot be opened.
    """
    from statekit.flink.snapshot import open_flink_snapshot
    from statekit.flink.uids import operator_id_for_uid

    if not uids:
        raise BadInputError("give the uids of the new Flink job (--uid, repeatable) to check a Flink snapshot",
                            path=snapshot_path)
    snapshot = open_flink_snapshot(snapshot_path)
    by_id = {operator_id_for_uid(uid): uid for uid in uids}
    c = _Comparison(snapshot.path, allow_non_restored_state)
    for op in snapshot.metadata.operators:
        uid = by_id.get(op.operator_id)
        stateful = any(True for _ in op.stream_handles())
        if uid is None:
            _flink_dropped(c, op.label, op.parallelism, op.max_parallelism, stateful)
            continue
        new = parallelism or op.parallelism
        notes: list[str] = [] if new == op.parallelism else [f"rescale {op.parallelism} -> {new}"]
        if stateful and new > op.max_parallelism:
            c.reasons.append(f"operator {uid!r}: parallelism {new} exceeds max parallelism {op.max_parallelism} of "
                             f"its state in {snapshot.path}; lower -p or change the max parallelism offline")
        c.operators.append(OperatorVerdict(uid, OperatorMapping.MAPPED, op.parallelism, new, op.max_parallelism,
                                           tuple(notes)))
    known = {op.operator_id for op in snapshot.metadata.operators}
    for operator_id, uid in by_id.items():
        if operator_id not in known:
            c.operators.append(OperatorVerdict(uid, OperatorMapping.NEW, None, parallelism, None,
                                               ("not in the snapshot: starts without state",)))
    return CompatibilityReport(snapshot.path, "--uid " + " ".join(uids), tuple(c.operators), (), tuple(c.reasons))


def _flink_dropped(c: _Comparison, label: str, parallelism: int, max_parallelism: int, stateful: bool) -> None:
    notes: tuple[str, ...] = ("stateless",) if not stateful else ()
    if stateful:
        if c.allow_non_restored_state:
            notes = ("its state is skipped (--allow-non-restored-state)",)
        else:
            c.reasons.append(missing_operator_message(c.path, label))
    c.operators.append(OperatorVerdict(label, OperatorMapping.DROPPED, parallelism, None, max_parallelism, notes))


def check_before_restore(env: StreamEnvironment, options: RunOptions, plan: RestorePlan) -> CompatibilityReport:
    """The comparison of ``statekit check``, for the job master before it restores ``plan``.

    Raises:
        IncompatibleStateError: One line per reason; no task has started.
    """
    from statekit.runtime.dataflow.job_capture import resolve_graph

    job = declared_states(resolve_graph(env, options))
    report = compare(plan.metadata, plan.path, job, allow_non_restored_state=plan.allow_non_restored_state)
    report.raise_if_incompatible()
    return report
