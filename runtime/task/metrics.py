"""Task metrics: what each task counts and reports, and the figures derived from its reports.

Each task owns one :class:`TaskMetrics`: plain counters that only the task's own thread
changes (never an object shared with another task). At most every :data:`REPORT_INTERVAL_S`
while it works, when it may wait for input and when it ends, the task reports an immutable
:class:`TaskReport` to its host — values only, so a task in another process can send the same
report over a pipe. :class:`TaskFigures` is one task as the job master sees it: its latest
report with rates over a window (:mod:`statekit.runtime.jobmaster.metrics`).

Figures:
    records in: records a task took from its input gate (a source task: from its reader);
    records out: records it handed to downstream channels (a broadcast record counts once per
        channel; a sink task sends none);
    backpressure: the share of time a task waited for room in its consumers' gates
        (Flink's levels: ok <= 10% < low <= 50% < high);
    checkpoints: the snapshots it took (last id, alignment and synchronous durations);
    watermarks: the task's current input watermark (the minimum over its live, active input
        channels; none for a source task) and output watermark (the last one it sent on);
        ``None`` before the first (Flink's "No Watermark").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from statekit.runtime.api.accumulators import Accumulator

if TYPE_CHECKING:
    pass

__all__ = [
    "Latency",
    "percentile",
    "REPORT_INTERVAL_S",
    "IDLE_REPORT_GAP_S",
    "BACKPRESSURE_LOW",
    "BACKPRESSURE_HIGH",
    "TaskReport",
    "TaskMetrics",
    "TaskFigures",
    "WatermarkSource",
]


REPORT_INTERVAL_S = 0.25
MAX_LATENCY_SAMPLES = 1000  # latency samples a task keeps between two reports


IDLE_REPORT_GAP_S = 0.02  # an idle report follows the previous one by at least this much


BACKPRESSURE_LOW = 0.1


BACKPRESSURE_HIGH = 0.5


@dataclass(frozen=True)
class TaskReport:
    """Cumulative figures of one task attempt at ``time_s`` (epoch seconds)."""

    vertex_id: int
    subtask: int
    name: str
    time_s: float
    records_in: int
    records_out: int
    backpressured_s: float
    checkpoints_taken: int
    last_checkpoint_id: int | None
    last_alignment_ms: int | None
    last_sync_ms: float | None
    last_unaligned: bool
    source: bool = False
    sink: bool = False
    finished: bool = False
    # (name, changes since the previous report) of the task's accumulators
    accumulators: tuple[tuple[str, Any], ...] = ()
    # end-to-end latencies (ms) of the latency markers the task measured since its previous report
    latencies: tuple[int, ...] = ()
    # buffers (record lists and events) queued in its input gate, and waiting in its writers' backlogs
    input_queued: int = 0
    output_backlogged: int = 0
    input_watermark: int | None = None
    output_watermark: int | None = None


class _Writer(Protocol):
    records_out: int
    pending: int


class WatermarkSource(Protocol):
    """Where a task's metrics read its watermarks (the task's event time)."""

    def input_watermark(self) -> int | None: ...

    def output_watermark(self) -> int | None: ...


class TaskMetrics:
    """The counters of one task; only the task's thread touches them.

    Args:
        vertex_id, subtask, name: Who the task is.
        writers: The task's record writers (their ``records_out`` counts are summed; none: a sink).
        report: Delivers a report to the job master.
        source: The task reads a source.
    """

    __slots__ = (
        "_dirty",
        "_due",
        "_latencies",
        "_queued",
        "_report",
        "_reported_watermarks",
        "_time",
        "_writers",
        "accumulators",
        "backpressured_s",
        "checkpoints_taken",
        "last_alignment_ms",
        "last_checkpoint_id",
        "last_sync_ms",
        "last_unaligned",
        "name",
        "records_in",
        "source",
        "subtask",
        "vertex_id",
    )

    def __init__(self, vertex_id: int, subtask: int, name: str, writers: Sequence[_Writer],
                 report: Callable[[TaskReport], None], *, source: bool = False,
                 accumulators: dict[str, Accumulator] | None = None,
                 queued: Callable[[], int] | None = None) -> None:
        self.vertex_id, self.subtask, self.name, self.source = vertex_id, subtask, name, source
        self._latencies: list[int] = []
        self._queued = queued
        self.accumulators = accumulators if accumulators is not None else {}
        self._writers = writers
        self._report = report
        self.records_in = 0
        self.backpressured_s = 0.0
        self.checkpoints_taken = 0
        self.last_checkpoint_id: int | None = None
        self.last_alignment_ms: int | None = None
        self.last_sync_ms: float | None = None
        self.last_unaligned = False
        self._due = 0.0
        self._dirty = True
        self._time: WatermarkSource | None = None
        self._reported_watermarks: tuple[int | None, int | None] = (None, None)

    def watch(self, time: WatermarkSource) -> None:
        """Report the watermarks of ``time`` (the task's event time) too."""
        self._time = time

    def _watermarks(self) -> tuple[int | None, int | None]:
        time = self._time
        return (None, None) if time is None else (time.input_watermark(), time.output_watermark())

    def count_in(self, records: int) -> None:
        """``records`` taken in; reports when the interval has passed."""
        self.records_in += records
        self._dirty = True
        if time.monotonic() >= self._due:
            self.report()

    def add_backpressure(self, seconds: float) -> None:
        self.backpressured_s += seconds
        self._dirty = True

    def latency(self, ms: int) -> None:
        """A latency marker arrived ``ms`` after its source made it."""
        if len(self._latencies) < MAX_LATENCY_SAMPLES:
            self._latencies.append(ms)
        self._dirty = True

    def waited(self, since: float) -> float:
        """The task has waited for room downstream since ``since`` (monotonic) and still waits:
        once the report interval passed, count the wait so far and report; returns the new ``since``."""
        now = time.monotonic()
        if now < self._due:
            return since
        self.backpressured_s += now - since
        self.report()
        return now

    def checkpoint_taken(self, checkpoint_id: int, alignment_ms: int, unaligned: bool, sync_ms: float) -> None:
        self.checkpoints_taken += 1
        self.last_checkpoint_id, self.last_alignment_ms = checkpoint_id, alignment_ms
        self.last_unaligned, self.last_sync_ms = unaligned, sync_ms
        self._dirty = True
        self._due = 0.0  # the job master learns of a snapshot with the task's next count

    def idle(self) -> None:
        """The task may wait now: report what changed (unless it reported moments ago)."""
        dirty = self._dirty or (self._time is not None and self._watermarks() != self._reported_watermarks)
        if dirty and time.monotonic() >= self._due - REPORT_INTERVAL_S + IDLE_REPORT_GAP_S:
            self.report()

    def report(self, *, finished: bool = False) -> None:
        self._due = time.monotonic() + REPORT_INTERVAL_S
        self._dirty = False
        watermarks = self._reported_watermarks = self._watermarks()
        self._report(TaskReport(
            self.vertex_id, self.subtask, self.name, time.time(), self.records_in,
            sum(w.records_out for w in self._writers), self.backpressured_s, self.checkpoints_taken,
            self.last_checkpoint_id, self.last_alignment_ms, self.last_sync_ms, self.last_unaligned,
            self.source, not self._writers, finished, self._accumulator_changes(), self._take_latencies(),
            self._queued() if self._queued is not None else 0, sum(w.pending for w in self._writers), *watermarks,
        ))

    def _take_latencies(self) -> tuple[int, ...]:
        if not self._latencies:
            return ()
        taken, self._latencies = tuple(self._latencies), []
        return taken

    def _accumulator_changes(self) -> tuple[tuple[str, Any], ...]:
        changes = ((name, accumulator.take_changes()) for name, accumulator in self.accumulators.items())
        return tuple((name, change) for name, change in changes if change is not None)


@dataclass(frozen=True)
class TaskFigures:
    """One task as the job master sees it: its latest report and rates over the window."""

    report: TaskReport
    records_in_per_s: float
    records_out_per_s: float
    backpressured_ratio: float

    @property
    def backpressure(self) -> str:
        """``ok``, ``low`` or ``high`` (Flink's levels)."""
        if self.backpressured_ratio > BACKPRESSURE_HIGH:
            return "high"
        return "low" if self.backpressured_ratio > BACKPRESSURE_LOW else "ok"

    def to_json(self) -> dict[str, Any]:
        r = self.report
        return {
            "vertex": r.vertex_id, "subtask": r.subtask, "name": r.name, "finished": r.finished,
            "records_in": r.records_in, "records_out": r.records_out,
            "records_in_per_second": round(self.records_in_per_s, 3),
            "records_out_per_second": round(self.records_out_per_s, 3),
            "backpressured_ratio": round(self.backpressured_ratio, 4), "backpressure": self.backpressure,
            "checkpoints": {"taken": r.checkpoints_taken, "last_id": r.last_checkpoint_id,
                            "last_alignment_ms": r.last_alignment_ms,
                            "last_sync_ms": None if r.last_sync_ms is None else round(r.last_sync_ms, 3),
                            "last_unaligned": r.last_unaligned},
            "buffers": {"input_queued": r.input_queued, "output_backlogged": r.output_backlogged},
            "watermarks": {"input": r.input_watermark, "output": r.output_watermark},
            "reported_at": int(r.time_s * 1000),
        }


@dataclass(frozen=True)
class Latency:
    """End-to-end latency (ms) of the latency markers measured in a window: source to the tasks
    without outputs, through every buffer, timeout and queue on the way."""

    p50_ms: int
    p99_ms: int
    max_ms: int
    samples: int

    def to_json(self) -> dict[str, Any]:
        return {"p50_ms": self.p50_ms, "p99_ms": self.p99_ms, "max_ms": self.max_ms, "samples": self.samples}


def percentile(ordered: list[int], q: float) -> int:
    """The ``q`` quantile of ascending ``ordered`` (nearest rank)."""
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


