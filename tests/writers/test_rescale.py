"""``rescale_savepoint``: every state kind and operator-state mode, plans, bad inputs, atomicity."""

from __future__ import annotations

import collections
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.verification import verify_snapshot
from statekit.statefmt.errors import (
    BadInputError,
    CorruptStateError,
    IncompleteCheckpointError,
    StateNotFoundError,
)
from statekit.statefmt.keygroups import assign_to_key_group, compute_operator_index_for_key_group
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.statefmt.statefile import IndexEntry, StateFileReader
from statekit.writers.rescale import RescaleReport, rescale_savepoint
from statekit.writers.savepoint_writer import SavepointWriter

KEYED = {
    "count": StateDescriptor("count", StateKind.VALUE, value_type="int"),
    "window": StateDescriptor("window", StateKind.REDUCING, value_type="int"),
    "history": StateDescriptor("history", StateKind.LIST, value_type="int"),
    "features": StateDescriptor("features", StateKind.MAP, value_type="float", user_key_type="string"),
    "avg": StateDescriptor("avg", StateKind.AGGREGATING, value_type="struct<sum:int,n:int>"),
}
OPERATOR = {
    "offsets": StateDescriptor("offsets", StateKind.OPERATOR_LIST, value_type="int"),
    "partitions": StateDescriptor("partitions", StateKind.UNION, value_type="string"),
    "rules": StateDescriptor("rules", StateKind.BROADCAST, value_type="int", user_key_type="string"),
}


def keyed_rows() -> dict[str, list[Any]]:
    return {
        "count": [(f"user-{i}", i) for i in range(600)],
        "window": [(f"user-{i}", w, i * w) for i in range(150) for w in (1000, 2000)],
        "history": [(i, list(range(i % 5))) for i in range(200)],
        "features": [(f"user-{i}", f"f{j}", i / (j + 1)) for i in range(100) for j in range(3)],
        "avg": [(("tenant", i), {"sum": i * 3, "n": 3}) for i in range(120)],
    }


def write_source(path: Path, parallelism: int = 3, max_parallelism: int = 128) -> str:
    rows = keyed_rows()
    writer = SavepointWriter.new_savepoint(max_parallelism, job_name="rescale-test")
    writer.with_operator("enricher", {KEYED[name]: rows[name] for name in KEYED} | {
        OPERATOR["offsets"]: list(range(17)),
        OPERATOR["partitions"]: ["p0", "p1", "p2", "p3"],
        OPERATOR["rules"]: {"min": 1, "max": 9},
    }, parallelism=parallelism)
    writer.with_operator("source", {OPERATOR["offsets"]: [10, 20, 30]}, parallelism=2)
    writer.write(str(path))
    return str(path)


def snapshot_content(path: str) -> dict[str, Any]:
    reader = SavepointReader.read(path)
    content: dict[str, Any] = {}
    for name in KEYED:
        content[name] = collections.Counter(repr(tuple(e)) for e in reader.read_keyed_state("enricher", name))
    content["offsets"] = reader.read_list_state("enricher", "offsets")
    content["partitions"] = reader.read_union_state("enricher", "partitions")
    content["rules"] = reader.read_broadcast_state("enricher", "rules")
    content["source"] = reader.read_list_state("source", "offsets")
    return content


