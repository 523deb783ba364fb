"""Rewriting real Flink savepoints (``statekit.flink.rewrite``): a new max parallelism, removed
and renamed operators. Sources are the canonical savepoints PyFlink wrote (tests/golden).

What restores in Flink itself is proved by tests/flink/test_flink_rewrite_restore.py (marked
``flink``); here the output is checked against the source entry by entry, and against
Flink's key-group assignment computed independently of the writer.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.flink.entries import decodable_states, read_keyed_state
from statekit.flink.keygroups import flink_murmur_hash, java_hash_code
from statekit.flink.metadata import read_flink_metadata
from statekit.flink.model import KeyedHandleKind, StreamHandleKind
from statekit.flink.rewrite import modify_flink_savepoint, rescale_flink_savepoint
from statekit.flink.storage import FlinkSnapshot, load_snapshot, read_stream_bytes
from statekit.flink.uids import operator_id_for_uid
from statekit.flink.verify import verify_snapshot
from statekit.statefmt.errors import BadInputError, CorruptStateError, StateNotFoundError
from statekit.statefmt.json_contract import json_data
from statekit.statefmt.keygroups import compute_key_group_range_for_operator_index

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
PYFLINK_23 = GOLDEN / "pyflink-2.3" / "hashmap" / "savepoints" / "savepoint-48634f-b2be849ccf0d"
PYFLINK_120 = GOLDEN / "pyflink-1.20" / "rocksdb" / "savepoints" / "savepoint-4a37e5-754b98d40435"  # metadata v4
FLINK_23 = GOLDEN / "flink-2.3" / "hashmap" / "savepoints" / "savepoint-962f67-bfc4c25148ed"  # max parallelism 128
NATIVE = GOLDEN / "pyflink-2.3" / "rocksdb" / "savepoints" / "savepoint-eb15bf-f1a299ad5000"
CHECKPOINT = GOLDEN / "pyflink-2.3" / "hashmap" / "checkpoints" / "48634f7cf73d7ede1086d790c5aed620" / "chk-4"
KEYED_IDS = {"profile": "3a6ebe42074adc76cfc3539a4ad436a8", "sparse": "2ca698008bc37faf0abb072f5dcddfbb",
             "running-count": "running-count"}


def entries(snapshot: FlinkSnapshot, op: str) -> dict[str, collections.Counter[str]]:
    """Every decoded entry of every keyed state of ``op`` (key, namespace, user key, value, expiry)."""
    out = {}
    for state in decodable_states(snapshot, op):
        assert state.decoder is not None, state.reason
        out[state.name] = collections.Counter(repr((e.key, e.namespace, e.user_key, e.value, e.expiry))
                                              for e in read_keyed_state(snapshot, op, state.name))
    return out


def keyed_ops(snapshot: FlinkSnapshot) -> list[str]:
    return [op.operator_id for op in snapshot.metadata.operators if any(s.managed_keyed_state for s in op.subtasks)]


def flink_key_group(key: Any, max_parallelism: int) -> int:
    """Flink's key group of a PyFlink key Row(value), from the value (62 + its hashCode: a Row's hashCode)."""
    value = key["f0"]
    code = java_hash_code(value, "string" if isinstance(value, str) else "int")
    return flink_murmur_hash((62 + code) & 0xFFFFFFFF) % max_parallelism


def test_rescale_moves_every_entry_to_flinks_key_group_and_keeps_its_bytes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    report = rescale_flink_savepoint(str(PYFLINK_23), str(out), max_parallelism=1024)
    source, result = load_snapshot(str(PYFLINK_23)), load_snapshot(str(out))
    for op in keyed_ops(source):
        assert entries(result, op) == entries(source, op)
        for state in decodable_states(result, op):
            for e in read_keyed_state(result, op, state.name):  # the reader checks the stored prefix too
                assert e.key_group == flink_key_group(e.key, 1024)
                assert e.key_group in compute_key_group_range_for_operator_index(
                    1024, result.metadata.operator(op).parallelism, e.subtask)
    regrouped = [op for op in report.operators if op.action == "regroup"]
    assert [op.label for op in regrouped] == ["profile", "sparse"]
    assert [op.key_type for op in regrouped] == ["Row<String>", "Row<Integer>"]
    assert sum(op.entries for op in regrouped) == 10120 and report.spilled_bytes == 0


def test_rescaled_metadata_keeps_version_operators_and_operator_state(tmp_path: Path) -> None:
    out = tmp_path / "out"
    rescale_flink_savepoint(str(PYFLINK_23), str(out), max_parallelism=1024)
    old, new = load_snapshot(str(PYFLINK_23)).metadata, load_snapshot(str(out)).metadata
    assert (new.version, new.checkpoint_id, new.properties) == (old.version, old.checkpoint_id, old.properties)
    assert [(op.operator_id, op.uid, op.name, op.parallelism) for op in new.operators] == \
        [(op.operator_id, op.uid, op.name, op.parallelism) for op in old.operators]
    assert {op.max_parallelism for op in new.operators} == {1024}
    for before, after in zip(old.operators, new.operators):
        assert [s.managed_operator_state for s in after.subtasks] == [s.managed_operator_state for s in before.subtasks]
        assert after.coordinator_state == before.coordinator_state
        for index, sub in enumerate(after.subtasks):
            handle = sub.managed_keyed_state
            if handle is None:
                continue
            assert handle.kind is KeyedHandleKind.SAVEPOINT_KEY_GROUPS
            assert handle.key_group_range == compute_key_group_range_for_operator_index(1024, after.parallelism, index)
            assert handle.delegate is not None and handle.delegate.kind is StreamHandleKind.RELATIVE_FILE
            assert (out / str(handle.delegate.path)).stat().st_size == handle.delegate.size
            starts = [o for o in handle.key_group_offsets if o]
            assert starts == sorted(starts) and len(set(starts)) == len(starts)
    assert sorted(os.listdir(out)) == sorted(["_metadata", *(str(h.path) for _, _, _, h in new.stream_handles()
                                                             if h.kind is StreamHandleKind.RELATIVE_FILE)])
    assert verify_snapshot(load_snapshot(str(out))) == []


def test_each_new_stream_starts_with_the_sources_header(tmp_path: Path) -> None:
    out = tmp_path / "out"
    rescale_flink_savepoint(str(PYFLINK_23), str(out), max_parallelism=300)
    source, result = load_snapshot(str(PYFLINK_23)), load_snapshot(str(out))
    for op_id in keyed_ops(source):
        (old_sub, *_), new_subs = source.metadata.operator(op_id).subtasks, result.metadata.operator(op_id).subtasks
        old = old_sub.managed_keyed_state
        assert old is not None and old.delegate is not None
        header = read_stream_bytes(source, old.delegate, length=min(o for o in old.key_group_offsets if o))
        for sub in new_subs:
            assert sub.managed_keyed_state is not None and sub.managed_keyed_state.delegate is not None
            assert read_stream_bytes(result, sub.managed_keyed_state.delegate, length=len(header)) == header


@pytest.mark.parametrize(("source", "max_parallelism"), [(PYFLINK_23, 100), (PYFLINK_120, 4096), (FLINK_23, 1024),
                                                          (FLINK_23, 2)])
def test_rescale_across_prefix_widths_and_versions(tmp_path: Path, source: Path, max_parallelism: int) -> None:
    """1-byte key-group prefixes (max parallelism <= 128) become 2-byte ones and back; v4 and v6."""
    out = tmp_path / "out"
    rescale_flink_savepoint(str(source), str(out), max_parallelism=max_parallelism)
    before, after = load_snapshot(str(source)), load_snapshot(str(out))
    assert after.metadata.version == before.metadata.version
    for op in keyed_ops(before):
        assert entries(after, op) == entries(before, op)
        for state in decodable_states(after, op):
            assert all(e.key_group == flink_key_group(e.key, max_parallelism)
                       for e in read_keyed_state(after, op, state.name))
    assert verify_snapshot(after) == []


def test_operators_with_their_own_max_parallelism_keep_it(tmp_path: Path) -> None:
    """The non-parallel source (max parallelism 1) must match the restoring job's, so it is kept."""
    out = tmp_path / "out"
    report = rescale_flink_savepoint(str(FLINK_23), str(out), max_parallelism=1024)
    assert [(op.label[:6], op.action, op.max_parallelism) for op in report.operators] == [
        ("cbc357", "kept", 1), ("runnin", "regroup", 1024), ("7df19f", "kept", 1), ("d1d986", "max parallelism", 1024)]
    assert [op.max_parallelism for op in load_snapshot(str(out)).metadata.operators] == [1, 1024, 1, 1024]


