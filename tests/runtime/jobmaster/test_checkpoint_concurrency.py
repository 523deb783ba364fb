"""Max concurrent checkpoints: checkpoint N+1 never starts before N completed or failed.

The coordinator runs against a fake execution whose tasks only record their mails, so the
test decides exactly when each checkpoint is acknowledged.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from statekit.runtime.api.checkpoint_config import CheckpointConfig
from statekit.runtime.checkpoint.handles import TaskStateSnapshot
from statekit.runtime.checkpoint.storage import CheckpointStorage
from statekit.runtime.jobmaster.coordinator import CheckpointCoordinator, OperatorInfo
from statekit.runtime.task.mails import TriggerCheckpoint
from statekit.statefmt.metadata import CheckpointMetadata


class MailBox:
    """A task of the fake execution: keeps what it was mailed."""

    def __init__(self, key: tuple[int, int]) -> None:
        self.key = key
        self.mails: list[Any] = []
        self.lock = threading.Lock()

    def mail(self, mail: Any) -> None:
        with self.lock:
            self.mails.append(mail)

    def triggered(self) -> list[int]:
        with self.lock:
            return [m.barrier.checkpoint_id for m in self.mails if isinstance(m, TriggerCheckpoint)]


class FakeExecution:
    def __init__(self) -> None:
        self.source = MailBox((0, 0))
        self.errors: list[BaseException] = []

    @property
    def source_tasks(self) -> list[MailBox]:
        return [self.source]

    @property
    def tasks(self) -> list[MailBox]:
        return [self.source]

    def fail(self, error: BaseException) -> None:
        self.errors.append(error)


def _coordinator(tmp_path: Path, **config: Any) -> CheckpointCoordinator:
    settings = {"interval_ms": 20, "checkpoint_storage": str(tmp_path), "max_concurrent": 1, **config}
    return CheckpointCoordinator(
        job_id="0" * 32, job_name="concurrency", operators=[OperatorInfo("op", "op", 1, 128)],
        config=CheckpointConfig(**settings), storage=CheckpointStorage(str(tmp_path), "0" * 32),
    )


def _wait(condition: Any, what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


@pytest.fixture
def running(tmp_path: Path) -> Any:
    coordinator = _coordinator(tmp_path)
    execution = FakeExecution()
    coordinator.attach(execution)
    yield coordinator, execution
    coordinator.detach("test over")
    coordinator.close()


def test_the_final_checkpoint_waits_for_the_periodic_one_in_flight(running: Any) -> None:
    coordinator, execution = running
    coordinator.start_periodic()
    _wait(lambda: execution.source.triggered() == [1], "checkpoint 1")
    coordinator.stop_periodic()
    final: list[concurrent.futures.Future[str]] = []
    thread = threading.Thread(target=lambda: final.append(coordinator.trigger(final=True)))
    thread.start()
    time.sleep(0.2)
    assert execution.source.triggered() == [1], "the final checkpoint started while checkpoint 1 was in flight"

    coordinator.acknowledge((0, 0), 1, TaskStateSnapshot(()))
    thread.join(5)
    _wait(lambda: execution.source.triggered() == [1, 2], "the final checkpoint")
    coordinator.acknowledge((0, 0), 2, TaskStateSnapshot(()))
    assert final[0].result(5).endswith("chk-2")


def test_the_final_checkpoint_starts_once_the_periodic_one_failed(running: Any) -> None:
    coordinator, execution = running
    coordinator.start_periodic()
    _wait(lambda: execution.source.triggered() == [1], "checkpoint 1")
    coordinator.stop_periodic()
    final: list[concurrent.futures.Future[str]] = []
    thread = threading.Thread(target=lambda: final.append(coordinator.trigger(final=True)))
    thread.start()
    time.sleep(0.1)
    assert execution.source.triggered() == [1]
    coordinator.decline(1, "a task could not write")
    thread.join(5)
    assert execution.source.triggered() == [1, 2]


def test_no_periodic_trigger_while_the_previous_checkpoint_commits(
    running: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checkpoint 1 is acknowledged by every task but its _metadata is still being written."""
    coordinator, execution = running
    committing, release = threading.Event(), threading.Event()
    from statekit.runtime.checkpoint import storage as checkpoint_storage

    original = checkpoint_storage.CheckpointStorageLocation.commit

    def slow_commit(self: Any, metadata: CheckpointMetadata) -> None:
        if self.checkpoint_id == 1:
            committing.set()
            release.wait(5)
        original(self, metadata)

    monkeypatch.setattr(checkpoint_storage.CheckpointStorageLocation, "commit", slow_commit)
    coordinator.start_periodic()
    _wait(lambda: execution.source.triggered() == [1], "checkpoint 1")
    acked = threading.Thread(target=coordinator.acknowledge, args=((0, 0), 1, TaskStateSnapshot(())))
    acked.start()
    assert committing.wait(5)
    for _ in range(10):  # ten intervals, each waking the timer up
        time.sleep(0.02)
        coordinator.start_periodic()
    assert execution.source.triggered() == [1], "checkpoint 2 started before checkpoint 1 was committed"
    release.set()
    acked.join(5)
    _wait(lambda: execution.source.triggered()[:2] == [1, 2], "checkpoint 2")


def test_periodic_checkpoints_never_overlap_with_max_concurrent_one(running: Any) -> None:
    coordinator, execution = running
    coordinator.start_periodic()
    for checkpoint_id in range(1, 6):
        _wait(lambda n=checkpoint_id: len(execution.source.triggered()) >= n, f"checkpoint {checkpoint_id}")
        time.sleep(0.05)
        assert execution.source.triggered() == list(range(1, checkpoint_id + 1))
        coordinator.acknowledge((0, 0), checkpoint_id, TaskStateSnapshot(()))
    stats = coordinator.stats()
    completed = sorted((e for e in stats["history"] if e["status"] == "COMPLETED"), key=lambda e: e["id"])
    for earlier, later in itertools.pairwise(completed):
        assert later["trigger_timestamp"] >= earlier["trigger_timestamp"] + earlier["end_to_end_duration"]
