"""Real Java DataStream jobs (tests/golden/flink-java-2.3): POJO, Tuple, Kryo, compressed state.

Written by Apache Flink 2.3 (scripts/gen_flink_java_fixtures.py); every variant's
``expected.json`` is the state computed from the jobs' input, not read back by statekit.
Each variant inspects with every state's serializers read, verifies, decodes to the
ground truth, and diffs equal to the other runs of the same job (compressed or not, heap or
RocksDB, savepoint or checkpoint).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.flink.entries import decodable_states, read_keyed_state
from statekit.flink.source_splits import snapshot_splits
from statekit.flink.storage import load_snapshot

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "flink-java-2.3"
VARIANTS = ("pojo", "tuple", "tuple-compressed", "tuple-compressed-rocksdb", "kryo")


def _facts(variant: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / variant / "facts.json").read_text())
    return data


def savepoint(variant: str) -> Path:
    return GOLDEN / variant / str(_facts(variant)["savepoint"])


def expected(variant: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / variant / "expected.json").read_text())
    return data


def _canonical(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(row, sort_keys=True) for row in rows)


def decoded(path: Path, uid: str, state: str, value_type: str | None = None) -> list[dict[str, Any]]:
    snapshot = load_snapshot(str(path))
    rows = []
    for e in read_keyed_state(snapshot, uid, state, value_type=value_type):
        row = {"key": e.key, "value": e.value}
        if e.user_key is not None:
            row["user_key"] = e.user_key
        rows.append(row)
    return rows


def statekit(*args: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(cli, [*args, "--json"])
    try:
        return result.exit_code, json.loads(result.stdout)
    except json.JSONDecodeError:
        raise AssertionError(result.output) from None


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_state_decodes_to_the_truth(variant: str) -> None:
    truth = expected(variant)
    for state, rows in truth["states"].items():
        got = decoded(savepoint(variant), truth["operator"], state, truth["value_types"].get(state))
        assert len(got) == len(rows), state
        assert _canonical(got) == _canonical(rows), state


@pytest.mark.parametrize("variant", VARIANTS)
def test_inspect_reads_every_serializer_snapshot_and_verify_passes(variant: str) -> None:
    code, report = statekit("inspect", str(savepoint(variant)))
    assert code == 0
    (op,) = [op for op in report["operators"] if op["uid"] == expected(variant)["operator"]]
    assert op["keyed_state_problem"] is None
    assert {st["name"] for st in op["keyed_states"]} >= set(expected(variant)["states"])
    code, verified = statekit("verify", str(savepoint(variant)))
    assert (code, verified["ok"]) == (0, True)


def test_the_compressed_checkpoint_decodes_too() -> None:
    """Heap checkpoint with snapshot compression: one Snappy stream per state after each key group id."""
    checkpoint = GOLDEN / "tuple-compressed" / str(_facts("tuple-compressed")["checkpoint"])
    snapshot = load_snapshot(str(checkpoint))
    handle = next(sub.managed_keyed_state for op in snapshot.metadata.operators for sub in op.subtasks
                  if sub.managed_keyed_state is not None)
    assert handle.kind.value == "key-groups"
    truth = expected("tuple-compressed")
    for state in ("stats", "buckets", "choice"):
        assert _canonical(decoded(checkpoint, "tuple-state", state)) == _canonical(truth["states"][state])


@pytest.mark.parametrize("other", ["tuple-compressed", "tuple-compressed-rocksdb"])
def test_compressed_and_plain_runs_diff_equal(other: str) -> None:
    code, report = statekit("diff", str(savepoint("tuple")), str(savepoint(other)), "--uid", "tuple-state")
    assert code == 0, report
    assert report["equal"] is True
    assert report["totals"]["unchanged"] == 40 * 8  # 6 states, 3 map entries per key, a timer per key
    assert {st["status"] for st in report["states"] if st["kind"] != "timers" or st["unchanged"]} == {"compared"}


def test_kryo_states_need_their_fields_declared() -> None:
    """Registered or not, a class Kryo writes field by field is refused until its fields are declared."""
    snapshot = load_snapshot(str(savepoint("kryo")))
    support = {s.name: s for s in decodable_states(snapshot, "kryo-state")}
    assert support["anything"].decoder is not None  # Integer, Long, String: Kryo's own classes
    assert support["token"].decoder is not None  # UUID: Flink's Chill registration
    for name, cls in (("reading", "FixtureJobs$Reading"), ("note", "FixtureJobs$Note")):
        assert support[name].decoder is None
        assert cls in (support[name].reason or "")


def test_a_wrong_kryo_declaration_is_an_error_not_a_value() -> None:
    from statekit.statefmt.errors import StatekitError

    with pytest.raises(StatekitError):
        decoded(savepoint("kryo"), "kryo-state", "reading", "struct<sensor:string,count:long>")


def test_source_positions_agree_with_the_keyed_state() -> None:
    """The file split's records to skip equal the lines the keyed operator counted (one consistent cut)."""
    snapshot = load_snapshot(str(savepoint("files")))
    splits, problems = snapshot_splits(snapshot)
    assert not problems
    (lines,) = [s for s in splits if s.connector == "file"]
    assert lines.path is not None and lines.path.endswith("/input.txt")
    assert (lines.offset, lines.position) == (0, -1)
    assert lines.records_to_skip is not None and lines.records_to_skip >= 1000
    total = sum(e.value for e in read_keyed_state(snapshot, "count", "lines"))
    assert total == lines.records_to_skip
    last = {e.key: e.value for e in read_keyed_state(snapshot, "count", "last")}
    read = range(lines.records_to_skip)
    assert last == {f"k{k}": max(n for n in read if n % 20 == k) for k in range(20)}


