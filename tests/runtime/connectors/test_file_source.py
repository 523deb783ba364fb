"""FileSource: the job master deals the files out by size, once per attempt; every reader of the
attempt agrees, so every line is read exactly once and the subtasks read about the same bytes."""

from __future__ import annotations

import collections
import os
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekit.runtime import RunOptions
from statekit.runtime.api.sources import SourceReaderContext
from statekit.runtime.connectors.sources import FileSource, file_owner
from statekit.runtime.control.launcher import run_job_file
from statekit.runtime.dataflow.job_handle import JobStatus

NUMBERED = [f"part-{n:02d}.txt" for n in range(8)]

SUBTASKS_JOB = '''
import sys
from statekit.runtime import FileSink, FileSource, MapFunction, RuntimeContext, get_execution_environment

class Tag(MapFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.subtask = ctx.index_of_this_subtask

    def map(self, line):
        return f"{self.subtask} {line}"

env = get_execution_environment()
(env.from_source(FileSource(sys.argv[1]), "files").uid("files")
    .map(Tag(), "tag").uid("tag")
    .sink_to(FileSink(sys.argv[2]), "sink").uid("sink"))
env.execute("file subtasks")
'''


def write_files(directory: Path, names: list[str], lines: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_text("".join(f"{name} {i}\n" for i in range(lines)), encoding="utf-8")


def read_all(source: FileSource, parallelism: int, plan: dict[str, int] | None) -> dict[int, list[str]]:
    """Every reader of one attempt polled to its end: the lines each subtask read."""
    read: dict[int, list[str]] = {}
    for subtask in range(parallelism):
        reader = source.create_reader(SourceReaderContext(subtask, parallelism, plan))
        lines: list[str] = []
        done = False
        while not done:
            records, done = reader.poll(1000)
            lines.extend(records)
        reader.close()
        read[subtask] = lines
    return read


def test_numbered_files_are_split_evenly(tmp_path: Path) -> None:
    # the names that crc32 parity put all on one subtask of two (the skew this plan removes)
    assert {zlib.crc32(name.encode()) % 2 for name in NUMBERED} == {1}
    write_files(tmp_path, NUMBERED, 10)
    source = FileSource(str(tmp_path))
    for parallelism in (2, 4):
        plan = source.plan(parallelism)
        assert plan is not None and set(plan) == set(NUMBERED)
        per_subtask = collections.Counter(plan.values())
        assert sorted(per_subtask.values()) == [8 // parallelism] * parallelism
        read = read_all(source, parallelism, plan)
        assert sorted(line for lines in read.values() for line in lines) == sorted(
            f"{name} {i}" for name in NUMBERED for i in range(10))
        assert all(len(lines) == 10 * 8 // parallelism for lines in read.values())


def test_sizes_are_dealt_largest_first(tmp_path: Path) -> None:
    sizes = {"a": 900, "b": 500, "c": 400, "d": 300, "e": 200, "f": 100}
    tmp_path.mkdir(exist_ok=True)
    for name, size in sizes.items():
        (tmp_path / name).write_bytes(b"x" * (size - 1) + b"\n")
    (tmp_path / ".hidden").write_text("no\n")
    (tmp_path / "_SUCCESS").write_text("")
    plan = FileSource(str(tmp_path)).plan(2)
    # loads after each: a -> 0 (900, 0); b -> 1 (900, 500); c -> 1 (900, 900); d -> 0, the lower
    # index of a tie (1200, 900); e -> 1 (1200, 1100); f -> 1 (1200, 1200)
    assert plan == {"a": 0, "b": 1, "c": 1, "d": 0, "e": 1, "f": 1}


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 10_000), max_size=40), parallelism=st.integers(1, 9))
def test_the_plan_gives_every_file_one_owner_and_loads_within_the_largest_file(
        tmp_path_factory: pytest.TempPathFactory, sizes: list[int], parallelism: int) -> None:
    directory = tmp_path_factory.mktemp("files")
    for i, size in enumerate(sizes):
        (directory / f"f{i}").write_bytes(b"x" * size)
    plan = FileSource(str(directory)).plan(parallelism)
    assert plan is not None and set(plan) == {f"f{i}" for i in range(len(sizes))}
    assert all(0 <= owner < parallelism for owner in plan.values())
    loads = [0] * parallelism
    for i, size in enumerate(sizes):
        loads[plan[f"f{i}"]] += size
    assert max(loads) - min(loads) <= max(sizes, default=0)


def test_a_file_that_appears_after_the_plan_has_exactly_one_reader(tmp_path: Path) -> None:
    write_files(tmp_path, NUMBERED[:4], 5)
    source = FileSource(str(tmp_path))
    plan = source.plan(3)
    write_files(tmp_path, ["late.txt"], 5)
    read = read_all(source, 3, plan)
    owners = [subtask for subtask, lines in read.items() if any(line.startswith("late.txt") for line in lines)]
    assert owners == [file_owner("late.txt", 3, plan)]
    assert sum(len(lines) for lines in read.values()) == 25


def test_no_plan_each_reader_decides_by_the_name_alone(tmp_path: Path) -> None:
    write_files(tmp_path, NUMBERED, 3)
    read = read_all(FileSource(str(tmp_path)), 2, None)
    assert sorted(line for lines in read.values() for line in lines) == sorted(
        f"{name} {i}" for name in NUMBERED for i in range(3))
    assert FileSource(str(tmp_path / "missing")).plan(2) is None


@pytest.mark.parametrize("executor", ["threads", "processes"])
def test_the_plan_reaches_every_reader_of_a_job(tmp_path: Path, executor: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATEKIT_HOME", str(tmp_path / "home"))
    texts, out = tmp_path / "texts", tmp_path / "out"
    write_files(texts, NUMBERED, 50)
    job = tmp_path / "job.py"
    job.write_text(SUBTASKS_JOB, encoding="utf-8")
    status = run_job_file(str(job), RunOptions(parallelism=2, executor=executor, job_args=(str(texts), str(out))))
    assert status is JobStatus.FINISHED
    tagged = [line.split(" ", 1) for name in os.listdir(out) for line in (out / name).read_text().splitlines()]
    assert sorted(line for _, line in tagged) == sorted(f"{name} {i}" for name in NUMBERED for i in range(50))
    readers_of = collections.defaultdict(set)
    for subtask, line in tagged:
        readers_of[line.split(" ")[0]].add(subtask)
    assert all(len(readers) == 1 for readers in readers_of.values())
    files_per_subtask = collections.Counter(next(iter(readers)) for readers in readers_of.values())
    assert files_per_subtask == {"0": 4, "1": 4}
