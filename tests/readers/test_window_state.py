"""Window state read offline: recognised by the window operator's state declarations (the
window is each entry's namespace), shown by `inspect` (pairs, windows, range, pending timers)
and named per (key, window) by `diff`.

Snapshots of the on-disk contract are written with the writer (:func:`write_window_savepoint`);
the end-to-end tests take real savepoints of examples/windowed_counts.py mid-window."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from statekit.readers.diff import DiffSpec
from statekit.readers.inspection import inspect_snapshot
from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.window_state import (
    WINDOW_CONTENTS_STATE,
    WINDOW_MERGING_SET_STATE,
    WINDOW_TIMERS_STATE,
    WINDOW_TRIGGER_STATE,
    inspect_windows,
    is_window_operator,
    timer_of_user_key,
    window_of_namespace,
    window_state_role,
)
from statekit.runtime.control.launcher import run_job_file
from statekit.runtime.dataflow.job_handle import JobHandle, JobStatus
from statekit.runtime.dataflow.run_options import RunOptions, add_job_listener, remove_job_listener
from statekit.statefmt.errors import CorruptStateError
from statekit.statefmt.json_contract import json_data
from statekit.statefmt.metadata import OperatorMetadata, StateDescriptor, StateKind
from statekit.writers.diff_output import write_diff
from statekit.writers.savepoint_writer import SavepointWriter

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "windowed_counts.py")
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon"]

# ---------------------------------------------------------------- the on-disk contract, written


def contents_descriptor(kind: StateKind = StateKind.LIST) -> StateDescriptor:
    return StateDescriptor(WINDOW_CONTENTS_STATE, kind, value_type="int", namespace_type="list<int>")


TRIGGER = StateDescriptor(WINDOW_TRIGGER_STATE, StateKind.MAP, value_type="int", user_key_type="string",
                          namespace_type="list<int>")
TIMERS = StateDescriptor(WINDOW_TIMERS_STATE, StateKind.MAP, value_type="bool", user_key_type="list<int>",
                         namespace_type="list<int>")
MERGING_SET = StateDescriptor(WINDOW_MERGING_SET_STATE, StateKind.VALUE, value_type="list<list<int>>")
WATERMARK = StateDescriptor("_watermark", StateKind.UNION, value_type="int")

# keys a, b, c in two tumbling 10 s windows and one global-window key g
W1, W2 = [0, 10_000], [10_000, 20_000]
CONTENTS_ROWS = [("a", W1, [1, 2]), ("a", W2, [3]), ("b", W1, [4]), ("c", W2, [5, 6, 7])]
TRIGGER_ROWS = [("a", W1, "count", 2), ("a", W1, "fired", 0), ("c", W2, "count", 3)]
TIMER_ROWS = [("a", W1, [0, 9_999], True), ("a", W2, [0, 19_999], True), ("b", W1, [0, 9_999], True),
              ("c", W2, [0, 19_999], True), ("c", W2, [1, 25_000], True)]


def write_window_savepoint(path: Path, *, contents: Sequence[Any] = CONTENTS_ROWS,
                           trigger: Sequence[Any] = TRIGGER_ROWS, timers: Sequence[Any] = TIMER_ROWS,
                           kind: StateKind = StateKind.LIST, merging: Sequence[Any] | None = None,
                           parallelism: int = 2) -> str:
    """A savepoint of operator ``windows`` in the window operator's on-disk layout (plus an
    operator ``source`` without windows)."""
    states: dict[StateDescriptor, Any] = {contents_descriptor(kind): list(contents), TRIGGER: list(trigger),
                                          TIMERS: list(timers), WATERMARK: [9_000, 9_500]}
    if merging is not None:
        states[MERGING_SET] = list(merging)
    count = StateDescriptor("count", StateKind.VALUE, value_type="int")
    (SavepointWriter.new_savepoint(128).with_operator("source", {count: [("x", 1)]}, parallelism=1)
        .with_operator("windows", states, parallelism=parallelism).write(str(path)))
    return str(path)


def test_inspect_counts_entries_pairs_windows_and_timers(tmp_path: Path) -> None:
    path = write_window_savepoint(tmp_path / "sp")
    ops = {op.uid: op for op in inspect_snapshot(path).operators}
    assert ops["source"].windows is None
    view = ops["windows"].windows
    assert view is not None
    states = {s.state: s for s in view.states}
    assert list(states) == [WINDOW_CONTENTS_STATE, WINDOW_TRIGGER_STATE, WINDOW_TIMERS_STATE]
    held = states[WINDOW_CONTENTS_STATE]
    assert (held.entries, held.key_window_pairs, held.windows, held.global_window_pairs) == (4, 4, 2, 0)
    assert (held.earliest_start, held.latest_end) == (0, 20_000)
    trigger = states[WINDOW_TRIGGER_STATE]
    assert (trigger.entries, trigger.key_window_pairs, trigger.windows) == (3, 2, 2)
    timers = states[WINDOW_TIMERS_STATE]
    assert (timers.entries, timers.key_window_pairs, timers.windows) == (5, 4, 2)
    by_domain = {t.domain: t for t in view.timers}
    assert (by_domain["event_time"].count, by_domain["event_time"].earliest, by_domain["event_time"].latest) == (
        4, 9_999, 19_999)
    assert (by_domain["processing_time"].count, by_domain["processing_time"].earliest) == (1, 25_000)
    assert view.pending_timers == 5
    as_json = json_data(ops["windows"])["windows"]
    assert as_json["pending_timers"] == 5 and as_json["states"][0]["key_window_pairs"] == 4


def test_reduce_contents_and_global_windows(tmp_path: Path) -> None:
    path = write_window_savepoint(tmp_path / "sp", kind=StateKind.VALUE,
                                  contents=[("a", [], 3), ("b", [], 4), ("c", W1, 5)],
                                  trigger=[("a", [], "count", 1), ("b", [], "count", 2)], timers=[])
    view = inspect_windows(SavepointReader.read(path), "windows")
    assert view is not None
    states = {s.state: s for s in view.states}
    held = states[WINDOW_CONTENTS_STATE]
    assert (held.entries, held.key_window_pairs, held.windows, held.global_window_pairs) == (3, 3, 2, 2)
    assert (held.earliest_start, held.latest_end) == (0, 10_000)  # the global window spans no time
    assert states[WINDOW_TRIGGER_STATE].global_window_pairs == 2
    assert view.pending_timers == 0 and all(t.earliest is None for t in view.timers)


def test_the_merging_set_is_ordinary_state(tmp_path: Path) -> None:
    path = write_window_savepoint(tmp_path / "sp", merging=[("a", [[0, 5_000], [7_000, 9_000]])])
    op = {op.uid: op for op in inspect_snapshot(path).operators}["windows"]
    assert WINDOW_MERGING_SET_STATE in {s.name for s in op.states}
    assert op.windows is not None
    assert WINDOW_MERGING_SET_STATE not in {s.state for s in op.windows.states}
    reader = SavepointReader.read(path)
    (entry,) = reader.read_keyed_state("windows", WINDOW_MERGING_SET_STATE)
    assert entry.namespace is None and entry.value == [[0, 5_000], [7_000, 9_000]]


@pytest.mark.parametrize("state, contents, timers", [
    (WINDOW_CONTENTS_STATE, [("a", [5], [1])], TIMER_ROWS),
    (WINDOW_CONTENTS_STATE, [("a", [10, 0], [1])], TIMER_ROWS),
    (WINDOW_CONTENTS_STATE, [("a", None, [1])], TIMER_ROWS),  # the void namespace: no window
    (WINDOW_CONTENTS_STATE, [("a", ["0", "10"], [1])], TIMER_ROWS),
    (WINDOW_TIMERS_STATE, CONTENTS_ROWS, [("a", [1, 2, 3], [0, 1], True)]),
])
def test_a_namespace_that_is_no_window_is_corrupt_state(tmp_path: Path, state: str, contents: Any,
                                                        timers: Any) -> None:
    path = write_window_savepoint(tmp_path / "sp", contents=contents, timers=timers)
    with pytest.raises(CorruptStateError, match=rf"^{re.escape(str(tmp_path / 'sp'))}: window state '{state}': namespace .* "
                                                r"is not a window"):
        inspect_snapshot(path)


@pytest.mark.parametrize("user_key", [[2, 9_999], [0], [], [0, 9_999, 0, 10_000]])
def test_a_timer_user_key_of_another_shape_is_corrupt_state(tmp_path: Path, user_key: list[Any]) -> None:
    path = write_window_savepoint(tmp_path / "sp", timers=[("a", W1, user_key, True)])
    with pytest.raises(CorruptStateError, match=rf"^{re.escape(str(tmp_path / 'sp'))}: window state '_window_timers': "
                                                r"user key .* is not a timer"):
        inspect_snapshot(path)


def test_window_of_a_namespace() -> None:
    assert window_of_namespace(WINDOW_CONTENTS_STATE, [0, 10]) == (0, 10)
    assert window_of_namespace(WINDOW_TRIGGER_STATE, []) is None  # the global window
    assert timer_of_user_key([1, 9]) == (1, 9)


@pytest.mark.parametrize("namespace", [[1, 2, 3], "[0, 10]", [10, 0], [5, 5], [True, 2], None, [0.5, 2]])
def test_a_malformed_namespace_names_the_snapshot(namespace: Any) -> None:
    with pytest.raises(CorruptStateError, match=r"^/snap: window state 'window-contents': namespace .* is not"):
        window_of_namespace(WINDOW_CONTENTS_STATE, namespace, "/snap")


def _operator(*states: StateDescriptor) -> OperatorMetadata:
    return OperatorMetadata(uid="w", name="w", parallelism=1, max_parallelism=8, key_serializer="msgpack",
                            states=tuple(states), subtasks=())


def test_a_window_operator_is_recognised_by_its_declarations_only() -> None:
    contents = contents_descriptor()
    assert is_window_operator(_operator(contents, TIMERS))
    assert is_window_operator(_operator(contents_descriptor(StateKind.VALUE), TIMERS, MERGING_SET))
    assert window_state_role(_operator(contents, TIMERS), WINDOW_TIMERS_STATE) == "timers"
    assert window_state_role(_operator(contents, TIMERS), WINDOW_CONTENTS_STATE) == "contents"
    assert window_state_role(_operator(contents, TIMERS), WINDOW_TRIGGER_STATE) is None  # not declared
    assert window_state_role(_operator(contents, TIMERS, TRIGGER), WINDOW_TRIGGER_STATE) == "trigger"
    assert window_state_role(_operator(contents, TIMERS, MERGING_SET), WINDOW_MERGING_SET_STATE) is None
    assert not is_window_operator(_operator(contents))
    no_namespace = StateDescriptor(WINDOW_CONTENTS_STATE, StateKind.LIST, value_type="int")
    assert not is_window_operator(_operator(no_namespace, TIMERS))
    other_namespace = StateDescriptor(WINDOW_CONTENTS_STATE, StateKind.LIST, namespace_type="string")
    assert not is_window_operator(_operator(other_namespace, TIMERS))
    old_layout = StateDescriptor(WINDOW_TIMERS_STATE, StateKind.MAP, value_type="bool", user_key_type="list<int>")
    assert not is_window_operator(_operator(contents, old_layout))
    string_timers = StateDescriptor(WINDOW_TIMERS_STATE, StateKind.MAP, user_key_type="string",
                                    namespace_type="list<int>")
    assert not is_window_operator(_operator(contents, string_timers))
    unnamespaced_trigger = StateDescriptor(WINDOW_TRIGGER_STATE, StateKind.MAP, user_key_type="string")
    assert window_state_role(_operator(contents, TIMERS, unnamespaced_trigger), WINDOW_TRIGGER_STATE) is None


def test_diff_compares_window_state_per_key_and_window(tmp_path: Path) -> None:
    a = write_window_savepoint(tmp_path / "a")
    changed = [("a", W1, [1, 2]), ("a", W2, [3, 4]), ("c", W2, [5, 6, 7]), ("c", [20_000, 30_000], [8])]
    b = write_window_savepoint(tmp_path / "b", contents=changed, parallelism=3)
    result = write_diff(DiffSpec(a, b, operator="windows", state=WINDOW_CONTENTS_STATE, keys=True))
    (state,) = result.states
    assert (state.only_in_a, state.only_in_b, state.changed, state.unchanged) == (1, 1, 1, 2)
    got = {(e.change, e.key, tuple(e.window or ())) for e in state.examples}
    assert got == {("only_in_a", "b", (0, 10_000)), ("only_in_b", "c", (20_000, 30_000)),
                   ("changed", "a", (10_000, 20_000))}
    for example in state.examples:
        assert example.window == example.namespace and example.user_key is None
        assert json_data(example)["window"] == example.window


def test_diff_names_the_window_of_trigger_and_timer_entries(tmp_path: Path) -> None:
    a = write_window_savepoint(tmp_path / "a", trigger=[("a", [], "count", 1)])
    b = write_window_savepoint(tmp_path / "b", trigger=[("a", [], "count", 2)], timers=TIMER_ROWS[:-1])
    result = write_diff(DiffSpec(a, b, operator="windows", keys=True))
    states = {s.state_name: s for s in result.states}
    (trigger,) = states[WINDOW_TRIGGER_STATE].examples
    assert (trigger.change, trigger.user_key, trigger.window, trigger.namespace) == ("changed", "count", None, [])
    (timer,) = states[WINDOW_TIMERS_STATE].examples
    assert (timer.change, timer.user_key, timer.window) == ("only_in_a", [1, 25_000], [10_000, 20_000])
    assert not states["_watermark"].differs


def test_diff_of_a_corrupt_window_names_its_snapshot(tmp_path: Path) -> None:
    a = write_window_savepoint(tmp_path / "a")
    b = write_window_savepoint(tmp_path / "b", contents=[*CONTENTS_ROWS, ("d", [7], [1])])
    with pytest.raises(CorruptStateError, match=rf"^{re.escape(str(tmp_path / 'b'))}: window state 'window-contents'"):
        write_diff(DiffSpec(a, b, operator="windows", state=WINDOW_CONTENTS_STATE, keys=True))


def test_diff_lists_a_changed_namespace_type(tmp_path: Path) -> None:
    """A savepoint of the window operator's former layout (no namespace) against the new one."""
    old_timers = StateDescriptor(WINDOW_TIMERS_STATE, StateKind.MAP, value_type="bool", user_key_type="list<int>")
    a, b = str(tmp_path / "a"), write_window_savepoint(tmp_path / "b", timers=[("a", W1, [0, 9_999], True)])
    (SavepointWriter.new_savepoint(128).with_operator("windows", {old_timers: [("a", [0, 9_999, *W1], True)]},
                                                      parallelism=2).write(a))
    result = write_diff(DiffSpec(a, b, operator="windows", state=WINDOW_TIMERS_STATE))
    (change,) = [c for c in result.structural if c.change == "descriptor_changed"]
    assert (change.state_name, change.field, change.a, change.b) == (WINDOW_TIMERS_STATE, "namespace_type", None,
                                                                     "list<int>")
    assert not result.equal


