"""The two-phase-commit sink base: exactly-once output into a transactional system.

Flink's ``TwoPhaseCommitSinkFunction`` in Python spelling. A subclass says how to open,
write, pre-commit, commit and abort one transaction of its system; the base drives them
with the checkpoints, per subtask:

1. ``begin_transaction()`` opens the *current* transaction; every record goes into it
   through ``invoke(txn, record)``.
2. At the barrier of checkpoint N (``snapshot_state``): ``pre_commit(txn, N)`` makes the
   current transaction durable but invisible (flush, prepare); it becomes *pending* and a
   new current transaction is begun. The pending transactions (and the new current one)
   are written into the union list operator state returned by ``state_descriptor()``,
   so the snapshot of N knows them. An empty current transaction (``is_empty``) is not
   pre-committed: it carries over to the next checkpoint.
3. ``notify_checkpoint_complete(N)`` (after ``_metadata`` of N is durable): ``commit(txn)``
   for every pending transaction of a checkpoint <= N, in checkpoint order.
4. Restore (``initialize_state``): subtask 0 reads the whole union state of the sink
   (every old subtask's entries, at any old parallelism) and calls
   ``recover_and_commit(txn)`` for every transaction pre-committed in the snapshot (its
   checkpoint completed, or the snapshot would not exist; the notification may have been
   lost) and ``recover_and_abort(txn)`` for every transaction that was open; then
   ``finish_recovering(committed, aborted)`` cleans up what the snapshot does not know
   (transactions pre-committed after it: their records are replayed from the restored
   source offsets). All subtasks initialize before any record flows, so recovery never
   races the new attempt's own transactions.
5. ``close()`` aborts the current transaction; pending ones stay for recovery.

Each transaction moves through explicit states (:class:`TransactionStatus`): OPEN ->
PRECOMMITTED -> COMMITTED, or OPEN/PRECOMMITTED -> ABORTED; any other move is a bug and
raises :class:`TransactionStateError`.

The runtime hands each record to the sink's ``__call__`` (a sink may be any callable),
which writes it into the current transaction.
"""

from __future__ import annotations

import enum
import logging
from abc import abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from statekit.runtime.api.functions import (
    CheckpointedFunction,
    CheckpointListener,
    Function,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    RuntimeContext,
)
from statekit.runtime.api.state import ListState, ListStateDescriptor

__all__ = [
    "TwoPhaseCommitSink",
    "TransactionHolder",
    "TransactionStatus",
    "TransactionStateError",
]

log = logging.getLogger(__name__)

TXN = TypeVar("TXN")


class TransactionStatus(enum.Enum):
    """Where a transaction is in the two-phase commit."""

    OPEN = "open"
    PRECOMMITTED = "precommitted"
    COMMITTED = "committed"
    ABORTED = "aborted"


_MOVES: dict[TransactionStatus, frozenset[TransactionStatus]] = {
    TransactionStatus.OPEN: frozenset({TransactionStatus.PRECOMMITTED, TransactionStatus.ABORTED}),
    TransactionStatus.PRECOMMITTED: frozenset({TransactionStatus.COMMITTED, TransactionStatus.ABORTED}),
    TransactionStatus.COMMITTED: frozenset(),
    TransactionStatus.ABORTED: frozenset(),
}


class TransactionStateError(RuntimeError):
    """A transaction was moved against the lifecycle (a bug in a sink, exit code 3)."""


@dataclass
class TransactionHolder(Generic[TXN]):
    """A transaction handle with its lifecycle state.

    Attributes:
        handle: The sink's own transaction object.
        status: Where it is in the two-phase commit.
        checkpoint_id: The checkpoint it was pre-committed at (None while open).
        entry: Its operator-state element (cached at pre-commit).
    """

    handle: TXN
    status: TransactionStatus = TransactionStatus.OPEN
    checkpoint_id: int | None = None
    entry: dict[str, Any] | None = field(default=None, repr=False)

    def move(self, to: TransactionStatus) -> None:
        """Advance to ``to``; raise :class:`TransactionStateError` if the lifecycle forbids it."""
        if to not in _MOVES[self.status]:
            raise TransactionStateError(f"transaction {self.handle!r} cannot move from {self.status.value} "
                                        f"to {to.value}")
        self.status = to


