"""A job file that does not compile or import is bad input (exit 2) in one line naming
``file:line`` — for ``run``, ``run -d`` and ``check`` — and a failing task's line, and a failed
job's, end with the innermost frame of the user's code. Real processes: stderr is what a user sees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from statekit.runtime.dataflow.user_code import user_location
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

SCRIPTS = {
    "syntax": ("from statekit.runtime import StreamEnvironment\n"
               "env = StreamEnvironment.get_execution_environment(\n", 2, "SyntaxError: '(' was never closed"),
    "indent": ("import os\n  x = 1\n", 2, "IndentationError: unexpected indent"),
    "import": ("import os\nimport statekit_no_such_module_xyz\n", 2,
               "ModuleNotFoundError: No module named 'statekit_no_such_module_xyz'"),
    "from-import": ("from statekit.runtime import no_such_name\n", 1,
                    "ImportError: cannot import name 'no_such_name' from 'statekit.runtime'"),
}


def statekit(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STATEKIT_HOME": str(tmp_path / "home")}
    return subprocess.run([sys.executable, "-m", "statekit.cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("check") / "sp"
    SavepointWriter.new_savepoint(128).with_operator(
        "counter", {StateDescriptor("count", StateKind.VALUE, value_type="int"): [("a", 1)]}).write(str(path))
    return str(path)


@pytest.mark.parametrize("command", ["run", "run -d", "check"])
@pytest.mark.parametrize("kind", sorted(SCRIPTS))
def test_a_job_file_that_does_not_compile_or_import_is_one_line_naming_file_and_line(
        tmp_path: Path, snapshot: str, command: str, kind: str) -> None:
    source, line, message = SCRIPTS[kind]
    job = tmp_path / "job.py"
    job.write_text(source)
    args = {"run": ["run", str(job)], "run -d": ["run", "-d", str(job)], "check": ["check", snapshot, str(job)]}
    result = statekit(tmp_path, *args[command])
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    (error,) = result.stderr.splitlines()
    assert error.startswith(f"statekit: error: {job}:{line}: {message}"), error
    assert "Traceback" not in result.stderr


def test_the_json_error_names_the_file_as_its_path(tmp_path: Path) -> None:
    job = tmp_path / "job.py"
    job.write_text(SCRIPTS["syntax"][0])
    result = statekit(tmp_path, "--json", "run", str(job))
    assert result.returncode == 2
    error = json.loads(result.stderr)["error"]
    assert (error["path"], error["type"], error["exit_code"]) == (str(job), "JobScriptError", 2)
    assert error["message"] == f"{job}:2: SyntaxError: '(' was never closed"


def test_check_of_a_script_that_fails_before_execute_is_bad_input_naming_the_line(tmp_path: Path,
                                                                                 snapshot: str) -> None:
    job = tmp_path / "job.py"
    job.write_text("x = 1\n\ndef setup():\n    raise ValueError('no input configured')\n\nsetup()\n")
    result = statekit(tmp_path, "check", snapshot, str(job))
    assert result.returncode == 2, result.stderr
    (error,) = result.stderr.splitlines()
    assert error == (f"statekit: error: {job}: the job script failed before it called execute(): ValueError: "
                     f"no input configured (at {job}:4, in setup)")


def test_the_user_frame_skips_statekit_and_library_frames(tmp_path: Path) -> None:
    """The innermost frame outside statekit and installed libraries: the user's call into json."""
    module = tmp_path / "user_module.py"
    module.write_text("import json\n\ndef parse(text):\n    return json.loads(text)\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import user_module  # type: ignore[import-not-found]

        with pytest.raises(ValueError) as caught:
            user_module.parse("{")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("user_module", None)
    assert user_location(caught.value) == f"{module}:4, in parse"