# ---------------------------------------------------------------- end to end: the runtime's layout


def _input(directory: Path, files: int = 40, lines: int = 10_000) -> None:
    """Lines 37 ms apart (about 270 per 10 s window), so any moment of the run is mid-window."""
    directory.mkdir(parents=True)
    t = 0
    for f in range(files):
        rows = []
        for i in range(lines):
            t += 37
            rows.append(f"{t}\t{WORDS[i % len(WORDS)]} {WORDS[(i * 3) % len(WORDS)]}")
        (directory / f"part-{f:02d}.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")


def mid_window_savepoints(tmp: Path) -> tuple[str, str]:
    """Two savepoints of one windowed_counts run (the second stops it), both before end of input."""
    _input(tmp / "in")
    handles: list[JobHandle] = []
    started = threading.Event()

    def listen(handle: JobHandle) -> None:
        handles.append(handle)
        started.set()

    add_job_listener(listen)
    args = ("--input", str(tmp / "in"), "--output", str(tmp / "out"), "--window", "10s", "--out-of-orderness", "2s")
    runner = threading.Thread(target=lambda: run_job_file(EXAMPLE, RunOptions(
        parallelism=2, checkpoint_dir=str(tmp / "chk"), checkpoint_interval_ms=200, job_args=args)))
    try:
        runner.start()
        assert started.wait(30)
        deadline = time.monotonic() + 30
        while handles[0].status is not JobStatus.RUNNING and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        first = handles[0].trigger_savepoint(str(tmp / "sp"), stop=False).result(60)
        second = handles[0].trigger_savepoint(str(tmp / "sp"), stop=True).result(60)
        runner.join(60)
    finally:
        remove_job_listener(listen)
    return first, second


