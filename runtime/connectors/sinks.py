"""Sinks: an exactly-once file sink (two-phase commit), a print sink, a discarding sink.

:class:`FileSink` is a :class:`~statekit.runtime.connectors.two_phase_commit.TwoPhaseCommitSink`
whose transaction is one file, per subtask:

1. *write*: records go to a hidden in-progress file ``.<prefix>-inprogress-...``.
2. *pre-commit* (at the barrier of checkpoint N): the in-progress file is flushed,
   fsynced and renamed to the hidden pending file ``.<prefix>-pending-<N>-...``; the pair
   (pending name, final name, N) goes into the union list state ``pending-files``.
3. *commit* (``notify_checkpoint_complete(N)``, after ``_metadata`` of N is durable): every
   pending file of a checkpoint <= N is renamed atomically to its visible final name
   ``<prefix>-<N>-<subtask>-<writer>-<seq><suffix>``.
4. *recovery* (``initialize_state``): subtask 0 commits every pending file the restored
   snapshot lists (idempotent: a file already renamed is skipped), then deletes every other
   hidden in-progress or pending file of this sink — they belong to checkpoints that never
   completed, and their records are replayed from the restored source offsets.

So a visible file holds exactly the records between two completed barriers of one subtask,
and it becomes visible once. Pending files are never visible (hidden names).
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from statekit.runtime.api.accumulators import ListAccumulator
from statekit.runtime.api.functions import RuntimeContext, SinkFunction
from statekit.runtime.api.state import ListStateDescriptor
from statekit.runtime.connectors.two_phase_commit import TwoPhaseCommitSink
from statekit.statefmt.fileio import fsync_dir

__all__ = [
    "FileSink",
    "FileTransaction",
    "PrintSink",
    "DiscardingSink",
    "CollectSink",
    "PENDING_FILES",
]

log = logging.getLogger(__name__)

PENDING_FILES = ListStateDescriptor(
    "pending-files", value_type="struct<checkpoint:int,pending:string,final:string>"
)


@dataclass
class FileTransaction:
    """One part file: hidden while open (``inprogress``) and pending, visible once committed.

    Attributes:
        tail: ``<subtask>-<writer>-<seq>``, the end of its names (empty for a restored transaction).
        inprogress: The hidden name records are written to (empty for a restored transaction).
        part: The open file, None until the first record.
        pending: The hidden name after pre-commit.
        final: The visible name after commit.
    """

    tail: str
    inprogress: str
    part: IO[str] | None = None
    pending: str = ""
    final: str = ""


class FileSink(TwoPhaseCommitSink[FileTransaction]):
    """Exactly-once text files in a directory, committed on checkpoint completion.

    Args:
        directory: The output directory (created if missing).
        encoder: Turns a record into one line of text (without the newline); ``str`` by default.
        prefix: File name prefix of part files.
        suffix: File name suffix of part files (e.g. ``.txt``).
    """

    def __init__(self, directory: str, *, encoder: Callable[[Any], str] = str, prefix: str = "part",
                 suffix: str = "") -> None:
        super().__init__()
        self.directory = directory
        self.encoder = encoder
        self.prefix = prefix
        self.suffix = suffix
        self.sequence = 0
        self.writer_id = ""
        self.subtask = 0
        self._renamed = False

    # ------------------------------------------------------------ names

    def _is_ours(self, name: str) -> bool:
        return name.startswith((f".{self.prefix}-inprogress-", f".{self.prefix}-pending-"))

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    # ------------------------------------------------------------ state

    def state_descriptor(self) -> ListStateDescriptor:
        return PENDING_FILES

    def transaction_entry(self, txn: FileTransaction, checkpoint_id: int | None) -> dict[str, Any] | None:
        if checkpoint_id is None:
            return None  # an in-progress file: recovery deletes every hidden file it does not commit
        return {"checkpoint": checkpoint_id, "pending": txn.pending, "final": txn.final}

    def restore_transaction(self, entry: dict[str, Any]) -> tuple[FileTransaction, int | None]:
        txn = FileTransaction("", "", pending=str(entry["pending"]), final=str(entry["final"]))
        return txn, int(entry["checkpoint"])

    # ------------------------------------------------------------ transactions

    def setup(self, runtime: RuntimeContext) -> None:
        self.subtask = runtime.index_of_this_subtask
        self.writer_id = secrets.token_hex(4)
        os.makedirs(self.directory, exist_ok=True)

    def begin_transaction(self) -> FileTransaction:
        self.sequence += 1
        tail = f"{self.subtask}-{self.writer_id}-{self.sequence}"
        return FileTransaction(tail, f".{self.prefix}-inprogress-{tail}")

    def invoke(self, txn: FileTransaction, record: Any) -> None:
        # the base writes only into the current transaction, which __call__ writes to
        if txn.part is None:
            self._open(txn)
        self(record)

    def __call__(self, record: Any) -> None:
        # the per-record path: invoke(current transaction, record), one call shorter
        part = self._transaction.part  # type: ignore[union-attr]
        if part is None:
            part = self._open(self._transaction)  # type: ignore[arg-type]
        part.write(self.encoder(record))
        part.write("\n")

    def _open(self, txn: FileTransaction) -> IO[str]:
        part = txn.part = open(self._path(txn.inprogress), "w", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115
        return part

    def is_empty(self, txn: FileTransaction) -> bool:
        return txn.part is None

    def pre_commit(self, txn: FileTransaction, checkpoint_id: int) -> None:
        part = txn.part
        assert part is not None
        part.flush()
        os.fsync(part.fileno())
        part.close()
        txn.pending = f".{self.prefix}-pending-{checkpoint_id}-{txn.tail}"
        txn.final = f"{self.prefix}-{checkpoint_id:08d}-{txn.tail}{self.suffix}"
        os.replace(self._path(txn.inprogress), self._path(txn.pending))

    def commit(self, txn: FileTransaction) -> None:
        pending, final = self._path(txn.pending), self._path(txn.final)
        if os.path.exists(pending):
            os.replace(pending, final)
            self._renamed = True
        elif not os.path.exists(final):
            log.warning("file sink %s: pending file %s is gone and was never committed", self.directory,
                        txn.pending)

    def abort(self, txn: FileTransaction) -> None:
        part, txn.part = txn.part, None
        if part is not None:
            part.close()
        for name in (txn.inprogress, txn.pending):
            if name and os.path.exists(self._path(name)):
                os.unlink(self._path(name))

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        super().notify_checkpoint_complete(checkpoint_id)
        self._sync_renames()

    def finish_recovering(self, committed: list[FileTransaction], aborted: list[FileTransaction]) -> None:
        for name in os.listdir(self.directory):
            if self._is_ours(name):
                os.unlink(self._path(name))
        self._renamed = True
        self._sync_renames()

    def _sync_renames(self) -> None:
        """Make the commits' renames durable: one directory fsync per batch of commits."""
        if self._renamed:
            fsync_dir(self.directory)
            self._renamed = False


