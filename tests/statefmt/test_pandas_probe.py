"""pyarrow's pandas probe is answered without importing pandas, and pandas still works.

Every case runs in a fresh interpreter: whether pandas is imported is process-wide state.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("pandas")  # the probe only costs anything where pandas is installed

HOOK = "from statekit.statefmt.pandas_probe import answer_pandas_probe_on_import\nanswer_pandas_probe_on_import()\n"


def run(*parts: str) -> dict[str, object]:
    """Run the code ``parts`` in a fresh interpreter; it prints one JSON object as its last line."""
    code = "\n".join(textwrap.dedent(part) for part in parts)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


ARRAYS = """
import json, sys
import pyarrow as pa
pa.array([1, 2], pa.int32())
pa.array(["a", None], pa.string()).to_pylist()
pa.table({"k": pa.array([b"x"], pa.binary())}).to_pylist()
print(json.dumps({"pandas": "pandas" in sys.modules}))
"""


UNTYPED = """
import json, sys
import pyarrow as pa
import pyarrow.compute as pc
pa.array([1, 2])
pa.array([False])
pc.equal(pa.array([1], pa.uint32()), 1)
pa.scalar(3)
print(json.dumps({"pandas": "pandas" in sys.modules}))
"""


def test_untyped_lists_and_python_scalars_keep_pandas_out_too() -> None:
    """pyarrow 26 probes again on the first untyped conversion (a list, a Python int handed to
    a compute function): the hook answers that probe as well."""
    assert run(UNTYPED)["pandas"] is True
    assert run(HOOK, UNTYPED)["pandas"] is False
    assert run("import pyarrow", HOOK, UNTYPED)["pandas"] is False


def test_without_the_hook_pyarrow_imports_pandas() -> None:
    """The cost the hook removes is real in this environment (else the next test proves nothing)."""
    assert run(ARRAYS)["pandas"] is True


def test_the_hook_keeps_pandas_out_of_arrays_and_lists() -> None:
    assert run(HOOK, ARRAYS)["pandas"] is False


def test_hook_installed_after_pyarrow_answers_at_once() -> None:
    assert run("import pyarrow", HOOK, ARRAYS)["pandas"] is False


def test_pandas_imported_later_converts_as_without_the_hook() -> None:
    """A Categorical must become a dictionary array, as pyarrow converts it without the probe."""
    code = """
    import json, sys
    import pyarrow as pa
    pa.array([1], pa.int64())
    import pandas as pd
    series = pd.Series(pd.Categorical(["a", "b", "a"]))
    converted = pa.array(series)
    frame = pa.table({"a": pa.array([1, None], pa.int64())}).to_pandas()
    print(json.dumps({"type": str(converted.type), "nulls": int(frame["a"].isna().sum()),
                      "have": pa.lib._pandas_api.have_pandas}))
    """
    result = run(HOOK, code)
    assert result == {"type": "dictionary<values=string, indices=int8, ordered=0>", "nulls": 1, "have": True}


def test_pandas_imported_first_is_left_alone() -> None:
    code = """
    import json
    import pyarrow as pa
    converted = pa.array(pd.Series(pd.Categorical(["x"])))
    print(json.dumps({"dictionary": pa.types.is_dictionary(converted.type), "have": pa.lib._pandas_api.have_pandas}))
    """
    assert run("import pandas as pd", HOOK, code) == {"dictionary": True, "have": True}


def test_the_hook_is_installed_once_and_leaves_no_blocker() -> None:
    code = """
    import json, sys
    import pyarrow as pa
    pa.array([1], pa.int64())
    import importlib.util
    kinds = [type(f).__name__ for f in sys.meta_path]
    print(json.dumps({"watch": kinds.count("_ImportWatch"), "blocker": kinds.count("_PandasAbsent"),
                      "found": importlib.util.find_spec("pandas") is not None}))
    """
    assert run(HOOK, HOOK, code) == {"watch": 1, "blocker": 0, "found": True}


def test_a_rescale_to_a_new_max_parallelism_does_not_import_pandas(tmp_path: Path) -> None:
    """The CLI installs the hook: the sorter's first arrays no longer pull in pandas."""
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps({"key": f"k{i}", "value": i}) + "\n" for i in range(500)))
    subprocess.run([sys.executable, "-m", "statekit.cli.main", "bootstrap", "--input", str(source), "--uid", "op",
                    "--state", "s", "--key-column", "key", "--value-column", "value", "-p", "2",
                    "--max-parallelism", "128", "-o", str(tmp_path / "sp")], check=True, capture_output=True)
    code = f"""
    import json, sys
    from statekit.cli.main import main
    sys.argv = ["statekit", "rescale", {str(tmp_path / "sp")!r}, "--max-parallelism", "256", "-p", "3",
                "-o", {str(tmp_path / "out")!r}]
    try:
        main()
    except SystemExit as exit:
        assert not exit.code, exit.code
    print(json.dumps({{"pandas": "pandas" in sys.modules}}))
    """
    assert run(code)["pandas"] is False


