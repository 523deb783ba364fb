"""Open, list, inspect, verify and dispose real Flink 2.3 snapshots (temporary copies)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from statekit.flink import (
    dispose_flink_snapshot,
    flink_referenced_files,
    inspect_flink_snapshot,
    list_flink_checkpoints,
    open_flink_snapshot,
    plan_flink_dispose,
    relocate_flink_metadata,
    verify_flink_snapshot,
)
from statekit.flink.entries import count_savepoint_entries
from statekit.statefmt.errors import (
    BadInputError,
    CorruptStateError,
    IncompleteCheckpointError,
    MetadataError,
    NotACheckpointError,
    PathNotFoundError,
)
from statekit.statefmt.keygroups import KeyGroupRange

NAMES = [
    "hashmap/chk-4",
    "rocksdb-incremental/chk-4",
    "rocksdb-incremental-inline0/chk-4",
    "hashmap/savepoint",
    "rocksdb-incremental/savepoint",
    "rocksdb-incremental-inline0/savepoint",
]
SAVEPOINTS = [n for n in NAMES if n.endswith("savepoint")]
INLINE0_SHARED = {
    "f9d21e4d-b186-4302-a801-d7767358b9fe": 5131,
    "96ea838d-eb15-43da-b57f-8e5405ec61c4": 12825,
    "8312a4c3-21c7-4007-88be-0e73b21a7ece": 1063,
    "af764ab4-7a1f-4ccb-95e2-e0570fef6ae7": 12695,
    "e338d51a-e053-4be0-8812-1442c40c94a4": 836,
    "22ef2c4d-25d9-4a07-9d11-4e930a09e5a6": 21348,
    "9876836f-e34e-445b-bac8-8ffdc5805b46": 16,
}


def test_open_directory_or_metadata_file(flink_golden: Any) -> None:
    directory = flink_golden["hashmap/chk-4"]
    by_dir = open_flink_snapshot(str(directory))
    by_file = open_flink_snapshot(str(directory / "_metadata"))
    assert by_dir.path == by_file.path == str(directory)
    assert by_dir.metadata_path == str(directory / "_metadata")
    assert by_dir.metadata == by_file.metadata
    assert by_dir.checkpoint_id == 4
    job = by_dir.job_dir
    assert job is not None and Path(job.path).name == flink_golden.jobs["hashmap"]
    assert open_flink_snapshot(str(flink_golden["hashmap/savepoint"])).job_dir is None


def test_open_refuses_what_is_not_a_snapshot(tmp_path: Path, flink_golden: Any) -> None:
    with pytest.raises(PathNotFoundError):
        open_flink_snapshot(str(tmp_path / "nope"))
    with pytest.raises(NotACheckpointError, match="no _metadata"):
        open_flink_snapshot(str(flink_golden.root))
    (tmp_path / "chk-9").mkdir()
    with pytest.raises(IncompleteCheckpointError):
        open_flink_snapshot(str(tmp_path / "chk-9"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "_metadata").write_bytes(b"STKMETA\x01" + bytes(30))
    with pytest.raises(NotACheckpointError, match="not a Flink _metadata"):
        open_flink_snapshot(str(tmp_path / "other"))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "_metadata").write_bytes(bytes.fromhex("4960672d0000000600"))
    with pytest.raises(MetadataError, match="byte offset 8"):
        open_flink_snapshot(str(tmp_path / "broken"))


@pytest.mark.parametrize(
    ("name", "kind", "fmt", "checkpoint_id", "inline", "file", "shared"),
    [
        ("hashmap/chk-4", "checkpoint", "native", 4, 0, 30213, 0),
        ("rocksdb-incremental/chk-4", "checkpoint", "native", 4, 39512, 21348, 0),
        ("rocksdb-incremental-inline0/chk-4", "checkpoint", "native", 4, 0, 1507 + 836 + 21348 + 16, 31714),
        ("hashmap/savepoint", "savepoint", "canonical", 5, 0, 32909, 0),
        ("rocksdb-incremental/savepoint", "savepoint", "canonical", 5, 0, 32909, 0),
        ("rocksdb-incremental-inline0/savepoint", "savepoint", "canonical", 5, 0, 32909, 0),
    ],
)
def test_inspect_summary(
    flink_golden: Any, name: str, kind: str, fmt: str, checkpoint_id: int, inline: int, file: int, shared: int
) -> None:
    summary = inspect_flink_snapshot(str(flink_golden[name]))
    assert (summary.kind, summary.format, summary.checkpoint_id, summary.metadata_version) == (
        kind, fmt, checkpoint_id, 6)
    assert (summary.inline_bytes, summary.file_bytes, summary.shared_bytes) == (inline, file, shared)
    assert summary.bytes == inline + file + shared
    labels = [o.label for o in summary.operators]
    assert labels == ["cbc357ccb763df2852fee8c4fc7d55f2", "running-count",
                      "7df19f87deec5680128845fd9a6ca18d", "d1d9868dcd7475c232129f1525c5e87e"]
    keyed = summary.operators[1]
    assert (keyed.name, keyed.parallelism, keyed.max_parallelism) == ("KEYED PROCESS", 1, 128)
    assert keyed.bytes == summary.bytes
    assert [(s.index, s.key_group_range, s.bytes) for s in keyed.subtasks] == [
        (0, KeyGroupRange(0, 127), summary.bytes)]
    assert sorted((s.name, s.kind) for s in keyed.keyed_states) == [
        ("_timer_state/event_user-timers", "timers"),
        ("_timer_state/processing_user-timers", "timers"),
        ("python-state-count", "list"),
    ]
    assert keyed.keyed_state_problem is None
    assert keyed.operator_state_names == ()
    assert all(o.keyed_states == () for i, o in enumerate(summary.operators) if i != 1)


def test_inspect_without_state_meta_reads_only_metadata(flink_golden: Any) -> None:
    summary = inspect_flink_snapshot(str(flink_golden["hashmap/chk-4"]), read_state_meta=False)
    assert summary.operators[1].keyed_states == ()


def test_missing_meta_file_is_a_state_problem(tmp_path: Path, flink_golden: Any) -> None:
    copy = tmp_path / "chk-4"
    shutil.copytree(flink_golden["rocksdb-incremental-inline0/chk-4"], copy)
    (copy / "f614e5df-98d0-41c2-b86f-33d39612dead").unlink()
    keyed = inspect_flink_snapshot(str(copy)).operators[1]
    assert keyed.keyed_states == ()
    assert keyed.keyed_state_problem is not None and "f614e5df" in keyed.keyed_state_problem


@pytest.mark.parametrize("name", SAVEPOINTS + ["hashmap/chk-4"])
def test_verify_passes_on_self_contained_snapshots(flink_golden: Any, name: str) -> None:
    assert verify_flink_snapshot(str(flink_golden[name])) == []


def _alone(checkpoint: Path, tmp_path: Path) -> Path:
    """A copy of ``checkpoint`` in a job directory of its own, without the job's shared files."""
    copy = tmp_path / checkpoint.parent.name / checkpoint.name
    shutil.copytree(checkpoint, copy)
    return copy


