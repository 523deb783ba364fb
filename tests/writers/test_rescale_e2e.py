"""End to end with the runtime: word count at p=2 -> savepoint -> ``statekit rescale`` ->
restore from the rescaled savepoint and feed more input -> final counts equal an
uninterrupted run; also through ``--max-parallelism 1024`` and back to p=1."""

from __future__ import annotations

import collections
import glob
import os
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.verification import verify_snapshot
from statekit.runtime.control.launcher import run_job_file
from statekit.runtime.dataflow.job_handle import JobStatus
from statekit.runtime.dataflow.run_options import RunOptions
from statekit.statefmt.keygroups import assign_to_key_group, compute_operator_index_for_key_group

WORDCOUNT = str(Path(__file__).resolve().parents[2] / "examples" / "wordcount.py")
WORDS = [f"w{chr(97 + i % 26)}{chr(97 + (i * 7) % 26)}" for i in range(400)]


def write_files(directory: Path, names: list[str], lines: int, seed: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for k, name in enumerate(names):
        rows = [" ".join(WORDS[(seed * 131 + k * 17 + i * 7 + j * 13) % len(WORDS)] for j in range(8))
                for i in range(lines)]
        (directory / name).write_text("\n".join(rows) + "\n", encoding="utf-8")


def truth(directory: Path) -> dict[str, int]:
    counts: collections.Counter[str] = collections.Counter()
    for path in directory.iterdir():
        counts.update(re.findall(r"[^\W\d_]+", path.read_text(encoding="utf-8").lower()))
    return dict(counts)


def output_lines(*directories: Path) -> dict[str, list[int]]:
    got: dict[str, list[int]] = collections.defaultdict(list)
    for directory in directories:
        for name in os.listdir(directory):
            for line in (directory / name).read_text(encoding="utf-8").splitlines():
                word, count = line.split("\t")
                got[word].append(int(count))
    return {w: sorted(c) for w, c in got.items()}


def savepoint_in(directory: Path) -> str:
    (path,) = glob.glob(str(directory / "savepoint-*"))
    return path


def final_counts(savepoint: str) -> dict[str, int]:
    return {e.key: e.value for e in SavepointReader.read(savepoint).read_keyed_state("counter", "count")}


def rescale(*args: str) -> None:
    result = CliRunner().invoke(cli, ["rescale", *args])
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("rescale-e2e")
    first, second, everything = root / "first", root / "second", root / "all"
    write_files(first, [f"a{i}.txt" for i in range(3)], 200, 1)
    write_files(second, [f"b{i}.txt" for i in range(2)], 200, 2)
    shutil.copytree(first, everything)
    for path in second.iterdir():
        shutil.copy(path, everything / path.name)
    status = run_job_file(WORDCOUNT, RunOptions(
        parallelism=2, savepoint_on_finish=str(root / "sp-p2"),
        job_args=("--input", str(first), "--output", str(root / "out-p2")),
    ))
    assert status is JobStatus.FINISHED
    assert final_counts(savepoint_in(root / "sp-p2")) == truth(first)
    return {"root": root, "all": everything, "sp": Path(savepoint_in(root / "sp-p2"))}


def restore_and_finish(world: dict[str, Path], savepoint: str, parallelism: int, name: str) -> str:
    """Restore word count from ``savepoint`` at ``parallelism`` over all files; returns its final savepoint."""
    root = world["root"]
    run_input = root / f"in-{name}"
    shutil.copytree(world["all"], run_input)
    status = run_job_file(WORDCOUNT, RunOptions(
        parallelism=parallelism, restore_path=savepoint, savepoint_on_finish=str(root / f"sp-{name}"),
        job_args=("--input", str(run_input), "--output", str(root / f"out-{name}")),
    ))
    assert status is JobStatus.FINISHED
    return savepoint_in(root / f"sp-{name}")


def assert_like_uninterrupted(world: dict[str, Path], final: str, name: str) -> None:
    expected = truth(world["all"])
    assert final_counts(final) == expected
    # both runs' outputs together hold every running count of every word exactly once
    got = output_lines(world["root"] / "out-p2", world["root"] / f"out-{name}")
    assert got == {w: list(range(1, n + 1)) for w, n in expected.items()}


def test_rescale_to_p5_then_restore_matches_an_uninterrupted_run(world: dict[str, Path]) -> None:
    rescaled = world["root"] / "rescaled-p5"
    rescale(str(world["sp"]), "-p", "5", "-o", str(rescaled))
    assert verify_snapshot(str(rescaled)).ok
    counter = SavepointReader.read(str(rescaled)).operator("counter")
    assert (counter.parallelism, counter.max_parallelism) == (5, 128)
    final = restore_and_finish(world, str(rescaled), 5, "p5")
    assert SavepointReader.read(final).operator("counter").parallelism == 5
    assert_like_uninterrupted(world, final, "p5")


def test_through_max_parallelism_1024_and_back_to_p1(world: dict[str, Path]) -> None:
    wide = world["root"] / "rescaled-m1024"
    rescale(str(world["sp"]), "--max-parallelism", "1024", "-p", "5", "-o", str(wide))
    reader = SavepointReader.read(str(wide))
    counter = reader.operator("counter")
    assert (counter.parallelism, counter.max_parallelism) == (5, 1024)
    for subtask, key_group, batch in reader.read_keyed_batches("counter", "count"):
        for key in batch.column("key").to_pylist():
            assert assign_to_key_group(key, 1024) == key_group
            assert compute_operator_index_for_key_group(1024, 5, key_group) == subtask
    narrow = world["root"] / "rescaled-m1024-p1"
    rescale(str(wide), "-p", "1", "-o", str(narrow))
    assert verify_snapshot(str(narrow)).ok
    final = restore_and_finish(world, str(narrow), 1, "m1024-p1")
    counter = SavepointReader.read(final).operator("counter")
    assert (counter.parallelism, counter.max_parallelism) == (1, 1024)
    assert_like_uninterrupted(world, final, "m1024-p1")
