"""Writing and rescaling Flink (and statekit) savepoints on Spark: the same output as the local engines.

* ``bootstrap --format flink --engine spark``: the same entries as the local engine (list
  elements given one per row in no defined order: compared as multisets);
* ``rescale FLINK --max-parallelism --engine spark``: byte for byte the local engine's streams,
  on every path (merge, split, rehash), compressed or not, however the key groups are sliced and
  spilled and wherever the streams are gathered;
* ``rescale STATEKIT --max-parallelism --engine spark``: byte for byte the local engine's files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.flink.entries import read_keyed_state
from statekit.flink.storage import load_snapshot

pytestmark = pytest.mark.spark

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "pyflink-2.3/hashmap/savepoints/savepoint-48634f-b2be849ccf0d"
JAVA = Path(__file__).resolve().parents[1] / "golden" / "flink-java-2.3" / "tuple-compressed"
COMPRESSED = JAVA / str(json.loads((JAVA / "facts.json").read_text())["savepoint"])  # Snappy key groups


def invoke(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file() and p.name != "_metadata"}


def decoded(path: Path, uid: str, state: str, value_type: str | None = None) -> list[tuple[Any, ...]]:
    out = []
    for e in read_keyed_state(load_snapshot(str(path)), uid, state, value_type=value_type):
        value = sorted(e.value) if isinstance(e.value, list) else e.value
        out.append((e.key_group, json.dumps(e.key, sort_keys=True), e.user_key, json.dumps(value, sort_keys=True)))
    return sorted(out)


def test_flink_bootstrap_on_spark_writes_the_local_entries(spark: Any, tmp_path: Path) -> None:
    keys = [f"k{i % 700}" for i in range(2100)]
    pq.write_table(pa.table({"key": keys, "n": list(range(2100)), "tag": [f"t{i % 3}" for i in range(2100)]}),
                   tmp_path / "rows.parquet")
    unique = pa.table({"key": [f"k{i}" for i in range(700)], "n": list(range(700))})
    pq.write_table(unique, tmp_path / "unique.parquet")
    spec = {"operators": [
        {"uid": "py", "pyflink": True, "key_type": "string", "parallelism": 3, "key_column": "key",
         "input": "unique.parquet", "states": [{"name": "v", "value_column": "n"}]},
        {"uid": "java", "key_type": "string", "parallelism": 2, "max_parallelism": 256, "key_column": "key",
         "input": "rows.parquet",
         "states": [{"name": "l", "kind": "list", "value_column": "n", "value_type": "int"},
                    {"name": "m", "kind": "map", "value_column": "n", "user_key_column": "tag"},
                    {"name": "v", "value_column": "n", "input": "unique.parquet"}]}]}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    local = invoke("bootstrap", "--format", "flink", "--spec", str(tmp_path / "spec.json"), "-o", str(tmp_path / "l"))
    remote = invoke("bootstrap", "--format", "flink", "--spec", str(tmp_path / "spec.json"), "--engine", "spark",
                    "--master", "local[2]", "-o", str(tmp_path / "s"))
    assert remote["engine"] == "spark" and remote["entries"] == local["entries"] == 700 + 700 + 2100 + 700
    for uid, state, value_type in (("py", "python-state-v", "int"), ("java", "l", None), ("java", "v", None)):
        assert decoded(tmp_path / "s", uid, state, value_type) == decoded(tmp_path / "l", uid, state, value_type)
    # map state: one of several rows of a (key, map key) is kept on Spark
    local_keys = {row[:3] for row in decoded(tmp_path / "l", "java", "m")}
    assert {row[:3] for row in decoded(tmp_path / "s", "java", "m")} == local_keys
    assert invoke("verify", str(tmp_path / "s"))["ok"] is True


@pytest.mark.parametrize("savepoint, max_parallelism", [(GOLDEN, 128), (GOLDEN, 1024), (GOLDEN, 200),
                                                         (COMPRESSED, 512), (COMPRESSED, 64)])
def test_flink_rescale_on_spark_writes_the_local_bytes(spark: Any, tmp_path: Path, savepoint: Path,
                                                       max_parallelism: int) -> None:
    local = invoke("rescale", str(savepoint), "--max-parallelism", str(max_parallelism), "-o", str(tmp_path / "l"))
    remote = invoke("rescale", str(savepoint), "--max-parallelism", str(max_parallelism), "--engine", "spark",
                    "--master", "local[2]", "-o", str(tmp_path / "s"))
    assert (remote["engine"], local["engine"], remote["format"]) == ("spark", "local", "flink")
    assert sorted(files(tmp_path / "s").values()) == sorted(files(tmp_path / "l").values())
    assert remote["operators"] == local["operators"]
    assert invoke("verify", str(tmp_path / "s"))["ok"] is True


@pytest.mark.parametrize("gather_in_driver", [False, True])
@pytest.mark.parametrize("max_parallelism", [1024, 200])
def test_flink_split_on_spark_from_small_slices_and_spilled_runs(spark: Any, tmp_path: Path, max_parallelism: int,
                                                                 gather_in_driver: bool) -> None:
    """Many slices per source, each spilling several runs per group into its fragment, gathered by
    Spark tasks or the driver's threads: still the local engine's bytes, and no fragment left."""
    from statekit.flink.rewrite import rescale_flink_savepoint
    from statekit.spark.flink_rewrite import FRAGMENTS_PREFIX, SparkRegroup
    from statekit.spark.session import SparkSettings

    local = rescale_flink_savepoint(str(GOLDEN), str(tmp_path / "l"), max_parallelism=max_parallelism)
    regroup = SparkRegroup(SparkSettings("local[2]"), memory_budget=2048, slice_bytes=4096,
                           gather_in_driver=gather_in_driver)
    remote = rescale_flink_savepoint(str(GOLDEN), str(tmp_path / "s"), max_parallelism=max_parallelism,
                                     regroup=regroup, execution="spark")
    assert remote.spilled_bytes > 0 and remote.bytes_read == local.bytes_read
    assert sorted(files(tmp_path / "s").values()) == sorted(files(tmp_path / "l").values())
    assert not [p for p in (tmp_path / "s").rglob("*") if p.name.startswith(FRAGMENTS_PREFIX)]
    assert remote.operators == local.operators


@pytest.mark.parametrize("max_parallelism, gather", [(1024, "_CopySubtask"), (200, "_WriteSubtask")])
def test_a_failed_spark_gather_leaves_no_output_and_no_fragments(spark: Any, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch, max_parallelism: int,
                                                                 gather: str) -> None:
    from statekit.flink.rewrite import rescale_flink_savepoint
    from statekit.spark import flink_rewrite
    from statekit.spark.session import SparkSettings
    from statekit.statefmt.errors import CorruptStateError

    def broken(self: Any, work: tuple[int, list[Any]]) -> Any:
        raise CorruptStateError("a fragment went missing", path="fragment")

    monkeypatch.setattr(getattr(flink_rewrite, gather), "__call__", broken)
    with pytest.raises(CorruptStateError, match="a fragment went missing"):
        rescale_flink_savepoint(str(GOLDEN), str(tmp_path / "out"), max_parallelism=max_parallelism,
                                regroup=flink_rewrite.SparkRegroup(SparkSettings("local[2]"), gather_in_driver=True))
    assert list(tmp_path.iterdir()) == []


def test_statekit_rescale_on_spark_writes_the_local_files(spark: Any, sample: str, tmp_path: Path) -> None:
    for max_parallelism, parallelism in ((256, "3"), (64, "2"), (100, "2")):
        out_local, out_spark = tmp_path / f"l{max_parallelism}", tmp_path / f"s{max_parallelism}"
        invoke("rescale", sample, "--max-parallelism", str(max_parallelism), "-p", parallelism, "-o", str(out_local))
        report = invoke("rescale", sample, "--max-parallelism", str(max_parallelism), "-p", parallelism,
                        "--engine", "spark", "--master", "local[2]", "-o", str(out_spark))
        assert report["engine"] == "spark"
        assert files(out_spark) == files(out_local)
        assert invoke("verify", str(out_spark))["ok"] is True


@pytest.mark.parametrize("tasks, slice_bytes", [(1, 1 << 30), (2, 1 << 30), (8, 1 << 30), (2, 8 << 10)])
def test_slices_cover_every_key_group_once_in_stream_order(tasks: int, slice_bytes: int) -> None:
    pytest.importorskip("pyspark")
    from statekit.flink.streams_writer import key_group_blocks, operator_streams
    from statekit.spark.flink_rewrite import _slices

    snapshot = load_snapshot(str(GOLDEN))
    op = next(o for o in snapshot.metadata.operators if any(s.managed_keyed_state for s in o.subtasks))
    streams = operator_streams(snapshot, op)
    slices = _slices(streams, slice_bytes, tasks)
    assert [s.index for s in slices] == list(range(len(slices)))
    for number, source in enumerate(streams.sources):
        assert [b for s in slices if s.source == number for b in s.blocks] == key_group_blocks(source)
    sizes = [s.bytes for s in slices]
    largest = max(end - offset for s in slices for _, offset, end in s.blocks)
    if slice_bytes < sum(sizes):  # capped: no slice much past the cap
        assert len(slices) >= sum(sizes) // slice_bytes and max(sizes) < slice_bytes + largest
    else:  # about even: one slice per source at least, each source's share of the tasks rounded
        assert max(len(streams.sources), tasks) <= len(slices) <= tasks + len(streams.sources)
        assert max(sizes) <= 2 * min(sizes)


@pytest.mark.parametrize("window", [1, 3, 64])
def test_fragment_reads_any_piece_through_a_small_window_and_sets_the_flag(window: int) -> None:
    import io
    import random

    pytest.importorskip("pyspark")
    from statekit.flink.sources import META_FOLLOWS
    from statekit.spark.flink_rewrite import _Fragment

    data = bytes(range(40)) * 3
    fragment = _Fragment(io.BytesIO(data), "fragment", window)
    chosen = random.Random(7)
    offset = 0
    while offset < len(data):  # ascending pieces, as a gather asks for them, and some going back
        length = min(chosen.randrange(0, 11), len(data) - offset)
        flag = chosen.randrange(-1, length) if length else -1
        expected = bytearray(data[offset:offset + length])
        if flag >= 0:
            expected[flag] |= META_FOLLOWS
        assert b"".join(bytes(c) for c in fragment.read(offset, length, flag)) == bytes(expected)
        assert bytes(b"".join(bytes(c) for c in fragment.read(max(0, offset - 5), 5, -1))) == \
            data[max(0, offset - 5):max(0, offset - 5) + 5]
        offset += length
    with pytest.raises(Exception, match="truncated"):
        list(fragment.read(len(data), 4, -1))


@pytest.mark.parametrize("max_parallelism", [1024, 200])
def test_flink_rescale_on_spark_of_keyed_state_without_entries(spark: Any, tmp_path: Path,
                                                               max_parallelism: int) -> None:
    """Keyed handles whose streams hold only the header: no slice to map, header-only streams out."""
    pq.write_table(pa.table({"key": pa.array([], pa.string()), "n": pa.array([], pa.int64())}),
                   tmp_path / "rows.parquet")
    spec = {"operators": [{"uid": "java", "key_type": "string", "parallelism": 2, "max_parallelism": 128,
                           "key_column": "key", "input": "rows.parquet", "states": [{"name": "v", "value_column": "n"}]}]}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    invoke("bootstrap", "--format", "flink", "--spec", str(tmp_path / "spec.json"), "-o", str(tmp_path / "empty"))
    local = invoke("rescale", str(tmp_path / "empty"), "--max-parallelism", str(max_parallelism), "-o",
                   str(tmp_path / "l"))
    remote = invoke("rescale", str(tmp_path / "empty"), "--max-parallelism", str(max_parallelism), "--engine", "spark",
                    "--master", "local[2]", "-o", str(tmp_path / "s"))
    assert sorted(files(tmp_path / "s").values()) == sorted(files(tmp_path / "l").values())
    assert remote["operators"] == local["operators"] and local["operators"][0]["entries"] == 0


@pytest.mark.parametrize("kernel", ["copies half, then fails", "unsupported"])
def test_the_split_gather_falls_back_to_python_copies(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      kernel: str) -> None:
    import errno
    import os

    from statekit.flink.rewrite import rescale_flink_savepoint
    from statekit.spark.flink_rewrite import SparkRegroup
    from statekit.spark.session import SparkSettings

    real = os.copy_file_range
    calls = []

    def copy_file_range(src: int, dst: int, count: int, offset_src: int | None = None) -> int:
        calls.append(count)
        if kernel == "unsupported" or len(calls) % 2 == 0:
            raise OSError(errno.EXDEV, "cross-device link")
        return real(src, dst, max(1, count // 2), offset_src)

    monkeypatch.setattr(os, "copy_file_range", copy_file_range)
    rescale_flink_savepoint(str(GOLDEN), str(tmp_path / "l"), max_parallelism=1024)
    rescale_flink_savepoint(str(GOLDEN), str(tmp_path / "s"), max_parallelism=1024,
                            regroup=SparkRegroup(SparkSettings("local[2]"), gather_in_driver=True))
    assert calls and sorted(files(tmp_path / "s").values()) == sorted(files(tmp_path / "l").values())
