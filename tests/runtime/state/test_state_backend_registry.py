"""The registry of keyed state backends is the only place that names them.

A toy third backend (tests/runtime/toy_backend.py: its module plus one registry entry)
runs a keyed job end to end through the public API, the launcher and ``statekit run``,
with the scratch directory its entry asks for; nothing else is changed to add it.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import runpy
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statekit.cli.main import cli
from statekit.readers.savepoint_reader import SavepointReader
from statekit.runtime.api.functions import KeyedProcessFunction, RuntimeContext
from statekit.runtime.api.state import ListStateDescriptor, ValueStateDescriptor
from statekit.runtime.control.launcher import run_job_file
from statekit.runtime.control.submission import validate_run
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.dataflow.job_handle import JobStatus
from statekit.runtime.dataflow.run_options import RunOptions
from statekit.runtime.state.registry import (
    StateBackendEntry,
    register_state_backend,
    state_backend,
    state_backend_names,
    unregister_state_backend,
)
from statekit.statefmt.errors import BadInputError

ROOT = Path(__file__).resolve().parents[3]
TOY_FILE = Path(__file__).parents[1] / "toy_backend.py"
WORDS = ["to", "be", "or", "not", "to", "be", "that", "is", "the", "question"] * 3
EXPECTED = {w: WORDS.count(w) for w in WORDS}


toy_backend = runpy.run_path(str(TOY_FILE))  # the toy module's globals


@pytest.fixture
def toy() -> Iterator[StateBackendEntry]:
    """The toy backend, registered for one test."""
    toy_backend["WORKING_DIRS"].clear()
    register_state_backend(toy_backend["TOY"])
    try:
        yield toy_backend["TOY"]
    finally:
        unregister_state_backend("toy")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STATEKIT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


class CountWords(KeyedProcessFunction):
    """A running count (value state) and the positions seen (list state) of each word."""

    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", "int"))
        self.seen = ctx.get_state(ListStateDescriptor("seen", "int"))

    def process_element(self, value: tuple[int, str], ctx: Any, out: Any) -> None:
        self.count.update((self.count.value() or 0) + 1)
        self.seen.add(value[0])


def build(env: StreamEnvironment) -> None:
    (env.from_collection(list(enumerate(WORDS))).uid("source")
        .key_by(lambda pair: pair[1])
        .process(CountWords()).uid("counter"))


JOB = f'''
import sys
sys.path.insert(0, {str(Path(__file__).parents[1])!r})
from statekit.runtime.dataflow.environment import get_execution_environment
from statekit.runtime.api.functions import KeyedProcessFunction
from statekit.runtime.api.state import ValueStateDescriptor

class CountWords(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", "int"))

    def process_element(self, value, ctx, out):
        self.count.update((self.count.value() or 0) + 1)

env = get_execution_environment().set_parallelism(2)
env.from_collection({WORDS!r}).uid("source").key_by(lambda w: w).process(CountWords()).uid("counter")
env.execute("toy backend job")
'''

# A fresh `statekit` process that registers the toy backend before the CLI is built.
CLI_WITH_TOY = """
import runpy, sys
from statekit.runtime.state.registry import register_state_backend
register_state_backend(runpy.run_path(sys.argv[1])["TOY"])
from statekit.cli.main import cli
cli(args=sys.argv[2:], prog_name="statekit")
"""


def counts(snapshot: str) -> dict[str, int]:
    return {e.key: e.value for e in SavepointReader.read(snapshot).read_keyed_state("counter", "count")}


def the_savepoint(directory: Path) -> str:
    (savepoint,) = directory.glob("savepoint-*")
    return str(savepoint)


def backend_of(snapshot: str) -> str:
    return SavepointReader.read(snapshot).metadata.properties["state_backend"]


def test_a_registered_backend_runs_a_keyed_job_through_the_public_api(toy: StateBackendEntry, tmp_path: Path) -> None:
    env = StreamEnvironment().set_parallelism(2).set_state_backend(toy.name)
    env.enable_checkpointing(60_000, checkpoint_storage=str(tmp_path / "chk"))
    build(env)
    result = env.execute("toy backend")
    assert result.latest_checkpoint is not None and backend_of(result.latest_checkpoint) == toy.name
    assert counts(result.latest_checkpoint) == EXPECTED
    seen = SavepointReader.read(result.latest_checkpoint).read_keyed_state("counter", "seen")
    assert {e.key: sorted(e.value) for e in seen} == {w: [i for i, x in enumerate(WORDS) if x == w] for w in EXPECTED}
    # the entry's needs_working_dir: one scratch directory per attempt, removed when the job ended
    assert len(set(toy_backend["WORKING_DIRS"])) == 1 and len(toy_backend["WORKING_DIRS"]) == 2
    assert not os.path.exists(toy_backend["WORKING_DIRS"][0])


def test_the_run_command_offers_and_uses_a_registered_backend(
    toy: StateBackendEntry, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = tmp_path / "job.py"
    job.write_text(JOB)
    # `run` takes its --state-backend choices from the registry when its module is imported: a
    # fresh copy of the module, in place for this test only, offers the toy registered above
    spec = importlib.util.find_spec("statekit.cli.jobs")
    assert spec is not None and spec.loader is not None
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    monkeypatch.setitem(sys.modules, "statekit.cli.jobs", fresh)
    ran = CliRunner().invoke(cli, ["run", "--executor", "threads", "--state-backend", toy.name, "--savepoint-on-finish", str(tmp_path / "sp"),
                                   str(job)])
    assert ran.exit_code == 0, ran.output
    savepoint = the_savepoint(tmp_path / "sp")
    assert backend_of(savepoint) == toy.name and counts(savepoint) == EXPECTED
    assert toy_backend["WORKING_DIRS"] and not any(os.path.exists(d) for d in toy_backend["WORKING_DIRS"])


def test_run_options_and_job_control_accept_a_registered_backend(toy: StateBackendEntry, tmp_path: Path) -> None:
    job = tmp_path / "job.py"
    job.write_text(JOB)
    options = RunOptions(state_backend=toy.name, savepoint_on_finish=str(tmp_path / "sp"))
    validate_run(str(job), options)
    assert run_job_file(str(job), options) is JobStatus.FINISHED
    assert backend_of(the_savepoint(tmp_path / "sp")) == toy.name


def test_statekit_run_offers_and_uses_a_registered_backend(tmp_path: Path) -> None:
    job = tmp_path / "job.py"
    job.write_text(JOB)
    env = {**os.environ, "STATEKIT_HOME": str(tmp_path / "home")}

    def statekit(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", CLI_WITH_TOY, str(TOY_FILE), *args], env=env,
                              capture_output=True, text=True, timeout=120)

    assert "--state-backend [hashmap|rocksdb|toy]" in statekit("run", "--help").stdout
    ran = statekit("--json", "run", "--executor", "threads", "--state-backend", "toy", "--savepoint-on-finish",
                   str(tmp_path / "sp"), str(job))
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["state"] == "FINISHED"
    savepoint = the_savepoint(tmp_path / "sp")
    assert backend_of(savepoint) == "toy" and counts(savepoint) == EXPECTED
    # TaskManager processes import the job file: a backend defined outside any module cannot reach them
    refused = statekit("run", "--executor", "processes", "--state-backend", "toy", str(job))
    assert refused.returncode == 2 and "cannot be sent to TaskManager processes" in refused.stderr, refused.stderr
    assert [line for line in refused.stderr.splitlines() if "error" in line] == \
        [refused.stderr.splitlines()[-1]], refused.stderr  # one line


def test_the_cli_choices_are_the_registry(home: Path, tmp_path: Path) -> None:
    help_text = CliRunner().invoke(cli, ["run", "--help"]).stdout
    assert f"--state-backend [{'|'.join(state_backend_names())}]" in help_text
    job = tmp_path / "job.py"
    job.write_text("print('never runs')\n")
    refused = CliRunner().invoke(cli, ["run", "--state-backend", "toy", str(job)])
    choices = ", ".join(repr(name) for name in state_backend_names())
    assert refused.exit_code == 2 and f"'toy' is not one of {choices}" in refused.stderr


def test_an_unknown_backend_is_refused_naming_the_registered_ones(tmp_path: Path) -> None:
    message = f"unknown state backend 'memory'; use one of {', '.join(state_backend_names())}"
    with pytest.raises(BadInputError, match=message):
        StreamEnvironment().set_state_backend("memory")
    with pytest.raises(BadInputError, match=message):
        state_backend("memory")
    job = tmp_path / "job.py"
    job.write_text("print('never runs')\n")
    with pytest.raises(BadInputError, match=message):
        validate_run(str(job), RunOptions(state_backend="memory"))
    assert CliRunner().invoke(cli, ["run", "--state-backend", "memory", str(job)]).exit_code == 2


def test_a_name_is_registered_once(toy: StateBackendEntry) -> None:
    with pytest.raises(ValueError, match="state backend 'toy' is already registered"):
        register_state_backend(toy)
    unregister_state_backend("toy")
    assert "toy" not in state_backend_names()


def test_a_backend_whose_package_is_missing_is_refused_with_its_install_hint(tmp_path: Path) -> None:
    needy = StateBackendEntry("needy", toy_backend["ToyKeyedStateBackend"], requires="statekit_no_such_package",
                              install_hint="pip install statekit-no-such-package")
    register_state_backend(needy)
    try:
        message = ("state backend 'needy' needs the optional package 'statekit_no_such_package', which is not "
                   "installed; pip install statekit-no-such-package or choose another state backend")
        assert not needy.available
        env = StreamEnvironment().set_state_backend("needy")
        build(env)
        with pytest.raises(BadInputError, match=message) as raised:
            env.execute("needy")
        assert raised.value.exit_code == 2
        job = tmp_path / "job.py"
        job.write_text("print('never runs')\n")
        with pytest.raises(BadInputError, match=message):
            validate_run(str(job), RunOptions(state_backend="needy"))
    finally:
        unregister_state_backend("needy")


def test_a_factory_named_by_module_and_attribute_is_imported_on_first_use() -> None:
    entry = state_backend("rocksdb")
    assert isinstance(entry.factory, str)
    assert entry.backend_class().__name__ == "RocksDBKeyedStateBackend"


def test_only_the_registry_and_the_backends_spell_a_backend_name() -> None:
    """runtime/ and cli/ choose backends only through the registry: no literal name elsewhere."""
    required = {state_backend(name).requires for name in state_backend_names()}
    spelled = set(state_backend_names()) | (required - {None})
    found = []
    for package in ("runtime", "cli"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if package == "runtime" and (path.name.startswith("backend") or (path.name == "registry.py"
                                         and path.parent.name == "state")):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and node.value in spelled:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not found, "backend names outside the registry:\n" + "\n".join(found)