class TwoPhaseCommitSink(Function, CheckpointedFunction, CheckpointListener, Generic[TXN]):
    """Base of exactly-once sinks into transactional systems (see the module docstring).

    Subclasses implement the transaction hooks (``begin_transaction``, ``invoke``,
    ``pre_commit``, ``commit``, ``abort``), the state mapping (``state_descriptor``,
    ``transaction_entry``, ``restore_transaction``), and optionally ``setup``,
    ``recover_and_commit``, ``recover_and_abort``, ``finish_recovering``, ``is_empty``.
    ``commit`` and ``recover_and_commit`` must be idempotent: after a crash between the
    checkpoint's completion and the commit, the transaction is committed again on restore.
    """

    def __init__(self) -> None:
        self._current: TransactionHolder[TXN] | None = None
        self._transaction: TXN | None = None  # the current handle, for the per-record path
        self._pending: list[TransactionHolder[TXN]] = []
        self._state: ListState[Any] | None = None

    # ------------------------------------------------------------ what a subclass implements

    @abstractmethod
    def state_descriptor(self) -> ListStateDescriptor:
        """The union list state holding this sink's transactions (name and element type)."""

    def setup(self, runtime: RuntimeContext) -> None:
        """Prepare the subtask before recovery (connect, create directories, check the target)."""

    @abstractmethod
    def begin_transaction(self) -> TXN:
        """Open a new transaction (may be lazy: nothing needs to happen before the first record)."""

    @abstractmethod
    def invoke(self, txn: TXN, record: Any) -> None:
        """Write ``record`` into ``txn``."""

    @abstractmethod
    def pre_commit(self, txn: TXN, checkpoint_id: int) -> None:
        """At the barrier of ``checkpoint_id``: make ``txn`` durable and ready to commit, still invisible."""

    @abstractmethod
    def commit(self, txn: TXN) -> None:
        """Make a pre-committed ``txn`` visible. Idempotent."""

    @abstractmethod
    def abort(self, txn: TXN) -> None:
        """Discard ``txn`` (open or pre-committed)."""

    def recover_and_commit(self, txn: TXN) -> None:
        """On restore: commit ``txn``, pre-committed in the restored snapshot (maybe committed already)."""
        self.commit(txn)

    def recover_and_abort(self, txn: TXN) -> None:
        """On restore: abort ``txn``, open in the restored snapshot."""
        self.abort(txn)

    def finish_recovering(self, committed: list[TXN], aborted: list[TXN]) -> None:
        """After recovery on subtask 0: discard leftovers the snapshot does not know."""

    def is_empty(self, txn: TXN) -> bool:
        """Whether ``txn`` holds nothing (an empty transaction is carried over a barrier)."""
        return False

    @abstractmethod
    def transaction_entry(self, txn: TXN, checkpoint_id: int | None) -> dict[str, Any] | None:
        """The state element for ``txn`` (pre-committed at ``checkpoint_id``, or open when None),
        or None to keep no record of it."""

    @abstractmethod
    def restore_transaction(self, entry: dict[str, Any]) -> tuple[TXN, int | None]:
        """A transaction and its checkpoint id (None: it was open) from a restored state element."""

    # ------------------------------------------------------------ runtime side

    def __call__(self, record: Any) -> None:
        """Write one record into the current transaction (the sink's per-record entry point).

        A subclass may override this with a shorter path (one Python call less per record)
        that does exactly what ``invoke(current transaction, record)`` does.
        """
        self.invoke(self._transaction, record)  # type: ignore[arg-type]

    def initialize_state(self, ctx: FunctionInitializationContext) -> None:
        runtime = ctx.runtime_context
        self.setup(runtime)
        state = self._state = ctx.operator_state_store.get_union_list_state(self.state_descriptor())
        restored = list(state.get())
        state.update([])
        if runtime.index_of_this_subtask == 0:
            self._recover(restored)
        self._begin()

    def _begin(self) -> None:
        holder = TransactionHolder(self.begin_transaction())
        self._current = holder
        self._transaction = holder.handle

    def _recover(self, entries: Iterable[dict[str, Any]]) -> None:
        restored = [self.restore_transaction(entry) for entry in entries]
        precommitted = sorted((c, i, t) for i, (t, c) in enumerate(restored) if c is not None)
        committed: list[TXN] = []
        for checkpoint_id, _, txn in precommitted:
            holder = TransactionHolder(txn, TransactionStatus.PRECOMMITTED, checkpoint_id)
            self.recover_and_commit(txn)
            holder.move(TransactionStatus.COMMITTED)
            committed.append(txn)
        aborted = [txn for txn, precommitted_at in restored if precommitted_at is None]
        for txn in aborted:
            self.recover_and_abort(txn)
            TransactionHolder(txn).move(TransactionStatus.ABORTED)
        self.finish_recovering(committed, aborted)

    def snapshot_state(self, ctx: FunctionSnapshotContext) -> None:
        current = self._current
        assert current is not None and self._state is not None
        checkpoint_id = ctx.checkpoint_id
        if not self.is_empty(current.handle):
            self.pre_commit(current.handle, checkpoint_id)
            current.move(TransactionStatus.PRECOMMITTED)
            current.checkpoint_id = checkpoint_id
            current.entry = self.transaction_entry(current.handle, checkpoint_id)
            self._pending.append(current)
            self._begin()
            current = self._current
            assert current is not None
        entries = [p.entry for p in self._pending]
        entries.append(self.transaction_entry(current.handle, None))
        self._state.update([e for e in entries if e is not None])

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        while self._pending and (self._pending[0].checkpoint_id or 0) <= checkpoint_id:
            holder = self._pending[0]
            self.commit(holder.handle)
            holder.move(TransactionStatus.COMMITTED)
            self._pending.pop(0)

    def close(self) -> None:
        """Abort the current transaction; pending ones are left for recovery."""
        current, self._current, self._transaction = self._current, None, None
        if current is not None and current.status is TransactionStatus.OPEN:
            self.abort(current.handle)
            current.move(TransactionStatus.ABORTED)

    @property
    def pending_transactions(self) -> list[TransactionHolder[TXN]]:
        """Pre-committed transactions not committed yet, in checkpoint order."""
        return list(self._pending)