class PrintSink(SinkFunction):
    """Prints records to stdout (``<subtask+1>> record`` when parallel), like Flink's print()."""

    def __init__(self, prefix: str | None = None, *, stderr: bool = False) -> None:
        self.prefix = prefix
        self.stderr = stderr
        self.label = ""

    def open(self, ctx: RuntimeContext) -> None:
        parts = [self.prefix] if self.prefix else []
        if ctx.number_of_parallel_subtasks > 1:
            parts.append(str(ctx.index_of_this_subtask + 1))
        self.label = (":".join(parts) + "> ") if parts else ""

    def invoke(self, value: Any) -> None:
        stream = sys.stderr if self.stderr else sys.stdout
        stream.write(f"{self.label}{value}\n")

    def finish(self) -> None:
        (sys.stderr if self.stderr else sys.stdout).flush()


class DiscardingSink(SinkFunction):
    """Drops every record (benchmarks)."""

    def invoke(self, value: Any) -> None:
        pass


class CollectSink(SinkFunction):
    """Collects the records of every subtask into ``values`` of this object (tests; not exactly-once).

    Each subtask runs its own copy, which adds its records to a list accumulator
    (:mod:`statekit.runtime.api.accumulators`) named :meth:`accumulator_name`; the job master
    merges every subtask's records as the tasks report them — also from another process — and
    hands them to this object (:meth:`receive`) when it runs in the job master's process.
    ``values`` is complete when ``execute()`` returns; while the job runs it trails the tasks by
    their report interval. The records are also ``JobExecutionResult.accumulators[name]``.
    """

    def __init__(self) -> None:
        import threading

        self.values: list[Any] = []
        self._lock = threading.Lock()
        self._collected: ListAccumulator | None = None

    @staticmethod
    def accumulator_name(uid: str) -> str:
        """The accumulator a collect sink with operator ``uid`` adds its records to."""
        return f"collect:{uid}"

    def __deepcopy__(self, memo: dict[int, Any]) -> CollectSink:
        """A subtask's copy: its own empty lists (nothing shared), a subclass's attributes copied."""
        import copy
        import threading

        clone = type(self).__new__(type(self))
        own = {"values", "_lock", "_collected"}
        clone.__dict__.update(copy.deepcopy({k: v for k, v in self.__dict__.items() if k not in own}, memo))
        clone.values, clone._lock, clone._collected = [], threading.Lock(), None
        return clone

    def open(self, runtime_context: RuntimeContext) -> None:
        self._collected = ListAccumulator()
        runtime_context.add_accumulator(self.accumulator_name(runtime_context.operator_uid), self._collected)

    def invoke(self, value: Any) -> None:
        collected = self._collected
        if collected is None:
            raise RuntimeError("CollectSink.invoke before open: the sink runs only inside a job")
        collected.add(value)

    def receive(self, values: list[Any]) -> None:
        """Records of one subtask, from the job master."""
        with self._lock:
            self.values.extend(values)