def test_verify_reports_missing_absolute_files_by_name(flink_golden: Any, tmp_path: Path) -> None:
    problems = verify_flink_snapshot(str(_alone(flink_golden["rocksdb-incremental-inline0/chk-4"], tmp_path / "a")))
    assert {p.kind for p in problems} == {"missing"}
    prefix = f"{flink_golden.inline0_old_prefix}/{flink_golden.jobs['rocksdb-incremental-inline0']}/shared/"
    prefix = prefix.replace("file:", "")
    assert {p.path for p in problems} == {prefix + name for name in INLINE0_SHARED}
    assert all(p.operator == "running-count" and p.subtask == 0 for p in problems)
    by_name = {Path(p.path).name: p.message for p in problems}
    assert "(5131 bytes, outside the snapshot directory)" in by_name["f9d21e4d-b186-4302-a801-d7767358b9fe"]

    problems = verify_flink_snapshot(str(_alone(flink_golden["rocksdb-incremental/chk-4"], tmp_path / "b")))
    assert [(p.kind, Path(p.path).name) for p in problems] == [
        ("missing", "13f5b204-570b-4228-8880-eddf4f28fc7a")]


def test_a_moved_checkpoint_is_read_in_place(flink_golden: Any) -> None:
    """Its shared files sit in its own job directory: read-only commands read them there and say so."""
    checkpoint = flink_golden["rocksdb-incremental-inline0/chk-4"]
    assert verify_flink_snapshot(str(checkpoint)) == []
    summary = inspect_flink_snapshot(str(checkpoint))
    assert summary.moved is not None and flink_golden.inline0_old_prefix in summary.moved
    assert str(checkpoint.parent) in summary.moved and "relocate --auto" in summary.moved
    refs = flink_referenced_files(str(checkpoint))
    assert {r.scope for r in refs if not r.relative} == {"external"}  # the plain listing says where they were
    from statekit.flink.entries import read_keyed_state
    from statekit.flink.snapshot import open_flink_snapshot

    entries = list(read_keyed_state(open_flink_snapshot(str(checkpoint)), "running-count", "python-state-count"))
    assert len(entries) == 1000
    with pytest.raises(Exception, match="relocate --auto"):  # opened for writing: nothing is mapped
        from statekit.flink.storage import load_snapshot

        list(read_keyed_state(load_snapshot(str(checkpoint)), "running-count", "python-state-count"))


