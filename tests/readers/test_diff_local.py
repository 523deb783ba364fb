"""The local diff engine: structural and data diffs on constructed savepoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekit.readers.diff import DiffSpec, SavepointDiff
from statekit.readers.diff import join as join_module
from statekit.readers.diff import regrouped as regrouped_module
from statekit.statefmt.errors import BadInputError, PathNotFoundError, StateNotFoundError
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.diff_output import write_diff
from statekit.writers.savepoint_writer import SavepointWriter

COUNT = StateDescriptor("count", StateKind.VALUE, value_type="int")
TAGS = StateDescriptor("tags", StateKind.MAP, value_type="int", user_key_type="string")
HISTORY = StateDescriptor("history", StateKind.LIST, value_type="int")
OFFSETS = StateDescriptor("offsets", StateKind.OPERATOR_LIST, value_type="int")
RULES = StateDescriptor("rules", StateKind.BROADCAST, value_type="string", user_key_type="string")


def diff_savepoints(a: str, b: str, **options: Any) -> SavepointDiff:
    return write_diff(DiffSpec(a, b, **options))


def counts(start: int, stop: int, changed: range = range(0)) -> list[tuple[str, int]]:
    return [(f"k{i}", i + (1000 if i in changed else 0)) for i in range(start, stop)]


def write(path: Path, rows: list[tuple[str, int]], *, parallelism: int = 2, max_parallelism: int = 128,
          extra: dict[StateDescriptor, Any] | None = None, operators: dict[str, Any] | None = None) -> str:
    writer = SavepointWriter.new_savepoint(max_parallelism)
    writer.with_operator("counter", {COUNT: rows, **(extra or {})}, parallelism=parallelism)
    for uid, states in (operators or {}).items():
        writer.with_operator(uid, states, parallelism=parallelism)
    writer.write(str(path))
    return str(path)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("diff")
    return {
        "a": write(root / "a", counts(0, 1000)),
        "a_copy": write(root / "a_copy", counts(0, 1000)),
        "a_p5": write(root / "a_p5", counts(0, 1000), parallelism=5),
        "a_m256": write(root / "a_m256", counts(0, 1000), max_parallelism=256),
        # 100 removed (0..99), 100 added (1000..1099), 100 changed (500..599), 800 unchanged
        "b": write(root / "b", counts(100, 1100, changed=range(500, 600))),
        "b_m256": write(root / "b_m256", counts(100, 1100, changed=range(500, 600)), max_parallelism=256, parallelism=3),
    }


def state(result: Any, name: str = "count") -> Any:
    return next(s for s in result.states if s.state_name == name)


def test_identical_savepoints_are_equal_and_skip_every_key_group(base: dict[str, str]) -> None:
    result = diff_savepoints(base["a"], base["a_copy"])
    assert result.equal
    s = state(result)
    assert (s.only_in_a, s.only_in_b, s.changed, s.unchanged) == (0, 0, 0, 1000)
    assert s.key_groups_compared == 0 and s.key_groups_skipped > 100
    assert result.structural == ()


def test_counts_of_removed_added_and_changed_keys(base: dict[str, str]) -> None:
    result = diff_savepoints(base["a"], base["b"])
    assert not result.equal
    s = state(result)
    assert (s.only_in_a, s.only_in_b, s.changed, s.unchanged) == (100, 100, 100, 800)
    assert s.key_groups_skipped + s.key_groups_compared <= 128


def test_rescaled_copy_is_equal_and_listed_as_a_layout_change(base: dict[str, str]) -> None:
    result = diff_savepoints(base["a"], base["a_p5"])
    assert result.equal
    assert state(result).unchanged == 1000
    assert [(c.change, c.a, c.b, c.layout) for c in result.structural] == [("parallelism_changed", 2, 5, True)]


def test_different_max_parallelism_compares_by_key(base: dict[str, str]) -> None:
    same = diff_savepoints(base["a"], base["a_m256"])
    assert same.equal and state(same).unchanged == 1000
    result = diff_savepoints(base["a"], base["b_m256"])
    s = state(result)
    assert (s.only_in_a, s.only_in_b, s.changed, s.unchanged) == (100, 100, 100, 800)


def _force_buckets(monkeypatch: pytest.MonkeyPatch, a: str, b: str, needed: int) -> dict[str, Any]:
    """Make ``needed`` hash buckets necessary for ``a`` against ``b``; returns a record of the
    path taken (the side read straight from its files, or None, and the buckets spilled)."""
    from statekit.readers.savepoint_reader import SavepointReader

    total = sum(f.size for path in (a, b) for st in SavepointReader.read(path).operator("counter").subtasks
                for f in st.files if f.state == "count")
    monkeypatch.setattr(regrouped_module, "BUCKET_BYTES", -(-total // needed))
    taken: dict[str, Any] = {"spilled": set()}
    direct_side, append = regrouped_module._direct_side, regrouped_module.ArrowSpill.append

    def record_direct(pair: Any, wanted: int) -> Any:
        taken["direct"] = direct_side(pair, wanted)
        return taken["direct"]

    def record_append(self: Any, bucket: str, batch: Any) -> None:
        taken["spilled"].add(bucket.split("-")[0])
        append(self, bucket, batch)

    monkeypatch.setattr(regrouped_module, "_direct_side", record_direct)
    monkeypatch.setattr(regrouped_module.ArrowSpill, "append", record_append)
    return taken


@pytest.mark.parametrize(("max_a", "max_b", "needed", "direct", "spilled"), [
    (128, 256, 300, None, {"a", "b"}),  # no divisor of 128 or 256 in [300, 1200]: both sides spill
    (128, 256, 200, ("b", 256), {"a"}),  # 256 in [200, 800]: b's buckets are whole key groups
    (96, 128, 40, ("a", 48), {"b"}),  # a is the larger side (more entries) and 48 divides 96
])
def test_different_max_parallelism_by_hash_buckets_gives_the_same_answer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_a: int, max_b: int, needed: int,
        direct: tuple[str, int] | None, spilled: set[str]) -> None:
    """Every way of cutting the entries into buckets gives the counts of the full comparison
    (100 removed, 100 added, 100 changed, 800 unchanged) and the same differing keys."""
    a = write(tmp_path / "a", counts(0, 1000) + counts(5000, 5000 + (1000 if max_a == 96 else 0)),
              max_parallelism=max_a)
    b = write(tmp_path / "b", counts(100, 1100, changed=range(500, 600)), max_parallelism=max_b, parallelism=3)
    expected = (100 + (1000 if max_a == 96 else 0), 100, 100, 800)
    taken = _force_buckets(monkeypatch, a, b, needed)
    result = diff_savepoints(a, b, keys=True, limit=10_000)
    s = state(result)
    assert (s.only_in_a, s.only_in_b, s.changed, s.unchanged) == expected
    assert (taken["direct"], taken["spilled"]) == (direct, spilled)
    changed = {e.key: (e.value_a, e.value_b) for e in s.examples if e.change == "changed"}
    assert changed == {f"k{i}": (i, i + 1000) for i in range(500, 600)}
    assert {e.key for e in s.examples if e.change == "only_in_b"} == {f"k{i}" for i in range(1000, 1100)}


@pytest.mark.parametrize(("max_b", "needed", "cut"), [
    (96, 1, [32]),  # buckets of key groups both sides share (gcd 32), read straight from the files
    (96, 40, [64]),  # hash buckets: a (more blocks: the larger side) read by key groups (64 divides 128), b spilled
    (100, 300, [300]),  # hash buckets: no divisor fits, both sides spilled
])
def test_different_max_parallelism_same_keys_are_matched_row_by_row(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_b: int, needed: int, cut: list[int]) -> None:
    """The same keys on both sides at other max parallelisms: each bucket's rows are matched by
    identity (no join), and the differing entries come out bucket by bucket in identity order
    (key hash, key) — the order of a diff that sorts both sides."""
    import msgpack

    from statekit.statefmt.keygroups import key_hash

    a = write(tmp_path / "a", counts(0, 2000), max_parallelism=128)
    b = write(tmp_path / "b", counts(0, 2000, changed=range(0, 2000, 7)), max_parallelism=max_b, parallelism=3)
    _force_buckets(monkeypatch, a, b, needed)
    monkeypatch.setattr(join_module, "join_chunk", None)  # the join must not be needed
    buckets: list[int] = []
    regrouped = regrouped_module._diff_regrouped

    def record_regrouped(*args: Any) -> None:
        buckets.append(args[-1])
        regrouped(*args)

    def record_spill(spill: Any, side: str, batch: Any, count: int) -> None:
        buckets.append(count)
        spill_batch(spill, side, batch, count)

    spill_batch = regrouped_module._spill
    monkeypatch.setattr(regrouped_module, "_diff_regrouped", record_regrouped)
    monkeypatch.setattr(regrouped_module, "_spill", record_spill)
    s = state(diff_savepoints(a, b, keys=True, limit=10_000))
    assert (s.only_in_a, s.only_in_b, s.changed, s.unchanged) == (0, 0, 286, 1714)
    assert {e.key: (e.value_a, e.value_b) for e in s.examples} == {f"k{i}": (i, i + 1000) for i in range(0, 2000, 7)}
    hashes = {e.key: key_hash(msgpack.packb(e.key)) for e in s.examples}
    assert sorted(set(buckets)) == cut  # the bucket count of the path taken
    expected = sorted(hashes, key=lambda k: (hashes[k] % cut[0], hashes[k], msgpack.packb(k)))
    assert [e.key for e in s.examples] == expected


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys_a=st.sets(st.integers(0, 400), max_size=150), keys_b=st.sets(st.integers(0, 400), max_size=150),
       changed=st.sets(st.integers(0, 400)), max_a=st.sampled_from([7, 32, 128]), max_b=st.sampled_from([12, 96, 100]),
       needed=st.sampled_from([1, 3, 50]))
def test_different_max_parallelism_agrees_with_a_dict_comparison(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, keys_a: set[int], keys_b: set[int],
        changed: set[int], max_a: int, max_b: int, needed: int) -> None:
    """Any two key sets at any two max parallelisms, cut into any number of buckets: the counts
    and the differing entries are those of comparing two dicts."""
    root = tmp_path_factory.mktemp("cross")
    rows_a = {f"k{i}": i for i in sorted(keys_a)}
    rows_b = {f"k{i}": i + (7 if i in changed else 0) for i in sorted(keys_b)}
    a = write(root / "a", list(rows_a.items()), max_parallelism=max_a)
    b = write(root / "b", list(rows_b.items()), max_parallelism=max_b, parallelism=3)
    with monkeypatch.context() as patch:
        _force_buckets(patch, a, b, needed)
        s = state(diff_savepoints(a, b, keys=True, limit=10_000))
    both = rows_a.keys() & rows_b.keys()
    differ = {k for k in both if rows_a[k] != rows_b[k]}
    assert (s.only_in_a, s.only_in_b, s.changed, s.unchanged) == (
        len(rows_a.keys() - both), len(rows_b.keys() - both), len(differ), len(both) - len(differ))
    assert {(e.change, e.key, e.value_a, e.value_b) for e in s.examples} == (
        {("only_in_a", k, rows_a[k], None) for k in rows_a.keys() - both}
        | {("only_in_b", k, None, rows_b[k]) for k in rows_b.keys() - both}
        | {("changed", k, rows_a[k], rows_b[k]) for k in differ})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.permutations(range(40)), st.permutations(range(40)))
def test_composed_permutations_with_and_without_numpy(
        monkeypatch: pytest.MonkeyPatch, perm_a: list[int], perm_b: list[int]) -> None:
    """``q[perm_a[j]] = perm_b[j]``: NumPy's path and Arrow's agree."""
    import pyarrow as pa

    from statekit.statefmt import numpy_support

    a, b = pa.array(perm_a, pa.uint32()), pa.array(perm_b, pa.uint32())
    fast = join_module._compose(a, b).to_pylist()
    with monkeypatch.context() as patch:
        patch.setattr(numpy_support, "_numpy", None)
        assert join_module._compose(a, b).to_pylist() == fast
    assert [fast[i] for i in perm_a] == perm_b


def test_map_state_of_floats_across_max_parallelisms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Map state (identity: key, namespace and user key; several user keys a key) with float
    values across max parallelisms, matched row by row: a float differs by its bits (-0.0 is
    not 0.0, NaN equals NaN), and nothing else does."""
    import math

    weights = StateDescriptor("weights", StateKind.MAP, value_type="double", user_key_type="string")
    before = [(f"k{i}", f"u{j}", float(i * 10 + j)) for i in range(300) for j in range(3)]
    after = [(k, u, -0.0 if (k, u) == ("k7", "u0") else math.nan if (k, u) == ("k9", "u1") else
              v + 0.5 if (k, u) == ("k11", "u2") else v) for k, u, v in before]
    before = [(k, u, math.nan) if (k, u) == ("k9", "u1") else (k, u, v) for k, u, v in before]
    a = write(tmp_path / "a", [], extra={weights: before}, max_parallelism=128)
    b = write(tmp_path / "b", [], extra={weights: after}, max_parallelism=96, parallelism=3)
    monkeypatch.setattr(join_module, "join_chunk", None)  # the same identities: no join
    s = state(diff_savepoints(a, b, keys=True), "weights")
    assert (s.only_in_a, s.only_in_b, s.changed, s.unchanged) == (0, 0, 2, 898)
    assert {(e.key, e.user_key, e.value_a, e.value_b) for e in s.examples} == {("k7", "u0", 70.0, -0.0),
                                                                             ("k11", "u2", 112.0, 112.5)}


