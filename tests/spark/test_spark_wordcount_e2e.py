"""End to end with the runtime: word-count savepoints exported and diffed, checked against
counts computed independently from the input files."""

from __future__ import annotations

import collections
import glob
import re
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest

from statekit.readers.diff import DiffSpec
from statekit.runtime.control.launcher import run_job_file
from statekit.runtime.dataflow.job_handle import JobStatus
from statekit.runtime.dataflow.run_options import RunOptions
from statekit.spark.engine import ENGINES, diff, export
from statekit.spark.export import ExportSpec
from statekit.spark.session import SparkSettings
from statekit.statefmt.json_contract import json_data

pytestmark = pytest.mark.spark

WORDCOUNT = str(Path(__file__).resolve().parents[2] / "examples" / "wordcount.py")
VOCABULARY = [f"{a}{b}" for a in "abcdefghij" for b in "klmnopqrst"]  # 100 words


def write_files(directory: Path, prefix: str, files: int, lines: int, first_word: int) -> None:
    """Lines of six words drawn from 60 consecutive words of the vocabulary, from ``first_word``."""
    directory.mkdir(parents=True, exist_ok=True)
    for k in range(files):
        rows = [" ".join(VOCABULARY[first_word + (k * 11 + i * 7 + j * 3) % 60] for j in range(6))
                for i in range(lines)]
        (directory / f"{prefix}{k}.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")


def truth(directory: Path) -> dict[str, int]:
    counts: collections.Counter[str] = collections.Counter()
    for path in directory.iterdir():
        counts.update(re.findall(r"[^\W\d_]+", path.read_text(encoding="utf-8").lower()))
    return dict(counts)


def run_wordcount(inputs: Path, root: Path, name: str, parallelism: int) -> str:
    status = run_job_file(WORDCOUNT, RunOptions(
        parallelism=parallelism, savepoint_on_finish=str(root / f"sp-{name}"),
        job_args=("--input", str(inputs), "--output", str(root / f"out-{name}")),
    ))
    assert status is JobStatus.FINISHED
    (path,) = glob.glob(str(root / f"sp-{name}" / "savepoint-*"))
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("wordcount-e2e")
    prefix, everything = root / "prefix", root / "all"
    write_files(prefix, "a", files=2, lines=60, first_word=0)
    shutil.copytree(prefix, everything)
    write_files(everything, "b", files=1, lines=60, first_word=40)  # 0-39 same, 40-59 changed, 60-99 new
    return {
        "truth_prefix": truth(prefix), "truth_all": truth(everything), "root": root,
        "prefix": run_wordcount(prefix, root, "prefix", 2),
        "prefix_p5": run_wordcount(prefix, root, "prefix-p5", 5),
        "all": run_wordcount(everything, root, "all", 2),
    }


def test_exported_word_counts_equal_the_input(spark: Any, world: dict[str, Any]) -> None:
    out = world["root"] / "export"
    export(ExportSpec(world["prefix"], str(out), operator="counter", state="count", spark=SparkSettings("local[2]")), "spark")
    glob_ = f"{out}/operator_uid=counter/state_name=count/*.parquet"
    con = duckdb.connect()
    types = {row[0]: row[1] for row in con.execute(f"DESCRIBE SELECT key, value FROM read_parquet('{glob_}')").fetchall()}
    assert types == {"key": "VARCHAR", "value": "BIGINT"}  # typed: not bytes, not text
    counts = dict(con.execute(f"SELECT key, value FROM read_parquet('{glob_}')").fetchall())
    assert counts == world["truth_prefix"]


def test_diff_of_two_prefixes_equals_the_input_difference(spark: Any, world: dict[str, Any]) -> None:
    before, after = world["truth_prefix"], world["truth_all"]
    expected = (
        len(set(before) - set(after)),
        len(set(after) - set(before)),
        sum(1 for w in before if w in after and before[w] != after[w]),
        sum(1 for w in before if after.get(w) == before[w]),
    )
    assert expected[1] > 0 and expected[2] > 0 and expected[3] > 0
    spec = DiffSpec(world["prefix"], world["all"], operator="counter", state="count")
    for result in (diff(spec), diff(spec, "spark", SparkSettings("local[2]"))):
        (count,) = result.states
        assert (count.only_in_a, count.only_in_b, count.changed, count.unchanged) == expected


def test_rescaled_runs_compare_equal(spark: Any, world: dict[str, Any]) -> None:
    for engine in ENGINES:
        result = diff(DiffSpec(world["prefix"], world["prefix_p5"], operator="counter"), engine)
        assert result.equal, json_data(result)
        assert result.states[0].unchanged == len(world["truth_prefix"])
