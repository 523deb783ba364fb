"""Checkpoint statistics: the tracker's counts, summary and details, and the history file that
outlives the job (append, rotation, a line cut short by a kill)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from statekit.runtime.checkpoint.handles import OperatorStateHandle, SubtaskStats, TaskStateSnapshot
from statekit.runtime.control.checkpoint_history import CheckpointHistoryWriter, history_of, read_history
from statekit.runtime.control.registry import JobRegistry, current_process_entry, new_job_id
from statekit.runtime.jobmaster.checkpoint_stats import CheckpointStatsTracker, subtask_details, summarize
from statekit.statefmt.json_contract import json_data


def entry(checkpoint_id: int, status: str = "COMPLETED", duration: int = 10, size: int = 100,
          savepoint: bool = False) -> dict[str, Any]:
    return {"id": checkpoint_id, "status": status, "is_savepoint": savepoint, "end_to_end_duration": duration,
            "state_size": size, "checkpointed_size": size, "alignment_duration": 0, "persisted_data": 0}


def test_subtask_details_name_every_subtask_and_what_it_said() -> None:
    snapshot = TaskStateSnapshot((OperatorStateHandle("op", (), None, bytes_written=70),),
                                 SubtaskStats(alignment_ms=3, barrier_ms=1_005, sync_ms=0.25, async_ms=12.5))
    records = subtask_details(1_000, [(0, 0), (0, 1)], {(0, 1): snapshot}, {(0, 1): 1_020})
    assert records[0] == {"vertex": 0, "subtask": 0, "status": "pending_or_failed"}
    assert records[1] == {"vertex": 0, "subtask": 1, "status": "completed", "ack_timestamp": 1_020,
                          "end_to_end_duration": 20, "state_size": 0, "checkpointed_size": 70, "sync_duration": 0.25,
                          "async_duration": 12.5, "alignment_duration": 3, "start_delay": 5,
                          "unaligned_checkpoint": False, "persisted_data": 0}


def test_tracker_counts_summarizes_keeps_details_and_tells_listeners() -> None:
    tracker = CheckpointStatsTracker(history_size=2)
    heard: list[dict[str, Any]] = []
    tracker.add_listener(heard.append)
    tracker.add_listener(lambda _: 1 / 0)  # a failing listener never stops the others or the checkpoint
    subtasks = [{"vertex": 0, "subtask": 0, "status": "completed", "sync_duration": 1.5, "async_duration": 4.0,
                 "start_delay": 2}]
    tracker.record(entry(1, duration=10), subtasks)
    tracker.record(entry(2, duration=30, savepoint=True), subtasks)
    tracker.record(entry(3, status="FAILED"), [])
    stats = tracker.snapshot([], None)
    assert stats["counts"] == {"completed": 2, "failed": 1, "in_progress": 0, "restored": 0, "savepoints": 1, "total": 3}
    assert [e["id"] for e in stats["history"]] == [3, 2]  # bounded history, newest first
    assert stats["summary"]["end_to_end_duration"] == {"min": 10, "avg": 20.0, "max": 30}  # over all completed
    assert stats["summary"]["sync_duration"] == {"min": 1.5, "avg": 1.5, "max": 1.5}
    assert stats["latest"]["savepoint"]["id"] == 2 and stats["latest"]["failed"]["id"] == 3
    assert tracker.details(1)["subtasks"] == subtasks  # type: ignore[index]
    assert [h["id"] for h in heard] == [1, 2, 3] and heard[0]["subtasks"] == subtasks


def test_history_file_appends_rotates_and_skips_a_cut_line(tmp_path: Path) -> None:
    path = tmp_path / "checkpoints.jsonl"
    writer = CheckpointHistoryWriter(path, max_bytes=600)
    for checkpoint_id in range(1, 11):
        writer.append(entry(checkpoint_id))
    rotated = tmp_path / "checkpoints.1.jsonl"
    assert rotated.is_file() and path.stat().st_size <= 600 + 200
    with path.open("ab") as out:
        out.write(b'{"id": 11, "status": "COMPL')  # the process was killed in the middle of a line
    read = read_history(path)
    ids = [r["id"] for r in read.records]
    assert ids == sorted(ids) and ids[-1] == 10 and read.damaged_lines == 1
    assert len(ids) >= 3  # at least the newest max_bytes of history


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["COMPLETED", "FAILED"]), st.integers(0, 10**6)), max_size=30))
def test_summary_is_min_avg_max_of_the_completed(values: list[tuple[str, int]]) -> None:
    entries = [entry(i, status, duration) for i, (status, duration) in enumerate(values)]
    durations = [d for status, d in values if status == "COMPLETED"]
    figure = summarize(entries)["end_to_end_duration"]
    if not durations:
        assert figure == {"min": None, "avg": None, "max": None}
    else:
        assert (figure["min"], figure["max"]) == (min(durations), max(durations))
        assert abs(figure["avg"] - sum(durations) / len(durations)) < 1e-3


def test_history_of_a_job_reads_its_file_and_one_checkpoint(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("STATEKIT_HOME", str(tmp_path / "home"))
    registry = JobRegistry()
    job_id = new_job_id()
    registry.register(current_process_entry(job_id, "job"))
    writer = CheckpointHistoryWriter(registry.history_path(job_id))
    writer.append({**entry(1), "subtasks": [{"vertex": 0, "subtask": 0}]})
    writer.append({**entry(2, "FAILED"), "failure_message": "expired", "subtasks": []})
    history = history_of(registry.get(job_id), registry, 1)
    assert [e["id"] for e in history.entries] == [2, 1] and "subtasks" not in history.entries[0]
    assert history.counts == {"completed": 1, "failed": 1, "savepoints": 0}
    assert history.checkpoint is not None and history.checkpoint["subtasks"] == [{"vertex": 0, "subtask": 0}]
    assert json.loads(json.dumps(json_data(history)))["path"].endswith("checkpoints.jsonl")