def test_joined_differences_come_out_in_identity_order(tmp_path: Path) -> None:
    """Buckets with added and removed keys are joined: their differing rows go out in
    identity order (key hash, key), whatever order the join gives."""
    import msgpack

    from statekit.statefmt.keygroups import key_hash

    a = write(tmp_path / "a", counts(0, 600), max_parallelism=128)
    b = write(tmp_path / "b", counts(300, 900, changed=range(300, 600, 5)), max_parallelism=96, parallelism=3)
    s = state(diff_savepoints(a, b, keys=True, limit=10_000))
    assert (s.only_in_a, s.only_in_b, s.changed, s.unchanged) == (300, 300, 60, 240)
    order = [(key_hash(msgpack.packb(e.key)), msgpack.packb(e.key)) for e in s.examples]
    assert len(order) == 660 and order == sorted(order)


def test_small_chunks_give_the_same_counts(base: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(join_module, "CHUNK_ROWS", 7)
    s = state(diff_savepoints(base["a"], base["b"]))
    assert (s.only_in_a, s.only_in_b, s.changed, s.unchanged) == (100, 100, 100, 800)


def test_blocks_with_the_same_keys_are_compared_row_by_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(join_module, "join_chunk", None)  # the join must not be needed
    a = write(tmp_path / "a", counts(0, 300))
    b = write(tmp_path / "b", counts(0, 300, changed=range(0, 300, 3)))
    result = diff_savepoints(a, b, keys=True, limit=500)
    s = state(result)
    assert (s.only_in_a, s.only_in_b, s.changed, s.unchanged) == (0, 0, 100, 200)
    assert {e.key: (e.value_a, e.value_b) for e in s.examples}["k3"] == (3, 1003)


def test_keys_lists_decoded_differences(base: dict[str, str]) -> None:
    result = diff_savepoints(base["a"], base["b"], keys=True, limit=1000)
    examples = state(result).examples
    assert len(examples) == 300
    changed = {e.key: (e.value_a, e.value_b) for e in examples if e.change == "changed"}
    assert changed["k500"] == (500, 1500)
    assert {e.key for e in examples if e.change == "only_in_a"} == {f"k{i}" for i in range(100)}
    assert {e.key for e in examples if e.change == "only_in_b"} == {f"k{i}" for i in range(1000, 1100)}
    assert all(e.namespace is None and e.user_key is None for e in examples)
    limited = diff_savepoints(base["a"], base["b"], keys=True, limit=5)
    assert len(state(limited).examples) == 5


def test_output_writes_every_difference_as_parquet(base: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "d"
    result = diff_savepoints(base["a"], base["b"], output=str(out))
    assert result.output == str(out)
    table = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    assert table.num_rows == 300
    rows = table.to_pylist()
    assert {r["operator_uid"] for r in rows} == {"counter"} and {r["state_name"] for r in rows} == {"count"}
    changed = next(r for r in rows if r["key"] == '"k500"')
    assert (changed["change"], changed["value_a"], changed["value_b"]) == ("changed", "500", "1500")
    assert 0 <= changed["key_group"] < 128
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]  # no staging directory left


def test_output_must_be_new(base: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    with pytest.raises(BadInputError, match="output directory exists and is not empty"):
        diff_savepoints(base["a"], base["b"], output=str(tmp_path / "taken"))


def test_map_and_list_state(tmp_path: Path) -> None:
    extra_a = {TAGS: [(1, "x", 1), (1, "y", 2), (2, "x", 3)], HISTORY: [(1, [1, 2]), (2, [3])]}
    extra_b = {TAGS: [(1, "x", 1), (1, "y", 20), (3, "z", 4)], HISTORY: [(1, [1, 2]), (2, [3, 4])]}
    a = write(tmp_path / "a", counts(0, 10), extra=extra_a)
    b = write(tmp_path / "b", counts(0, 10), extra=extra_b, parallelism=3)
    result = diff_savepoints(a, b, keys=True)
    tags, history = state(result, "tags"), state(result, "history")
    assert (tags.only_in_a, tags.only_in_b, tags.changed, tags.unchanged) == (1, 1, 1, 1)
    assert {(e.change, e.key, e.user_key) for e in tags.examples} == {
        ("only_in_a", 2, "x"), ("only_in_b", 3, "z"), ("changed", 1, "y")}
    assert (history.changed, history.unchanged) == (1, 1)
    assert history.examples[0].value_a == [3] and history.examples[0].value_b == [3, 4]
    assert state(result).unchanged == 10


def test_operator_state_compares_elements_and_broadcast_keys(tmp_path: Path) -> None:
    a = write(tmp_path / "a", counts(0, 5), operators={"source": {OFFSETS: [1, 2, 3], RULES: {"r1": "x", "r2": "y"}}})
    b = write(tmp_path / "b", counts(0, 5), parallelism=3,
              operators={"source": {OFFSETS: [3, 2, 4], RULES: {"r1": "x", "r2": "z", "r3": "w"}}})
    result = diff_savepoints(a, b, operator="source", keys=True)
    offsets, rules = state(result, "offsets"), state(result, "rules")
    assert (offsets.only_in_a, offsets.only_in_b, offsets.unchanged) == (1, 1, 2)
    assert (rules.only_in_b, rules.changed, rules.unchanged) == (1, 1, 1)
    assert {(e.change, e.user_key, e.value_a, e.value_b) for e in rules.examples} == {
        ("only_in_b", "r3", None, "w"), ("changed", "r2", "y", "z")}
    assert [s.operator_uid for s in result.states] == ["source", "source"]


def test_structural_changes(tmp_path: Path) -> None:
    a = write(tmp_path / "a", counts(0, 5), operators={"gone": {OFFSETS: [1]}})
    writer = SavepointWriter.new_savepoint(128)
    writer.with_operator("counter", {StateDescriptor("count", StateKind.VALUE, value_type="json", ttl_ms=5): counts(0, 5),
                                     HISTORY: [(1, [1])]}, parallelism=2)
    writer.with_operator("new", {OFFSETS: [1]}, parallelism=1)
    writer.write(str(tmp_path / "b"))
    result = diff_savepoints(a, str(tmp_path / "b"))
    assert not result.equal
    found = {(c.change, c.operator_uid, c.state_name, c.field) for c in result.structural}
    assert found == {
        ("operator_removed", "gone", None, None), ("operator_added", "new", None, None),
        ("state_added", "counter", "history", None),
        ("descriptor_changed", "counter", "count", "value_type"), ("descriptor_changed", "counter", "count", "ttl_ms"),
    }
    assert state(result).unchanged == 5
    assert (state(result, "history").status, state(result, "history").only_in_b) == ("added", 1)
    gone = next(s for s in result.states if s.operator_uid == "gone")
    assert (gone.status, gone.only_in_a) == ("removed", 1)


def test_serializer_change_is_incomparable(tmp_path: Path) -> None:
    a = write(tmp_path / "a", counts(0, 5))
    writer = SavepointWriter.new_savepoint(128)
    writer.with_operator("counter", {StateDescriptor("count", StateKind.VALUE, value_serializer="json"): counts(0, 5)})
    writer.write(str(tmp_path / "b"))
    result = diff_savepoints(a, str(tmp_path / "b"))
    assert state(result).status == "incomparable" and "value_serializer" in (state(result).reason or "")
    assert not result.equal


def test_filters_and_bad_input(base: dict[str, str], tmp_path: Path) -> None:
    assert [s.state_name for s in diff_savepoints(base["a"], base["b"], operator="counter", state="count").states] == ["count"]
    with pytest.raises(StateNotFoundError):
        diff_savepoints(base["a"], base["b"], operator="nope")
    with pytest.raises(StateNotFoundError):
        diff_savepoints(base["a"], base["b"], state="nope")
    with pytest.raises(PathNotFoundError):
        diff_savepoints(base["a"], str(tmp_path / "missing"))
