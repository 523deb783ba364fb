"""The JSON contract of ``--json``: ``schema_version`` first, snake_case keys generated from the
result dataclasses, one JSON Schema per command in docs/json/ (scripts/gen_json_schemas.py) that
the real output of the commands validates against (here on the golden snapshots, and in every
CLI test through ``json_documents_follow_their_schema`` of tests/conftest.py)."""

from __future__ import annotations

import enum
import importlib.util
import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import click
import jsonschema
import pytest
from click.testing import CliRunner

from statekit.cli.main import COMMANDS, cli
from statekit.cli.render import COMMAND_RESULTS, RENDERERS, class_path, command_results
from statekit.flink.rewrite_report import FlinkModifyReport
from statekit.flink.summary import FlinkSnapshotSummary
from statekit.statefmt.json_contract import SCHEMA_VERSION, JsonShape, json_data, json_document, json_schema
from statekit.statefmt.keygroups import KeyGroupRange

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "docs" / "json"
STATEKIT_GOLDEN = ROOT / "tests" / "golden" / "statekit-v1" / "statekit-0.1-v1-all-kinds"
FLINK_GOLDEN = ROOT / "tests" / "golden" / "flink-2.3"
SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")
NO_RESULT = {"ui"}  # takes the common options but serves the dashboard until interrupted: no result


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("gen_json_schemas", ROOT / "scripts" / "gen_json_schemas.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _json_commands() -> Iterator[str]:
    """Every command (its words after ``statekit``) that takes ``--json``."""
    root = click.Context(cli)

    def walk(command: click.Command, words: list[str]) -> Iterator[str]:
        if isinstance(command, click.Group):
            for name in command.list_commands(root):
                sub = command.get_command(root, name)
                assert sub is not None
                yield from walk(sub, [*words, name])
        elif any(p.name == "as_json" for p in command.params) and " ".join(words) not in NO_RESULT:
            yield " ".join(words)

    for name in COMMANDS:
        command = cli.get_command(root, name)
        assert command is not None
        yield from walk(command, [name])


def _schema(command: str) -> dict[str, Any]:
    path = SCHEMAS / f"{command.replace(' ', '-')}.schema.json"
    schema: dict[str, Any] = json.loads(path.read_text())
    return schema


def _valid(command: str, document: Any) -> None:
    jsonschema.Draft202012Validator(_schema(command)).validate(document)


# ------------------------------------------------------------------ the schemas


def test_the_committed_schemas_are_the_generators_output() -> None:
    wanted = _generator().render()
    present = {p.name: p.read_text() for p in SCHEMAS.glob("*.schema.json")}
    assert sorted(present) == sorted(wanted), "run python scripts/gen_json_schemas.py"
    assert "error.schema.json" in present
    stale = [name for name in wanted if present[name] != wanted[name]]
    assert not stale, f"docs/json/ is out of date ({stale}): run python scripts/gen_json_schemas.py"


def test_every_command_with_json_output_has_a_schema_and_nothing_else_does() -> None:
    assert sorted(_json_commands()) == sorted(COMMAND_RESULTS)
    for command in COMMAND_RESULTS:
        assert (SCHEMAS / f"{command.replace(' ', '-')}.schema.json").is_file(), command
        for cls in command_results(command):
            assert class_path(cls) in RENDERERS, f"{command}: {class_path(cls)} has no renderer"


@pytest.mark.parametrize("command", sorted(COMMAND_RESULTS))
def test_every_schema_is_a_valid_json_schema_of_snake_case_keys(command: str) -> None:
    schema = _schema(command)
    jsonschema.Draft202012Validator.check_schema(schema)

    def keys(node: Any) -> Iterator[str]:
        if isinstance(node, dict):
            yield from node.get("properties", {}) if isinstance(node.get("properties"), dict) else ()
            for value in node.values():
                yield from keys(value)
        elif isinstance(node, list):
            for value in node:
                yield from keys(value)

    names = set(keys(schema))
    assert "schema_version" in names
    assert not sorted(n for n in names if not SNAKE.match(n)), "every key is snake_case"
    assert not names & {"jid", "damage", "request_id", "history_file"}, "the renamed keys are gone"


# ------------------------------------------------------------------ real output


def run_json(*args: str, code: int | tuple[int, ...] = 0) -> Any:
    result = CliRunner().invoke(cli, ["--json", *args])
    assert result.exit_code in ((code,) if isinstance(code, int) else code), result.output
    document = json.loads(result.stdout)
    assert next(iter(document)) == "schema_version" and document["schema_version"] == SCHEMA_VERSION
    return document


def test_a_failure_is_a_json_document_of_the_error_schema(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--json", "inspect", str(tmp_path / "missing")])
    assert result.exit_code == 2 and result.stdout == ""
    document = json.loads(result.stderr)
    jsonschema.Draft202012Validator(json.loads((SCHEMAS / "error.schema.json").read_text())).validate(document)
    assert document["schema_version"] == SCHEMA_VERSION and document["error"]["path"] == str(tmp_path / "missing")


def test_statekit_snapshot_commands_validate(tmp_path: Path) -> None:
    copy = tmp_path / "savepoint-a"
    shutil.copytree(STATEKIT_GOLDEN, copy)
    _valid("checkpoints list", run_json("checkpoints", "list", str(tmp_path)))
    inspected = run_json("inspect", str(copy))
    _valid("inspect", inspected)
    assert {s["kind"] for op in inspected["operators"] for s in op["operator_states"]} == {
        "operator-list", "union", "broadcast"}
    verified = run_json("verify", str(copy))
    _valid("verify", verified)
    assert verified["problems"] == [] and "damage" not in verified
    _valid("dispose", run_json("dispose", "--dry-run", str(copy)))
    _valid("keygroup", run_json("keygroup", "hello", "-p", "4"))
    _valid("diff", run_json("diff", "--engine", "local", str(copy), str(STATEKIT_GOLDEN)))
    _valid("rescale", run_json("rescale", str(copy), "-p", "3", "--dry-run"))
    _valid("modify", run_json("modify", str(copy), "--dry-run", "--rename-uid", "counter=c2"))
    _valid("config show", run_json("config", "show"))


def test_flink_snapshot_commands_validate_and_share_the_statekit_names(tmp_path: Path) -> None:
    shutil.copytree(FLINK_GOLDEN / "rocksdb-incremental", tmp_path / "job")
    (snapshot,) = (tmp_path / "job" / "savepoints").iterdir()
    listing = run_json("checkpoints", "list", str(tmp_path / "job" / "checkpoints"))
    _valid("checkpoints list", listing)
    inspected = run_json("inspect", str(snapshot))
    _valid("inspect", inspected)
    assert inspected["engine"] == "flink"
    assert all({"keyed_states", "operator_states"} <= set(op) for op in inspected["operators"])
    verified = run_json("verify", str(snapshot))
    _valid("verify", verified)
    assert isinstance(verified["problems"], list) and "damage" not in verified
    _valid("dispose", run_json("dispose", "--dry-run", str(snapshot)))
    _valid("keygroup", run_json("keygroup", "--flink", "hello", "-p", "4"))
    _valid("check", run_json("check", "--target-flink", "2.0", str(snapshot), code=(0, 1)))


def test_convert_validates(tmp_path: Path) -> None:
    from statekit.statefmt.metadata import StateDescriptor, StateKind
    from statekit.writers.savepoint_writer import SavepointWriter

    source = tmp_path / "statekit"
    writer = SavepointWriter.new_savepoint(128)
    writer.with_operator("counter", {StateDescriptor("count", StateKind.VALUE, value_type="int"): [("a", 1), ("b", 2)]},
                         parallelism=2)
    writer.write(str(source))
    converted = run_json("convert", str(source), "--to", "flink", "-o", str(tmp_path / "flink"))
    _valid("convert", converted)
    assert [(s["uid"], s["state"], s["entries"]) for s in converted["states"]] == [("counter", "count", 2)]
    back = run_json("convert", str(tmp_path / "flink"), "--to", "statekit", "-o", str(tmp_path / "back"))
    _valid("convert", back)
    assert back["entries"] == 2


def test_run_and_list_of_a_real_job_validate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATEKIT_HOME", str(tmp_path / "home"))
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("apple pear apple\n")
    ran = run_json("run", "--executor", "threads", str(ROOT / "examples" / "wordcount.py"), "--input",
                   str(tmp_path / "in"), "--output", str(tmp_path / "out"))
    _valid("run", ran)
    assert ran["state"] == "FINISHED" and ran["duration_ms"] >= 0
    listed = run_json("list", "--all")
    _valid("list", listed)
    assert [(j["job_id"], j["state"], j["end_time_ms"] >= j["start_time_ms"]) for j in listed["jobs"]] == [
        (ran["job_id"], "FINISHED", True)]


def _job_control_results() -> list[tuple[str, Any]]:
    """One result of every job control command (their CLI tests run jobs in processes)."""
    from statekit.runtime.control.checkpoint_history import CheckpointHistory
    from statekit.runtime.control.registry import JobEntry
    from statekit.runtime.control.results import (
        CancelResult,
        CheckpointResult,
        JobList,
        LastCheckpoint,
        RunResult,
        SavepointResult,
        SavepointStatus,
        SavepointTrigger,
    )
    from statekit.spark.connect_server import ServerInfo, SparkServerStatus

    job = "ab" * 16
    running = JobEntry(job, "wordcount", 4242, 17, "RUNNING", 1_700_000_000_000, host="127.0.0.1", port=8081,
                       job_file="/jobs/wordcount.py", checkpoint_dir="/chk")
    crashed = JobEntry("cd" * 16, "other", 4343, None, "CRASHED", 1_700_000_000_500, end_time_ms=1_700_000_001_000,
                       crash_reason="process 4343 is gone")
    entry = {"id": 3, "status": "COMPLETED", "is_savepoint": False, "external_path": "/chk/x/chk-3"}
    server = ServerInfo(4444, 15002, "local[2]", "/usr/bin/python3", "4.0.0", 1_700_000_000_000, "/run/log")
    return [
        ("run", RunResult(job, "wordcount", "FINISHED", duration_ms=1200)),
        ("run", RunResult(job, "wordcount", "RUNNING", detached=True, log_path="/jobs/x/job.log")),
        ("list", JobList((running, crashed), True, "/home/.statekit",
                         (LastCheckpoint(3, 1_700_000_000_900, 4096, "/chk/x/chk-3"), None), ((entry,), ()))),
        ("savepoint", SavepointResult(job, "/sp/savepoint-ababab-1", "t1", "RUNNING")),
        ("savepoint", SavepointTrigger(job, "t1")),
        ("savepoint", SavepointStatus(job, "t1", "FAILED", failure="the job ended")),
        ("stop", SavepointResult(job, "/sp/savepoint-ababab-2", "t2", "FINISHED", operation="stop")),
        ("cancel", CancelResult(job, "CANCELED")),
        ("checkpoint", CheckpointResult(job, 4, "/chk/x/chk-4", "t3", full=True)),
        ("checkpoints history", CheckpointHistory(job, "wordcount", "RUNNING", "/home/jobs/x/checkpoints.jsonl",
                                                  (entry,), {"duration_ms": {"min": 1, "avg": 2.0, "max": 3}},
                                                  counts={"completed": 1, "failed": 0, "savepoints": 0})),
        ("spark start", SparkServerStatus("started", server, "/run", "started sc://127.0.0.1:15002")),
        ("spark stop", SparkServerStatus("not_running", None, "/run", "no server")),
    ]


@pytest.mark.parametrize(("command", "result"), _job_control_results(), ids=lambda v: v if isinstance(v, str) else "")
def test_job_control_and_server_results_validate(command: str, result: Any) -> None:
    document = json.loads(json.dumps(json_document(result)))
    _valid(command, document)
    assert "jid" not in document and not any("-" in key for key in document)


def test_job_list_names_every_job_and_its_last_checkpoint() -> None:
    (_, jobs), = [(c, r) for c, r in _job_control_results() if c == "list"]
    document = json_document(jobs)
    first, second = document["jobs"]
    assert first["job_id"] == "ab" * 16 and first["rest_url"] == "http://127.0.0.1:8081"
    assert first["last_checkpoint"] == {"checkpoint_id": 3, "completed_ms": 1_700_000_000_900, "size": 4096,
                                        "path": "/chk/x/chk-3"}
    assert second["last_checkpoint"] is None and second["end_time_ms"] == 1_700_000_001_000
    assert second["crash_reason"] == "process 4343 is gone" and second["checkpoints"] == []


# ------------------------------------------------------------------ the serializer


class Colour(enum.Enum):
    RED = "red"


@dataclass(frozen=True)
class Inner:
    range: KeyGroupRange
    colour: Colour


@dataclass(frozen=True)
class Outer:
    """An example result."""

    json_shape: ClassVar[JsonShape] = JsonShape(
        extra=("total",), omit=("secret",), rename={"items": "entries"}, digits={"ratio": 2},
        omit_none=("note",), records={"pairs": ("old", "new")})

    items: tuple[Inner, ...]
    ratio: float
    pairs: tuple[tuple[str, str], ...]
    options: dict[str, int] = field(default_factory=dict)
    secret: str = "hidden"
    note: str | None = None

    @property
    def total(self) -> int:
        return len(self.items)


@dataclass(frozen=True)
class Viewed:
    inner: Inner

    def json_view(self) -> Inner:
        return self.inner


def test_the_serializer_follows_the_shape_and_the_schema_describes_it() -> None:
    outer = Outer((Inner(KeyGroupRange(0, 3), Colour.RED),), 2 / 3, (("a", "b"),), {"x": 1})
    document = json_document(outer)
    assert document == {"schema_version": 1, "entries": [{"range": [0, 3], "colour": "red"}], "ratio": 0.67,
                        "pairs": [{"old": "a", "new": "b"}], "options": {"x": 1}, "total": 1}
    schema = json_schema(Outer)
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(document, schema)
    jsonschema.validate({**document, "note": "set"}, schema)
    for broken in ({**document, "secret": "x"}, {**document, "entries": [{"range": [0], "colour": "red"}]},
                   {**document, "pairs": [["a", "b"]]}, {k: v for k, v in document.items() if k != "total"},
                   {**document, "entries": [{"range": [0, 3], "colour": "blue"}]}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, schema)
    assert json_data(Viewed(Inner(KeyGroupRange(1, 1), Colour.RED))) == {"range": [1, 1], "colour": "red"}


@dataclass(frozen=True)
class Both:
    modified: FlinkModifyReport
    summary: FlinkSnapshotSummary


def test_two_classes_of_one_name_get_two_definitions() -> None:
    defs = json_schema(Both)["$defs"]
    named = [name for name in defs if name.endswith("FlinkOperatorSummary")]
    assert sorted(named) == ["FlinkOperatorSummary", "statekit.flink.summary.FlinkOperatorSummary"] or sorted(
        named) == ["FlinkOperatorSummary", "statekit.flink.rewrite_report.FlinkOperatorSummary"]
    assert defs[named[0]] != defs[named[1]]
    assert json_schema(Viewed)["properties"]["colour"] == {"enum": ["red"]}
