"""Will it restore? ``statekit check``'s comparison on real job pairs, and the same check in ``run``.

The snapshot is a savepoint of examples/wordcount.py; the jobs are tests/runtime/jobs/
wordcount_variant.py, each with one change (a renamed uid, a removed operator, an added state,
a changed type, kind, serializer, key serializer or max parallelism).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekit.readers.savepoint_reader import SavepointReader
from statekit.runtime.checkpoint.restore import missing_operator_message
from statekit.runtime.control.launcher import run_job_file
from statekit.runtime.dataflow.job_handle import JobStatus
from statekit.runtime.dataflow.run_options import RunOptions
from statekit.runtime.jobmaster.compatibility import (
    CompatibilityReport,
    OperatorMapping,
    StateStatus,
    check_job_file,
    compare,
)
from statekit.runtime.jobmaster.state_probe import DeclaredOperator
from statekit.statefmt.errors import BadInputError, IncompatibleStateError, PathNotFoundError
from statekit.statefmt.json_contract import json_data
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.statefmt.type_evolution import SchemaCompatibility
from statekit.writers.savepoint_writer import SavepointWriter

ROOT = Path(__file__).resolve().parents[3]
WORDCOUNT = str(ROOT / "examples" / "wordcount.py")
ALERTS = str(ROOT / "examples" / "alerts.py")
VARIANT = str(Path(__file__).resolve().parents[1] / "jobs" / "wordcount_variant.py")


@pytest.fixture(scope="module")
def texts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("texts")
    (root / "a.txt").write_text("apple pear apple\nplum\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def savepoint(tmp_path_factory: pytest.TempPathFactory, texts: Path) -> str:
    """A savepoint of examples/wordcount.py (apple 2, pear 1, plum 1)."""
    root = tmp_path_factory.mktemp("wordcount")
    options = RunOptions(savepoint_on_finish=str(root / "sp"), job_args=("--input", str(texts), "--output", str(root / "out")))
    assert run_job_file(WORDCOUNT, options) is JobStatus.FINISHED
    (path,) = (root / "sp").iterdir()
    return str(path)


def check(savepoint: str, texts: Path, tmp_path: Path, variant: str, **options: object) -> CompatibilityReport:
    args = ("--input", str(texts), "--output", str(tmp_path / "out"), "--variant", variant)
    report = check_job_file(savepoint, VARIANT, RunOptions(job_args=args, **options))  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists(), "check ran the job's sink"
    return report


def statuses(report: CompatibilityReport) -> dict[str, StateStatus]:
    return {f"{s.uid}/{s.state}": s.status for s in report.states}


def mappings(report: CompatibilityReport) -> dict[str, OperatorMapping]:
    return {o.uid: o.mapping for o in report.operators}


def test_the_unchanged_job_is_compatible(savepoint: str, texts: Path, tmp_path: Path) -> None:
    report = check(savepoint, texts, tmp_path, "same")
    assert report.compatible and report.reasons == ()
    assert statuses(report) == {"source/offsets": StateStatus.SAME, "counter/count": StateStatus.SAME,
                                "sink/pending-files": StateStatus.SAME}
    assert mappings(report) == {"source": OperatorMapping.MAPPED, "counter": OperatorMapping.MAPPED,
                                "sink": OperatorMapping.MAPPED, "tokenize": OperatorMapping.NEW}
    assert {o.uid: o.notes for o in report.operators}["tokenize"] == ("stateless",)


def test_a_renamed_uid_drops_the_state_unless_allowed(savepoint: str, texts: Path, tmp_path: Path) -> None:
    report = check(savepoint, texts, tmp_path, "renamed-uid")
    assert report.reasons == (missing_operator_message(savepoint, "counter"),)
    assert mappings(report)["counter"] is OperatorMapping.DROPPED
    assert mappings(report)["counter-v2"] is OperatorMapping.NEW
    assert statuses(report)["counter/count"] is StateStatus.DROPPED
    assert statuses(report)["counter-v2/count"] is StateStatus.NEW
    allowed = check(savepoint, texts, tmp_path, "renamed-uid", allow_non_restored_state=True)
    assert allowed.compatible
    counter = next(o for o in allowed.operators if o.uid == "counter")
    assert counter.notes == ("its state is skipped (--allow-non-restored-state)",)


def test_a_removed_operator_is_refused(savepoint: str, texts: Path, tmp_path: Path) -> None:
    report = check(savepoint, texts, tmp_path, "removed-operator")
    assert report.reasons == (missing_operator_message(savepoint, "counter"),)
    assert "counter" not in {o.uid for o in report.operators if o.mapping is not OperatorMapping.DROPPED}


def test_an_added_state_is_new_and_compatible(savepoint: str, texts: Path, tmp_path: Path) -> None:
    report = check(savepoint, texts, tmp_path, "added-state")
    assert report.compatible
    assert statuses(report)["counter/first-seen"] is StateStatus.NEW
    assert statuses(report)["counter/count"] is StateStatus.SAME


def test_a_widened_type_is_migrated(savepoint: str, texts: Path, tmp_path: Path) -> None:
    report = check(savepoint, texts, tmp_path, "float-count")
    assert report.compatible
    (verdict,) = [s for s in report.states if s.state == "count"]
    assert verdict.status is StateStatus.MIGRATED
    assert verdict.type_compatibility is SchemaCompatibility.COMPATIBLE_AFTER_MIGRATION
    assert verdict.changes == ("declared type int -> float: compatible_after_migration",)
    assert report.migration_map()[("counter", "count")].value_type == "float"


@pytest.mark.parametrize("variant, reason", [
    ("string-count", "state counter/count: declared type changed from int to string, which is incompatible "
                     "(int values cannot be read as string)"),
    ("struct-count", "state counter/count: declared type changed from int to struct<n:int>, which is "
                     "incompatible (int values cannot be read as struct<n:int>)"),
    ("list-count", "state counter/count: kind changed from value to list"),
    ("json-serializer", "state counter/count: value serializer changed from 'msgpack' to 'json'"),
    ("string-keys", "operator 'counter': key serializer changed from 'msgpack' to 'utf8'; keys written by one "
                    "cannot be found by the other"),
])
def test_incompatible_changes_give_one_reason_each(savepoint: str, texts: Path, tmp_path: Path,
                                                   variant: str, reason: str) -> None:
    report = check(savepoint, texts, tmp_path, variant)
    assert report.reasons == (reason,)
    assert not report.compatible


def test_a_changed_max_parallelism_is_refused(savepoint: str, texts: Path, tmp_path: Path) -> None:
    report = check(savepoint, texts, tmp_path, "max-parallelism-256")
    (reason,) = report.reasons
    assert reason.startswith("operator 'counter': max parallelism 256 differs from 128")
    assert "statekit rescale --max-parallelism" in reason


def test_a_parallelism_above_the_max_parallelism_needs_an_offline_rescale(savepoint: str, texts: Path,
                                                                        tmp_path: Path) -> None:
    report = check(savepoint, texts, tmp_path, "same", parallelism=200)
    assert report.reasons == (
        f"operator 'counter': parallelism 200 exceeds max parallelism 128 of its keyed state in {savepoint}; "
        "lower -p or raise the key-group count offline with `statekit rescale --max-parallelism M` (M >= 200)",)


def test_a_new_parallelism_reports_the_redistribution(savepoint: str, texts: Path, tmp_path: Path) -> None:
    report = check(savepoint, texts, tmp_path, "same", parallelism=3)
    assert report.compatible
    notes = {o.uid: o.notes for o in report.operators}
    assert notes["counter"] == ("rescale 1 -> 3", "keyed state: 128 key groups redistributed by key-group ranges")
    assert notes["source"] == ("rescale 1 -> 3", "offsets: union list state, every subtask gets all elements")


def test_bad_input_is_an_error_not_a_verdict(savepoint: str, texts: Path, tmp_path: Path) -> None:
    with pytest.raises(PathNotFoundError, match="job file not found"):
        check_job_file(savepoint, str(tmp_path / "nope.py"), RunOptions())
    with pytest.raises(BadInputError, match=r"exited \(code 2\) before it called execute\(\)"):
        check_job_file(savepoint, VARIANT, RunOptions(job_args=("--variant", "no-such")))
    quiet = tmp_path / "quiet.py"
    quiet.write_text("x = 1\n", encoding="utf-8")
    with pytest.raises(BadInputError, match=r"never called env\.execute"):
        check_job_file(savepoint, str(quiet), RunOptions())
    with pytest.raises(PathNotFoundError, match="input directory does not exist"):
        check_job_file(savepoint, VARIANT, RunOptions(job_args=("--input", str(tmp_path / "no"), "--output", "x")))


def test_operator_state_redistribution_of_the_alerts_example(tmp_path: Path) -> None:
    options = RunOptions(parallelism=2, savepoint_on_finish=str(tmp_path / "sp"),
                         job_args=("--payments", "200", "--output", str(tmp_path / "alerts.txt")))
    assert run_job_file(ALERTS, options) is JobStatus.FINISHED
    (path,) = (tmp_path / "sp").iterdir()
    report = check_job_file(str(path), ALERTS, RunOptions(parallelism=3, job_args=("--payments", "200")))
    assert report.compatible
    notes = {o.uid: o.notes for o in report.operators}
    assert "buffer: list state elements split evenly over 3 subtasks" in notes["alert-sink"]
    assert "limits: broadcast state, every subtask gets a copy" in notes["limits"]
    # broadcast state is asked for while records are processed: restored, carried, reported
    assert statuses(report)["limits/limits"] is StateStatus.UNDECLARED


# ---------------------------------------------------------------- the same check in `statekit run`


def test_run_refuses_an_incompatible_restore_before_any_task_starts(savepoint: str, texts: Path,
                                                                   tmp_path: Path) -> None:
    args = ("--input", str(texts), "--output", str(tmp_path / "out"), "--variant", "string-count")
    expected = check_job_file(savepoint, VARIANT, RunOptions(job_args=args))
    with pytest.raises(IncompatibleStateError) as failure:
        run_job_file(VARIANT, RunOptions(restore_path=savepoint, job_args=args))
    assert str(failure.value).splitlines() == list(expected.reasons)
    assert failure.value.exit_code == 2
    assert not (tmp_path / "out").exists()


def test_run_migrates_a_widened_type_on_restore(savepoint: str, texts: Path, tmp_path: Path) -> None:
    more = tmp_path / "more"
    more.mkdir()
    (more / "a.txt").write_text("apple pear apple\nplum\n", encoding="utf-8")
    (more / "b.txt").write_text("apple fig\n", encoding="utf-8")
    args = ("--input", str(more), "--output", str(tmp_path / "out"), "--variant", "float-count")
    options = RunOptions(restore_path=savepoint, savepoint_on_finish=str(tmp_path / "sp"), job_args=args)
    assert run_job_file(VARIANT, options) is JobStatus.FINISHED  # the job asserts each restored count is a float
    lines = sorted(line for f in sorted((tmp_path / "out").iterdir()) if not f.name.startswith((".", "_"))
                   for line in f.read_text(encoding="utf-8").splitlines())
    assert lines == ["apple\t3.0", "fig\t1.0"]
    (path,) = (tmp_path / "sp").iterdir()
    reader = SavepointReader.read(str(path))
    assert reader.descriptor("counter", "count").value_type == "float"
    counts = {e.key: e.value for e in reader.read_keyed_state("counter", "count")}
    assert counts == {"apple": 3.0, "pear": 1.0, "plum": 1.0, "fig": 1.0}
    assert all(isinstance(v, float) for v in counts.values())


# ---------------------------------------------------------------- compare() on written snapshots


def _declared(uid: str, *states: StateDescriptor, parallelism: int = 1) -> DeclaredOperator:
    return DeclaredOperator(uid, uid, parallelism, 128, False, True, "msgpack", states)


def test_ttl_and_map_key_changes(tmp_path: Path) -> None:
    old_spent = StateDescriptor("spent", StateKind.MAP, value_type="int", user_key_serializer="msgpack",
                                user_key_type="string", ttl_ms=60_000)
    SavepointWriter.new_savepoint().with_operator("acc", {old_spent: [("k", "food", 3)]}).write(str(tmp_path / "sp"))
    metadata = SavepointReader.read(str(tmp_path / "sp")).metadata
    shorter = StateDescriptor("spent", StateKind.MAP, value_type="int", user_key_serializer="msgpack",
                              user_key_type="string", ttl_ms=1_000)
    report = compare(metadata, "SP", [_declared("acc", shorter)])
    assert report.compatible
    assert report.states[0].changes == ("TTL 60000 ms -> 1000 ms (expiry is stored per entry: entries restored "
                                        "keep theirs)",)
    int_keys = StateDescriptor("spent", StateKind.MAP, value_type="float", user_key_serializer="msgpack",
                               user_key_type="int", ttl_ms=60_000)
    report = compare(metadata, "SP", [_declared("acc", int_keys)])
    assert report.reasons == ("state acc/spent: map key type changed from string to int; keys cannot change type",)


def test_a_state_whose_namespace_changes_is_incompatible(tmp_path: Path) -> None:
    # window state of an older layout (no namespace) cannot be restored as namespaced window state
    plain = StateDescriptor("window-contents", StateKind.VALUE, value_type="int")
    SavepointWriter.new_savepoint().with_operator("w", {plain: [("k", 3)]}).write(str(tmp_path / "sp"))
    metadata = SavepointReader.read(str(tmp_path / "sp")).metadata
    windowed = StateDescriptor("window-contents", StateKind.VALUE, value_type="int", namespace_type="list<int>")
    report = compare(metadata, "SP", [_declared("w", windowed)])
    assert report.reasons == ("state w/window-contents: namespace type changed from none to list<int>; "
                              "a state's namespace cannot change",)
    assert compare(metadata, "SP", [_declared("w", plain)]).compatible


def test_keyed_state_on_an_operator_that_is_no_longer_keyed(tmp_path: Path) -> None:
    count = StateDescriptor("count", StateKind.VALUE, value_type="int")
    SavepointWriter.new_savepoint().with_operator("c", {count: [("k", 1)]}).write(str(tmp_path / "sp"))
    metadata = SavepointReader.read(str(tmp_path / "sp")).metadata
    plain = DeclaredOperator("c", "c", 1, 128, False, False, None, ())
    report = compare(metadata, "SP", [plain])
    assert report.reasons == ("operator 'c' has keyed state 'count' in the snapshot but is not keyed in the job; "
                              "key the stream (key_by) or drop the state offline",)
    assert json_data(report)["states"][0]["status"] == "undeclared"


def test_run_without_restore_still_runs_the_job(tmp_path: Path, texts: Path) -> None:
    # no -s: nothing to compare; execute() outside a capture runs the job
    options = RunOptions(job_args=("--input", str(texts), "--output", str(tmp_path / "out")))
    assert run_job_file(VARIANT, options) is JobStatus.FINISHED
    assert os.listdir(tmp_path / "out")


def test_a_migration_of_native_keyed_state_is_refused(tmp_path: Path, texts: Path) -> None:
    pytest.importorskip("rocksdict")
    args = ("--input", str(texts), "--output", str(tmp_path / "out"))
    options = RunOptions(checkpoint_dir=str(tmp_path / "chk"), checkpoint_interval_ms=20, state_backend="rocksdb",
                         incremental=True, job_args=args)
    assert run_job_file(WORDCOUNT, options) is JobStatus.FINISHED
    (job_dir,) = (tmp_path / "chk").iterdir()
    report = check_job_file(str(job_dir), VARIANT, RunOptions(job_args=(*args, "--variant", "float-count")))
    assert report.reasons == (
        "state counter/count: declared type int -> float needs a migration, which native keyed state (a RocksDB "
        "checkpoint) does not get on restore; restore from a canonical savepoint of the job, or migrate one "
        "offline with `statekit migrate`",)
    assert check_job_file(str(job_dir), VARIANT, RunOptions(job_args=(*args, "--variant", "same"))).compatible
