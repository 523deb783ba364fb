"""``statekit check`` and ``statekit migrate`` through click's CliRunner: exit codes, lines, --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from statekit.cli.main import cli
from statekit.readers.savepoint_reader import SavepointReader
from statekit.runtime.control.launcher import run_job_file
from statekit.runtime.dataflow.job_handle import JobStatus
from statekit.runtime.dataflow.run_options import RunOptions
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = str(ROOT / "examples" / "wordcount.py")
VARIANT = str(ROOT / "tests" / "runtime" / "jobs" / "wordcount_variant.py")


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


@pytest.fixture(scope="module")
def texts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("texts")
    (root / "a.txt").write_text("apple pear apple\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def savepoint(tmp_path_factory: pytest.TempPathFactory, texts: Path) -> str:
    root = tmp_path_factory.mktemp("wordcount")
    options = RunOptions(savepoint_on_finish=str(root / "sp"), job_args=("--input", str(texts), "--output", str(root / "out")))
    assert run_job_file(WORDCOUNT, options) is JobStatus.FINISHED
    (path,) = (root / "sp").iterdir()
    return str(path)


def job(texts: Path, tmp_path: Path, variant: str) -> list[str]:
    return [VARIANT, "--input", str(texts), "--output", str(tmp_path / "out"), "--variant", variant]


def test_compatible_exits_0(savepoint: str, texts: Path, tmp_path: Path) -> None:
    result = invoke("check", savepoint, *job(texts, tmp_path, "float-count"))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == f"Restore check of {VARIANT} from {savepoint}"
    assert "counter/count" in result.output and "migrated" in result.output
    assert result.output.rstrip().endswith("compatible: the job restores from this snapshot")


def test_incompatible_exits_1_with_one_line_per_reason(savepoint: str, texts: Path, tmp_path: Path) -> None:
    result = invoke("check", "-p", "200", savepoint, *job(texts, tmp_path, "string-count"))
    assert result.exit_code == 1, result.output
    tail = result.output.splitlines()[-3:]
    assert tail[0] == "incompatible (2 reasons):"
    assert tail[1].startswith("operator 'counter': parallelism 200 exceeds max parallelism 128")
    assert tail[2] == ("state counter/count: declared type changed from int to string, which is incompatible "
                       "(int values cannot be read as string)")


def test_json(savepoint: str, texts: Path, tmp_path: Path) -> None:
    result = invoke("--json", "check", savepoint, *job(texts, tmp_path, "renamed-uid"))
    assert result.exit_code == 1, result.output
    data = json.loads(result.output)
    assert data["compatible"] is False and len(data["reasons"]) == 1
    assert {o["uid"]: o["mapping"] for o in data["operators"]}["counter-v2"] == "new"
    state = next(s for s in data["states"] if s["uid"] == "counter")
    assert state == {"uid": "counter", "state": "count", "status": "dropped", "old_kind": "value", "new_kind": None,
                     "old_type": "int", "new_type": None, "type_compatibility": None, "changes": []}
    allowed = invoke("--json", "check", "-n", savepoint, *job(texts, tmp_path, "renamed-uid"))
    assert allowed.exit_code == 0 and json.loads(allowed.output)["compatible"] is True


def test_bad_input_exits_2_with_one_line(savepoint: str, texts: Path, tmp_path: Path) -> None:
    missing = invoke("check", str(tmp_path / "nope"), *job(texts, tmp_path, "same"))
    assert missing.exit_code == 2
    assert missing.output.count("\n") == 1 and missing.output.startswith("statekit: error: ")
    bad_args = invoke("check", savepoint, VARIANT, "--variant", "nope")
    assert bad_args.exit_code == 2
    assert "statekit: error: " in bad_args.output and "before it called execute()" in bad_args.output


def test_run_fails_with_the_same_lines(savepoint: str, texts: Path, tmp_path: Path) -> None:
    checked = invoke("--json", "check", savepoint, *job(texts, tmp_path, "list-count"))
    reasons = json.loads(checked.output)["reasons"]
    ran = invoke("run", "-s", savepoint, *job(texts, tmp_path, "list-count"))
    assert ran.exit_code == 2
    assert [line for line in ran.output.splitlines() if line.startswith("statekit: error: ")] == [
        f"statekit: error: {r}" for r in reasons]
    assert not (tmp_path / "out").exists()


@pytest.fixture
def typed(tmp_path: Path) -> str:
    path = str(tmp_path / "sp")
    SavepointWriter.new_savepoint(8).with_operator("op", {
        StateDescriptor("n", StateKind.VALUE, value_type="int"): [("a", 1), ("b", 2)]}).write(path)
    return path


def test_migrate(typed: str, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    result = invoke("migrate", typed, "--state", "op/n", "--value-type", "double", "-o", out)
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Migrated op/n: int -> float (compatible_after_migration, 2 entries) into {out}")
    assert {e.key: e.value for e in SavepointReader.read(out).read_keyed_state("op", "n")} == {"a": 1.0, "b": 2.0}
    data = json.loads(invoke("--json", "migrate", typed, "--state", "op/n", "--value-type", "float",
                             "-o", str(tmp_path / "out2")).output)
    assert (data["uid"], data["state"]) == ("op", "n") and data["entries"] == 2 and data["new_type"] == "float"


def test_migrate_refuses_an_incompatible_type(typed: str, tmp_path: Path) -> None:
    result = invoke("migrate", typed, "--state", "op/n", "--value-type", "string", "-o", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert result.output == (f"statekit: error: {typed}: state op/n: declared type int cannot change to string "
                             "(int values cannot be read as string)\n")
    assert not (tmp_path / "out").exists()


FLINK = ROOT / "tests" / "golden" / "flink-2.3" / "hashmap" / "savepoints"


@pytest.fixture
def flink_savepoint() -> str:
    (path,) = FLINK.iterdir()
    return str(path)


def test_a_flink_snapshot_is_checked_against_uids(flink_savepoint: str) -> None:
    ok = invoke("--json", "check", "--uid", "running-count", "--uid", "new-one", flink_savepoint)
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.output)
    mapped = {o["uid"]: (o["mapping"], o["notes"]) for o in data["operators"]}
    assert mapped["running-count"] == ("mapped", [])
    assert mapped["new-one"] == ("new", ["not in the snapshot: starts without state"])
    assert [m for m, notes in mapped.values() if m == "dropped" and notes != ["stateless"]] == []
    assert data["states"] == []


def test_a_flink_snapshot_whose_stateful_operator_has_no_uid_is_refused(flink_savepoint: str) -> None:
    refused = invoke("check", "--uid", "renamed", flink_savepoint)
    assert refused.exit_code == 1
    assert refused.output.splitlines()[-1].startswith(
        f"Failed to rollback to checkpoint/savepoint {flink_savepoint}. Cannot map checkpoint/savepoint state "
        "for operator running-count to the new program")
    assert invoke("check", "-n", "--uid", "renamed", flink_savepoint).exit_code == 0
    too_wide = invoke("check", "-p", "200", "--uid", "running-count", flink_savepoint)
    assert too_wide.exit_code == 1
    assert too_wide.output.splitlines()[-1].startswith(
        "operator 'running-count': parallelism 200 exceeds max parallelism 128")


def test_a_flink_snapshot_needs_uids_not_a_job(flink_savepoint: str, savepoint: str) -> None:
    no_uids = invoke("check", flink_savepoint)
    assert no_uids.exit_code == 2 and "give the uids of the new Flink job (--uid, repeatable)" in no_uids.output
    with_job = invoke("check", "--uid", "running-count", flink_savepoint, VARIANT)
    assert with_job.exit_code == 2 and "not a statekit JOB.py" in with_job.output
    no_job = invoke("check", savepoint)
    assert no_job.exit_code == 2 and "give the job script (JOB.py)" in no_job.output
    uid_on_statekit = invoke("check", "--uid", "x", savepoint, VARIANT)
    assert uid_on_statekit.exit_code == 2 and "this is a statekit snapshot" in uid_on_statekit.output


def test_migrate_with_defaults(tmp_path: Path) -> None:
    path = str(tmp_path / "sp")
    SavepointWriter.new_savepoint(8).with_operator("op", {
        StateDescriptor("s", StateKind.VALUE, value_type="struct<n:int>"): [("a", {"n": 1})]}).write(path)
    out = str(tmp_path / "out")
    result = invoke("migrate", path, "--state", "op/s", "--value-type", "struct<n:int,cur:string,rate:float>",
                    "--default", "cur=EUR", "--default", "rate=0.5", "-o", out)
    assert result.exit_code == 0, result.output
    assert [e.value for e in SavepointReader.read(out).read_keyed_state("op", "s")] == [
        {"n": 1, "cur": "EUR", "rate": 0.5}]
    bad = invoke("migrate", path, "--state", "op/s", "--value-type", "struct<n:int>", "--default", "n=2",
                 "-o", str(tmp_path / "out2"))
    assert bad.exit_code == 2 and "adds no field 'n'" in bad.output
    assert not (tmp_path / "out2").exists()
    malformed = invoke("migrate", path, "--state", "op/s", "--value-type", "struct<n:int,c:int>", "--default", "c",
                       "-o", str(tmp_path / "out3"))
    assert malformed.exit_code == 2 and "expected FIELD=VALUE" in malformed.output