def test_a_small_memory_budget_spills_and_writes_the_same_streams(tmp_path: Path) -> None:
    spill = tmp_path / "spill"
    spill.mkdir()
    whole = rescale_flink_savepoint(str(PYFLINK_23), str(tmp_path / "a"), max_parallelism=512)
    spilled = rescale_flink_savepoint(str(PYFLINK_23), str(tmp_path / "b"), max_parallelism=512,
                                      memory_budget=4096, spill_dir=str(spill))
    assert whole.spilled_bytes == 0 and spilled.spilled_bytes > 100_000
    assert list(spill.iterdir()) == []  # temporary files are gone

    def streams(directory: Path) -> list[bytes]:
        return sorted(p.read_bytes() for p in directory.iterdir() if p.name != "_metadata")

    assert streams(tmp_path / "a") == streams(tmp_path / "b")
    assert [json_data(op) for op in whole.operators] == [json_data(op) for op in spilled.operators]


def test_dry_run_plans_what_a_run_writes_and_writes_nothing(tmp_path: Path) -> None:
    plan = rescale_flink_savepoint(str(PYFLINK_23), str(tmp_path / "out"), max_parallelism=1024, dry_run=True,
                                   exact_plan=True)
    assert plan.dry_run and not (tmp_path / "out").exists() and plan.bytes_read > 400_000
    done = rescale_flink_savepoint(str(PYFLINK_23), str(tmp_path / "out"), max_parallelism=1024)
    assert [json_data(op) for op in plan.operators] == [json_data(op) for op in done.operators]
    profile = next(op for op in done.operators if op.label == "profile")
    assert [s.key_group_range.to_list() for s in profile.subtasks] == [[0, 341], [342, 682], [683, 1023]]
    assert 1.0 <= profile.skew < 1.2 and sum(s.entries for s in profile.subtasks) == 10000
    assert rescale_flink_savepoint(str(PYFLINK_23), None, max_parallelism=64, dry_run=True).output is None