def test_verify_after_relocation_passes(relocated_inline0: Path) -> None:
    assert verify_flink_snapshot(str(relocated_inline0 / "chk-4")) == []
    refs = flink_referenced_files(str(relocated_inline0 / "chk-4"))
    assert {r.scope for r in refs} == {"exclusive", "shared"}
    assert sorted(Path(r.url).name for r in refs if r.scope == "shared") == sorted(INLINE0_SHARED)


def test_verify_detects_damage(tmp_path: Path, flink_golden: Any) -> None:
    copy = tmp_path / "savepoint-x"
    shutil.copytree(flink_golden["hashmap/savepoint"], copy)
    state = copy / "876e98d2-7ba3-4bfd-95bd-4f44843c2c61"
    state.write_bytes(state.read_bytes()[:-10])
    (problem,) = verify_flink_snapshot(str(copy))
    assert problem.kind == "size-mismatch" and "32899 bytes, metadata records 32909" in problem.message
    state.unlink()
    (problem,) = verify_flink_snapshot(str(copy))
    assert problem.kind == "missing" and problem.path == str(state)
    meta = copy / "_metadata"
    meta.write_bytes(meta.read_bytes()[:100])
    (problem,) = verify_flink_snapshot(str(copy))
    assert problem.kind == "metadata" and "byte offset" in problem.message


