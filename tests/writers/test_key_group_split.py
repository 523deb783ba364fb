"""Key groups split into a multiple of the old max parallelism without spilling
(``writers/key_group_split.py`` and its use by ``rescale --max-parallelism``): the sweep
schedule, the block-order check it relies on, and the same bytes as the sorter's path."""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import statekit.writers.rescale as rescale_module
from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.verification import verify_snapshot
from statekit.statefmt.errors import CorruptStateError
from statekit.statefmt.keygroups import compute_key_group_range_for_operator_index
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.key_group_sorter import DuplicateMode, in_block_order, sort_key_group_table
from statekit.writers.key_group_split import MAX_READS_PER_PARENT, children, split_reads, split_schedule
from statekit.writers.rescale import rescale_savepoint
from statekit.writers.savepoint_writer import SavepointWriter

VALUE = StateDescriptor("value", StateKind.VALUE)
MAP = StateDescriptor("map", StateKind.MAP)
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(max_examples=200, deadline=None)
@given(old_max=st.integers(1, 64), ratio=st.integers(1, 9), shape=st.data())
def test_each_subtask_gets_its_key_groups_in_order_from_their_parents(old_max: int, ratio: int,
                                                                      shape: st.DataObject) -> None:
    new_max = old_max * ratio
    parallelism = shape.draw(st.integers(1, min(new_max, 16)), "parallelism")
    ranges = [compute_key_group_range_for_operator_index(new_max, parallelism, i) for i in range(parallelism)]
    steps = split_schedule(old_max, new_max, ranges)
    got: list[list[int]] = [[] for _ in ranges]
    sweeps = 1
    for before, step in zip([None, *steps], steps):
        if before is not None and step.parent <= before.parent:
            sweeps += 1  # a new sweep starts over at a lower old key group
        subtasks = [i for i, _ in step.targets]
        assert len(subtasks) == len(set(subtasks)), "two key groups of one subtask in one read"
        for i, key_group in step.targets:
            assert key_group % old_max == step.parent
            got[i].append(key_group)
    assert got == [list(r) for r in ranges]
    widest = max(len(r) for r in ranges)
    assert sweeps <= -(-widest // old_max) + 1
    assert split_reads(steps, old_max) == len(steps) / old_max <= sweeps


def test_a_max_parallelism_that_is_no_multiple_is_refused() -> None:
    with pytest.raises(ValueError, match="not a multiple"):
        split_schedule(128, 1000, [compute_key_group_range_for_operator_index(1000, 1, 0)])


def write_source(directory: str, keys: list[Any], max_parallelism: int, parallelism: int) -> str:
    path = os.path.join(directory, "source")
    SavepointWriter.new_savepoint(max_parallelism).with_operator("op", {
        VALUE: [(k, None if i % 3 else f"ns{i % 2}", i) for i, k in enumerate(keys)],
        MAP: [(k, f"u{j}", [i, j]) for i, k in enumerate(keys[:60]) for j in range(i % 4)],
    }, parallelism=parallelism).write(path)
    return path


def state_files(path: str) -> dict[str, bytes]:
    found = {}
    for directory, _, files in os.walk(path):
        for name in files:
            if name != "_metadata":
                full = os.path.join(directory, name)
                found[os.path.relpath(full, path)] = Path(full).read_bytes()
    return found


@pytest.fixture
def split_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the states a rescale writes through the split."""
    calls: list[int] = []
    original = rescale_module._Job._split_state

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(rescale_module._Job, "_split_state", spy)
    return calls


keys = st.lists(st.one_of(st.integers(-10**9, 10**9), st.text(max_size=5)), min_size=1, max_size=150, unique=True)


@SETTINGS
@given(data=keys, shape=st.data())
def test_the_split_writes_the_bytes_the_sorter_writes(data: list[Any], shape: st.DataObject) -> None:
    old_max = shape.draw(st.integers(1, 40), "old max parallelism")
    new_max = old_max * shape.draw(st.integers(2, 8), "ratio")
    p1 = shape.draw(st.integers(1, min(old_max, 6)), "p1")
    p2 = shape.draw(st.integers(1, min(new_max, 8)), "p2")
    ranges = [compute_key_group_range_for_operator_index(new_max, p2, i) for i in range(p2)]
    split = split_reads(split_schedule(old_max, new_max, ranges), old_max) <= MAX_READS_PER_PARENT
    with tempfile.TemporaryDirectory() as directory, pytest.MonkeyPatch.context() as patch:
        source = write_source(directory, data, old_max, p1)
        calls: list[int] = []
        original = rescale_module._Job._split_state
        patch.setattr(rescale_module._Job, "_split_state",
                      lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
        rescale_savepoint(source, f"{directory}/split", max_parallelism=new_max, parallelism=p2)
        assert len(calls) == (2 if split else 0)  # both states, or neither
        patch.setattr(rescale_module, "MAX_READS_PER_PARENT", 0)  # every state through the sorter
        rescale_savepoint(source, f"{directory}/sorted", max_parallelism=new_max, parallelism=p2,
                          memory_budget=8 << 20)
        assert len(calls) == (2 if split else 0)
        assert state_files(f"{directory}/split") == state_files(f"{directory}/sorted")
        assert verify_snapshot(f"{directory}/split").ok


def test_a_rescale_to_8x_the_max_parallelism_splits_and_keeps_every_entry(tmp_path: Path,
                                                                          split_calls: list[int]) -> None:
    source = write_source(str(tmp_path), [f"key-{i}" for i in range(3000)], 32, 3)
    report = rescale_savepoint(source, str(tmp_path / "out"), max_parallelism=256, parallelism=5)
    assert len(split_calls) == 2
    before, after = SavepointReader.read(source), SavepointReader.read(str(tmp_path / "out"))
    for state in ("value", "map"):
        assert sorted(map(repr, after.read_keyed_state("op", state))) == \
            sorted(map(repr, before.read_keyed_state("op", state)))
        for _, key_group, batch in after.read_keyed_batches("op", state):
            assert all(h % 256 == key_group for h in batch.column("key_hash").to_pylist())
    assert verify_snapshot(str(tmp_path / "out")).ok
    assert sum(s.entries for s in report.operators[0].subtasks) == 3000 + sum(i % 4 for i in range(60))


def test_a_split_that_would_read_too_often_goes_through_the_sorter(tmp_path: Path, split_calls: list[int]) -> None:
    source = write_source(str(tmp_path), [f"key-{i}" for i in range(500)], 8, 2)
    rescale_savepoint(source, str(tmp_path / "out"), max_parallelism=64, parallelism=1)  # 8 sweeps
    assert split_calls == []
    assert verify_snapshot(str(tmp_path / "out")).ok


def blocks_of(path: str, state: str = "value") -> Iterator[tuple[int, pa.RecordBatch]]:
    for _, key_group, batch in SavepointReader.read(path).read_keyed_batches("op", state):
        yield key_group, batch


@pytest.fixture(scope="module")
def source_blocks(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[int, pa.RecordBatch]]:
    directory = str(tmp_path_factory.mktemp("blocks"))
    return list(blocks_of(write_source(directory, [f"u{i:05d}" for i in range(4000)], 4, 1)))


def tied(key_group: int, batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` in key order, its ``key_hash`` replaced by values of ``key_group`` at max
    parallelism 4 that come in equal pairs: a block in version 2's order whose hashes tie
    (as real hashes do about every other block of 80,000 entries at max parallelism 128)."""
    import pyarrow.compute as pc

    ordered = batch.take(pc.sort_indices(batch.column("key")))
    hashes = pa.array([key_group + 4 * (i // 2) for i in range(ordered.num_rows)], pa.uint32())
    return ordered.set_column(ordered.schema.get_field_index("key_hash"), "key_hash", hashes)


def test_blocks_in_order_pass_the_hash_check_also_with_equal_hashes(
        source_blocks: list[tuple[int, pa.RecordBatch]]) -> None:
    for key_group, batch in source_blocks:
        for block in (batch, tied(key_group, batch)):
            assert in_block_order(block, 4, key_group, 2)
            assert not in_block_order(block, 4, (key_group + 1) % 4, 2)
            assert not in_block_order(block, 4, key_group, 1)  # version 1: the full check decides
            (_, checked), = sort_key_group_table(pa.Table.from_batches([block]), 4, DuplicateMode.LAST,
                                                 presorted=True, version=2)
            assert checked.equals(block)  # the full check agrees


def _with_rows_swapped(batch: pa.RecordBatch, i: int) -> pa.RecordBatch:
    order = list(range(batch.num_rows))
    order[i], order[i + 1] = order[i + 1], order[i]
    return batch.take(pa.array(order))


def test_a_tie_out_of_order_or_repeated_fails_the_hash_check(source_blocks: list[tuple[int, pa.RecordBatch]]) -> None:
    key_group, batch = source_blocks[0]
    block = tied(key_group, batch)
    swapped_tie = _with_rows_swapped(block, 10)  # rows 10 and 11 share a hash
    repeated = pa.concat_batches([block.slice(0, 11), block.slice(10, block.num_rows - 10)])
    descending = _with_rows_swapped(block, 11)  # rows 11 and 12 do not
    for bad in (swapped_tie, repeated, descending):
        assert not in_block_order(bad, 4, key_group, 2)
        (_, mended), = sort_key_group_table(pa.Table.from_batches([bad]), 4, DuplicateMode.LAST,
                                            presorted=True, version=2)
        assert mended.equals(block)  # what the sorter makes of it: the block in order


def test_an_entry_of_another_key_group_in_a_block_is_named(source_blocks: list[tuple[int, pa.RecordBatch]]) -> None:
    (g0, first), (g1, second) = source_blocks[:2]
    mixed = pa.concat_batches([first, second.slice(0, 1)])
    with pytest.raises(CorruptStateError, match=f"key group {g0}: .*key group {g1}") as caught:
        rescale_module._ordered_parent(mixed, 4, g0, 2, "op/value/00000-of-00001.sks")
    assert caught.value.path == "op/value/00000-of-00001.sks"


def test_children_cut_a_parent_by_the_new_key_group_in_its_order(
        source_blocks: list[tuple[int, pa.RecordBatch]]) -> None:
    key_group, parent = source_blocks[0]
    wanted = [key_group + 4 * j for j in range(8)]
    cut = children(parent, 32, wanted)
    assert sum(c.num_rows for c in cut) == parent.num_rows
    for k, child in zip(wanted, cut):
        hashes = child.column("key_hash").to_pylist()
        assert all(h % 32 == k for h in hashes) and hashes == sorted(hashes)
    assert children(cut[0], 32, [wanted[0]]) == [cut[0]]  # a parent that is one child whole


def test_an_empty_old_block_gives_no_entries_and_no_error(tmp_path: Path, split_calls: list[int],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A block of 0 entries passes verify (found by review: the split raised IndexError)."""
    import statekit.statefmt.statefile as statefile

    original = statefile.StateFileWriter.write_blocks

    def with_an_empty_first_block(self: Any, groups: Any) -> None:
        groups = list(groups)
        if groups and groups[0][0] > 0:
            if self.codec is None:
                self._start(statefile.BlockCodec.for_writing(self._kind, groups[0][1].schema,
                                                             statefile.current_write_format()))
            self._write_parts(0, 0, self.codec.encode_parts(groups[0][1].slice(0, 0)))
        original(self, groups)

    monkeypatch.setattr(statefile.StateFileWriter, "write_blocks", with_an_empty_first_block)
    SavepointWriter.new_savepoint(64).with_operator(
        "op", {VALUE: [(f"key-{i}", i) for i in range(3, 40)]}, parallelism=1).write(str(tmp_path / "source"))
    monkeypatch.setattr(statefile.StateFileWriter, "write_blocks", original)
    assert next((g, b.num_rows) for g, b in blocks_of(str(tmp_path / "source"))) == (0, 0)
    rescale_savepoint(str(tmp_path / "source"), str(tmp_path / "split"), max_parallelism=128, parallelism=2)
    assert split_calls == [1]
    monkeypatch.setattr(rescale_module, "MAX_READS_PER_PARENT", 0)
    rescale_savepoint(str(tmp_path / "source"), str(tmp_path / "sorted"), max_parallelism=128, parallelism=2)
    assert state_files(str(tmp_path / "split")) == state_files(str(tmp_path / "sorted"))


def test_a_cutting_thread_holds_one_old_file_open_at_a_time(tmp_path: Path, split_calls: list[int],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by review: every cutter kept every old file open (file descriptors: 2 x old
    parallelism, on top of the new files)."""
    import contextlib
    import threading

    source = write_source(str(tmp_path), [f"key-{i}" for i in range(3000)], 64, 32)
    reader_type = type(SavepointReader.read(source))
    original = reader_type.open_subtask_file
    open_now, most = [0], [0]
    lock = threading.Lock()

    @contextlib.contextmanager
    def counted(self: Any, *args: Any) -> Iterator[Any]:
        with original(self, *args) as reader:
            with lock:
                open_now[0] += 1
                most[0] = max(most[0], open_now[0])
            try:
                yield reader
            finally:
                with lock:
                    open_now[0] -= 1

    monkeypatch.setattr(reader_type, "open_subtask_file", counted)
    rescale_savepoint(source, str(tmp_path / "out"), max_parallelism=128, parallelism=4)
    assert split_calls == [1, 1]
    assert most[0] <= rescale_module._CUTTERS and open_now[0] == 0
    assert verify_snapshot(str(tmp_path / "out")).ok


@pytest.mark.parametrize("case", ["format version 1", "object store output", "many new subtasks"])
def test_where_the_split_would_cost_more_the_sorter_writes(case: str, tmp_path: Path, split_calls: list[int]) -> None:
    """Found by review: in format version 1 the split wrote other bytes than the sorter (blocks
    not compacted); to an object store, every open file buffers a part (s3fs: up to 50 MiB)."""
    import uuid

    from statekit.statefmt.encoding import WriteFormat, writing_format

    keys = [f"key-{i}" for i in range(800)]
    if case == "format version 1":
        with writing_format(WriteFormat(version=1)):
            source = write_source(str(tmp_path), keys, 16, 2)
            rescale_savepoint(source, str(tmp_path / "out"), max_parallelism=64, parallelism=3)
    elif case == "object store output":
        source = write_source(str(tmp_path), keys, 16, 2)
        rescale_savepoint(source, f"memory://statekit-split-{uuid.uuid4().hex}", max_parallelism=64, parallelism=3)
    else:
        from statekit.writers.key_group_split import MAX_SPLIT_OUTPUTS

        source = write_source(str(tmp_path), keys, 64, 2)
        rescale_savepoint(source, str(tmp_path / "out"), max_parallelism=256, parallelism=MAX_SPLIT_OUTPUTS + 1)
    assert split_calls == []


def test_null_key_hashes_are_left_to_the_full_check(source_blocks: list[tuple[int, pa.RecordBatch]]) -> None:
    key_group, batch = source_blocks[0]
    hashes = batch.column("key_hash").to_pylist()
    hashes[1] = None
    nulled = batch.set_column(batch.schema.get_field_index("key_hash"), "key_hash", pa.array(hashes, pa.uint32()))
    assert not in_block_order(nulled, 4, key_group, 2)


def test_the_split_starts_each_new_files_writeback_as_it_grows(tmp_path: Path, split_calls: list[int],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Every few MiB a new file's new bytes are handed to the OS with a writeback hint, range
    after range from the start; the hint changes no byte."""
    source = write_source(str(tmp_path), [f"key-{i}" for i in range(4000)], 16, 2)
    hinted: dict[int, list[tuple[int, int]]] = {}

    def record(fd: int, offset: int, length: int) -> None:
        assert os.fstat(fd).st_size >= offset + length, "a hint beyond what was flushed"
        hinted.setdefault(os.fstat(fd).st_ino, []).append((offset, length))

    monkeypatch.setattr(rescale_module, "start_writeback", record)
    monkeypatch.setattr(rescale_module, "_WRITEBACK_BYTES", 2048)
    rescale_savepoint(source, str(tmp_path / "split"), max_parallelism=64, parallelism=3)
    assert split_calls == [1, 1]
    assert len(hinted) == 6  # two states, three new files each
    for ranges in hinted.values():
        assert ranges[0][0] == 0 and all(a + n == b for (a, n), (b, _) in itertools.pairwise(ranges))
    monkeypatch.setattr(rescale_module, "MAX_READS_PER_PARENT", 0)
    rescale_savepoint(source, str(tmp_path / "sorted"), max_parallelism=64, parallelism=3)
    assert state_files(str(tmp_path / "split")) == state_files(str(tmp_path / "sorted"))
