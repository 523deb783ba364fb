"""inspect (library): sizes and entries from _metadata, skew from the index only."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekit.readers.inspection import HISTOGRAM_BUCKETS, _skew, inspect_snapshot
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "statekit-v1" / "statekit-0.1-v1-all-kinds"


def test_skew_over_all_key_groups() -> None:
    view = _skew({0: 100, 3: 50}, 4)
    assert view.mean_bytes == 150 / 4 and view.max_bytes == 100 and view.max_key_group == 0
    assert view.ratio == 100 / (150 / 4) and view.key_groups_with_state == 2
    assert sum(view.histogram) == 4 and len(view.histogram) == HISTOGRAM_BUCKETS
    assert view.histogram[0] == 2 and view.histogram[-1] == 1 and view.histogram[5] == 1
    empty = _skew({}, 128)
    assert (empty.max_key_group, empty.ratio, empty.histogram) == (None, 0.0, [0] * HISTOGRAM_BUCKETS)


def test_even_spread_has_ratio_near_one(tmp_path: Path) -> None:
    value = StateDescriptor("v", StateKind.VALUE)
    SavepointWriter.new_savepoint(max_parallelism=8).with_operator(
        "op", {value: [(i, "x" * 20) for i in range(4000)]}, parallelism=3).write(str(tmp_path / "sp"))
    state = inspect_snapshot(str(tmp_path / "sp")).operators[0].states[0]
    assert state.skew is not None and state.skew.key_groups_with_state == 8
    assert 1.0 <= state.skew.ratio < 1.2
    assert state.entries == 4000 and [p["subtask"] for p in state.per_subtask] == [0, 1, 2]


def test_no_skew_reads_no_state_file(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: FileIO, path: str) -> None:
        raise AssertionError(f"opened {path}")

    monkeypatch.setattr(FileIO, "open_input", refuse)
    inspection = inspect_snapshot(str(GOLDEN), skew=False)
    assert inspection.bytes == 6488 and all(s.skew is None for o in inspection.operators for s in o.states)


def test_skew_reads_only_footers_and_indexes(monkeypatch: pytest.MonkeyPatch) -> None:
    read = {"bytes": 0}
    original = FileIO.open_input

    class Counting:
        def __init__(self, stream: object) -> None:
            self._stream = stream

        def read(self, n: int = -1) -> bytes:
            data: bytes = self._stream.read(n)  # type: ignore[attr-defined]
            read["bytes"] += len(data)
            return data

        def __enter__(self) -> Counting:
            return self

        def __exit__(self, *exc: object) -> None:
            self._stream.close()  # type: ignore[attr-defined]

        def __getattr__(self, name: str) -> object:
            return getattr(self._stream, name)

    monkeypatch.setattr(FileIO, "open_input", lambda self, path: Counting(original(self, path)))
    inspect_snapshot(str(GOLDEN))
    keyed_files, keyed_blocks = 10, 7
    assert read["bytes"] == keyed_files * (16 + 28) + keyed_blocks * 32
