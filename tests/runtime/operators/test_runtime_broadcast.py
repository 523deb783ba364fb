"""Broadcast state with a keyed stream: both input orders, and ``apply_to_keyed_state``.

Nothing orders a broadcast input against the keyed input, so the two orders are forced
here with gates: one source waits until the other side has been processed.
"""

from __future__ import annotations

import collections
import importlib.util
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from statekit.runtime.api.functions import KeyedBroadcastProcessFunction, ProcessFunction, RuntimeContext
from statekit.runtime.api.sources import SourceReader, SourceReaderContext
from statekit.runtime.connectors.sources import CollectionSource
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.dataflow.job_handle import JobStatus
from statekit.statefmt.errors import BadInputError

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
PAYMENTS = 2000


def load_alerts() -> Any:
    spec = importlib.util.spec_from_file_location("example_alerts_broadcast", EXAMPLES / "alerts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


alerts = load_alerts()


class _Progress:
    """Counts records processed by the keyed operator, across its subtasks and threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.payments = 0
        self.rules = 0
        self.lines: list[str] = []

    def add(self, field: str) -> None:
        with self.lock:
            setattr(self, field, getattr(self, field) + 1)


PROGRESS = _Progress()


class _GatedReader(SourceReader):
    """Emits nothing until ``ready()``; then the whole collection."""

    def __init__(self, elements: list[Any], ready: Any) -> None:
        self.elements = elements
        self.ready = ready
        self.done = False
        self.deadline = time.monotonic() + 60

    def poll(self, max_records: int) -> tuple[list[Any], bool]:
        if self.done:
            return [], True
        if not self.ready():
            if time.monotonic() > self.deadline:
                raise TimeoutError("the gate never opened")
            return [], False
        self.done = True
        return list(self.elements), False


class _GatedSource(CollectionSource):
    def __init__(self, elements: list[Any], ready: Any) -> None:
        super().__init__(elements)
        self.ready = ready

    def create_reader(self, ctx: SourceReaderContext) -> SourceReader:
        share = self.elements if ctx.subtask == 0 else []
        return _GatedReader(share, self.ready)


class _CountingLimits(alerts.SpendingLimits):  # type: ignore[misc]
    def process_element(self, value: Any, ctx: Any, out: Any) -> None:
        super().process_element(value, ctx, out)
        PROGRESS.add("payments")

    def process_broadcast_element(self, value: Any, ctx: Any, out: Any) -> None:
        super().process_broadcast_element(value, ctx, out)
        PROGRESS.add("rules")


def _collect(line: str) -> None:
    with PROGRESS.lock:
        PROGRESS.lines.append(line)


def _expected_alerts() -> set[tuple[str, str]]:
    spent: collections.Counter[tuple[str, str]] = collections.Counter()
    for account, category, amount in (alerts.payment(i) for i in range(PAYMENTS)):
        spent[(account, category)] += amount
    limit = dict(alerts.RULES)
    return {pair for pair, total in spent.items() if total > limit[pair[1]]}


@pytest.mark.parametrize("order", ["rules-first", "rules-last"])
@pytest.mark.parametrize("backend", ["hashmap", pytest.param("rocksdb", marks=pytest.mark.skipif(
    importlib.util.find_spec("rocksdict") is None, reason="rocksdict is not installed"))])
def test_every_pair_over_its_limit_alerts_once_whatever_arrives_first(order: str, backend: str) -> None:
    PROGRESS.reset()
    parallelism = 2
    payments = [alerts.payment(i) for i in range(PAYMENTS)]
    if order == "rules-first":
        rules_ready = lambda: True  # noqa: E731
        payments_ready = lambda: PROGRESS.rules == len(alerts.RULES) * parallelism  # noqa: E731
    else:
        rules_ready = lambda: PROGRESS.payments == PAYMENTS  # noqa: E731
        payments_ready = lambda: True  # noqa: E731
    env = StreamEnvironment().set_parallelism(parallelism).set_state_backend(backend)
    rules = env.from_source(_GatedSource(alerts.RULES, rules_ready), "rules").uid("rules").set_parallelism(1)
    (
        env.from_source(_GatedSource(payments, payments_ready), "payments").uid("payments")
        .key_by(lambda p: p[0])
        .connect(rules.broadcast(alerts.LIMITS))
        .process(_CountingLimits(), "limits").uid("limits")
        .sink_to(_collect, "alerts").uid("sink")
    )
    handle = env.execute_async(f"alerts {order}")
    assert handle.wait(90) is JobStatus.FINISHED
    assert (PROGRESS.payments, PROGRESS.rules) == (PAYMENTS, len(alerts.RULES) * parallelism)
    pairs = [tuple(line.split("\t")[:2]) for line in PROGRESS.lines]
    assert len(pairs) == len(set(pairs))  # once each
    assert set(pairs) == _expected_alerts()
    limit = dict(alerts.RULES)
    for line in PROGRESS.lines:
        _, category, total, alerted_limit = line.split("\t")
        assert int(alerted_limit) == limit[category] < int(total)


class _ApplyOnKeyedSide(ProcessFunction):
    def process_element(self, value: Any, ctx: Any, out: Any) -> None:
        ctx.apply_to_keyed_state(alerts.SPENT, lambda key, state: None)


def test_apply_to_keyed_state_outside_the_broadcast_side_fails_the_job() -> None:
    env = StreamEnvironment().set_parallelism(1)
    env.from_collection([1]).uid("one").process(_ApplyOnKeyedSide()).uid("apply").sink_to(lambda v: None).uid("sink")
    with pytest.raises(BadInputError, match="apply_to_keyed_state needs the broadcast side of a keyed stream"):
        env.execute("misuse")


def test_apply_to_keyed_state_visits_every_key_and_restores_the_current_key() -> None:
    PROGRESS.reset()
    seen: list[tuple[Any, Any]] = []

    class Probe(KeyedBroadcastProcessFunction):
        def open(self, ctx: RuntimeContext) -> None:
            self.spent = ctx.get_map_state(alerts.SPENT)

        def process_element(self, value: Any, ctx: Any, out: Any) -> None:
            self.spent.put("x", value)
            _collect(str(value))  # opens the gate of the broadcast side after three keys

        def process_broadcast_element(self, value: Any, ctx: Any, out: Any) -> None:
            before = ctx.get_current_key()
            ctx.apply_to_keyed_state(alerts.SPENT, lambda key, state: seen.append((key, state.get("x"))))
            assert ctx.get_current_key() == before

    env = StreamEnvironment().set_parallelism(1)
    go = env.from_source(_GatedSource(["go"], lambda: len(PROGRESS.lines) == 3), "go").uid("go")
    (
        env.from_collection([1, 2, 3]).uid("numbers")
        .key_by(lambda v: f"k{v}")
        .connect(go.broadcast(alerts.LIMITS))
        .process(Probe()).uid("probe")
        .sink_to(lambda v: None).uid("sink")
    )
    handle = env.execute_async("probe")
    assert handle.wait(60) is JobStatus.FINISHED
    assert sorted(seen) == [("k1", 1), ("k2", 2), ("k3", 3)]
