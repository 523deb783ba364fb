"""The vectorized regroup path (:mod:`statekit.flink.fast_regroup`) writes what the entry path writes.

Oracle: the Python entry-by-entry :class:`Regrouper` (``vectorized=False``); the streams of
both must be byte for byte equal, for every path (merge, split, rehash), prefix width change,
key type (vectorized hash or one by one), timers, and key groups whose id is a byte common in
the data (key group 0: dense candidates, the pointer-doubling chain).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekit.flink import regroup
from statekit.flink.fast_regroup import java_hashes, murmur_hash_array, parse_block
from statekit.flink.key_hash import murmur_words
from statekit.flink.keygroups import flink_murmur_hash, java_string_hash
from statekit.flink.rewrite import rescale_flink_savepoint
from statekit.flink.savepoint_bootstrap import (
    FlinkBootstrapSpec,
    FlinkOperatorSpec,
    FlinkStateSpec,
    bootstrap_flink_savepoint,
)
from statekit.flink.sources import key_group_entries
from statekit.flink.type_info import parse_flink_type
from statekit.statefmt.json_contract import json_data

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "pyflink-2.3/hashmap/savepoints/savepoint-48634f-b2be849ccf0d"
SQL_GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "flink-sql-2.3"
SQL_SAVEPOINTS = {"hashmap": "savepoint-90ad96-f1c6f0d4e954", "rocksdb": "savepoint-a2f725-610023af5004",
                  "hashmap-ttl": "savepoint-cfdbfe-d2f56d1ef35f"}  # canonical


def streams(directory: Path) -> list[bytes]:
    return sorted(p.read_bytes() for p in directory.iterdir() if p.name != "_metadata")


def both_paths(source: Path, out: Path, max_parallelism: int, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = rescale_flink_savepoint(str(source), str(out / "fast"), max_parallelism=max_parallelism)
    init = regroup.Regrouper.__init__

    def slow(self: regroup.Regrouper, *args: object, **kwargs: object) -> None:
        kwargs["vectorized"] = False
        init(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(regroup.Regrouper, "__init__", slow)
    slow_report = rescale_flink_savepoint(str(source), str(out / "slow"), max_parallelism=max_parallelism)
    monkeypatch.setattr(regroup.Regrouper, "__init__", init)
    assert streams(out / "fast") == streams(out / "slow")
    assert [json_data(op) for op in fast.operators] == [json_data(op) for op in slow_report.operators]


@pytest.mark.parametrize("max_parallelism", [64, 128, 512, 1000, 1024, 4096])
def test_real_flink_savepoint_same_bytes_on_every_path(tmp_path: Path, max_parallelism: int,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    both_paths(GOLDEN, tmp_path, max_parallelism, monkeypatch)


@pytest.mark.parametrize("variant", sorted(SQL_SAVEPOINTS))
@pytest.mark.parametrize("max_parallelism", [64, 100, 256, 1000])
def test_real_flink_sql_savepoint_same_bytes_on_every_path(tmp_path: Path, variant: str, max_parallelism: int,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``BinaryRowData`` keys: hashed a matrix of words at a time, or one by one."""
    both_paths(SQL_GOLDEN / variant / "savepoints" / SQL_SAVEPOINTS[variant], tmp_path, max_parallelism, monkeypatch)


def generated(tmp_path: Path, key_type: str, keys: list[object], max_parallelism: int) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = pa.table({"k": keys, "v": list(range(len(keys))), "ts": [1000 + i for i in range(len(keys))]})
    pq.write_table(rows, tmp_path / "rows.parquet")
    s = FlinkStateSpec
    op = FlinkOperatorSpec("op", (s("v", "value", ("v",)), s("l", "list", ("v",)), s("t", "event-timers", ("ts",))),
                           key_type=key_type, parallelism=3, max_parallelism=max_parallelism, key_column="k",
                           inputs=(str(tmp_path / "rows.parquet"),))
    bootstrap_flink_savepoint(FlinkBootstrapSpec((op,), str(tmp_path / "src")))
    return tmp_path / "src"


