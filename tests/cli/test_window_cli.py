"""`inspect` and `export` of a window operator's state (the window is each entry's namespace):
on savepoints written in the window operator's on-disk layout, and on real savepoints of
examples/windowed_counts.py taken mid-window."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner, Result

from statekit.cli.main import cli
from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.metadata import StateKind

HELPERS = Path(__file__).resolve().parents[1] / "readers" / "test_window_state.py"
UTC_US = pa.timestamp("us", tz="UTC")


def _helpers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("window_state_helpers", HELPERS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


H = _helpers()


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def _ms(value: Any) -> int | None:
    return None if value is None else round(value.timestamp() * 1000)  # int() truncates x.999 s to the ms below


def _table(out: Path, state: str) -> pa.Table:
    return ds.dataset(out / "operator_uid=windows" / f"state_name={state}").to_table()


# ---------------------------------------------------------------- the on-disk layout, written


def test_inspect_prints_the_window_view(tmp_path: Path) -> None:
    path = H.write_window_savepoint(tmp_path / "sp")
    result = run("inspect", path)
    assert result.exit_code == 0, result.output
    assert "Windows of 'windows'" in result.output and "Windows of 'source'" not in result.output
    assert "Pending timers of 'windows' (5)" in result.output
    assert "(9999)" in result.output and "(25000)" in result.output and "(20000))" in result.output
    as_json = run("inspect", "--json", path)
    assert as_json.exit_code == 0, as_json.output
    ops = {op["uid"]: op for op in json.loads(as_json.output)["operators"]}
    assert ops["source"]["windows"] is None
    windows = ops["windows"]["windows"]
    assert windows["pending_timers"] == 5
    assert [(s["state"], s["key_window_pairs"]) for s in windows["states"]] == [
        ("window-contents", 4), ("window-trigger", 2), ("_window_timers", 4)]


def test_inspect_of_a_corrupt_window_is_one_line_naming_the_snapshot(tmp_path: Path) -> None:
    path = H.write_window_savepoint(tmp_path / "sp", contents=[("a", [3], [1])])
    result = run("inspect", path)
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"statekit: error: {path}: window state 'window-contents': namespace [3] is not a window")


def test_export_writes_the_namespace_and_typed_window_columns(tmp_path: Path) -> None:
    path = H.write_window_savepoint(tmp_path / "sp", merging=[("a", [[0, 5_000]])])
    out = tmp_path / "export"
    result = run("export", path, "-o", str(out), "--operator", "windows")
    assert result.exit_code == 0, result.output
    contents = _table(out, "window-contents")
    assert contents.schema.field("namespace").type == pa.list_(pa.int64())
    assert contents.schema.field("window_start").type == UTC_US == contents.schema.field("window_end").type
    rows = sorted((r["key"], r["namespace"], _ms(r["window_start"]), _ms(r["window_end"]), r["value"])
                  for r in contents.to_pylist())
    assert rows == sorted((k, w, w[0], w[1], v) for k, w, v in H.CONTENTS_ROWS)
    trigger = _table(out, "window-trigger").to_pylist()
    assert sorted((r["key"], r["trigger_state"], _ms(r["window_start"]), r["value"]) for r in trigger) == [
        ("a", "count", 0, 2), ("a", "fired", 0, 0), ("c", "count", 10_000, 3)]
    timers = _table(out, "_window_timers")
    assert timers.schema.field("timer_timestamp").type == UTC_US
    got = sorted((r["key"], r["timer_domain"], _ms(r["timer_timestamp"]), _ms(r["window_end"]))
                 for r in timers.to_pylist())
    domains = ("event_time", "processing_time")
    assert got == sorted((k, domains[d], t, w[1]) for k, w, (d, t), _ in H.TIMER_ROWS)
    for plain in ("_watermark", "window-merging-set"):  # not window states: no window columns
        assert "window_start" not in _table(out, plain).schema.names
    merging = _table(out, "window-merging-set").to_pylist()
    assert [(r["key"], r["namespace"], r["value"]) for r in merging] == [("a", None, [[0, 5_000]])]


def test_global_windows_export_null_window_columns(tmp_path: Path) -> None:
    path = H.write_window_savepoint(tmp_path / "sp", kind=StateKind.VALUE, contents=[("a", [], 4), ("b", [], 2)],
                                    trigger=[("a", [], "count", 2), ("b", [], "count", 1)], timers=[])
    out = tmp_path / "export"
    result = run("export", path, "-o", str(out), "--operator", "windows")
    assert result.exit_code == 0, result.output
    contents = _table(out, "window-contents").to_pylist()
    assert sorted((r["key"], r["namespace"], r["value"]) for r in contents) == [("a", [], 4), ("b", [], 2)]
    assert all(r["window_start"] is None and r["window_end"] is None for r in contents)
    trigger = _table(out, "window-trigger").to_pylist()
    assert sorted((r["key"], r["trigger_state"], r["window_start"]) for r in trigger) == [
        ("a", "count", None), ("b", "count", None)]
    assert _table(out, "_window_timers").num_rows == 0


@pytest.mark.parametrize("contents, timers, message", [
    ([("a", [20, 10], [1])], H.TIMER_ROWS,
     "window state 'window-contents': namespace [20,10] is not a window"),
    ([("a", None, [1])], H.TIMER_ROWS, "window state 'window-contents': namespace null is not a window"),
    (H.CONTENTS_ROWS, [("a", [0, 10], [7, 9_999], True)], "window state '_window_timers': user key [7,9999] is not"),
])
def test_export_of_a_corrupt_window_fails_naming_the_snapshot(tmp_path: Path, contents: Any, timers: Any,
                                                               message: str) -> None:
    path = H.write_window_savepoint(tmp_path / "sp", contents=contents, timers=timers)
    out = tmp_path / "export"
    result = run("export", path, "-o", str(out), "--operator", "windows")
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"statekit: error: {path}: {message}"), line
    assert not out.exists()


# ---------------------------------------------------------------- end to end: the runtime's layout


@pytest.fixture(scope="module")
def savepoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(H.mid_window_savepoints(tmp_path_factory.mktemp("windowed"))[1])


def test_inspect_prints_the_window_view_of_a_runtime_savepoint(savepoint: str) -> None:
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
    namespaces = {s["name"]: s["namespace_type"] for s in ops["windows"]["keyed_states"]}
    assert namespaces["window-contents"] == namespaces["_window_timers"] == "list<int>"
    assert {s["namespace_type"] for s in ops["source"]["keyed_states"] + ops["source"]["operator_states"]} == {None}


def test_export_of_a_runtime_savepoint_writes_window_columns_and_a_timer_table(savepoint: str,
                                                                                tmp_path: Path) -> None:
    out = tmp_path / "export"
    result = run("export", savepoint, "-o", str(out), "--operator", "windows")
    assert result.exit_code == 0, result.output
    contents = _table(out, "window-contents")
    assert contents.schema.field("namespace").type == pa.list_(pa.int64())
    assert contents.schema.field("window_start").type == UTC_US == contents.schema.field("window_end").type
    for row in contents.to_pylist():
        assert [_ms(row["window_start"]), _ms(row["window_end"])] == row["namespace"]
    timers = _table(out, "_window_timers")
    assert timers.num_rows > 0 and contents.num_rows > 0
    for row in timers.to_pylist():
        domain, stamp = row["user_key"]
        assert row["timer_domain"] == ("event_time" if domain == 0 else "processing_time")
        assert _ms(row["timer_timestamp"]) == stamp
        assert [_ms(row["window_start"]), _ms(row["window_end"])] == row["namespace"]
    trigger = _table(out, "window-trigger").schema
    assert {"trigger_state", "window_start", "window_end"} <= set(trigger.names)
    assert "window_start" not in _table(out, "_watermark").schema.names


def _global_window_savepoint(directory: Path) -> str:
    """A bounded job whose count-triggered global windows keep contents and trigger counts."""
    from statekit.runtime.api.windows.assigners import GlobalWindows
    from statekit.runtime.api.windows.triggers import CountTrigger
    from statekit.runtime.connectors.sinks import CollectSink
    from statekit.runtime.dataflow.environment import StreamEnvironment
    from statekit.runtime.dataflow.run_options import RunOptions, set_run_options

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


def test_runtime_global_windows_export_null_window_columns_and_the_trigger_state(tmp_path: Path) -> None:
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
    contents = _table(out, "window-contents").to_pylist()
    assert sorted(r["key"] for r in contents) == ["a", "b"]
    assert all(r["namespace"] == [] and r["window_start"] is None and r["window_end"] is None for r in contents)
    trigger = _table(out, "window-trigger").to_pylist()
    assert sorted((r["key"], r["trigger_state"], r["window_start"]) for r in trigger) == [
        ("a", "count", None), ("b", "count", None)]