@pytest.mark.parametrize(("source", "kwargs", "message"), [
    (PYFLINK_23, {"max_parallelism": 256}, "already have max parallelism 256: nothing to do"),
    (PYFLINK_23, {"max_parallelism": 2}, "operator profile runs at parallelism 3, more than the max parallelism 2"),
    (PYFLINK_23, {"max_parallelism": 32769}, r"max parallelism must be in \[1, 32768\]"),
    (NATIVE, {"max_parallelism": 1024}, r"is a native savepoint \(operator profile subtask 0: incremental keyed "
                                        r"state handle, the state backend's own files\): rewriting keyed state needs a "
                                        r"canonical savepoint; take one with `flink savepoint --type canonical`"),
    (CHECKPOINT, {"max_parallelism": 1024}, "is a checkpoint; rescale rewrites savepoints"),
])
def test_rescale_refusals_name_the_cause(tmp_path: Path, source: Path, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(BadInputError, match=message):
        rescale_flink_savepoint(str(source), str(tmp_path / "out"), **kwargs)
    assert not (tmp_path / "out").exists()


def copy_savepoint(source: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "source"
    shutil.copytree(source, copy)
    for path in copy.iterdir():
        path.chmod(0o644)
    return copy


def test_keys_statekit_cannot_hash_are_refused_naming_state_and_serializer(tmp_path: Path) -> None:
    """The key serializer of "profile" made BigDecimal's (same length, skippable, not hashed)."""
    copy = copy_savepoint(PYFLINK_23, tmp_path)
    for sub in load_snapshot(str(copy)).metadata.operator("profile").subtasks:
        assert sub.managed_keyed_state is not None and sub.managed_keyed_state.delegate is not None
        stream = copy / str(sub.managed_keyed_state.delegate.path)
        data = stream.read_bytes()
        stream.write_bytes(data.replace(b"StringSerializer$StringSerializerSnapshot",
                                        b"BigDecSerializer$BigDecSerializerSnapshot"))
    with pytest.raises(BadInputError) as caught:
        rescale_flink_savepoint(str(copy), str(tmp_path / "out"), max_parallelism=1024)
    message = str(caught.value)
    assert "\n" not in message and "operator profile: state 'python-state-flag' is keyed by " \
        "org.apache.flink.api.common.typeutils.base.BigDecSerializer$BigDecSerializerSnapshot, whose Java " \
        "hashCode statekit cannot compute" in message
    assert not (tmp_path / "out").exists()


def test_damaged_state_fails_the_whole_rescale_and_leaves_nothing(tmp_path: Path) -> None:
    copy = copy_savepoint(PYFLINK_23, tmp_path)
    sub = load_snapshot(str(copy)).metadata.operator("sparse").subtasks[1]
    assert sub.managed_keyed_state is not None and sub.managed_keyed_state.delegate is not None
    stream = copy / str(sub.managed_keyed_state.delegate.path)
    size = stream.stat().st_size
    stream.write_bytes(stream.read_bytes()[:-100])
    spill = tmp_path / "spill"
    spill.mkdir()
    with pytest.raises(CorruptStateError, match=f"{stream}: {size - 100} bytes, _metadata records {size}"):
        rescale_flink_savepoint(str(copy), str(tmp_path / "out"), max_parallelism=1024, spill_dir=str(spill))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["source", "spill"] and list(spill.iterdir()) == []


@pytest.mark.parametrize("damage", ["truncated", "appended"])
def test_modify_refuses_a_damaged_kept_file_and_writes_nothing(tmp_path: Path, damage: str) -> None:
    """Flink records each file's size: a kept file of another size is damage (the output's verify
    would fail); a removed operator's damaged file is no obstacle."""
    copy = copy_savepoint(PYFLINK_23, tmp_path)
    sub = load_snapshot(str(copy)).metadata.operator("sparse").subtasks[0]
    assert sub.managed_keyed_state is not None and sub.managed_keyed_state.delegate is not None
    stream = copy / str(sub.managed_keyed_state.delegate.path)
    data = stream.read_bytes()
    stream.write_bytes(data[:-10] if damage == "truncated" else data + b"\0" * 10)
    with pytest.raises(CorruptStateError, match=r"damaged: operator sparse subtask 0, data file .* has "
                                                r"\d+ bytes, metadata records \d+; nothing was written"):
        modify_flink_savepoint(str(copy), str(tmp_path / "out"), remove_operators=["profile"])
    assert not (tmp_path / "out").exists()
    done = CliRunner().invoke(cli, ["modify", str(copy), "--remove-operator", "sparse", "-o", str(tmp_path / "kept")])
    assert done.exit_code == 0, done.output  # the damaged operator removed: nothing damaged is kept
    assert verify_snapshot(load_snapshot(str(tmp_path / "kept"))) == []


def test_modify_refuses_a_native_savepoint_whose_rocksdb_state_is_damaged(pyflink_jobs: Any, tmp_path: Path) -> None:
    source = pyflink_jobs["pyflink-2.3/rocksdb"].savepoint("native")
    copy = copy_savepoint(source, tmp_path)
    snapshot = load_snapshot(str(copy), uids=("profile",))
    handle = snapshot.metadata.operator("profile").subtasks[0].managed_keyed_state
    assert handle is not None
    manifest = next(n.handle for n in handle.private if n.local_path.startswith("MANIFEST") and n.handle)
    damaged = copy / str(manifest.path)
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0x01
    damaged.write_bytes(bytes(data))
    with pytest.raises(CorruptStateError, match="damaged: RocksDB state of operator") as failure:
        modify_flink_savepoint(str(copy), str(tmp_path / "out"), remove_operators=["sparse"])
    assert str(damaged) in str(failure.value) and not (tmp_path / "out").exists()


def test_an_output_that_is_not_empty_is_refused_before_any_work(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep").write_text("x")
    with pytest.raises(BadInputError, match="output directory exists and is not empty"):
        rescale_flink_savepoint(str(PYFLINK_23), str(tmp_path / "out"), max_parallelism=1024)
    with pytest.raises(BadInputError, match="give the output directory"):
        rescale_flink_savepoint(str(PYFLINK_23), None, max_parallelism=1024)


# ----------------------------------------------------------------------------- modify


def test_rename_gives_the_new_uid_and_its_operator_id_and_keeps_the_state(tmp_path: Path) -> None:
    out = tmp_path / "out"
    report = modify_flink_savepoint(str(PYFLINK_23), str(out), rename_uids=[("profile", "profile-v2")])
    assert report.renamed == [("profile", "profile-v2", operator_id_for_uid("profile-v2"))]
    source, result = load_snapshot(str(PYFLINK_23)), load_snapshot(str(out))
    renamed = result.metadata.operator("profile-v2")
    assert (renamed.operator_id, renamed.name) == (operator_id_for_uid("profile-v2"),
                                                   source.metadata.operator("profile").name)
    assert entries(result, "profile-v2") == entries(source, "profile")
    with pytest.raises(StateNotFoundError):
        result.metadata.operator("profile")
    assert [op.label for op in result.metadata.operators] == [
        "numbers", "f2ad361cabceed144f7a8ae2c75e1c0c", "throttle", "profile-v2", "sparse", "drop"]
    assert verify_snapshot(result) == []


def test_renames_apply_together_and_removal_takes_uids_or_hex_ids(tmp_path: Path) -> None:
    out = tmp_path / "out"
    modify_flink_savepoint(str(PYFLINK_23), str(out), rename_uids=[("profile", "sparse"), ("sparse", "profile")],
                           remove_operators=["f2ad361cabceed144f7a8ae2c75e1c0c", "drop"])
    source, result = load_snapshot(str(PYFLINK_23)), load_snapshot(str(out))
    assert [op.label for op in result.metadata.operators] == ["numbers", "throttle", "sparse", "profile"]
    assert entries(result, "sparse") == entries(source, "profile")
    assert entries(result, "profile") == entries(source, "sparse")
    assert result.metadata.size < source.metadata.size


def test_rename_in_metadata_without_uids_addresses_operators_by_the_hash_of_their_uid(tmp_path: Path) -> None:
    out = tmp_path / "out"
    report = modify_flink_savepoint(str(PYFLINK_120), str(out), rename_uids=[("sparse", "sparse-v2")])
    assert report.metadata_version == 4 and report.renamed[0][0] == "sparse"
    result = load_snapshot(str(out), uids=["sparse-v2"])
    assert result.metadata.version == 4
    assert result.metadata.operator("sparse-v2").operator_id == operator_id_for_uid("sparse-v2")
    assert entries(result, "sparse-v2") == entries(load_snapshot(str(PYFLINK_120), uids=["sparse"]), "sparse")
    assert read_flink_metadata((out / "_metadata").read_bytes(), source="x").operators[4].uid is None


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({}, BadInputError, "nothing to do"),
    ({"remove_operators": ["nope"]}, StateNotFoundError, "--remove-operator 'nope': no operator with that uid or id "
                                                          r"\(operators: numbers, f2ad361cabceed144f7a8ae2c75e1c0c"),
    ({"rename_uids": [("profile", "sparse")]}, BadInputError, "two operators would have operator id"),
    ({"rename_uids": [("profile", "a")], "remove_operators": ["profile"]}, BadInputError, "more than one operation"),
    ({"rename_uids": [("profile", "")]}, BadInputError, "must not be empty"),
    ({"rename_uids": [("profile", "profile")]}, BadInputError, "already has that uid"),
])
def test_modify_refusals(tmp_path: Path, kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        modify_flink_savepoint(str(PYFLINK_23), str(tmp_path / "out"), **kwargs)
    assert not (tmp_path / "out").exists()


def test_modify_refuses_checkpoints_and_dry_run_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="is a checkpoint; modify rewrites savepoints"):
        modify_flink_savepoint(str(CHECKPOINT), str(tmp_path / "out"), remove_operators=["profile"])
    plan = modify_flink_savepoint(str(PYFLINK_23), str(tmp_path / "out"), remove_operators=["sparse"], dry_run=True)
    assert plan.dry_run and plan.removed == [("sparse", KEYED_IDS["sparse"])] and not (tmp_path / "out").exists()
    assert [op.label for op in plan.operators] == ["numbers", "f2ad361cabceed144f7a8ae2c75e1c0c", "throttle",
                                                   "profile", "drop"]


def test_absolute_file_handles_become_relative_files_of_the_output(tmp_path: Path) -> None:
    """A savepoint whose _metadata names its files by absolute paths (relocated) comes out self-contained."""
    copy = copy_savepoint(PYFLINK_23, tmp_path)
    data = (copy / "_metadata").read_bytes()
    handles = [h for _, _, _, h in read_flink_metadata(data, source="x").stream_handles()
               if h.kind is StreamHandleKind.RELATIVE_FILE]
    # rewrite the relative handles as absolute ones (type 2: size, path) the way Flink 1.x wrote them
    from statekit.flink.metadata_writer import Edit, apply_edits, encode_utf

    edits = [Edit(h.offset, h.offset + 1 + 2 + len(str(h.path).encode()) + 8,
                  b"\x02" + h.size.to_bytes(8, "big") + encode_utf(f"file:{copy}/{h.path}", what="path"))
             for h in handles]
    (copy / "_metadata").write_bytes(apply_edits(data, edits))
    absolute = [h for _, _, _, h in load_snapshot(str(copy)).metadata.stream_handles() if not h.is_inline]
    assert len(absolute) == 5 and {h.kind for h in absolute} == {StreamHandleKind.FILE}
    out = tmp_path / "out"
    modify_flink_savepoint(str(copy), str(out), remove_operators=["drop"])
    result = load_snapshot(str(out))
    kinds = {h.kind for _, _, _, h in result.metadata.stream_handles() if not h.is_inline}
    assert kinds == {StreamHandleKind.RELATIVE_FILE}
    assert entries(result, "profile") == entries(load_snapshot(str(PYFLINK_23)), "profile")
    assert verify_snapshot(result) == []


# ----------------------------------------------------------------------------- command line


def test_the_cli_rescales_and_inspect_and_verify_read_the_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    runner = CliRunner()
    done = runner.invoke(cli, ["rescale", str(PYFLINK_23), "--max-parallelism", "1024", "-o", str(out), "--json"])
    assert done.exit_code == 0, done.output
    assert {op["label"]: op["action"] for op in json.loads(done.stdout)["operators"]}["profile"] == "regroup"
    inspected = runner.invoke(cli, ["inspect", str(out), "--json"])
    assert inspected.exit_code == 0, inspected.output
    assert {op["max_parallelism"] for op in json.loads(inspected.stdout)["operators"]} == {1024}
    verified = runner.invoke(cli, ["verify", str(out), "--json"])
    assert verified.exit_code == 0 and json.loads(verified.stdout)["ok"] is True


@pytest.mark.parametrize(("argv", "message"), [
    (["rescale", str(NATIVE), "--max-parallelism", "1024"],
     f"{NATIVE}: is a native savepoint (operator profile subtask 0: incremental keyed state handle"),
    (["modify", str(CHECKPOINT), "--remove-operator", "profile"], f"{CHECKPOINT}: is a checkpoint; modify rewrites"),
])
def test_the_cli_refuses_with_one_line_and_exit_code_2(tmp_path: Path, argv: list[str], message: str) -> None:
    done = CliRunner().invoke(cli, [*argv, "-o", str(tmp_path / "out")])
    assert done.exit_code == 2 and message in done.output
    assert "Traceback" not in done.output and len(done.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_the_cli_dry_run_prints_the_plan_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = CliRunner().invoke(cli, ["rescale", str(PYFLINK_23), "--max-parallelism", "1024", "-o", str(out),
                                    "--dry-run"])
    assert done.exit_code == 0, done.output
    assert "dry run: nothing written" in done.output and "0-341" in done.output and "skew" in done.output
    renamed = CliRunner().invoke(cli, ["modify", str(PYFLINK_23), "--rename-uid", "profile=profile-v2", "-o",
                                       str(out), "--dry-run"])
    assert renamed.exit_code == 0 and "profile-v2" in renamed.output
    assert not out.exists()


def _synthetic_metadata(version: int) -> bytes:
    """The synthetic _metadata of test_flink_metadata.py: every handle kind, in-flight data included,
    and no recorded snapshot kind (test modules cannot import each other: loaded by path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("flink_metadata_cases", Path(__file__).with_name("test_flink_metadata.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return bytes(module._synthetic(version))


@pytest.mark.parametrize("version", [3, 5, 7])
def test_a_metadata_with_in_flight_data_is_refused_by_both_rewrites(tmp_path: Path, version: int) -> None:
    """An unaligned checkpoint whose _metadata does not say it is a checkpoint: its channel state
    (in-flight records) cannot be carried over, so nothing is written."""
    source = tmp_path / "savepoint-x"
    source.mkdir()
    (source / "_metadata").write_bytes(_synthetic_metadata(version))
    for rewrite in (lambda out: modify_flink_savepoint(str(source), out, remove_operators=["op-a"]),
                    lambda out: rescale_flink_savepoint(str(source), out, max_parallelism=256)):
        with pytest.raises(BadInputError, match=r"holds in-flight data \(2 channel state handle\(s\)\) of an "
                                                "unaligned checkpoint"):
            rewrite(str(tmp_path / "out"))
        assert not (tmp_path / "out").exists()
