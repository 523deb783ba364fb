"""Restore: map a snapshot's operators onto a new job and hand each subtask its share.

Rules (Flink's):
    * Every operator uid with state in the snapshot must exist in the job, unless
      ``allow_non_restored_state`` (then its state is skipped).
    * Keyed state is redistributed by key-group ranges: subtask ``i`` of the new
      parallelism reads exactly the key groups of
      ``compute_key_group_range_for_operator_index(M, p, i)`` (M cannot change on restore).
      Native keyed state goes to a backend that reads it natively (the store's files, or at a
      new parallelism the entries of the new key groups); any other backend reads it through
      the canonical view.
    * Operator list state: unchanged parallelism keeps each subtask's list; otherwise all
      elements are split evenly in contiguous parts. Union list state: every subtask gets
      all elements. Broadcast state: every subtask gets a copy.
    * In-flight records of an unaligned checkpoint are replayed into the consumer of their
      channel before any new input: unchanged, each channel's records go to the same
      subtask (those stored by the consumer first, then those its producer stored); at another
      parallelism, records of a keyed exchange go to the subtask owning their key group and
      records of a rebalance exchange are dealt round-robin, while records of a forward or
      broadcast exchange cannot be redistributed and the restore is refused (Flink keeps such
      exchanges aligned instead; statekit stores them and asks for the old parallelism).
"""

from __future__ import annotations

import collections
import logging
import posixpath
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import mmh3

from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.snapshot import Snapshot, open_snapshot
from statekit.statefmt.channel_state import ChannelSection, RecordCodec, decode_channel_state
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.keygroups import KeyGroupRange, compute_key_group_range_for_operator_index
from statekit.statefmt.metadata import CheckpointMetadata, OperatorMetadata, SnapshotKind, StateDescriptor, StateKind
from statekit.statefmt.native_state import NativeKeyedState
from statekit.statefmt.serializers import get_serializer
from statekit.writers.savepoint_writer import split_evenly

__all__ = [
    "RestorePlan",
    "RestoreSpec",
    "SubtaskRestore",
    "NativeRestoreSource",
    "ExchangeEdge",
    "missing_operator_message",
    "InFlight",
]

log = logging.getLogger(__name__)

# (consumer uid, consumer subtask) -> [(input index, records)], replayed in order before new input
InFlight = dict[tuple[str, int], list[tuple[int, list[Any]]]]


def missing_operator_message(path: str, uid: str) -> str:
    """Flink's message for snapshot state whose operator is not in the new job."""
    return (
        f"Failed to rollback to checkpoint/savepoint {path}. Cannot map checkpoint/savepoint state "
        f"for operator {uid} to the new program, because the operator is not available in the new "
        "program. If you want to allow to skip this, you can set the --allow-non-restored-state "
        "option on the CLI."
    )


@dataclass(frozen=True)
class ExchangeEdge:
    """An exchange between two operators of the new job (what in-flight records are replayed into)."""

    producer: str
    consumer: str
    input_index: int
    partitioning: str
    producer_parallelism: int
    consumer_parallelism: int
    consumer_max_parallelism: int
    key_selector: Callable[[Any], Any] | None
    key_serializer: str

    @property
    def key(self) -> tuple[str, str, int]:
        return self.producer, self.consumer, self.input_index


@dataclass(frozen=True)
class NativeRestoreSource:
    """One old subtask's native keyed state that a new subtask restores (some of) its key groups from.

    Attributes:
        io: The snapshot's filesystem.
        resolve: Turns a path of ``_metadata`` into a checked path of ``io``.
        handle: The old subtask's store files.
        old_range: The old subtask's key-group range.
        key_groups: The key groups the new subtask takes from it.
        descriptors: The operator's states by name.
        checkpoint_id: The snapshot's checkpoint id.
        shared_reusable: The snapshot is a checkpoint of this very job: its shared files may be
            referenced by the job's next incremental checkpoint.
        where: The snapshot URL (messages).
    """

    io: FileIO
    resolve: Callable[[str], str]
    handle: NativeKeyedState
    old_range: KeyGroupRange
    key_groups: KeyGroupRange
    descriptors: dict[str, StateDescriptor]
    checkpoint_id: int
    shared_reusable: bool
    where: str


@dataclass(frozen=True)
class RestoreSpec:
    """The snapshot a job restores from, in plain values: what a task's host needs to open it
    itself and take its subtasks' slices (:meth:`RestorePlan.from_spec`).

    Attributes:
        path: The snapshot directory (resolved: a savepoint or ``chk-N``).
        trust_pickle: Pickle-serialized state may be decoded.
        allow_non_restored_state: State of uids the job lacks is skipped.
        own_job_dir: The job directory this job checkpoints into (shared files of a snapshot
            there may be reused).
        migrations: ``(uid, state, the job's descriptor)``: values migrate to its value type.
    """

    path: str
    trust_pickle: bool = False
    allow_non_restored_state: bool = False
    own_job_dir: str | None = None
    migrations: tuple[tuple[str, str, StateDescriptor], ...] = ()