def test_list_checkpoint_root_job_dir_and_savepoints(flink_golden: Any, tmp_path: Path) -> None:
    now = 2_000_000_000.0
    root = flink_golden.root / "rocksdb-incremental-inline0" / "checkpoints"
    (entry,) = list_flink_checkpoints(str(root), now=now)
    assert (entry.job_id, entry.checkpoint_id, entry.kind, entry.complete, entry.format) == (
        flink_golden.jobs["rocksdb-incremental-inline0"], 4, "checkpoint", True, "native")
    assert entry.size == 2184 + 1507
    assert entry.age_seconds is not None and entry.age_seconds > 0
    (same,) = list_flink_checkpoints(str(root / flink_golden.jobs["rocksdb-incremental-inline0"]), now=now)
    assert same.path == entry.path
    (sp,) = list_flink_checkpoints(str(flink_golden.root / "hashmap" / "savepoints"), now=now)
    assert (sp.kind, sp.checkpoint_id, sp.format, sp.job_id, sp.size) == ("savepoint", 5, "canonical", None, 2130 + 32909)

    copy = tmp_path / "checkpoints"
    shutil.copytree(flink_golden.root / "hashmap" / "checkpoints", copy)
    job = copy / flink_golden.jobs["hashmap"]
    (job / "chk-5").mkdir()
    (job / "chk-5" / "partial").write_bytes(b"x" * 10)
    (job / "chk-6").mkdir()
    (job / "chk-6" / "_metadata").write_bytes(bytes.fromhex("4960672d00000006"))
    entries = list_flink_checkpoints(str(copy), now=now)
    assert [(e.checkpoint_id, e.complete, e.kind, e.error is not None) for e in entries] == [
        (4, True, "checkpoint", False), (5, False, "checkpoint", False), (6, False, "checkpoint", True)]
    assert entries[1].size == 10
    (single,) = list_flink_checkpoints(str(job / "chk-4"), now=now)
    assert single.checkpoint_id == 4 and single.job_id == flink_golden.jobs["hashmap"]


def test_dispose_refuses_non_snapshots_and_deletes_nothing(flink_golden: Any, tmp_path: Path) -> None:
    copy = tmp_path / "checkpoints"
    shutil.copytree(flink_golden.root / "hashmap" / "checkpoints", copy)
    before = sorted(p for p in copy.rglob("*"))
    for target in (copy, copy / flink_golden.jobs["hashmap"]):
        with pytest.raises(NotACheckpointError):
            dispose_flink_snapshot(str(target))
    (copy / "chk-7").mkdir()
    with pytest.raises(IncompleteCheckpointError):
        dispose_flink_snapshot(str(copy / "chk-7"))
    (copy / "chk-7").rmdir()
    assert sorted(p for p in copy.rglob("*")) == before


def test_dispose_savepoint_and_dry_run(flink_golden: Any, tmp_path: Path) -> None:
    copy = tmp_path / "savepoint-1"
    shutil.copytree(flink_golden["hashmap/savepoint"], copy)
    result = dispose_flink_snapshot(str(copy), dry_run=True)
    assert result.dry_run and result.deleted == () and copy.exists()
    plan = result.plan
    assert plan.delete_files[0] == str(copy / "_metadata")
    assert plan.bytes_to_free == 2130 + 32909 and plan.remove_directory
    result = dispose_flink_snapshot(str(copy))
    assert not copy.exists()
    assert result.deleted[0] == str(copy / "_metadata") and result.deleted[-1] == str(copy)


def test_dispose_keeps_shared_files_a_retained_checkpoint_uses(relocated_inline0: Path) -> None:
    job = relocated_inline0
    shared = job / "shared"
    chk5 = job / "chk-5"
    shutil.copytree(job / "chk-4", chk5)
    # chk-5 keeps referencing every shared file except the two whose names start with "9"
    meta5 = chk5 / "_metadata"
    meta5.write_bytes(relocate_flink_metadata(meta5.read_bytes(), f"file:{shared}/9", "file:/elsewhere/9"))
    dropped = {n for n in INLINE0_SHARED if n.startswith("9")}

    plan = plan_flink_dispose(str(job / "chk-4"))
    assert {Path(p).name for p in plan.delete_shared} == dropped
    assert {Path(p).name for p, _ in plan.keep_shared} == set(INLINE0_SHARED) - dropped
    assert all(refs == (str(chk5),) for _, refs in plan.keep_shared)
    assert plan.keep_external == () and plan.missing == () and plan.warnings == ()

    result = dispose_flink_snapshot(str(job / "chk-4"))
    assert result.failed == ()
    assert not (job / "chk-4").exists()
    assert {p.name for p in shared.iterdir()} == set(INLINE0_SHARED) - dropped
    assert verify_flink_snapshot(str(chk5)) != []  # chk-5's "9*" files point elsewhere
    assert {Path(p.path).name for p in verify_flink_snapshot(str(chk5))} == dropped

    # the last checkpoint takes the remaining shared files with it
    result = dispose_flink_snapshot(str(chk5))
    assert not chk5.exists() and list(shared.iterdir()) == []
    assert {Path(p).name for p in result.plan.missing} == dropped