def file_digests(path: str) -> dict[str, str]:
    out = {}
    for directory, _, files in os.walk(path):
        for name in files:
            full = os.path.join(directory, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = hashlib.sha256(f.read()).hexdigest()
    return out


def first_block(path: str) -> IndexEntry:
    with open(path, "rb") as f:
        return StateFileReader(f, os.path.getsize(path), path=path).index[0]


def check_placement(path: str, uid: str, state: str) -> None:
    """Every key sits in the key group of its bytes and the subtask that owns that group."""
    reader = SavepointReader.read(path)
    op = reader.operator(uid)
    seen: dict[tuple[bytes, bytes, bytes | None], int] = {}
    for subtask, key_group, batch in reader.read_keyed_batches(uid, state):
        assert compute_operator_index_for_key_group(op.max_parallelism, op.parallelism, key_group) == subtask
        columns = batch.to_pydict()
        for key, ns, uk in zip(columns["key"], columns["namespace"], columns["user_key"]):
            assert assign_to_key_group(key, op.max_parallelism) == key_group
            assert (key, ns, uk) not in seen
            seen[(key, ns, uk)] = subtask


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    path = write_source(tmp_path_factory.mktemp("rescale") / "sp")
    return path, snapshot_content(path)


def plan_numbers(report: RescaleReport) -> list[Any]:
    return [(op.uid, op.action, [(s.index, s.key_group_range, s.key_groups, s.bytes, s.entries) for s in op.subtasks],
             [(s.name, s.elements) for s in op.operator_states]) for op in report.operators]


@pytest.mark.parametrize("options", [
    {"parallelism": 5}, {"parallelism": 1}, {"parallelism": 128},
    {"max_parallelism": 1024, "parallelism": 4}, {"max_parallelism": 100}, {"max_parallelism": 7, "parallelism": 7},
    {"operator_parallelism": {"source": 4}},
], ids=["p5", "p1", "p128", "m1024-p4", "m100", "m7-p7", "source-only"])
def test_rescale_keeps_all_state_and_places_every_key(source: tuple[str, dict[str, Any]], tmp_path: Path,
                                                      options: dict[str, Any]) -> None:
    path, before = source
    digests = file_digests(path)
    plan = rescale_savepoint(path, None, dry_run=True, **options)
    report = rescale_savepoint(path, str(tmp_path / "out"), **options)
    out = str(tmp_path / "out")
    assert snapshot_content(out) == before
    assert verify_snapshot(out).ok
    assert file_digests(path) == digests, "the source was modified"
    reader = SavepointReader.read(out)
    expected_p = options.get("operator_parallelism", {}).get("enricher", options.get("parallelism", 3))
    enricher = reader.operator("enricher")
    assert enricher.parallelism == expected_p
    assert enricher.max_parallelism == options.get("max_parallelism", 128)
    assert reader.operator("source").parallelism == options.get("operator_parallelism", {}).get("source", 2)
    assert reader.metadata.kind.value == "savepoint" and reader.metadata.format.value == "canonical"
    for name in KEYED:
        check_placement(out, "enricher", name)
    # the plan's numbers are the output's (bytes are estimated for a max-parallelism change)
    if "max_parallelism" in options:
        assert [[s.entries for s in op.subtasks] for op in plan.operators] == \
               [[s.entries for s in op.subtasks] for op in report.operators]
        estimate, actual = plan.operators[0].bytes, report.operators[0].bytes
        assert abs(estimate - actual) <= 0.25 * actual
    else:
        assert plan_numbers(plan) == plan_numbers(report)
    # every subtask's keyed bytes in the report are its files' sizes
    for op in report.operators:
        meta = reader.operator(op.uid)
        keyed = set(op.keyed_states)
        for s in op.subtasks:
            files = [f for f in meta.subtasks[s.index].files if f.state in keyed]
            assert s.bytes == sum(f.size for f in files) and s.entries == sum(f.entries for f in files)


def test_operator_state_redistribution_by_mode(source: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    path, _ = source
    rescale_savepoint(path, str(tmp_path / "out"), parallelism=5)
    reader = SavepointReader.read(str(tmp_path / "out"))
    offsets = reader.read_operator_state_per_subtask("enricher", "offsets")
    assert [len(p) for p in offsets] == [4, 4, 3, 3, 3]
    assert [e for p in offsets for e in p] == list(range(17))
    union = reader.read_operator_state_per_subtask("enricher", "partitions")
    assert [e for p in union for e in p] == ["p0", "p1", "p2", "p3"], "each element once, order kept"
    rules = reader.read_operator_state_per_subtask("enricher", "rules")
    assert all(sorted(p) == [("max", 9), ("min", 1)] for p in rules) and len(rules) == 5
    checksums = {f.checksum for st in reader.operator("enricher").subtasks for f in st.files if f.state == "rules"}
    assert len(checksums) == 1, "broadcast files are byte copies"


def test_pickled_state_is_rescaled_without_trust(tmp_path: Path) -> None:
    descriptor = StateDescriptor("blob", StateKind.VALUE, value_serializer="pickle")
    items = StateDescriptor("items", StateKind.OPERATOR_LIST, value_serializer="pickle")
    writer = SavepointWriter.new_savepoint(128)
    writer.with_operator("op", {descriptor: [(i, {i}) for i in range(50)], items: [{1}, {2}, {3}]}, parallelism=2)
    writer.write(str(tmp_path / "sp"))
    rescale_savepoint(str(tmp_path / "sp"), str(tmp_path / "out"), parallelism=3)
    rescale_savepoint(str(tmp_path / "sp"), str(tmp_path / "out2"), max_parallelism=256)
    for out in ("out", "out2"):
        reader = SavepointReader.read(str(tmp_path / out), trust_pickle=True)
        assert sorted((e.key, e.value) for e in reader.read_keyed_state("op", "blob")) == [(i, {i}) for i in range(50)]
        assert reader.read_list_state("op", "items") == [{1}, {2}, {3}]


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize("options, error, message", [
    ({"parallelism": 0}, BadInputError, "operator 'enricher': parallelism must be at least 1, got 0"),
    ({"parallelism": 129}, BadInputError,
     "operator 'enricher': parallelism 129 is larger than max parallelism 128 (raise it with --max-parallelism)"),
    ({"max_parallelism": 2, "parallelism": 3}, BadInputError, "parallelism 3 is larger than max parallelism 2"),
    ({"max_parallelism": 40000}, BadInputError, "max parallelism must be in [1, 32768], got 40000"),
    ({"operator_parallelism": {"nope": 2}}, StateNotFoundError,
     "--operator nope=2: no operator with uid 'nope' (operators: enricher, source)"),
    ({}, BadInputError, "nothing to do"),
])
def test_bad_options_are_refused_and_nothing_is_written(source: tuple[str, dict[str, Any]], tmp_path: Path,
                                                        options: dict[str, Any], error: type[Exception],
                                                        message: str) -> None:
    path, _ = source
    with pytest.raises(error) as failure:
        rescale_savepoint(path, str(tmp_path / "out"), **options)
    assert message in str(failure.value) and str(failure.value).startswith(path)
    assert not (tmp_path / "out").exists()
    assert os.listdir(tmp_path) == []


def test_incomplete_source_is_refused(tmp_path: Path) -> None:
    incomplete = tmp_path / "savepoint-abc123"
    (incomplete / "op").mkdir(parents=True)
    with pytest.raises(IncompleteCheckpointError, match="incomplete checkpoint: no _metadata"):
        rescale_savepoint(str(incomplete), str(tmp_path / "out"), parallelism=2)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("options", [{"parallelism": 2}, {"max_parallelism": 256}, {"operator_parallelism": {"source": 3}}])
def test_corrupted_source_fails_atomically(tmp_path: Path, options: dict[str, Any]) -> None:
    path = write_source(tmp_path / "sp", parallelism=3)
    victim = SavepointReader.read(path).operator("enricher").subtasks[1].file_of("count")
    assert victim is not None
    full = os.path.join(path, victim.path)
    data = bytearray(Path(full).read_bytes())
    first = first_block(full)
    data[first.offset + first.length // 2] ^= 0xFF  # inside the first block
    Path(full).write_bytes(bytes(data))
    with pytest.raises(CorruptStateError) as failure:
        rescale_savepoint(path, str(tmp_path / "out"), **options)
    message = str(failure.value)
    assert message.startswith(full) and "checksum mismatch" in message
    assert sorted(os.listdir(tmp_path)) == ["sp"], "nothing at (or beside) the output"


@pytest.mark.parametrize("options", [{"parallelism": 2}, {"max_parallelism": 256}])
@pytest.mark.parametrize("where", ["header", "footer"])
def test_damage_no_block_checksum_covers_is_refused(tmp_path: Path, options: dict[str, Any], where: str) -> None:
    """A reserved header byte, or the footer's CRC of the body: byte-range block copies and the
    regrouping decode never read them, the whole-file CRC of _metadata does (from the header,
    index and footer, before a block is copied)."""
    path = write_source(tmp_path / "sp", parallelism=3)
    victim = SavepointReader.read(path).operator("enricher").subtasks[1].file_of("count")
    assert victim is not None
    full = Path(path, victim.path)
    data = bytearray(full.read_bytes())
    data[11 if where == "header" else len(data) - 12] ^= 0x01  # footer: ... | body crc u32 | end magic u64
    full.write_bytes(bytes(data))
    assert not verify_snapshot(path).ok
    with pytest.raises(CorruptStateError, match="header, index or footer damaged") as failure:
        rescale_savepoint(path, str(tmp_path / "out"), **options)
    assert str(failure.value).startswith(str(full))
    assert sorted(os.listdir(tmp_path)) == ["sp"], "nothing at (or beside) the output"


def test_a_truncated_file_is_named(tmp_path: Path) -> None:
    path = write_source(tmp_path / "sp", parallelism=2)
    victim = SavepointReader.read(path).operator("enricher").subtasks[0].file_of("history")
    assert victim is not None
    full = os.path.join(path, victim.path)
    Path(full).write_bytes(Path(full).read_bytes()[:-10])
    with pytest.raises(CorruptStateError, match="differs from the .* bytes recorded in _metadata"):
        rescale_savepoint(path, str(tmp_path / "out"), parallelism=4)
    assert not (tmp_path / "out").exists()


def test_existing_output_is_refused(source: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    path, _ = source
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(BadInputError, match="output directory exists and is not empty"):
        rescale_savepoint(path, str(tmp_path / "out"), parallelism=2)
    with pytest.raises(BadInputError, match="output directory exists and is not empty"):
        rescale_savepoint(path, str(tmp_path / "out"), parallelism=2, dry_run=True)
    assert os.listdir(tmp_path / "out") == ["keep.txt"]


def test_unchanged_operator_is_copied_byte_for_byte(source: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    path, _ = source
    report = rescale_savepoint(path, str(tmp_path / "out"), parallelism=4)
    assert [op.action for op in report.operators] == ["rescale", "copy"]
    before = SavepointReader.read(path).operator("source")
    after = SavepointReader.read(str(tmp_path / "out")).operator("source")
    assert [f.checksum for s in before.subtasks for f in s.files] == [f.checksum for s in after.subtasks for f in s.files]


@pytest.mark.s3
def test_rescale_between_local_disk_and_s3(s3_bucket: str, s3_server: dict[str, Any], tmp_path: Path) -> None:
    options = s3_server["storage_options"]
    path = write_source(tmp_path / "sp", parallelism=2)
    before = snapshot_content(path)
    rescale_savepoint(path, f"{s3_bucket}/rescaled", parallelism=3, output_storage_options=options)
    rescale_savepoint(f"{s3_bucket}/rescaled", str(tmp_path / "back"), max_parallelism=256,
                      storage_options=options)
    assert snapshot_content(str(tmp_path / "back")) == before
    assert verify_snapshot(f"{s3_bucket}/rescaled", storage_options=options).ok


class RecordingProgress:
    """A progress factory (the shape of ``Output.progress``) that records what it is told."""

    def __init__(self) -> None:
        self.bars: list[dict[str, Any]] = []

    def __call__(self, description: str, total: int | None = None, unit: str = "bytes") -> Any:
        import contextlib

        bar: dict[str, Any] = {"description": description, "total": total, "done": 0}
        self.bars.append(bar)

        @contextlib.contextmanager
        def open_bar() -> Any:
            yield lambda _name, amount: bar.__setitem__("done", bar["done"] + amount)

        return open_bar()


@pytest.mark.parametrize("options", [{"parallelism": 4}, {"max_parallelism": 512}])
def test_progress_reaches_its_total(source: tuple[str, dict[str, Any]], tmp_path: Path, options: dict[str, Any]) -> None:
    path, _ = source
    progress = RecordingProgress()
    rescale_savepoint(path, str(tmp_path / "out"), progress=progress, **options)
    (bar,) = progress.bars
    assert bar["description"] == "rescaling" and bar["total"] > 0
    assert abs(bar["done"] - bar["total"]) <= 0.01 * bar["total"]
