"""Window state read offline: recognised by the window operator's state declarations, shown by
`inspect` (pairs, windows, range, pending timers) and named per (key, window) by `diff` — on
real savepoints of examples/windowed_counts.py taken mid-window."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from statekit.readers.diff import DiffSpec
from statekit.readers.inspection import inspect_snapshot
from statekit.readers.savepoint_reader import SavepointReader
from statekit.readers.window_state import (
    WINDOW_CONTENTS_STATE,
    WINDOW_TIMERS_STATE,
    WINDOW_TRIGGER_STATE,
    is_window_operator,
    window_of_user_key,
    window_state_role,
)
from statekit.runtime.job import JobHandle, JobStatus
from statekit.runtime.launcher import run_job_file
from statekit.runtime.run_options import RunOptions, add_job_listener, remove_job_listener
from statekit.statefmt.errors import CorruptStateError
from statekit.statefmt.metadata import OperatorMetadata, StateDescriptor, StateKind
from statekit.writers.diff_output import write_diff

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "windowed_counts.py")
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon"]


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
    entries = reader.read_keyed_state("windows", state)
    return {(e.key, tuple(e.user_key)) for e in entries}  # type: ignore[union-attr]


def test_inspect_shows_window_contents_and_pending_timers(savepoints: tuple[str, str]) -> None:
    path = savepoints[1]
    reader = SavepointReader.read(path)
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
    as_json = ops["windows"].to_json()["windows"]
    assert as_json["pending_timers"] == len(timers)
    assert as_json["states"][0]["key_window_pairs"] == len(contents)


def test_diff_compares_window_state_per_key_and_window(savepoints: tuple[str, str], tmp_path: Path) -> None:
    first, second = savepoints
    result = write_diff(DiffSpec(first, second, operator="windows", state=WINDOW_CONTENTS_STATE, keys=True, limit=50))
    (state,) = result.states
    a, b = _pairs(SavepointReader.read(first), WINDOW_CONTENTS_STATE), _pairs(SavepointReader.read(second),
                                                                              WINDOW_CONTENTS_STATE)
    assert state.only_in_a == len(a - b) and state.only_in_b == len(b - a)
    assert state.examples, "the run did not move between the savepoints"
    for example in state.examples:
        assert example.window == example.user_key and len(example.window) == 2
        assert example.to_json()["window"] == example.window


def test_window_of_a_user_key_per_state() -> None:
    assert window_of_user_key(WINDOW_CONTENTS_STATE, [0, 10]) == (0, 10)
    assert window_of_user_key(WINDOW_CONTENTS_STATE, []) is None  # the global window
    assert window_of_user_key(WINDOW_TRIGGER_STATE, ["count", 5, 9]) == (5, 9)
    assert window_of_user_key(WINDOW_TIMERS_STATE, [0, 9, 0, 10]) == (0, 10)
    assert window_of_user_key(WINDOW_TIMERS_STATE, [1, 9]) is None


@pytest.mark.parametrize("state, user_key", [
    (WINDOW_CONTENTS_STATE, [1, 2, 3]),
    (WINDOW_CONTENTS_STATE, "[0, 10]"),
    (WINDOW_CONTENTS_STATE, [10, 0]),
    (WINDOW_TRIGGER_STATE, ["count", "a", "b"]),
    (WINDOW_TIMERS_STATE, [0, 9, 0]),
])
def test_a_malformed_window_key_is_corrupt_state(state: str, user_key: Any) -> None:
    with pytest.raises(CorruptStateError, match=r"not a window key|holds no"):
        window_of_user_key(state, user_key, "/snap")


def _operator(*states: StateDescriptor) -> OperatorMetadata:
    return OperatorMetadata(uid="w", name="w", parallelism=1, max_parallelism=8, key_serializer="msgpack",
                            states=tuple(states), subtasks=())


def test_a_window_operator_is_recognised_by_its_declarations_only() -> None:
    contents = StateDescriptor(WINDOW_CONTENTS_STATE, StateKind.MAP, user_key_type="list<int>")
    timers = StateDescriptor(WINDOW_TIMERS_STATE, StateKind.MAP, value_type="bool", user_key_type="list<int>")
    assert is_window_operator(_operator(contents, timers))
    assert window_state_role(_operator(contents, timers), WINDOW_TIMERS_STATE) == "timers"
    assert window_state_role(_operator(contents, timers), WINDOW_TRIGGER_STATE) is None  # not declared
    assert not is_window_operator(_operator(contents))
    user_map = StateDescriptor(WINDOW_CONTENTS_STATE, StateKind.MAP, user_key_type="string")
    assert not is_window_operator(_operator(user_map, timers))
    assert window_state_role(_operator(user_map, timers), WINDOW_CONTENTS_STATE) is None
