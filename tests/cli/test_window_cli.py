"""`inspect` and `export` of a window operator's state, on a real savepoint of
examples/windowed_counts.py taken mid-window."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner, Result

from statekit.cli.main import cli
from statekit.readers.savepoint_reader import SavepointReader

HELPERS = Path(__file__).resolve().parents[1] / "readers" / "test_window_state.py"


def _helpers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("window_state_helpers", HELPERS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def savepoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(_helpers().mid_window_savepoints(tmp_path_factory.mktemp("windowed"))[1])


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def test_inspect_prints_the_window_view(savepoint: str) -> None:
    reader = SavepointReader.read(savepoint)
    timers = [e.user_key for e in reader.read_keyed_state("windows", "_window_timers")]  # type: ignore[union-attr]
    result = run("inspect", savepoint)
    assert result.exit_code == 0, result.output
    assert "Windows of 'windows'" in result.output
    assert f"Pending timers of 'windows' ({len(timers)})" in result.output
    earliest = min(t[1] for t in timers)
    assert f"({earliest})" in result.output
    as_json = run("inspect", "--json", savepoint)
    assert as_json.exit_code == 0, as_json.output
    ops = {op["uid"]: op for op in json.loads(as_json.output)["operators"]}
    assert ops["source"]["windows"] is None
    assert ops["windows"]["windows"]["pending_timers"] == len(timers)


def test_export_writes_typed_window_columns_and_a_timer_table(savepoint: str, tmp_path: Path) -> None:
    out = tmp_path / "export"
    result = run("export", savepoint, "-o", str(out), "--operator", "windows")
    assert result.exit_code == 0, result.output
    utc_ms = pa.timestamp("us", tz="UTC")
    contents = ds.dataset(out / "operator_uid=windows" / "state_name=window-contents").to_table()
    assert contents.schema.field("window_start").type == utc_ms == contents.schema.field("window_end").type
    for row in contents.to_pylist():
        start, end = row["user_key"]
        assert int(row["window_start"].timestamp() * 1000) == start
        assert int(row["window_end"].timestamp() * 1000) == end
    timers = ds.dataset(out / "operator_uid=windows" / "state_name=_window_timers").to_table()
    assert timers.num_rows > 0 and contents.num_rows > 0
    for row in timers.to_pylist():
        domain, stamp, start, end = row["user_key"]
        assert row["timer_domain"] == ("event_time" if domain == 0 else "processing_time")
        assert int(row["timer_timestamp"].timestamp() * 1000) == stamp
        assert int(row["window_start"].timestamp() * 1000) == start
        assert int(row["window_end"].timestamp() * 1000) == end
    trigger = ds.dataset(out / "operator_uid=windows" / "state_name=window-trigger").schema
    assert {"trigger_state", "window_start", "window_end"} <= set(trigger.names)
    watermark = ds.dataset(out / "operator_uid=windows" / "state_name=_watermark").schema
    assert "window_start" not in watermark.names


def _global_window_savepoint(directory: Path) -> str:
    """A bounded job whose count-triggered global windows keep contents and trigger counts."""
    from statekit.runtime.environment import StreamEnvironment
    from statekit.runtime.run_options import RunOptions, set_run_options
    from statekit.runtime.sinks import CollectSink
    from statekit.runtime.windows import CountTrigger, GlobalWindows

    set_run_options(RunOptions(savepoint_on_finish=str(directory)))
    try:
        env = StreamEnvironment().set_parallelism(1)
        (env.from_collection([("a", 1), ("b", 2), ("a", 3)]).uid("source").key_by(lambda v: v[0])
            .window(GlobalWindows.create()).trigger(CountTrigger.of(5)).reduce(lambda x, y: (x[0], x[1] + y[1]))
            .uid("windows").sink_to(CollectSink()).uid("sink"))
        env.execute("global windows")
    finally:
        set_run_options(None)
    (savepoint,) = directory.iterdir()
    return str(savepoint)


def test_global_windows_export_null_window_columns_and_the_trigger_state(tmp_path: Path) -> None:
    savepoint = _global_window_savepoint(tmp_path / "sp")
    shown = run("inspect", "--json", savepoint)
    assert shown.exit_code == 0, shown.output
    (windows,) = [op["windows"] for op in json.loads(shown.output)["operators"] if op["windows"]]
    states = {s["state"]: s for s in windows["states"]}
    assert states["window-contents"]["global_window_pairs"] == 2 == states["window-trigger"]["global_window_pairs"]
    assert states["window-contents"]["earliest_start"] is None and windows["pending_timers"] == 0
    out = tmp_path / "export"
    result = run("export", savepoint, "-o", str(out), "--operator", "windows")
    assert result.exit_code == 0, result.output
    contents = ds.dataset(out / "operator_uid=windows" / "state_name=window-contents").to_table().to_pylist()
    assert sorted(r["key"] for r in contents) == ["a", "b"]
    assert all(r["window_start"] is None and r["window_end"] is None for r in contents)
    trigger = ds.dataset(out / "operator_uid=windows" / "state_name=window-trigger").to_table().to_pylist()
    assert sorted((r["key"], r["trigger_state"], r["window_start"]) for r in trigger) == [
        ("a", "count", None), ("b", "count", None)]
