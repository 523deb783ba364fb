"""Restore at another parallelism, stop-with-savepoint, and the restore rules for uids."""

from __future__ import annotations

import collections
import glob
import importlib.util
import os
import re
import shutil
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from statekit.readers.savepoint_reader import SavepointReader
from statekit.runtime.checkpoint.restore import missing_operator_message
from statekit.runtime.connectors.sinks import FileSink
from statekit.runtime.connectors.sources import FileSource
from statekit.runtime.control.launcher import run_job_file
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.dataflow.job_handle import JobStatus
from statekit.runtime.dataflow.run_options import RunOptions, set_run_options
from statekit.statefmt.errors import BadInputError

WORDCOUNT = str(Path(__file__).resolve().parents[3] / "examples" / "wordcount.py")
WORDS = [f"w{chr(97 + i % 26)}{chr(97 + (i * 7) % 26)}" for i in range(400)]


def _wordcount() -> ModuleType:
    spec = importlib.util.spec_from_file_location("wordcount_example", WORDCOUNT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wc = _wordcount()


def write_files(directory: Path, names: list[str], lines: int, seed: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for k, name in enumerate(names):
        rows = [" ".join(WORDS[(seed * 131 + k * 17 + i * 7 + j * 13) % len(WORDS)] for j in range(8))
                for i in range(lines)]
        (directory / name).write_text("\n".join(rows) + "\n", encoding="utf-8")


def truth(*directories: Path) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for directory in directories:
        for path in directory.iterdir():
            counts.update(re.findall(r"[^\W\d_]+", path.read_text(encoding="utf-8").lower()))
    return counts


def output_lines(*directories: Path) -> dict[str, list[int]]:
    got: dict[str, list[int]] = collections.defaultdict(list)
    for directory in directories:
        for name in os.listdir(directory):
            assert not name.startswith("."), f"pending file visible: {name}"
            for line in (directory / name).read_text(encoding="utf-8").splitlines():
                word, count = line.split("\t")
                got[word].append(int(count))
    return got


def final_counts(savepoint_dir: Path) -> dict[str, int]:
    (path,) = glob.glob(str(savepoint_dir / "savepoint-*"))
    return {e.key: e.value for e in SavepointReader.read(path).read_keyed_state("counter", "count")}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("rescale")
    first, second = root / "first", root / "second"
    write_files(first, [f"a{i}.txt" for i in range(4)], 300, 1)
    write_files(second, [f"b{i}.txt" for i in range(3)], 300, 2)
    everything = root / "all"
    shutil.copytree(first, everything)
    for path in second.iterdir():
        shutil.copy(path, everything / path.name)
    return {"root": root, "first": first, "second": second, "all": everything}


@pytest.fixture(scope="module")
def p2_savepoint(inputs: dict[str, Path]) -> Path:
    """Word count over the first files at p=2, ending in a savepoint."""
    root = inputs["root"]
    status = run_job_file(WORDCOUNT, RunOptions(
        parallelism=2, savepoint_on_finish=str(root / "sp-p2"),
        job_args=("--input", str(inputs["first"]), "--output", str(root / "out-p2")),
    ))
    assert status is JobStatus.FINISHED
    assert final_counts(root / "sp-p2") == dict(truth(inputs["first"]))
    (path,) = glob.glob(str(root / "sp-p2" / "savepoint-*"))
    return Path(path)


@pytest.fixture(scope="module")
def uninterrupted(inputs: dict[str, Path]) -> dict[str, int]:
    root = inputs["root"]
    status = run_job_file(WORDCOUNT, RunOptions(
        parallelism=2, savepoint_on_finish=str(root / "sp-ref"),
        job_args=("--input", str(inputs["all"]), "--output", str(root / "out-ref")),
    ))
    assert status is JobStatus.FINISHED
    return final_counts(root / "sp-ref")


@pytest.mark.parametrize(("parallelism", "backend"), [(3, "rocksdb"), (1, "hashmap")])
def test_restore_at_another_parallelism_matches_an_uninterrupted_run(
    inputs: dict[str, Path], p2_savepoint: Path, uninterrupted: dict[str, int], parallelism: int, backend: str
) -> None:
    """The p=2 savepoint (hashmap backend) restored at p=3 (rocksdb backend) and p=1."""
    if backend == "rocksdb":
        pytest.importorskip("rocksdict")
    root = inputs["root"]
    run_input = root / f"in-p{parallelism}"
    shutil.copytree(inputs["all"], run_input)
    out = root / f"out-p{parallelism}"
    status = run_job_file(WORDCOUNT, RunOptions(
        parallelism=parallelism, restore_path=str(p2_savepoint), savepoint_on_finish=str(root / f"sp-p{parallelism}"),
        state_backend=backend, checkpoint_dir=str(root / "chk"), checkpoint_interval_ms=20,
        job_args=("--input", str(run_input), "--output", str(out)),
    ))
    assert status is JobStatus.FINISHED
    restored = SavepointReader.read(glob.glob(str(root / f"sp-p{parallelism}" / "savepoint-*"))[0])
    counter = restored.operator("counter")
    assert counter.parallelism == parallelism and counter.max_parallelism == 128
    assert final_counts(root / f"sp-p{parallelism}") == uninterrupted == dict(truth(inputs["all"]))
    # the outputs of both runs together hold every count of every word exactly once
    got = output_lines(root / "out-p2", out)
    assert {w: sorted(c) for w, c in got.items()} == {w: list(range(1, n + 1)) for w, n in uninterrupted.items()}


class SlowTokenize:
    """The example's tokenizer, 1 ms per line, so that a stop lands mid-stream."""

    def __call__(self, line: str) -> Any:
        time.sleep(0.001)
        return wc.tokenize(line)


def build_wordcount(env: StreamEnvironment, source: FileSource, output: Path, *, counter_uid: str = "counter",
                    tokenize: Any = None) -> None:
    (env.from_source(source, "files").uid("source")
        .flat_map(tokenize or wc.tokenize).uid("tokenize")
        .key_by(lambda word: word)
        .process(wc.CountWords()).uid(counter_uid)
        .sink_to(FileSink(str(output), encoder=wc.encode)).uid("sink"))


def test_stop_with_savepoint_mid_stream_then_restore_at_p3(inputs: dict[str, Path], uninterrupted: dict[str, int]) -> None:
    root = inputs["root"] / "stop"
    run_input = root / "in"
    shutil.copytree(inputs["all"], run_input)
    out = root / "out"
    env = StreamEnvironment().set_parallelism(2)
    env.enable_checkpointing(50, checkpoint_storage=str(root / "chk"))
    build_wordcount(env, FileSource(str(run_input), watch=True), out, tokenize=SlowTokenize())
    handle = env.execute_async("wordcount watch")
    time.sleep(0.5)
    savepoint = handle.trigger_savepoint(str(root / "sp"), stop=True).result(30)
    assert handle.wait(30) is JobStatus.FINISHED
    assert os.path.basename(savepoint).startswith(f"savepoint-{handle.job_id[:6]}-")
    consumed = sum(e["offset"] for e in SavepointReader.read(savepoint).read_union_state("source", "offsets"))
    assert 0 < consumed < sum(p.stat().st_size for p in run_input.iterdir()), "the stop did not land mid-stream"

    set_run_options(RunOptions(parallelism=3, restore_path=savepoint))
    try:
        env = StreamEnvironment()
        build_wordcount(env, FileSource(str(run_input)), out)
        result = env.execute("wordcount bounded")
    finally:
        set_run_options(None)
    assert result.status is JobStatus.FINISHED
    got = output_lines(out)
    assert {w: sorted(c) for w, c in got.items()} == {w: list(range(1, n + 1)) for w, n in uninterrupted.items()}


def test_missing_operator_fails_with_flinks_message_unless_allowed(inputs: dict[str, Path], p2_savepoint: Path) -> None:
    root = inputs["root"] / "missing"
    set_run_options(RunOptions(restore_path=str(p2_savepoint)))
    try:
        env = StreamEnvironment()
        build_wordcount(env, FileSource(str(inputs["all"])), root / "out", counter_uid="counter-v2")
        with pytest.raises(BadInputError) as failure:
            env.execute("renamed counter")
        assert str(failure.value) == missing_operator_message(str(p2_savepoint), "counter")
        assert str(failure.value).startswith(f"Failed to rollback to checkpoint/savepoint {p2_savepoint}. "
                                             "Cannot map checkpoint/savepoint state for operator counter")
        assert failure.value.exit_code == 2
        set_run_options(RunOptions(restore_path=str(p2_savepoint), allow_non_restored_state=True))
        env = StreamEnvironment()
        build_wordcount(env, FileSource(str(inputs["all"])), root / "out", counter_uid="counter-v2")
        assert env.execute("renamed counter").status is JobStatus.FINISHED
    finally:
        set_run_options(None)
    # the new counter started from scratch: only the second files' words were counted
    got = output_lines(root / "out")
    assert {w: max(c) for w, c in got.items()} == dict(truth(inputs["second"]))


def test_a_different_max_parallelism_is_refused_on_restore(inputs: dict[str, Path], p2_savepoint: Path) -> None:
    set_run_options(RunOptions(restore_path=str(p2_savepoint), max_parallelism=256))
    try:
        env = StreamEnvironment()
        build_wordcount(env, FileSource(str(inputs["all"])), inputs["root"] / "unused")
        env.transformations[2].max_parallelism = 256
        with pytest.raises(BadInputError, match="max parallelism 256 differs from 128"):
            env.execute("other max parallelism")
    finally:
        set_run_options(None)

