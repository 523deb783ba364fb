"""The list/map-state and operator/broadcast-state examples run, checkpoint and restore."""

from __future__ import annotations

import collections
import glob
import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

from statekit.readers.savepoint_reader import SavepointReader
from statekit.runtime.control.launcher import run_job_file
from statekit.runtime.dataflow.job_handle import JobStatus
from statekit.runtime.dataflow.run_options import RunOptions
from statekit.statefmt.metadata import StateKind

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def only(pattern: str) -> str:
    (path,) = glob.glob(pattern)
    return path


def test_clickstream_keeps_list_and_map_state(tmp_path: Path) -> None:
    clickstream = load("clickstream")
    events = 3000
    status = run_job_file(str(EXAMPLES / "clickstream.py"), RunOptions(
        parallelism=2, checkpoint_dir=str(tmp_path / "chk"), checkpoint_interval_ms=50,
        savepoint_on_finish=str(tmp_path / "sp"), job_args=("--events", str(events), "--output", str(tmp_path / "out")),
    ))
    assert status is JobStatus.FINISHED
    clicks = [clickstream.click(i) for i in range(events)]
    views = collections.Counter(clicks)
    lines = [line.split("\t") for name in os.listdir(tmp_path / "out")
             for line in (tmp_path / "out" / name).read_text().splitlines()]
    assert len(lines) == events
    per_pair: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
    for user, page, count, _ in lines:
        per_pair[(user, page)].append(int(count))
    assert {k: sorted(v) for k, v in per_pair.items()} == {k: list(range(1, n + 1)) for k, n in views.items()}

    reader = SavepointReader.read(only(str(tmp_path / "sp" / "savepoint-*")))
    sessions = reader.operator("sessions")
    assert {d.name: d.kind for d in sessions.states} == {"recent-pages": StateKind.LIST, "page-views": StateKind.MAP}
    page_views = {(e.key, e.user_key): e.value for e in reader.read_keyed_state("sessions", "page-views")}
    assert page_views == dict(views)
    pages_of: dict[str, set[str]] = collections.defaultdict(set)
    clicks_of: collections.Counter[str] = collections.Counter()
    for user, page in clicks:
        pages_of[user].add(page)
        clicks_of[user] += 1
    # the two source subtasks interleave, so which pages are the last ones is not fixed
    recent = {e.key: e.value for e in reader.read_keyed_state("sessions", "recent-pages")}
    assert set(recent) == set(pages_of)
    for user, pages in recent.items():
        assert len(pages) == min(clickstream.RECENT, clicks_of[user]) and set(pages) <= pages_of[user]


@pytest.mark.parametrize("restore_parallelism", [3])
def test_alerts_keeps_broadcast_and_operator_state_across_rescale(tmp_path: Path, restore_parallelism: int) -> None:
    alerts = load("alerts")
    payments = 4000
    status = run_job_file(str(EXAMPLES / "alerts.py"), RunOptions(
        parallelism=2, checkpoint_dir=str(tmp_path / "chk"), checkpoint_interval_ms=50,
        savepoint_on_finish=str(tmp_path / "sp"),
        job_args=("--payments", str(payments), "--output", str(tmp_path / "alerts.txt")),
    ))
    assert status is JobStatus.FINISHED
    first = SavepointReader.read(only(str(tmp_path / "sp" / "savepoint-*")))
    limits = first.operator("limits")
    assert {d.name: d.kind for d in limits.states} == {"limits": StateKind.BROADCAST, "spent": StateKind.MAP}
    assert [sorted(p) for p in first.read_operator_state_per_subtask("limits", "limits")] == [sorted(alerts.RULES)] * 2
    spent: collections.Counter[tuple[str, str]] = collections.Counter()
    for account, category, amount in (alerts.payment(i) for i in range(payments)):
        spent[(account, category)] += amount
    assert {(e.key, e.user_key): e.value for e in first.read_keyed_state("limits", "spent")} == dict(spent)
    assert first.descriptor("alert-sink", "buffer").kind is StateKind.OPERATOR_LIST
    # each pair that ends over its limit alerts once, whether its rule came early or late
    limit = dict(alerts.RULES)
    alerted = [tuple(line.split("\t")[:2]) for line in (tmp_path / "alerts.txt").read_text().splitlines()]
    assert sorted(alerted) == sorted(pair for pair, total in spent.items() if total > limit[pair[1]])

    status = run_job_file(str(EXAMPLES / "alerts.py"), RunOptions(
        parallelism=restore_parallelism, restore_path=first.path, savepoint_on_finish=str(tmp_path / "sp2"),
        job_args=("--payments", str(payments), "--output", str(tmp_path / "alerts2.txt")),
    ))
    assert status is JobStatus.FINISHED
    second = SavepointReader.read(only(str(tmp_path / "sp2" / "savepoint-*")))
    assert second.operator("limits").parallelism == restore_parallelism
    copies = second.read_operator_state_per_subtask("limits", "limits")
    assert [sorted(p) for p in copies] == [sorted(alerts.RULES)] * restore_parallelism
    assert {(e.key, e.user_key): e.value for e in second.read_keyed_state("limits", "spent")} == dict(spent)
