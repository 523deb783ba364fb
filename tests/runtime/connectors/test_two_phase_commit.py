"""The two-phase-commit sink base: lifecycle order, explicit states, operator state, recovery,
and exactly-once output through the runtime's failover (with an in-memory transactional store)."""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

import pytest
from sink_contexts import FakeRuntime, Snapshot, initialize, union_state

from statekit.runtime.api.functions import CheckpointListener, KeyedProcessFunction, RuntimeContext
from statekit.runtime.api.restart_strategy import fixed_delay_restart
from statekit.runtime.api.state import ListStateDescriptor, ValueStateDescriptor
from statekit.runtime.connectors.two_phase_commit import (
    TransactionHolder,
    TransactionStateError,
    TransactionStatus,
    TwoPhaseCommitSink,
)
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.dataflow.job_handle import JobStatus
from statekit.runtime.state.operator_state import DefaultOperatorStateStore

STATE = ListStateDescriptor("txns", value_type="struct<checkpoint:int,name:string,rows:json>")


class Store:
    """A transactional store shared by every subtask: prepared (invisible) and committed rows."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.prepared: dict[str, list[Any]] = {}
        self.committed: dict[str, list[Any]] = {}

    def __deepcopy__(self, memo: dict[int, Any]) -> Store:
        return self


class Txn:
    def __init__(self, name: str, rows: list[Any] | None = None) -> None:
        self.name = name
        self.rows: list[Any] = rows or []


class JournalSink(TwoPhaseCommitSink[Txn]):
    """Records every hook call; prepares into and commits from a :class:`Store`."""

    def __init__(self, store: Store, journal: list[tuple[Any, ...]] | None = None) -> None:
        super().__init__()
        self.store = store
        self.journal = journal if journal is not None else []
        self.count = 0
        self.subtask = 0

    def state_descriptor(self) -> ListStateDescriptor:
        return STATE

    def setup(self, runtime: RuntimeContext) -> None:
        self.subtask = runtime.index_of_this_subtask
        self.attempt = runtime.attempt_number
        self.journal.append(("setup", self.subtask))

    def begin_transaction(self) -> Txn:
        self.count += 1
        txn = Txn(f"{self.subtask}-{self.attempt}-{self.count}")
        self.journal.append(("begin", txn.name))
        return txn

    def invoke(self, txn: Txn, record: Any) -> None:
        txn.rows.append(record)

    def is_empty(self, txn: Txn) -> bool:
        return not txn.rows

    def pre_commit(self, txn: Txn, checkpoint_id: int) -> None:
        self.journal.append(("pre_commit", txn.name, checkpoint_id))
        with self.store.lock:
            self.store.prepared[txn.name] = list(txn.rows)

    def commit(self, txn: Txn) -> None:
        self.journal.append(("commit", txn.name))
        with self.store.lock:
            rows = self.store.prepared.pop(txn.name, None)
            if rows is not None:
                self.store.committed[txn.name] = rows

    def abort(self, txn: Txn) -> None:
        self.journal.append(("abort", txn.name))
        with self.store.lock:
            self.store.prepared.pop(txn.name, None)

    def recover_and_commit(self, txn: Txn) -> None:
        self.journal.append(("recover_and_commit", txn.name))
        self.commit(txn)

    def recover_and_abort(self, txn: Txn) -> None:
        self.journal.append(("recover_and_abort", txn.name))
        self.abort(txn)

    def finish_recovering(self, committed: list[Txn], aborted: list[Txn]) -> None:
        self.journal.append(("finish_recovering", [t.name for t in committed], [t.name for t in aborted]))
        with self.store.lock:
            for name in list(self.store.prepared):  # prepared after the snapshot: replayed
                if name not in {t.name for t in committed}:
                    del self.store.prepared[name]

    def transaction_entry(self, txn: Txn, checkpoint_id: int | None) -> dict[str, Any] | None:
        return {"checkpoint": checkpoint_id, "name": txn.name, "rows": list(txn.rows)}

    def restore_transaction(self, entry: dict[str, Any]) -> tuple[Txn, int | None]:
        return Txn(entry["name"], list(entry["rows"])), entry["checkpoint"]


def started(journal: list[tuple[Any, ...]], subtask: int = 0, restored: list[Any] | None = None,
            parallelism: int = 1) -> tuple[JournalSink, DefaultOperatorStateStore]:
    sink = JournalSink(Store(), journal)
    return sink, initialize(sink, STATE, runtime=FakeRuntime(subtask, parallelism), restored=restored)


def test_barrier_pre_commits_and_completion_commits_in_checkpoint_order() -> None:
    journal: list[tuple[Any, ...]] = []
    sink, operator_state = started(journal)
    sink("a")
    sink.snapshot_state(Snapshot(1))
    sink("b")
    sink.snapshot_state(Snapshot(2))
    assert [h.status for h in sink.pending_transactions] == [TransactionStatus.PRECOMMITTED] * 2
    assert union_state(operator_state) == [
        {"checkpoint": 1, "name": "0-0-1", "rows": ["a"]},
        {"checkpoint": 2, "name": "0-0-2", "rows": ["b"]},
        {"checkpoint": None, "name": "0-0-3", "rows": []},
    ]
    sink.notify_checkpoint_complete(1)
    assert sink.store.committed == {"0-0-1": ["a"]} and list(sink.store.prepared) == ["0-0-2"]
    sink.notify_checkpoint_complete(2)
    assert sink.store.committed == {"0-0-1": ["a"], "0-0-2": ["b"]} and not sink.pending_transactions
    assert journal == [
        ("setup", 0), ("finish_recovering", [], []), ("begin", "0-0-1"),
        ("pre_commit", "0-0-1", 1), ("begin", "0-0-2"), ("pre_commit", "0-0-2", 2), ("begin", "0-0-3"),
        ("commit", "0-0-1"), ("commit", "0-0-2"),
    ]


def test_an_empty_transaction_is_carried_over_the_barrier() -> None:
    journal: list[tuple[Any, ...]] = []
    sink, _ = started(journal)
    sink.snapshot_state(Snapshot(1))
    sink("a")
    sink.snapshot_state(Snapshot(2))
    assert ("pre_commit", "0-0-1", 2) in journal and not any(e[0] == "pre_commit" and e[2] == 1 for e in journal)
    assert [e[1] for e in journal if e[0] == "begin"] == ["0-0-1", "0-0-2"]


def test_a_completed_checkpoint_commits_the_pending_transactions_of_aborted_ones_before_it() -> None:
    sink, _ = started([])
    sink("a")
    sink.snapshot_state(Snapshot(1))
    sink.notify_checkpoint_aborted(1)
    sink("b")
    sink.snapshot_state(Snapshot(2))
    sink("c")
    sink.snapshot_state(Snapshot(3))
    sink.notify_checkpoint_complete(2)
    assert list(sink.store.committed) == ["0-0-1", "0-0-2"] and list(sink.store.prepared) == ["0-0-3"]
    assert [h.checkpoint_id for h in sink.pending_transactions] == [3]


def test_restore_on_subtask_0_commits_precommitted_in_order_and_aborts_open_ones() -> None:
    restored = [
        {"checkpoint": 7, "name": "1-0-4", "rows": [3]},
        {"checkpoint": None, "name": "1-0-5", "rows": []},
        {"checkpoint": 5, "name": "0-0-2", "rows": [1]},
        {"checkpoint": 7, "name": "0-0-3", "rows": [2]},
        {"checkpoint": None, "name": "0-0-4", "rows": []},
    ]
    journal: list[tuple[Any, ...]] = []
    sink, operator_state = started(journal, subtask=0, restored=restored, parallelism=3)
    assert journal[1:] == [
        ("recover_and_commit", "0-0-2"), ("commit", "0-0-2"),
        ("recover_and_commit", "1-0-4"), ("commit", "1-0-4"),
        ("recover_and_commit", "0-0-3"), ("commit", "0-0-3"),
        ("recover_and_abort", "1-0-5"), ("abort", "1-0-5"),
        ("recover_and_abort", "0-0-4"), ("abort", "0-0-4"),
        ("finish_recovering", ["0-0-2", "1-0-4", "0-0-3"], ["1-0-5", "0-0-4"]),
        ("begin", "0-0-1"),
    ]
    assert union_state(operator_state) == []  # restored entries are resolved, not carried into new snapshots
    sink.snapshot_state(Snapshot(8))
    assert union_state(operator_state) == [{"checkpoint": None, "name": "0-0-1", "rows": []}]


def test_restore_on_other_subtasks_leaves_recovery_to_subtask_0() -> None:
    journal: list[tuple[Any, ...]] = []
    started(journal, subtask=1, restored=[{"checkpoint": 5, "name": "0-0-2", "rows": [1]}], parallelism=2)
    assert journal == [("setup", 1), ("begin", "1-0-1")]


def test_close_aborts_the_open_transaction_and_leaves_pending_ones_for_recovery() -> None:
    journal: list[tuple[Any, ...]] = []
    sink, _ = started(journal)
    sink("a")
    sink.snapshot_state(Snapshot(1))
    sink("b")
    sink.close()
    assert journal[-1] == ("abort", "0-0-2")
    assert list(sink.store.prepared) == ["0-0-1"] and not sink.store.committed
    sink.close()  # twice is harmless
    assert journal[-1] == ("abort", "0-0-2")


def test_moves_against_the_lifecycle_raise() -> None:
    holder = TransactionHolder("t")
    with pytest.raises(TransactionStateError, match="cannot move from open to committed"):
        holder.move(TransactionStatus.COMMITTED)
    holder.move(TransactionStatus.PRECOMMITTED)
    holder.move(TransactionStatus.COMMITTED)
    for target in TransactionStatus:
        with pytest.raises(TransactionStateError, match="from committed"):
            holder.move(target)
    aborted = TransactionHolder("u")
    aborted.move(TransactionStatus.ABORTED)
    with pytest.raises(TransactionStateError, match="from aborted to precommitted"):
        aborted.move(TransactionStatus.PRECOMMITTED)


class CountPerKey(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", "int"))

    def process_element(self, value: int, ctx: Any, out: Any) -> None:
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        out.collect([value % 7, count])


class FailTwice(CheckpointListener):
    """Fails attempts 0 and 1 once a checkpoint of theirs completed and ``after`` records passed;
    pauses 1 ms every 100 records, so that checkpoints complete while the input lasts."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.seen = 0
        self.attempt = 0
        self.completed = False

    def open(self, ctx: RuntimeContext) -> None:
        self.attempt = ctx.attempt_number

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.completed = True

    def __call__(self, value: int) -> int:
        self.seen += 1
        if self.seen % 100 == 0:
            time.sleep(0.001)
        if self.attempt < 2 and self.completed and self.seen >= self.after:
            raise RuntimeError(f"boom in attempt {self.attempt}")
        return value


def test_failover_through_the_runtime_commits_every_row_exactly_once() -> None:
    store = Store()
    env = StreamEnvironment().set_parallelism(2)
    env.enable_checkpointing(30)
    env.set_restart_strategy(fixed_delay_restart(3, 10))
    (env.from_sequence(1, 60_000).uid("numbers")
        .map(FailTwice(after=1000)).uid("fail")
        .key_by(lambda v: v % 7)
        .process(CountPerKey()).uid("count")
        .sink_to(JournalSink(store)).uid("sink"))
    handle = env.execute_async("2pc failover")
    assert handle.wait(60) is JobStatus.FINISHED
    attempts = {name.split("-")[1] for name in store.committed}
    assert attempts == {"0", "1", "2"}, f"expected output of three attempts (two failovers), got {attempts}"
    assert not store.prepared, "prepared transactions left over"
    got: dict[int, list[int]] = collections.defaultdict(list)
    for rows in store.committed.values():
        for key, count in rows:
            got[key].append(count)
    expected = collections.Counter(v % 7 for v in range(1, 60_001))
    assert {k: sorted(v) for k, v in got.items()} == {k: list(range(1, n + 1)) for k, n in expected.items()}