class RestorePlan:
    """An opened snapshot and how its operators map onto the job."""

    def __init__(self, reader: SavepointReader, allow_non_restored_state: bool = False) -> None:
        self.reader = reader
        self.allow_non_restored_state = allow_non_restored_state
        self.own_job_dir: str | None = None
        # (uid, state) -> the job's descriptor: values migrate to its value type on restore
        # (set by statekit.runtime.jobmaster.compatibility before any task starts)
        self.migrations: dict[tuple[str, str], StateDescriptor] = {}
        self._operator_cache: dict[tuple[str, str], list[list[Any]]] = {}
        self._canonical: SavepointReader | None = None
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls, path: str, *, allow_non_restored_state: bool = False, trust_pickle: bool = False,
        storage_options: dict[str, Any] | None = None,
    ) -> RestorePlan:
        """Open ``path`` (savepoint, ``chk-N``, or a job checkpoint dir = its latest complete one)."""
        snapshot = open_snapshot(path, storage_options=storage_options)
        return cls(SavepointReader(snapshot, trust_pickle=trust_pickle), allow_non_restored_state)

    @classmethod
    def from_spec(cls, spec: RestoreSpec, storage_options: dict[str, Any] | None = None) -> RestorePlan:
        """Open the snapshot ``spec`` names, as the plan that made the spec had it."""
        plan = cls.open(spec.path, allow_non_restored_state=spec.allow_non_restored_state,
                        trust_pickle=spec.trust_pickle, storage_options=storage_options)
        plan.own_job_dir = spec.own_job_dir
        plan.migrations = {(uid, state): descriptor for uid, state, descriptor in spec.migrations}
        return plan

    def spec(self) -> RestoreSpec:
        """This plan in plain values (:class:`RestoreSpec`)."""
        return RestoreSpec(self.path, self.reader.trust_pickle, self.allow_non_restored_state, self.own_job_dir,
                           tuple((uid, state, d) for (uid, state), d in sorted(self.migrations.items())))

    @property
    def snapshot(self) -> Snapshot:
        return self.reader.snapshot

    @property
    def path(self) -> str:
        """The snapshot directory restored from."""
        return self.reader.path

    @property
    def metadata(self) -> CheckpointMetadata:
        return self.reader.metadata

    @property
    def checkpoint_id(self) -> int:
        return self.metadata.checkpoint_id

    def shared_reusable(self) -> bool:
        """The snapshot is a checkpoint of the job directory this job checkpoints into."""
        if self.own_job_dir is None or self.metadata.kind is not SnapshotKind.CHECKPOINT:
            return False
        return posixpath.dirname(self.path.rstrip("/")) == self.own_job_dir.rstrip("/")

    def canonical_reader(self) -> SavepointReader:
        """A reader of canonical state files (the canonical view of a native snapshot, built once)."""
        with self._lock:
            if self._canonical is None:
                if any(st.native for op in self.metadata.operators for st in op.subtasks):
                    from statekit.readers.native_view import canonical_view

                    self._canonical = SavepointReader(canonical_view(self.snapshot), trust_pickle=self.reader.trust_pickle)
                else:
                    self._canonical = self.reader
            return self._canonical

    def check_operators(self, job_uids: set[str]) -> None:
        """Fail before the job starts for state it cannot restore.

        Raises:
            BadInputError: Snapshot state whose uid is not in the job (Flink's message),
                unless ``allow_non_restored_state``.
            UntrustedSerializerError: State the job restores is pickle-serialized and the
                snapshot is not trusted (``--trust-pickle``).
        """
        for op in self.metadata.operators:
            if not op.states:
                continue
            if op.uid in job_uids:
                self._check_trusted(op)
                continue
            if not self.allow_non_restored_state:
                raise BadInputError(missing_operator_message(self.path, op.uid))
            log.warning("skipping state of operator %s from %s: it is not in the job", op.uid, self.path)

    def _check_trusted(self, op: OperatorMetadata) -> None:
        trusted = self.reader.trust_pickle
        if op.key_serializer is not None and op.keyed:
            get_serializer(op.key_serializer, trust_pickle=trusted, what=f"the keys of operator {op.uid}",
                           source=self.path)
        for d in op.states:
            for name in (d.value_serializer, d.user_key_serializer, d.namespace_serializer):
                if name is not None:
                    get_serializer(name, trust_pickle=trusted, what=f"state {op.uid}/{d.name}", source=self.path)

    def operator(self, uid: str) -> OperatorMetadata | None:
        """The snapshot's operator ``uid``, if any."""
        return next((op for op in self.metadata.operators if op.uid == uid), None)

    def max_parallelism(self, uid: str) -> int | None:
        """The max parallelism keyed state of ``uid`` was written with (None: no keyed state)."""
        op = self.operator(uid)
        return op.max_parallelism if op is not None and op.keyed else None

    def subtask(self, uid: str, subtask: int, parallelism: int, max_parallelism: int) -> SubtaskRestore | None:
        """What subtask ``subtask`` of ``parallelism`` restores of ``uid`` (None: nothing)."""
        op = self.operator(uid)
        if op is None or not op.states:
            return None
        migrations = {state: new for (owner, state), new in self.migrations.items() if owner == uid}
        return SubtaskRestore(self, op, subtask, parallelism, max_parallelism, migrations)

    def operator_elements(self, uid: str, state: str) -> list[list[Any]]:
        """Per old subtask, the elements of one operator state (read once, cached)."""
        with self._lock:
            key = (uid, state)
            if key not in self._operator_cache:
                self._operator_cache[key] = self.reader.read_operator_state_per_subtask(uid, state)
            return self._operator_cache[key]

    # ------------------------------------------------------------ in-flight records

    def sections(self) -> list[ChannelSection]:
        """Every channel-state section of the snapshot (checked while read)."""
        snapshot = self.snapshot
        found: list[ChannelSection] = []
        for op in self.metadata.operators:
            for st in op.subtasks:
                if st.channel_state is None:
                    continue
                path = snapshot.file_path(st.channel_state.path)
                data = snapshot.io.read_bytes(path, limit=st.channel_state.size)
                found.extend(decode_channel_state(data, path=snapshot.io.url(path)))
        return found

    def inflight(self, edges: list[ExchangeEdge]) -> InFlight:
        """The in-flight records each new consumer subtask replays, redistributed for ``edges``.

        Raises:
            BadInputError: Records on an exchange the job lacks (unless
                ``allow_non_restored_state``), or on a forward/broadcast exchange whose
                parallelism changed.
        """
        by_edge: dict[tuple[str, str, int], list[ChannelSection]] = collections.defaultdict(list)
        for section in self.sections():
            by_edge[section.edge].append(section)
        known = {edge.key: edge for edge in edges}
        replay: InFlight = collections.defaultdict(list)
        for key, sections in sorted(by_edge.items()):
            edge = known.get(key)
            if edge is None:
                self._unknown_edge(key, sections)
                continue
            for subtask, records in _redistribute(self, edge, sections):
                if records:
                    replay[(edge.consumer, subtask)].append((edge.input_index, records))
        return dict(replay)

    def _unknown_edge(self, key: tuple[str, str, int], sections: list[ChannelSection]) -> None:
        count = sum(len(s.records) for s in sections)
        producer, consumer, index = key
        message = (f"{self.path} holds {count} in-flight record(s) on the exchange {producer} -> {consumer} "
                   f"(input {index}), which the job does not have")
        if not self.allow_non_restored_state:
            raise BadInputError(f"{message}; restore the job it was taken from, or pass "
                                "--allow-non-restored-state to drop them")
        log.warning("%s: dropping them (--allow-non-restored-state)", message)

    def codec(self, section: ChannelSection) -> RecordCodec:
        return RecordCodec(section.serializer, trust_pickle=self.reader.trust_pickle, source=self.path)