def test_dispose_keeps_all_shared_files_when_a_sibling_is_unreadable(relocated_inline0: Path) -> None:
    job = relocated_inline0
    (job / "chk-6").mkdir()
    (job / "chk-6" / "_metadata").write_bytes(bytes.fromhex("4960672d0000000600"))
    plan = plan_flink_dispose(str(job / "chk-4"))
    assert plan.delete_shared == ()
    assert len(plan.keep_shared) == len(INLINE0_SHARED)
    assert plan.warnings and "chk-6" in plan.warnings[0]
    dispose_flink_snapshot(str(job / "chk-4"))
    assert len(list((job / "shared").iterdir())) == len(INLINE0_SHARED)


def test_dispose_never_deletes_files_outside_the_job(flink_golden: Any, tmp_path: Path) -> None:
    job = tmp_path / flink_golden.jobs["rocksdb-incremental-inline0"]
    shutil.copytree(flink_golden["rocksdb-incremental-inline0/chk-4"], job / "chk-4")
    outside = tmp_path / "elsewhere"
    shutil.copytree(flink_golden.root / "rocksdb-incremental-inline0" / "checkpoints" /
                    flink_golden.jobs["rocksdb-incremental-inline0"] / "shared", outside)
    meta = job / "chk-4" / "_metadata"
    old = f"{flink_golden.inline0_old_prefix}/{flink_golden.jobs['rocksdb-incremental-inline0']}/shared"
    meta.write_bytes(relocate_flink_metadata(meta.read_bytes(), old, f"file:{outside}"))
    result = dispose_flink_snapshot(str(job / "chk-4"))
    assert len(result.plan.keep_external) == len(INLINE0_SHARED)
    assert len(list(outside.iterdir())) == len(INLINE0_SHARED)
    assert not (job / "chk-4").exists()


@pytest.mark.s3
def test_open_and_verify_savepoint_on_s3(flink_golden: Any, s3_server: dict[str, Any], s3_bucket: str) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(**s3_server["storage_options"])
    source = flink_golden["hashmap/savepoint"]
    target = f"{s3_bucket}/savepoints/{source.name}"
    for file in source.iterdir():
        fs.pipe_file(f"{target}/{file.name}", file.read_bytes())
    options = s3_server["storage_options"]
    summary = inspect_flink_snapshot(target, storage_options=options)
    assert summary.checkpoint_id == 5
    assert next(s.name for s in summary.operators[1].keyed_states) == "python-state-count"
    assert verify_flink_snapshot(target, storage_options=options) == []
    (entry,) = list_flink_checkpoints(f"{s3_bucket}/savepoints", storage_options=options)
    assert entry.complete and entry.kind == "savepoint"


@pytest.mark.parametrize("name", SAVEPOINTS)
def test_count_canonical_savepoint_entries(flink_golden: Any, name: str) -> None:
    counts = count_savepoint_entries(open_flink_snapshot(str(flink_golden[name])), "running-count")
    assert counts.totals == {"python-state-count": 1000}  # the job's 1000 keys
    groups = counts.per_key_group["python-state-count"]
    assert sorted(groups) == list(range(128))
    assert [groups[kg] for kg in range(5)] == [7, 6, 6, 10, 8]
    assert counts.bytes_per_state == {"python-state-count": 22890}


