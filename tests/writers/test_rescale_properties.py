"""Hypothesis: for random keys, max parallelism and p1 -> p2 (up and down), with and without a
new max parallelism, every key lands in exactly one new subtask — the one
``compute_operator_index_for_key_group`` names — and the multiset of entries is unchanged."""

from __future__ import annotations

import collections
import tempfile
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.verification import verify_snapshot
from statekit.statefmt.json_contract import json_data
from statekit.statefmt.keygroups import assign_to_key_group, compute_operator_index_for_key_group
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.rescale import rescale_savepoint
from statekit.writers.savepoint_writer import SavepointWriter

VALUE = StateDescriptor("value", StateKind.VALUE)
MAP = StateDescriptor("map", StateKind.MAP)

keys = st.lists(st.one_of(st.integers(-10**12, 10**12), st.text(max_size=6)), min_size=1, max_size=120, unique=True)
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def entries(path: str) -> dict[str, collections.Counter[str]]:
    reader = SavepointReader.read(path)
    return {name: collections.Counter(repr(tuple(e)) for e in reader.read_keyed_state("op", name))
            for name in ("value", "map")}


def check_placement(path: str, max_parallelism: int, parallelism: int) -> None:
    reader = SavepointReader.read(path)
    op = reader.operator("op")
    assert (op.max_parallelism, op.parallelism) == (max_parallelism, parallelism)
    for state in ("value", "map"):
        owner: dict[tuple[bytes, bytes, Any], int] = {}
        for subtask, key_group, batch in reader.read_keyed_batches("op", state):
            assert compute_operator_index_for_key_group(max_parallelism, parallelism, key_group) == subtask
            assert key_group in op.subtasks[subtask].key_group_range
            columns = batch.to_pydict()
            for key, namespace, user_key in zip(columns["key"], columns["namespace"], columns["user_key"]):
                assert assign_to_key_group(key, max_parallelism) == key_group
                assert (key, namespace, user_key) not in owner, "an entry in two places"
                owner[(key, namespace, user_key)] = subtask
        by_key: dict[bytes, set[int]] = collections.defaultdict(set)
        for (key, _, _), subtask in owner.items():
            by_key[key].add(subtask)
        assert all(len(s) == 1 for s in by_key.values()), "a key in two subtasks"


def build(directory: str, data: list[Any], max_parallelism: int, parallelism: int) -> str:
    path = f"{directory}/source"
    writer = SavepointWriter.new_savepoint(max_parallelism)
    writer.with_operator("op", {
        VALUE: [(k, None if i % 3 else f"ns{i % 2}", i) for i, k in enumerate(data)],
        MAP: [(k, f"u{j}", [i, j]) for i, k in enumerate(data[:40]) for j in range(i % 3)],
    }, parallelism=parallelism)
    writer.write(path)
    return path


@SETTINGS
@given(data=keys, shape=st.data())
def test_new_parallelism_places_every_key_once(data: list[Any], shape: st.DataObject) -> None:
    max_p = shape.draw(st.integers(1, 300), "max parallelism")
    p1 = shape.draw(st.integers(1, min(max_p, 12)), "p1")
    p2 = shape.draw(st.integers(1, min(max_p, 12)), "p2")
    with tempfile.TemporaryDirectory() as directory:
        source = build(directory, data, max_p, p1)
        report = rescale_savepoint(source, f"{directory}/out", parallelism=p2)
        check_placement(f"{directory}/out", max_p, p2)
        assert entries(f"{directory}/out") == entries(source)
        assert verify_snapshot(f"{directory}/out").ok
        plan = rescale_savepoint(source, None, parallelism=p2, dry_run=True)
        assert json_data(plan.operators[0].subtasks) == json_data(report.operators[0].subtasks)


@SETTINGS
@given(data=keys, shape=st.data())
def test_new_max_parallelism_regroups_every_key(data: list[Any], shape: st.DataObject) -> None:
    m1 = shape.draw(st.integers(1, 300), "old max parallelism")
    m2 = shape.draw(st.one_of(st.integers(1, 600), st.sampled_from([m1 * 2, m1 * 8, max(1, m1 // 2)])),
                    "new max parallelism")
    p1 = shape.draw(st.integers(1, min(m1, 8)), "p1")
    p2 = shape.draw(st.integers(1, min(m2, 8)), "p2")
    with tempfile.TemporaryDirectory() as directory:
        source = build(directory, data, m1, p1)
        report = rescale_savepoint(source, f"{directory}/out", max_parallelism=m2, parallelism=p2,
                                   memory_budget=8 << 20)
        check_placement(f"{directory}/out", m2, p2)
        assert entries(f"{directory}/out") == entries(source)
        assert verify_snapshot(f"{directory}/out").ok
        plan = rescale_savepoint(source, None, max_parallelism=m2, parallelism=p2, dry_run=True)
        assert [(s.entries, s.key_groups) for s in plan.operators[0].subtasks] == \
               [(s.entries, s.key_groups) for s in report.operators[0].subtasks]