def _channel_records(plan: RestorePlan, sections: list[ChannelSection]) -> Iterator[tuple[ChannelSection, list[Any]]]:
    """Per old channel, in channel order: the consumer's stored records, then the producer's."""
    ordered = sorted(sections, key=lambda s: (s.producer_subtask, s.consumer_subtask, s.direction != "input"))
    for section in ordered:
        decode = plan.codec(section).decode
        yield section, [decode(r) for r in section.records]


def _redistribute(plan: RestorePlan, edge: ExchangeEdge, sections: list[ChannelSection]) -> Iterator[tuple[int, list[Any]]]:
    """(new consumer subtask, records) for the in-flight records of one exchange."""
    first = sections[0]
    unchanged = all(s.partitioning == edge.partitioning and s.producer_parallelism == edge.producer_parallelism
                    and s.consumer_parallelism == edge.consumer_parallelism for s in sections)
    if unchanged:
        for section, records in _channel_records(plan, sections):
            yield section.consumer_subtask, records
        return
    old = first.partitioning
    if old in ("forward", "broadcast") or edge.partitioning in ("forward", "broadcast"):
        count = sum(len(s.records) for s in sections)
        raise BadInputError(
            f"{plan.path} holds {count} in-flight record(s) on the {old} exchange {edge.producer} -> "
            f"{edge.consumer}, which cannot be redistributed to a new parallelism (the order and the "
            f"per-subtask copies of a {old} exchange would be lost); restore at the old parallelism "
            f"({first.producer_parallelism} -> {first.consumer_parallelism}), or take a savepoint there "
            "(savepoints are always aligned) and rescale from it")
    parallelism = edge.consumer_parallelism
    if edge.partitioning == "hash" and edge.key_selector is not None:
        serialize = get_serializer(edge.key_serializer, for_write=True).serialize
        selector, max_parallelism = edge.key_selector, edge.consumer_max_parallelism
        for _, records in _channel_records(plan, sections):
            routed: dict[int, list[Any]] = collections.defaultdict(list)
            for record in records:
                key_group = mmh3.hash(serialize(selector(record)), 0, False) % max_parallelism
                routed[key_group * parallelism // max_parallelism].append(record)
            yield from sorted(routed.items())
        return
    turn = 0
    for _, records in _channel_records(plan, sections):
        dealt: dict[int, list[Any]] = collections.defaultdict(list)
        for record in records:
            dealt[turn].append(record)
            turn = (turn + 1) % parallelism
        yield from sorted(dealt.items())


class SubtaskRestore:
    """The state one new subtask restores from one snapshot operator."""

    def __init__(self, plan: RestorePlan, op: OperatorMetadata, subtask: int, parallelism: int, max_parallelism: int,
                 migrations: dict[str, StateDescriptor] | None = None) -> None:
        self.plan = plan
        self.migrations = migrations or {}  # state -> the job's descriptor (values migrate to its type)
        self.op = op
        self.subtask = subtask
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism

    @property
    def checkpoint_id(self) -> int:
        return self.plan.checkpoint_id

    @property
    def key_groups(self) -> KeyGroupRange:
        return compute_key_group_range_for_operator_index(self.max_parallelism, self.parallelism, self.subtask)

    def native_sources(self) -> list[NativeRestoreSource] | None:
        """The old subtasks' native keyed state overlapping this subtask's key groups, or None
        when the operator's keyed state is not (all) native."""
        keyed = [d for d in self.op.states if d.keyed]
        if any(d.name in self.migrations for d in keyed):
            return None  # migrated values are decoded, converted and re-encoded
        if not keyed or not all(st.native is not None and all(st.native.state_id(d.name) is not None for d in keyed)
                                for st in self.op.subtasks):
            return None
        snapshot = self.plan.snapshot
        wanted = self.key_groups
        descriptors = {d.name: d for d in self.op.states}
        sources = []
        for st in self.op.subtasks:
            overlap = st.key_group_range.intersection(wanted)
            if len(overlap) and st.native is not None:
                sources.append(NativeRestoreSource(
                    snapshot.io, snapshot.file_path, st.native, st.key_group_range, overlap, descriptors,
                    self.plan.checkpoint_id, self.plan.shared_reusable(), self.plan.path,
                ))
        return sources

    def keyed_states(self) -> Iterator[tuple[StateDescriptor, Iterator[Any]]]:
        """(descriptor, decoded entries of this subtask's key groups) per keyed state."""
        key_groups = self.key_groups
        reader = self.plan.canonical_reader() if any(st.native for st in self.op.subtasks) else self.plan.reader
        for descriptor in self.op.states:
            if descriptor.keyed:
                yield self._migrated(descriptor, reader.read_keyed_state(self.op.uid, descriptor.name, key_groups))

    def operator_states(self) -> Iterator[tuple[StateDescriptor, list[Any]]]:
        """(descriptor, this subtask's elements) per operator state, redistributed by mode."""
        for descriptor in self.op.states:
            if descriptor.keyed:
                continue
            parts = self.plan.operator_elements(self.op.uid, descriptor.name)
            declared, elements = self._migrated(descriptor, self._share(descriptor.kind, parts))
            yield declared, list(elements)

    def _migrated(self, descriptor: StateDescriptor, items: Iterable[Any]) -> tuple[StateDescriptor, Iterator[Any]]:
        """``(descriptor, items)`` of one state, migrated to the job's declared value type when
        :attr:`migrations` names it."""
        new = self.migrations.get(descriptor.name)
        if new is None:
            return descriptor, iter(items)
        from statekit.writers.migration import EntryMigration

        return new, EntryMigration(descriptor, new).items(items)

    def _share(self, kind: StateKind, parts: list[list[Any]]) -> list[Any]:
        if kind is StateKind.UNION:
            return [e for part in parts for e in part]
        if kind is StateKind.BROADCAST:
            return list(parts[self.subtask % len(parts)]) if parts else []
        if len(parts) == self.parallelism:
            return list(parts[self.subtask])
        return split_evenly([e for part in parts for e in part], self.parallelism)[self.subtask]