@pytest.mark.parametrize(("key_type", "keys"), [
    ("string", [f"k{i}" for i in range(3000)]),
    ("string", [f"ü{i}" * 3 for i in range(500)]),  # not ASCII: hashed one by one
    ("long", list(range(-1500, 1500))),
    ("int", list(range(0, 3000, 3))),
    ("row<a:string,b:int>", [{"a": f"x{i}", "b": i} for i in range(1000)]),  # two fields: one by one
])
@pytest.mark.parametrize(("old", "new"), [(128, 1024), (256, 128), (128, 96), (1024, 256)])
def test_generated_savepoints_same_bytes(tmp_path: Path, key_type: str, keys: list[object], old: int, new: int,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    source = generated(tmp_path, key_type, keys, old)
    both_paths(source, tmp_path / "out", new, monkeypatch)
    shutil.rmtree(tmp_path / "out")


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.binary(min_size=0, max_size=40), st.binary(max_size=300), st.integers(0, 3)),
                min_size=1, max_size=60), st.sampled_from([0, 1, 7, 127, 128, 300]))
def test_parse_block_finds_exactly_the_entries(entries: list[tuple[bytes, bytes, int]], key_group: int) -> None:
    """Random keys and values (full of zero bytes and key-group bytes) in sections of states."""
    prefix = 2 if key_group > 127 else 1
    head = key_group.to_bytes(prefix, "big")
    entries = sorted(entries, key=lambda e: e[2])
    block = bytearray(entries[0][2].to_bytes(2, "big"))
    for i, (key, value, state) in enumerate(entries):
        last = i + 1 == len(entries) or entries[i + 1][2] != state
        full = bytes([head[0] | (0x80 if last else 0)]) + head[1:] + key
        block += len(full).to_bytes(4, "big") + full + len(value).to_bytes(4, "big") + value
        if last:
            block += (0xFFFF if i + 1 == len(entries) else entries[i + 1][2]).to_bytes(2, "big")
    parsed = parse_block(bytes(block), key_group, prefix)
    expected = list(key_group_entries(bytes(block), key_group, ("a", "b", "c", "d"), prefix, "t", 0))
    assert parsed is not None
    assert parsed.starts.tolist() == [at for _, _, _, at in expected]
    assert parsed.states.tolist() == ["abcd".index(name) for name, _, _, _ in expected]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(max_codepoint=0x7E), max_size=30), min_size=1, max_size=40))
def test_vectorized_hashes_are_javas(texts: list[str]) -> None:
    string, row = parse_flink_type("string"), parse_flink_type("row<f0:string>")
    for text_type, extra in ((string, 0), (row, 62)):
        data = b"".join(text_type.encode_java(t if text_type is string else [t]) for t in texts)
        starts, at = [], 0
        for t in texts:
            starts.append(at)
            at += len(text_type.encode_java(t if text_type is string else [t]))
        hashes = java_hashes(np.frombuffer(data, np.uint8), np.array(starts, np.int64),
                             "String" if text_type is string else "Row<String>")
        assert hashes is not None
        expected = [(java_string_hash(t) + extra) & 0xFFFFFFFF for t in texts]
        assert hashes.tolist() == expected
        assert murmur_hash_array(hashes).tolist() == [flink_murmur_hash(h) for h in expected]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.binary(max_size=40)), min_size=1, max_size=30),
       st.binary(max_size=9))
def test_vectorized_binary_row_hashes_are_the_word_hash(rows: list[tuple[int, bytes]], gap: bytes) -> None:
    """SQL keys of 0 to 3 fields with any bytes after the fixed part (rows of several sizes in one
    block, each followed by bytes of no row): ``BinaryRowData.hashCode`` of each."""
    arity = 2
    fixed = 8 + 8 * arity
    data, starts, ends, expected, sizes = bytearray(), [], [], [], []
    for words, tail in rows:
        body = bytes(range(fixed)) + tail[:len(tail) // 4 * 4] + bytes(4 * words)
        starts.append(len(data))
        data += len(body).to_bytes(4, "big") + body
        ends.append(len(data) + len(gap))
        data += gap
        expected.append(murmur_words(body, 0, len(body)))
        sizes.append(len(body))
    hashes = java_hashes(np.frombuffer(bytes(data), np.uint8), np.array(starts, np.int64), "RowData<INT, INT>",
                         np.array(ends, np.int64), row_arity=arity)
    assert hashes is not None and hashes.tolist() == expected
    wider = java_hashes(np.frombuffer(bytes(data), np.uint8), np.array(starts, np.int64), "RowData<INT, INT, INT>",
                        np.array(ends, np.int64), row_arity=3)  # a row shorter than 3 fields' fixed part: one by one
    assert (wider is None) == (min(sizes) < 8 + 8 * 3)
    assert wider is None or wider.tolist() == expected
