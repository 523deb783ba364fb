"""What the TaskManager tests share: the test job, its truth and output (and the exactly-once check
of every committed line), a running job at hand, the processes of a job."""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from statekit.runtime import JobHandle, JobStatus, RunOptions, run_job_file
from statekit.runtime.dataflow.run_options import add_job_listener, remove_job_listener

JOB = str(Path(__file__).with_name("jobs") / "numbers.py")


def truth(count: int, keys: int = 100) -> dict[int, int]:
    sums: dict[int, int] = collections.defaultdict(int)
    for n in range(count):
        sums[n % keys] += n
    return dict(sums)


def final_sums(output: Path) -> dict[int, int]:
    names = os.listdir(output)
    assert not [n for n in names if n.startswith(".")], "pending or in-progress files are visible"
    sums: dict[int, int] = {}
    for name in names:
        for line in (output / name).read_text().splitlines():
            key, total = (int(x) for x in line.split("\t"))
            sums[key] = max(sums.get(key, 0), total)
    return sums


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def task_managers(pid: int) -> list[int]:
    found = []
    for child in children(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as cmdline:
                if b"statekit.runtime.taskmanager" in cmdline.read():
                    found.append(child)
        except OSError:
            pass
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def committed_sums(*outputs: Path) -> dict[int, list[int]]:
    """Every committed ``key<TAB>sum`` line of the ``outputs``, per key, in ascending order of the
    sums (no pending or in-progress file may be visible)."""
    sums: dict[int, list[int]] = collections.defaultdict(list)
    for output in outputs:
        names = os.listdir(output)
        assert not [n for n in names if n.startswith(".")], "pending or in-progress files are visible"
        for name in names:
            for line in (output / name).read_text().splitlines():
                key, total = (int(x) for x in line.split("\t"))
                sums[key].append(total)
    return {key: sorted(totals) for key, totals in sums.items()}


def source_splits(count: int, parallelism: int) -> list[range]:
    """The numbers each source subtask of jobs/numbers.py emits in order (its even split of
    ``0..count-1`` at the parallelism the job first ran with; a restored split goes on in order)."""
    per, extra = divmod(count, parallelism)
    splits, start = [], 0
    for subtask in range(parallelism):
        size = per + (1 if subtask < extra else 0)
        splits.append(range(start, start + size))
        start += size
    return splits


def assert_running_sums_exactly_once(output: Path | Sequence[Path], count: int, keys: int = 100,
                                     parallelism: int = 2) -> None:
    """The committed lines of jobs/numbers.py (in ``output``, or the outputs of the runs that took
    the job on from each other's snapshots) are its running sums with every input record counted
    exactly once: per key, the sums in ascending order are the prefix sums of one order of exactly
    the key's numbers (the numbers are >= 0, so ascending is the order they were added), in which
    the numbers of each source split come in ascending order (a channel keeps its order). A lost
    line merges two numbers into one step, a duplicated or replayed one adds a step of 0 or a
    number twice: either makes the steps differ from the key's numbers."""
    expected: dict[int, list[int]] = collections.defaultdict(list)
    for n in range(count):
        expected[n % keys].append(n)
    got = committed_sums(*([output] if isinstance(output, Path) else output))
    assert sorted(got) == sorted(expected), f"keys {sorted(set(got) ^ set(expected))[:10]} missing or extra"
    split_of = {n: index for index, split in enumerate(source_splits(count, parallelism)) for n in split}
    wrong: dict[int, str] = {}
    for key, numbers in expected.items():
        sums = got[key]
        steps = [b - a for a, b in zip([0, *sums], sums)]
        if len(sums) != len(numbers):
            wrong[key] = f"{len(sums)} lines for {len(numbers)} records"
        elif sorted(steps) != numbers:
            missing = collections.Counter(numbers) - collections.Counter(steps)
            extra = collections.Counter(steps) - collections.Counter(numbers)
            wrong[key] = f"steps {sorted(extra)[:5]} are no record of the key, records {sorted(missing)[:5]} missing"
        else:
            last: dict[int, int] = {}
            for step in steps:
                split = split_of[step]
                if last.get(split, -1) > step:
                    wrong[key] = f"{step} was added after {last[split]} of the same source split"
                    break
                last[split] = step
    assert not wrong, f"{len(wrong)} of {len(expected)} keys are not counted exactly once, e.g. {list(wrong.items())[:3]}"


class RunningJob:
    """jobs/numbers.py run with ``options`` in a thread of this process, its handle at hand: ``with
    RunningJob(options) as job: job.handle...``; leaving cancels it unless it ended, and waits for it."""

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.outcome: list[JobStatus] = []
        self.error: list[BaseException] = []
        self._handles: list[JobHandle] = []

    def _run(self) -> None:
        try:
            self.outcome.append(run_job_file(JOB, self.options))
        except BaseException as error:  # noqa: BLE001 - handed to the test
            self.error.append(error)

    def __enter__(self) -> RunningJob:
        add_job_listener(self._handles.append)
        self.thread = threading.Thread(target=self._run, name="numbers-job", daemon=True)
        self.thread.start()
        self.wait_for(lambda: bool(self._handles), "the job never started")
        return self

    @property
    def handle(self) -> JobHandle:
        return self._handles[-1]

    def wait_for(self, condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert not self.error, f"{what}: {self.error[0]!r}"
            assert self.thread.is_alive() and time.monotonic() < deadline, what
            time.sleep(0.02)

    def completed_checkpoints(self) -> int:
        return int(self.handle.checkpoint_stats()["counts"]["completed"])

    def finish(self, timeout: float = 120) -> JobStatus:
        self.thread.join(timeout)
        if self.error:
            raise self.error[0]
        assert self.outcome, "the job did not end in time"
        return self.outcome[0]

    def __exit__(self, *_: object) -> None:
        remove_job_listener(self._handles.append)
        if self.thread.is_alive() and self._handles:
            self.handle.cancel()
        self.thread.join(60)
