"""Sinks: an exactly-once file sink (two-phase commit), a print sink, a discarding sink.

:class:`FileSink` protocol, per subtask:

1. *write*: records go to a hidden in-progress file ``.<prefix>-inprogress-...``.
2. *pre-commit* (at the barrier of checkpoint N, in ``snapshot_state``): the in-progress
   file is flushed, fsynced and renamed to the hidden pending file
   ``.<prefix>-pending-<N>-...``; the pair (pending name, final name, N) goes into the
   union list state ``pending-files``.
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
from typing import IO, Any

from statekit.runtime.functions import (
    CheckpointedFunction,
    CheckpointListener,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    RuntimeContext,
    SinkFunction,
)
from statekit.runtime.state import ListStateDescriptor
from statekit.statefmt.fileio import fsync_dir

__all__ = ["FileSink", "PrintSink", "DiscardingSink", "CollectSink"]

log = logging.getLogger(__name__)

PENDING_FILES = ListStateDescriptor(
    "pending-files", value_type="struct<checkpoint:int,pending:string,final:string>"
)


class FileSink(SinkFunction, CheckpointedFunction, CheckpointListener):
    """Exactly-once text files in a directory, committed on checkpoint completion.

    Args:
        directory: The output directory (created if missing).
        encoder: Turns a record into one line of text (without the newline); ``str`` by default.
        prefix: File name prefix of part files.
        suffix: File name suffix of part files (e.g. ``.txt``).
    """

    def __init__(self, directory: str, *, encoder: Callable[[Any], str] = str, prefix: str = "part",
                 suffix: str = "") -> None:
        self.directory = directory
        self.encoder = encoder
        self.prefix = prefix
        self.suffix = suffix
        self.pending: list[dict[str, Any]] = []
        self.part: IO[str] | None = None
        self.part_name: str | None = None
        self.sequence = 0
        self.writer_id = ""
        self.subtask = 0

    # ------------------------------------------------------------ names

    def _inprogress_name(self) -> str:
        return f".{self.prefix}-inprogress-{self.subtask}-{self.writer_id}-{self.sequence}"

    def _is_ours(self, name: str) -> bool:
        return name.startswith((f".{self.prefix}-inprogress-", f".{self.prefix}-pending-"))

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    # ------------------------------------------------------------ lifecycle

    def initialize_state(self, ctx: FunctionInitializationContext) -> None:
        runtime: RuntimeContext = ctx.runtime_context
        self.subtask = runtime.index_of_this_subtask
        self.writer_id = secrets.token_hex(4)
        os.makedirs(self.directory, exist_ok=True)
        self.state = ctx.operator_state_store.get_union_list_state(PENDING_FILES)
        restored = list(self.state.get())
        self.state.update([])
        if self.subtask == 0:
            self._recover(restored)

    def _recover(self, restored: list[dict[str, Any]]) -> None:
        for entry in sorted(restored, key=lambda e: (int(e["checkpoint"]), str(e["final"]))):
            self._commit(entry)
        for name in os.listdir(self.directory):
            if self._is_ours(name):
                os.unlink(self._path(name))
        fsync_dir(self.directory)

    def invoke(self, value: Any) -> None:
        part = self.part
        if part is None:
            self.sequence += 1
            self.part_name = self._inprogress_name()
            part = self.part = open(self._path(self.part_name), "w", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115
        part.write(self.encoder(value))
        part.write("\n")

    def snapshot_state(self, ctx: FunctionSnapshotContext) -> None:
        if self.part is not None:
            assert self.part_name is not None
            part, self.part = self.part, None
            part.flush()
            os.fsync(part.fileno())
            part.close()
            checkpoint_id = ctx.checkpoint_id
            tail = f"{self.subtask}-{self.writer_id}-{self.sequence}"
            entry: dict[str, Any] = {
                "checkpoint": checkpoint_id,
                "pending": f".{self.prefix}-pending-{checkpoint_id}-{tail}",
                "final": f"{self.prefix}-{checkpoint_id:08d}-{tail}{self.suffix}",
            }
            os.replace(self._path(self.part_name), self._path(entry["pending"]))
            self.pending.append(entry)
        self.state.update(list(self.pending))

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        done = [e for e in self.pending if e["checkpoint"] <= checkpoint_id]
        if not done:
            return
        for entry in done:
            self._commit(entry)
        fsync_dir(self.directory)
        self.pending = [e for e in self.pending if e["checkpoint"] > checkpoint_id]

    def _commit(self, entry: dict[str, Any]) -> None:
        pending, final = self._path(str(entry["pending"])), self._path(str(entry["final"]))
        if os.path.exists(pending):
            os.replace(pending, final)
        elif not os.path.exists(final):
            log.warning("file sink %s: pending file %s of checkpoint %s is gone and was never committed",
                        self.directory, entry["pending"], entry["checkpoint"])

    def close(self) -> None:
        if self.part is not None:
            part, self.part = self.part, None
            part.close()


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
    """Appends records to one list shared by all subtasks (tests; not exactly-once).

    The sink is not copied per subtask, so ``sink.values`` holds every subtask's records.
    """

    def __init__(self) -> None:
        import threading

        self.values: list[Any] = []
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> CollectSink:
        return self

    def invoke(self, value: Any) -> None:
        with self._lock:
            self.values.append(value)
