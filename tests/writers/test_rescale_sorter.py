"""``KeyGroupSorter``: blocks per key group, sorted (in the order of the format version written)
and unique, with bounded buckets; serialized and typed values alike."""

from __future__ import annotations

import os
import random
from typing import Any

import pyarrow as pa
import pytest

from statekit.statefmt.entries import StateCodec
from statekit.statefmt.keygroups import compute_operator_index_for_key_group
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.statefmt.serializers import decode_list
from statekit.writers.key_group_sorter import DuplicateMode, KeyGroupSorter, sort_key_group_table

CODEC = StateCodec(StateDescriptor("s", StateKind.VALUE), "msgpack", for_write=True)


def table(rows: list[tuple[Any, Any]]) -> pa.Table:
    return CODEC.encode_keyed_rows(rows)


def drain_all(sorter: KeyGroupSorter) -> list[tuple[int, int, pa.RecordBatch]]:
    out: list[tuple[int, int, pa.RecordBatch]] = []
    results = sorter.drain(lambda i, blocks: [(i, kg, b) for kg, b in blocks])
    for part in results:
        out.extend(part)
    return out


def check_blocks(blocks: list[tuple[int, int, pa.RecordBatch]], max_p: int, p: int, version: int = 2) -> list[bytes]:
    keys: list[bytes] = []
    last: dict[int, int] = {}
    for subtask, key_group, batch in blocks:
        assert compute_operator_index_for_key_group(max_p, p, key_group) == subtask
        assert key_group > last.get(subtask, -1)
        last[subtask] = key_group
        hashes = batch.column("key_hash").to_pylist()
        assert all(h % max_p == key_group for h in hashes)
        column = batch.column("key").to_pylist()
        order = column if version == 1 else list(zip(hashes, column))
        assert order == sorted(order) and len(set(column)) == len(column)
        keys.extend(column)
    return keys


def test_oversized_buckets_are_resplit_without_losing_rows() -> None:
    rows = [(f"key-{i:07d}", "x" * 20) for i in range(60_000)]
    random.Random(7).shuffle(rows)
    with KeyGroupSorter(500, 1, memory_budget=1 << 20) as sorter:
        for start in range(0, len(rows), 5000):
            sorter.add(table(rows[start:start + 5000]))
        blocks = drain_all(sorter)
        assert sorter.spilled_bytes > 2 * table(rows).nbytes, "the bucket was re-partitioned"
        assert os.listdir(sorter.directory) == []
    keys = check_blocks(blocks, 500, 1)
    assert len(keys) == len(rows)
    assert not os.path.exists(sorter.directory)


@pytest.mark.parametrize("parallelism", [1, 3, 7])
def test_concurrent_drain_gives_every_subtask_its_groups(parallelism: int) -> None:
    rows = [(i, i * 2) for i in range(20_000)]
    with KeyGroupSorter(128, parallelism, expected_bytes=1 << 20) as sorter:
        sorter.add(table(rows))
        blocks = drain_all(sorter)
    assert sorted(check_blocks(blocks, 128, parallelism)) == sorted(table(rows).column("key").to_pylist())
    with KeyGroupSorter(128, parallelism) as sorter:
        sorter.add(table(rows))
        list(sorter.subtask_groups(0))
        with pytest.raises(ValueError, match="drained twice"):
            list(sorter.subtask_groups(0))


def test_last_write_wins_for_duplicates() -> None:
    with KeyGroupSorter(16, 2) as sorter:
        sorter.add(table([("a", 1), ("b", 1)]))
        sorter.add(table([("a", 2)]))
        sorter.add(table([("a", 3), ("c", 1)]))
        blocks = drain_all(sorter)
    decoded = {e.key: e.value for _, _, b in blocks for e in CODEC.decode_keyed_batch(b)}
    assert decoded == {"a": 3, "b": 1, "c": 1}


def test_concat_lists_appends_elements_in_arrival_order() -> None:
    codec = StateCodec(StateDescriptor("l", StateKind.LIST), "msgpack", for_write=True)
    with KeyGroupSorter(16, 1, duplicates=DuplicateMode.CONCAT_LISTS) as sorter:
        sorter.add(codec.encode_keyed_rows([("a", [1]), ("b", [9])]))
        sorter.add(codec.encode_keyed_rows([("a", [2, 3]), ("a", [4])]))
        blocks = drain_all(sorter)
    decoded = {e.key: e.value for _, _, b in blocks for e in codec.decode_keyed_batch(b)}
    assert decoded == {"a": [1, 2, 3, 4], "b": [9]}
    frames = [v for _, _, b in blocks for v in b.column("value").to_pylist()]
    assert all(len(decode_list(f)) in (1, 4) for f in frames)


@pytest.mark.parametrize("version", [1, 2])
def test_presorted_input_that_is_not_sorted_still_comes_out_sorted(version: int) -> None:
    rows = [(f"k{i}", i) for i in range(2000)]
    shuffled = table(rows).take(list(reversed(range(2000))))
    blocks = list(sort_key_group_table(shuffled, 8, presorted=True, version=version))
    keys = check_blocks([(compute_operator_index_for_key_group(8, 1, kg), kg, b) for kg, b in blocks], 8, 1, version)
    assert len(keys) == 2000


@pytest.mark.parametrize("version", [1, 2])
def test_blocks_are_in_the_order_of_the_version_written(version: int) -> None:
    rows = [(f"key-{i}", i) for i in range(5000)]
    random.Random(3).shuffle(rows)
    with KeyGroupSorter(64, 2, version=version) as sorter:
        sorter.add(table(rows))
        keys = check_blocks(drain_all(sorter), 64, 2, version)
    assert len(keys) == 5000


def test_typed_values_sort_and_concatenate_lists() -> None:
    codec = StateCodec(StateDescriptor("l", StateKind.LIST, value_type="int"), "msgpack", for_write=True)
    first = codec.encode_keyed_rows([("a", [1]), ("b", [9])], version=2)
    assert first.schema.field("value").type == pa.list_(pa.int64())
    with KeyGroupSorter(16, 1, duplicates=DuplicateMode.CONCAT_LISTS) as sorter:
        sorter.add(first)
        sorter.add(codec.encode_keyed_rows([("a", [2, 3]), ("a", [4])], version=2))
        blocks = drain_all(sorter)
    assert {e.key: e.value for _, _, b in blocks for e in codec.decode_keyed_batch(b)} == {"a": [1, 2, 3, 4], "b": [9]}
    assert all(b.schema.field("value").type == pa.list_(pa.int64()) for _, _, b in blocks)


def test_tables_of_another_schema_are_refused() -> None:
    typed = StateCodec(StateDescriptor("v", StateKind.VALUE, value_type="int"), "msgpack", for_write=True)
    with KeyGroupSorter(16, 1) as sorter:
        sorter.add(typed.encode_keyed_rows([("a", 1)], version=2))
        with pytest.raises(ValueError, match="differs from the first table's"):
            sorter.add(typed.encode_keyed_rows([("b", 1)], version=1))


def test_add_after_drain_is_refused() -> None:
    with KeyGroupSorter(8, 1) as sorter:
        sorter.add(table([("a", 1)]))
        drain_all(sorter)
        with pytest.raises(ValueError, match="after draining"):
            sorter.add(table([("b", 1)]))