def test_number_sequence_splits_of_every_job() -> None:
    for variant in VARIANTS:
        splits, problems = snapshot_splits(load_snapshot(str(savepoint(variant))))
        assert not problems
        (numbers,) = splits
        assert numbers.connector == "number-sequence" and numbers.last_number == (1 << 63) - 1
        assert numbers.next_number is not None and numbers.next_number >= 300


def test_inspect_json_lists_the_splits() -> None:
    code, report = statekit("inspect", str(savepoint("tuple-compressed")))
    assert code == 0
    (source,) = [op for op in report["operators"] if op["uid"] == "numbers"]
    (split,) = source["source_splits"]
    assert split["connector"] == "number-sequence" and split["split_id"] == "1"


def test_verify_checks_the_snappy_checksums_of_compressed_key_groups(tmp_path: Path) -> None:
    import shutil

    checkpoint = GOLDEN / "tuple-compressed" / str(_facts("tuple-compressed")["checkpoint"])
    copy = tmp_path / checkpoint.parent.name / checkpoint.name
    shutil.copytree(checkpoint, copy)
    code, report = statekit("verify", str(copy))
    assert (code, report["ok"]) == (0, True)
    snapshot = load_snapshot(str(copy))
    handle = next(sub.managed_keyed_state for op in snapshot.metadata.operators for sub in op.subtasks
                  if sub.managed_keyed_state is not None and sub.managed_keyed_state.delegate is not None)
    assert handle.delegate is not None and handle.delegate.path is not None
    state_file = copy / Path(handle.delegate.path).name
    first = min(o for o in handle.key_group_offsets if o)
    data = bytearray(state_file.read_bytes())
    data[first + 40] ^= 0x55  # inside the first key group's compressed chunk: same size, bad CRC
    state_file.write_bytes(bytes(data))
    code, report = statekit("verify", str(copy))
    assert code == 1
    (problem,) = report["problems"]
    assert problem["kind"] == "bad-compression" and "key group" in problem["message"]


@pytest.mark.parametrize("variant", ["tuple", "tuple-compressed", "tuple-compressed-rocksdb"])
def test_rescale_of_tuple_keys_keeps_every_entry_and_the_compression(variant: str, tmp_path: Path) -> None:
    from statekit.flink.key_hash import key_hasher
    from statekit.flink.sources import keyed_sources

    out = tmp_path / "rescaled"
    code, report = statekit("rescale", str(savepoint(variant)), "--max-parallelism", "512", "-o", str(out))
    assert code == 0, report
    snapshot = load_snapshot(str(out))
    op = snapshot.metadata.operator("tuple-state")
    assert op.max_parallelism == 512
    sources = list(keyed_sources(snapshot, op))
    assert {s.meta.compressed for s in sources} == {variant != "tuple"}
    for state, rows in expected(variant)["states"].items():
        assert _canonical(decoded(out, "tuple-state", state)) == _canonical(rows), state
    hasher = key_hasher(sources[0].meta.key_serializer.tree if sources[0].meta.key_serializer else None)
    assert hasher is not None and hasher.name == "Tuple2<String,Integer>"
    for source in sources:  # every key where Flink looks for it: murmur(Tuple2.hashCode) % 512
        for kg, key, _, where in source.entries(snapshot, "stats", 2, None):
            assert hasher.key_group(key, 2, 512, where=where) == kg


def test_rescale_of_pojo_keys_is_refused_naming_the_serializer(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["rescale", str(savepoint("pojo")), "--max-parallelism", "256", "-o",
                                      str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "PojoSerializerSnapshot" in result.output and "user code" in result.output
    assert not (tmp_path / "out").exists()