def test_a_job_run_by_the_launcher_writes_its_snapshots_without_importing_pandas(tmp_path: Path) -> None:
    """``statekit run`` installs the hook: a job's checkpoints and final savepoint (keyed
    snapshots through the block encoder) leave pandas unimported."""
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent("""
        from statekit.runtime.dataflow.environment import get_execution_environment
        from statekit.runtime.api.functions import KeyedProcessFunction
        from statekit.runtime.connectors.sinks import DiscardingSink
        from statekit.runtime.api.state import ValueStateDescriptor

        class Count(KeyedProcessFunction):
            def open(self, ctx):
                self.count = ctx.get_state(ValueStateDescriptor("count", "int"))

            def process_element(self, value, ctx, out):
                self.count.update((self.count.value() or 0) + 1)
                out.collect(value)

        env = get_execution_environment()
        (env.from_collection([f"k{i % 500}" for i in range(5000)], "events").uid("events")
            .key_by(lambda k: k).process(Count(), "count").uid("count")
            .sink_to(DiscardingSink(), "sink").uid("sink"))
        env.execute("probe")
    """))
    code = f"""
    import glob, json, os, sys
    from statekit.cli.main import main
    os.environ["STATEKIT_HOME"] = {str(tmp_path / "home")!r}
    sys.argv = ["statekit", "run", "-p", "2", "--checkpoint-dir", {str(tmp_path / "chk")!r}, "--checkpoint-interval",
                "50ms", "--savepoint-on-finish", {str(tmp_path / "sp")!r}, {str(job)!r}]
    try:
        main()
    except SystemExit as exit:
        code = exit.code
    print(json.dumps({{"code": code, "savepoint": len(glob.glob({str(tmp_path / "sp" / "**" / "_metadata")!r}, recursive=True)),
                      "pandas": "pandas" in sys.modules}}))
    """
    assert run(code) == {"code": 0, "savepoint": 1, "pandas": False}


def test_an_embedded_job_writes_its_checkpoints_without_importing_pandas(tmp_path: Path) -> None:
    """``env.execute`` in a user's own program installs the hook too (no launcher involved)."""
    code = f"""
    import glob, json, sys
    from statekit.runtime.dataflow.environment import StreamEnvironment
    from statekit.runtime.connectors.sinks import DiscardingSink

    env = StreamEnvironment().set_parallelism(2)
    env.enable_checkpointing(20, checkpoint_storage={str(tmp_path / "chk")!r})
    (env.from_collection([f"k{{i % 100}}" for i in range(200000)], "events").uid("events")
        .key_by(lambda k: k).reduce(lambda a, b: a).uid("reduce")
        .sink_to(DiscardingSink(), "sink").uid("sink"))
    handle = env.execute_async("probe")
    handle.wait()
    print(json.dumps({{"checkpoints": handle.checkpoint_stats()["counts"]["completed"] > 0,
                      "pandas": "pandas" in sys.modules}}))
    """
    assert run(code) == {"checkpoints": True, "pandas": False}
