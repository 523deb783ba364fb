"""Spark's own progress, through statekit's progress seam (:mod:`statekit.readers.progress`).

:func:`spark_start_progress` shows the session start (seconds: a JVM, maybe a cluster);
:func:`task_progress` shows the tasks of the Spark jobs a block of code starts, as Spark's
status tracker counts them — one step per partition written, not one per state.

Invariants:
    * the jobs of a block are found by a job group of their own (set on the calling thread,
      cleared when the block ends), never by "the latest job";
    * one poller thread per block reads the status tracker every :data:`POLL_S` seconds; it
      opens its bar once the first stage is known (its total is that job's task count), and
      ends when the block ends, after one last read (a bar never ends short of what Spark did);
    * a failing status read never fails the work: progress is shown best effort;
    * a Spark Connect session has no status tracker: its block is one step.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

from statekit.readers.progress import Advance, ProgressFactory, no_progress

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from statekit.spark.session import SparkSettings

__all__ = ["POLL_S", "spark_start_progress", "task_counts", "task_progress"]

POLL_S = 0.25
SETTLE_S = 5.0  # how long the last poll waits for the status tracker to show finished tasks


def spark_start_progress(settings: SparkSettings, progress: ProgressFactory | None) -> SparkSession:
    """The session of ``settings``, started under a one-step bar naming the master."""
    with (progress or no_progress)(f"starting Spark ({settings.target})", total=1, unit="steps") as advance:
        session = settings.session()
        advance("spark", 1)
    return session


def task_counts(tracker: Any, group: str) -> tuple[int, int]:
    """(tasks, completed tasks) of every stage of every job of ``group`` that the tracker knows.

    Every stage of a succeeded job counts as done: a stage whose shuffle output an earlier job
    already wrote is skipped, and its tasks never run (nor show as completed).
    """
    total = done = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        succeeded = job is not None and job.status == "SUCCEEDED"
        for stage_id in job.stageIds if job is not None else ():
            stage = tracker.getStageInfo(stage_id)
            if stage is not None:
                total += stage.numTasks
                done += stage.numTasks if succeeded else stage.numCompletedTasks
    return total, done


@contextmanager
def task_progress(spark: SparkSession, progress: ProgressFactory | None, description: str) -> Iterator[None]:
    """Show the tasks of the Spark jobs started inside the block as a bar of ``description``."""
    if progress is None:
        yield
        return
    from statekit.spark.session import is_connect

    if is_connect(spark):  # no status tracker over Connect: one step when the block ends
        with progress(description, total=1, unit="steps") as advance:
            yield
            advance(description, 1)
        return
    context = spark.sparkContext
    group = f"statekit-{uuid.uuid4().hex}"
    context.setJobGroup(group, description)
    poller = _Poller(context.statusTracker(), group, progress, description)
    poller.start()
    try:
        yield
    finally:
        poller.finish()
        try:
            context._jsc.clearJobGroup()
        except Exception:  # noqa: BLE001 - best effort: after a Ctrl-C the JVM is gone
            pass


class _Poller(threading.Thread):
    def __init__(self, tracker: Any, group: str, progress: ProgressFactory, description: str) -> None:
        super().__init__(name=f"statekit-progress-{group}", daemon=True)
        self.tracker = tracker
        self.group = group
        self.progress = progress
        self.description = description
        self.done = threading.Event()
        self.reported = 0

    def finish(self) -> None:
        self.done.set()
        self.join(timeout=10)

    def run(self) -> None:
        with ExitStack() as stack:
            advance: Advance | None = None
            total = 0
            while True:
                finished = self.done.wait(POLL_S)
                counts = self._counts()
                if advance is None and counts[0] > 0:
                    total = counts[0]
                    advance = stack.enter_context(self.progress(self.description, total=total, unit="tasks"))
                if finished:  # the status tracker lags the jobs: let it catch up, briefly
                    counts = self._settled(counts)
                if advance is not None:
                    self._advance(advance, min(counts[1], total))
                if finished:
                    return

    def _settled(self, counts: tuple[int, int]) -> tuple[int, int]:
        """The task counts once every known task shows as completed (at most SETTLE_S later)."""
        deadline = time.monotonic() + SETTLE_S
        while counts[1] < counts[0] and time.monotonic() < deadline:
            time.sleep(POLL_S / 5)
            counts = self._counts()
        return counts

    def _counts(self) -> tuple[int, int]:
        try:
            return task_counts(self.tracker, self.group)
        except Exception:  # noqa: BLE001 - progress is best effort; the work reports its own errors
            return 0, 0

    def _advance(self, advance: Advance, completed: int) -> None:
        if completed > self.reported:
            advance(self.description, completed - self.reported)
            self.reported = completed