def test_count_entries_refuses_checkpoints_and_reports_damage(flink_golden: Any, tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="canonical savepoint"):
        count_savepoint_entries(open_flink_snapshot(str(flink_golden["hashmap/chk-4"])), "running-count")
    copy = tmp_path / "savepoint-x"
    shutil.copytree(flink_golden["hashmap/savepoint"], copy)
    state = copy / "876e98d2-7ba3-4bfd-95bd-4f44843c2c61"
    data = bytearray(state.read_bytes())
    data[1507 + 6] ^= 0x05  # the first key's key-group prefix byte of key group 0
    state.write_bytes(bytes(data))
    with pytest.raises(CorruptStateError, match="key-group prefix"):
        count_savepoint_entries(open_flink_snapshot(str(copy)), "running-count")
    state.write_bytes(bytes(data[:5000]))
    with pytest.raises(CorruptStateError, match=f"5000 bytes, _metadata records {len(data)}"):
        count_savepoint_entries(open_flink_snapshot(str(copy)), "running-count")


def test_stream_reads_stay_inside_the_stream(tmp_path: Path, flink_golden: Any) -> None:
    """Offsets and lengths come from _metadata: a read starts inside the stream and stops at its end,
    and the file must have the size its handle records."""
    from statekit.flink.storage import load_snapshot, read_stream_bytes

    copy = tmp_path / "sp"
    shutil.copytree(flink_golden["hashmap/savepoint"], copy)
    snapshot = load_snapshot(str(copy))
    handle = next(s.managed_keyed_state for op in snapshot.metadata.operators for s in op.subtasks
                  if s.managed_keyed_state is not None and s.managed_keyed_state.delegate is not None)
    assert handle is not None and handle.delegate is not None
    stream = handle.delegate
    assert read_stream_bytes(snapshot, stream, length=2**31 - 1) == (copy / str(stream.path)).read_bytes()
    for offset, length in ((2**63 - 1, None), (stream.size + 1, 4), (-1, 4), (0, -1)):
        with pytest.raises(CorruptStateError, match="an offset or length in _metadata is damaged"):
            read_stream_bytes(snapshot, stream, offset=offset, length=length)
    with open(copy / str(stream.path), "ab") as out:
        out.write(b"\0")
    with pytest.raises(CorruptStateError, match=f"{stream.size + 1} bytes, _metadata records {stream.size}"):
        read_stream_bytes(snapshot, stream, length=4)


@pytest.mark.parametrize("value", [0x7FFFFFFF << 32, 0x7FFFFFFFFFFFFFFF])
def test_a_huge_key_group_offset_is_bad_input_for_diff_and_rescale(tmp_path: Path, flink_golden: Any,
                                                                   value: int) -> None:
    import struct

    from click.testing import CliRunner

    from statekit.cli.main import cli
    from statekit.flink.storage import load_snapshot

    copy = tmp_path / "sp"
    shutil.copytree(flink_golden["hashmap/savepoint"], copy)
    handle = next(s.managed_keyed_state for op in load_snapshot(str(copy)).metadata.operators for s in op.subtasks
                  if s.managed_keyed_state is not None and any(s.managed_keyed_state.key_group_offsets))
    assert handle is not None
    first = next(i for i, o in enumerate(handle.key_group_offsets) if o)
    at = handle.offset + 1 + 4 + 4 + 8 * first  # type byte, range start, count, then the offsets
    data = (copy / "_metadata").read_bytes()
    assert struct.unpack_from(">q", data, at)[0] == handle.key_group_offsets[first]
    (copy / "_metadata").write_bytes(data[:at] + struct.pack(">q", value) + data[at + 8:])
    runner = CliRunner()
    for args in (["diff", str(copy), str(flink_golden["hashmap/savepoint"])],
                 ["rescale", str(copy), "--max-parallelism", "256", "-o", str(tmp_path / "out")]):
        result = runner.invoke(cli, args)
        assert result.exit_code == 2, (args, result.output)
        assert result.output.count("\n") == 1 and "statekit: error:" in result.output
    assert not (tmp_path / "out").exists()
