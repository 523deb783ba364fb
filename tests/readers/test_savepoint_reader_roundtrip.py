"""Every state kind through SavepointWriter -> SavepointReader (hypothesis), key-group
selection, sort order inside blocks, partial reads, and the pickle guard."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import fsspec
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.entries import KeyedStateEntry, MapStateEntry
from statekit.statefmt.errors import BadInputError, StateNotFoundError, UntrustedSerializerError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.keygroups import (
    assign_to_key_group,
    compute_key_group_range_for_operator_index,
    compute_operator_index_for_key_group,
)
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import PerSubtask, SavepointWriter, split_evenly

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

keys = st.one_of(st.integers(-(2**40), 2**40), st.text(max_size=6))
namespaces = st.one_of(st.none(), st.integers(0, 5), st.text(min_size=1, max_size=3))
values = st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=8), st.lists(st.integers(0, 9), max_size=3),
                   st.none(), st.booleans(), st.binary(max_size=6))
expiries = st.one_of(st.none(), st.integers(0, 2**62))
# (max parallelism, parallelism)
shapes = st.sampled_from([1, 2, 4, 7, 128, 300, 32768]).flatmap(
    lambda m: st.tuples(st.just(m), st.integers(1, min(m, 5))))


@pytest.fixture
def memory_dir() -> Iterator[str]:
    url = f"memory://statekit-test-{uuid.uuid4().hex}"
    yield url
    fs = fsspec.filesystem("memory")
    if fs.exists(url):
        fs.rm(url, recursive=True)


def write_and_read(descriptor: StateDescriptor, data: Any, shape: tuple[int, int], key_serializer: str = "msgpack",
                   ) -> tuple[SavepointReader, str]:
    max_p, p = shape
    url = f"memory://statekit-test-{uuid.uuid4().hex}"
    SavepointWriter.new_savepoint(max_parallelism=max_p).with_operator(
        "op", {descriptor: data}, parallelism=p, key_serializer=key_serializer).write(url)
    return SavepointReader.read(url), url


def cleanup(url: str) -> None:
    fsspec.filesystem("memory").rm(url, recursive=True)


def check_keyed_layout(reader: SavepointReader, state: str, key_serializer: str = "msgpack") -> None:
    """Blocks sit in the subtask owning their key group, sorted by (key hash, key, namespace,
    user key) — the order of format version 2, which the writer writes."""
    op = reader.operator("op")
    for subtask, key_group, batch in reader.read_keyed_batches("op", state):
        assert key_group in op.subtasks[subtask].key_group_range
        assert compute_operator_index_for_key_group(op.max_parallelism, op.parallelism, key_group) == subtask
        rows = list(zip(batch.column("key_hash").to_pylist(), batch.column("key").to_pylist(),
                        batch.column("namespace").to_pylist(), [u or b"" for u in batch.column("user_key").to_pylist()]))
        assert rows == sorted(rows) and len(set(rows)) == len(rows)
        assert all(assign_to_key_group(k, op.max_parallelism) == key_group for _, k, _, _ in rows)
        assert all(assign_to_key_group(k, 2**32) == h for h, k, _, _ in rows)


# ---------------------------------------------------------------- keyed kinds


@pytest.mark.parametrize("kind", [StateKind.VALUE, StateKind.REDUCING, StateKind.AGGREGATING])
def test_single_value_kinds(kind: StateKind) -> None:
    @SETTINGS
    @given(st.lists(st.tuples(keys, namespaces, values, expiries), max_size=30), shapes)
    def check(rows: list[tuple[Any, Any, Any, int | None]], shape: tuple[int, int]) -> None:
        descriptor = StateDescriptor("s", kind, ttl_ms=60_000)
        reader, url = write_and_read(descriptor, [KeyedStateEntry(*r) for r in rows], shape)
        try:
            expected = {(k, ns): (v, exp) for k, ns, v, exp in rows}
            got = list(reader.read_keyed_state("op", "s"))
            assert {(e.key, e.namespace): (e.value, e.expiry) for e in got} == expected
            assert len(got) == len(expected)
            assert sum(f.entries for f in reader.metadata.files()) == len(expected)
            check_keyed_layout(reader, "s")
        finally:
            cleanup(url)

    check()


@SETTINGS
@given(st.lists(st.tuples(keys, namespaces, st.lists(values, max_size=4)), max_size=20), shapes)
def test_list_state(rows: list[tuple[Any, Any, list[Any]]], shape: tuple[int, int]) -> None:
    reader, url = write_and_read(StateDescriptor("l", StateKind.LIST), rows, shape)
    try:
        expected = {(k, ns): v for k, ns, v in rows}
        got = list(reader.read_keyed_state("op", "l"))
        assert {(e.key, e.namespace): e.value for e in got} == expected and len(got) == len(expected)
        check_keyed_layout(reader, "l")
    finally:
        cleanup(url)


@SETTINGS
@given(st.lists(st.tuples(keys, namespaces, st.text(max_size=4), values, expiries), max_size=30), shapes,
       st.sampled_from(["msgpack", "utf8", "json"]))
def test_map_state(rows: list[tuple[Any, Any, str, Any, int | None]], shape: tuple[int, int], user_key_serializer: str,
                   ) -> None:
    descriptor = StateDescriptor("m", StateKind.MAP, user_key_serializer=user_key_serializer)
    rows = [r for r in rows if user_key_serializer != "json" or not isinstance(r[3], bytes)]
    reader, url = write_and_read(descriptor, [MapStateEntry(k, uk, v, ns, exp) for k, ns, uk, v, exp in rows], shape)
    try:
        expected = {(k, ns, uk): (v, exp) for k, ns, uk, v, exp in rows}
        got = [e for e in reader.read_keyed_state("op", "m") if isinstance(e, MapStateEntry)]
        assert len(got) == len(list(reader.read_keyed_state("op", "m")))
        assert {(e.key, e.namespace, e.user_key): (e.value, e.expiry) for e in got} == expected
        assert len(got) == len(expected)
        check_keyed_layout(reader, "m")
    finally:
        cleanup(url)


@SETTINGS
@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40, unique=True), shapes,
       st.sampled_from(["int64", "msgpack", "json"]))
def test_key_serializers(key_list: list[int], shape: tuple[int, int], key_serializer: str) -> None:
    reader, url = write_and_read(StateDescriptor("v", StateKind.VALUE), [(k, -k) for k in key_list], shape, key_serializer)
    try:
        assert sorted((e.key, e.value) for e in reader.read_keyed_state("op", "v")) == sorted((k, -k) for k in key_list)
        assert reader.operator("op").key_serializer == key_serializer
        check_keyed_layout(reader, "v")
    finally:
        cleanup(url)


@SETTINGS
@given(st.lists(keys, max_size=60, unique=True), shapes, st.data())
def test_read_keyed_state_of_selected_key_groups(key_list: list[Any], shape: tuple[int, int], data: st.DataObject,
                                                 ) -> None:
    max_p, _ = shape
    reader, url = write_and_read(StateDescriptor("v", StateKind.VALUE), [(k, 1) for k in key_list], shape)
    try:
        groups = {k: assign_to_key_group(msgpack.packb(k), max_p) for k in key_list}
        chosen = data.draw(st.sets(st.sampled_from(sorted(set(groups.values()) | {0, max_p - 1}))))
        got = [e.key for e in reader.read_keyed_state("op", "v", key_groups=chosen)]
        assert sorted(got, key=repr) == sorted((k for k in key_list if groups[k] in chosen), key=repr)
        batches = list(reader.read_keyed_batches("op", "v", key_groups=chosen))
        assert [kg for _, kg, _ in batches] == sorted({groups[k] for k in key_list} & chosen)
        raw = list(reader.read_raw_blocks("op", "v", key_groups=chosen))
        assert [e.key_group for _, e, _ in raw] == [kg for _, kg, _ in batches]
    finally:
        cleanup(url)


# ---------------------------------------------------------------- operator kinds


@SETTINGS
@given(st.lists(values, max_size=20), st.integers(1, 6))
def test_operator_list_state_is_split_evenly(elements: list[Any], parallelism: int) -> None:
    reader, url = write_and_read(StateDescriptor("o", StateKind.OPERATOR_LIST), elements, (128, parallelism))
    try:
        parts = reader.read_operator_state_per_subtask("op", "o")
        assert parts == split_evenly(elements, parallelism)
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
        assert reader.read_list_state("op", "o") == elements
    finally:
        cleanup(url)


@SETTINGS
@given(st.lists(values, max_size=20), st.integers(1, 6))
def test_union_state(elements: list[Any], parallelism: int) -> None:
    reader, url = write_and_read(StateDescriptor("u", StateKind.UNION), elements, (128, parallelism))
    try:
        assert reader.read_union_state("op", "u") == elements
        parts = reader.read_operator_state_per_subtask("op", "u")
        assert len(parts) == parallelism and [e for p in parts for e in p] == elements
    finally:
        cleanup(url)


@SETTINGS
@given(st.dictionaries(st.text(max_size=5), values, max_size=10), st.integers(1, 6))
def test_broadcast_state(mapping: dict[str, Any], parallelism: int) -> None:
    descriptor = StateDescriptor("b", StateKind.BROADCAST, user_key_serializer="utf8")
    reader, url = write_and_read(descriptor, mapping, (128, parallelism))
    try:
        assert reader.read_broadcast_state("op", "b") == mapping
        parts = reader.read_operator_state_per_subtask("op", "b")
        assert parts == [sorted(mapping.items(), key=lambda kv: kv[0].encode())] * parallelism
    finally:
        cleanup(url)


def test_operator_list_state_given_per_subtask(memory_dir: str) -> None:
    descriptor = StateDescriptor("o", StateKind.OPERATOR_LIST)
    SavepointWriter.new_savepoint().with_operator("op", {descriptor: PerSubtask([[1], [], [2, 3]])}, parallelism=3
                                                  ).write(memory_dir)
    assert SavepointReader.read(memory_dir).read_operator_state_per_subtask("op", "o") == [[1], [], [2, 3]]
    with pytest.raises(BadInputError, match="2 subtask parts for parallelism 3"):
        SavepointWriter.new_savepoint().with_operator("op", {descriptor: PerSubtask([[1], [2]])}, parallelism=3
                                                      ).write(memory_dir + "-2")


def test_several_states_and_operators_together(memory_dir: str) -> None:
    value = StateDescriptor("v", StateKind.VALUE)
    union = StateDescriptor("u", StateKind.UNION)
    (SavepointWriter.new_savepoint(max_parallelism=16)
     .with_operator("a", {value: [(i, i) for i in range(50)], union: ["x"]}, parallelism=3)
     .with_operator("b", {value: [("k", 1)]}, parallelism=1, max_parallelism=32)
     .write(memory_dir))
    reader = SavepointReader.read(memory_dir)
    assert [(o.uid, o.parallelism, o.max_parallelism) for o in reader.operators] == [("a", 3, 16), ("b", 1, 32)]
    assert sorted(e.value for e in reader.read_keyed_state("a", "v")) == list(range(50))
    assert reader.read_union_state("a", "u") == ["x"]
    assert [s.key_group_range for s in reader.operator("a").subtasks] == [
        compute_key_group_range_for_operator_index(16, 3, i) for i in range(3)]


# ---------------------------------------------------------------- wrong requests


def test_wrong_kind_and_unknown_names(memory_dir: str) -> None:
    value = StateDescriptor("v", StateKind.VALUE)
    union = StateDescriptor("u", StateKind.UNION)
    SavepointWriter.new_savepoint().with_operator("op", {value: [(1, 1)], union: [1]}).write(memory_dir)
    reader = SavepointReader.read(memory_dir)
    with pytest.raises(BadInputError, match="state 'u' of 'op' is union state, not keyed"):
        list(reader.read_keyed_state("op", "u"))
    with pytest.raises(BadInputError, match="state 'v' of 'op' is keyed value state"):
        reader.read_operator_state_per_subtask("op", "v")
    with pytest.raises(BadInputError, match="state 'u' of 'op' is union state, not operator-list state"):
        reader.read_list_state("op", "u")
    with pytest.raises(BadInputError, match="not broadcast state"):
        reader.read_broadcast_state("op", "u")
    with pytest.raises(StateNotFoundError, match=r"no operator with uid 'nope' \(operators: op\)"):
        list(reader.read_keyed_state("nope", "v"))
    with pytest.raises(StateNotFoundError, match=r"operator 'op' has no state 'w' \(states: v, u\)"):
        list(reader.read_keyed_state("op", "w"))


# ---------------------------------------------------------------- pickle


def test_pickle_state_is_refused_without_trust(memory_dir: str) -> None:
    descriptor = StateDescriptor("p", StateKind.VALUE, value_serializer="pickle")
    SavepointWriter.new_savepoint().with_operator("op", {descriptor: [("k", {1, 2})]}).write(memory_dir)
    reader = SavepointReader.read(memory_dir)  # metadata is safe to read
    assert reader.descriptor("op", "p").value_serializer == "pickle"
    with pytest.raises(UntrustedSerializerError, match="'pickle' serializer, which can run arbitrary code") as info:
        list(reader.read_keyed_state("op", "p"))
    assert "--trust-pickle" in str(info.value)
    trusted = SavepointReader.read(memory_dir, trust_pickle=True)
    assert list(trusted.read_keyed_state("op", "p")) == [KeyedStateEntry("k", None, {1, 2}, None)]


def test_pickle_keys_and_operator_state_are_refused_too(memory_dir: str) -> None:
    value = StateDescriptor("v", StateKind.VALUE)
    union = StateDescriptor("u", StateKind.UNION, value_serializer="pickle")
    SavepointWriter.new_savepoint().with_operator("op", {value: [(("t", 1), 1)], union: [object.__name__]},
                                                  key_serializer="pickle").write(memory_dir)
    reader = SavepointReader.read(memory_dir)
    with pytest.raises(UntrustedSerializerError):
        list(reader.read_keyed_state("op", "v"))
    with pytest.raises(UntrustedSerializerError):
        reader.read_union_state("op", "u")
    trusted = SavepointReader.read(memory_dir, trust_pickle=True)
    assert [e.key for e in trusted.read_keyed_state("op", "v")] == [("t", 1)]


# ---------------------------------------------------------------- partial reads


class CountingStream:
    """Wraps a binary stream and counts the bytes handed to the reader."""

    def __init__(self, stream: IO[bytes], counter: dict[str, int]) -> None:
        self._stream = stream
        self._counter = counter

    def read(self, n: int = -1) -> bytes:
        data = self._stream.read(n)
        self._counter["bytes"] += len(data)
        self._counter["reads"] += 1
        return data

    def __enter__(self) -> CountingStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stream.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@pytest.mark.parametrize("where", ["local", "memory"])
def test_one_key_group_is_read_without_the_others(where: str, tmp_path: Path, memory_dir: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    url = str(tmp_path / "sp") if where == "local" else memory_dir
    descriptor = StateDescriptor("v", StateKind.VALUE)
    SavepointWriter.new_savepoint(max_parallelism=128).with_operator(
        "op", {descriptor: [(i, "x" * 50) for i in range(3000)]}).write(url)
    reader = SavepointReader.read(url)
    [file] = reader.metadata.files()
    counter = {"bytes": 0, "reads": 0}
    original = FileIO.open_input
    monkeypatch.setattr(FileIO, "open_input", lambda self, path: CountingStream(original(self, path), counter))

    key_group = 77
    got = list(reader.read_keyed_state("op", "v", key_groups=[key_group]))
    assert got and all(assign_to_key_group(msgpack.packb(e.key), 128) == key_group for e in got)
    with reader.open_file(file) as state_file:
        entry = state_file.entry(key_group)
        index_bytes = 32 * len(state_file.index)
        header_bytes = state_file.header_size  # version 2: 16 bytes and the file's schema
    assert entry is not None and header_bytes > 16
    one_open = header_bytes + 28 + index_bytes
    assert counter["bytes"] == 2 * one_open + entry.length  # header, footer, index (twice) and one block
    assert counter["bytes"] < file.size / 20

    counter.update(bytes=0, reads=0)
    list(reader.read_keyed_state("op", "v"))
    assert counter["bytes"] == file.size  # a full read touches every byte exactly once