@pytest.fixture(scope="module")
def savepoints(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    return mid_window_savepoints(tmp_path_factory.mktemp("windowed"))


def _pairs(reader: SavepointReader, state: str) -> set[tuple[Any, tuple[int, ...]]]:
    return {(e.key, tuple(e.namespace)) for e in reader.read_keyed_state("windows", state)}


def test_inspect_shows_window_contents_and_pending_timers(savepoints: tuple[str, str]) -> None:
    path = savepoints[1]
    reader = SavepointReader.read(path)
    assert is_window_operator(reader.operator("windows")), "the runtime does not write the namespaced layout"
    contents = _pairs(reader, WINDOW_CONTENTS_STATE)
    entries = reader.read_keyed_state("windows", WINDOW_TIMERS_STATE)
    timers = [tuple(e.user_key) for e in entries]  # type: ignore[union-attr]
    assert contents and timers, "the savepoint was not taken mid-window"

    report = inspect_snapshot(path)
    ops = {op.uid: op for op in report.operators}
    assert ops["source"].windows is None and ops["sink"].windows is None
    view = ops["windows"].windows
    assert view is not None
    states = {s.state: s for s in view.states}
    assert set(states) == {WINDOW_CONTENTS_STATE, WINDOW_TRIGGER_STATE, WINDOW_TIMERS_STATE}
    held = states[WINDOW_CONTENTS_STATE]
    assert held.entries == held.key_window_pairs == len(contents)
    assert held.windows == len({w for _, w in contents}) and held.global_window_pairs == 0
    assert held.earliest_start == min(w[0] for _, w in contents)
    assert held.latest_end == max(w[1] for _, w in contents)
    assert states[WINDOW_TRIGGER_STATE].entries == 0  # the event-time trigger keeps no state
    by_domain = {t.domain: t for t in view.timers}
    assert view.pending_timers == len(timers) == by_domain["event_time"].count
    assert by_domain["event_time"].earliest == min(t[1] for t in timers)
    assert by_domain["event_time"].latest == max(t[1] for t in timers)
    assert by_domain["processing_time"].count == 0 and by_domain["processing_time"].earliest is None
    as_json = json_data(ops["windows"])["windows"]
    assert as_json["pending_timers"] == len(timers)
    assert as_json["states"][0]["key_window_pairs"] == len(contents)
    # each subtask's watermark when it snapshotted (operator state _watermark), behind its pending timers
    stored = reader.read_operator_state_per_subtask("windows", "_watermark")
    assert view.watermarks == [max(part) if part else None for part in stored] and len(view.watermarks) == 2
    assert all(isinstance(w, int) for w in view.watermarks), "the savepoint was taken before any watermark"
    assert min(w for w in view.watermarks if w is not None) < by_domain["event_time"].latest
    assert as_json["watermarks"] == list(view.watermarks)  # index: the subtask


def test_diff_of_runtime_savepoints_compares_per_key_and_window(savepoints: tuple[str, str]) -> None:
    first, second = savepoints
    result = write_diff(DiffSpec(first, second, operator="windows", state=WINDOW_CONTENTS_STATE, keys=True, limit=50))
    (state,) = result.states
    a = _pairs(SavepointReader.read(first), WINDOW_CONTENTS_STATE)
    b = _pairs(SavepointReader.read(second), WINDOW_CONTENTS_STATE)
    assert state.only_in_a == len(a - b) and state.only_in_b == len(b - a)
    assert state.examples, "the run did not move between the savepoints"
    for example in state.examples:
        assert example.window == example.namespace and len(example.window) == 2
        assert json_data(example)["window"] == example.window
