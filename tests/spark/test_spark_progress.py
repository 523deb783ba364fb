"""``export`` shows the Spark start and each state's tasks as Spark's status tracker counts them."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from statekit.readers.progress import Advance
from statekit.spark.engine import export as run_export
from statekit.spark.export import ExportSpec
from statekit.spark.progress import task_counts, task_progress
from statekit.spark.session import SparkSettings
from statekit.spark.source import read_state

pytestmark = pytest.mark.spark


class Recorder:
    """A progress factory that records every bar: description, total, unit and the amounts advanced."""

    def __init__(self) -> None:
        self.bars: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    @contextmanager
    def __call__(self, description: str, total: int | None = None, unit: str = "bytes") -> Iterator[Advance]:
        bar: dict[str, Any] = {"description": description, "total": total, "unit": unit, "steps": [], "open": True}
        with self.lock:
            self.bars.append(bar)
        yield lambda _name, amount: bar["steps"].append(amount)
        bar["open"] = False


def test_export_shows_the_start_and_every_states_tasks(spark: Any, sample: str, tmp_path: Path) -> None:
    recorder = Recorder()
    result = run_export(ExportSpec(sample, str(tmp_path / "out"), spark=SparkSettings("local[2]")), "spark", progress=recorder)
    start, *states = recorder.bars
    assert (start["description"], start["total"], start["unit"], start["steps"]) == (
        "starting Spark (local[2])", 1, "steps", [1])
    assert [b["description"] for b in states] == [f"{s.operator_uid}/{s.state_name}" for s in result.states]
    for bar in states:
        assert bar["unit"] == "tasks" and not bar["open"]
        assert bar["total"] >= 1 and sum(bar["steps"]) == bar["total"] and all(step > 0 for step in bar["steps"])
    count = next(b for b in states if b["description"] == "counter/count")
    partitions = read_state(spark, sample, "counter", "count").rdd.getNumPartitions()
    assert partitions > 1 and count["total"] == partitions  # one step per partition written, not one per state


def test_the_job_group_is_the_blocks_own(spark: Any, sample: str) -> None:
    recorder = Recorder()
    with task_progress(spark, recorder, "mine"):
        spark.range(10, numPartitions=3).count()
    spark.range(10, numPartitions=5).count()  # after the block: not counted, no bar
    assert len(recorder.bars) == 1 and recorder.bars[0]["description"] == "mine"
    assert sum(recorder.bars[0]["steps"]) == recorder.bars[0]["total"]
    assert spark.sparkContext.getLocalProperty("spark.jobGroup.id") is None


def test_task_counts_of_an_unknown_group(spark: Any) -> None:
    assert task_counts(spark.sparkContext.statusTracker(), "no-such-group") == (0, 0)


def test_a_succeeded_jobs_skipped_stages_count_as_done(spark: Any) -> None:
    # count() runs two jobs; the second reuses the first one's shuffle output, so its map stage
    # is skipped: its tasks never run, yet the work is complete
    context = spark.sparkContext
    context.setJobGroup("statekit-test-skipped", "skipped stages")
    try:
        spark.range(10, numPartitions=3).count()
    finally:
        context._jsc.clearJobGroup()
    tracker = context.statusTracker()
    deadline = time.monotonic() + 30
    while any(tracker.getJobInfo(j).status != "SUCCEEDED" for j in tracker.getJobIdsForGroup("statekit-test-skipped")):
        assert time.monotonic() < deadline, "the status tracker never showed the jobs as succeeded"
        time.sleep(0.05)
    stages = [tracker.getStageInfo(s) for j in tracker.getJobIdsForGroup("statekit-test-skipped")
              for s in tracker.getJobInfo(j).stageIds]
    assert any(stage.numCompletedTasks < stage.numTasks for stage in stages)  # a skipped stage exists
    total, done = task_counts(tracker, "statekit-test-skipped")
    assert total == done == sum(stage.numTasks for stage in stages) > 3
