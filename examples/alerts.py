"""Spending alerts: broadcast state and operator list state.

Two streams: *rules* (a category and its spending limit) are broadcast to every subtask
and kept in broadcast state ``limits``; *payments* ``(account, category, amount)`` are keyed
by account, and a KeyedBroadcastProcessFunction keeps each account's spending per category
(keyed MapState ``spent``) and emits an alert when the limit is crossed. Rules and payments
race (as in Flink, nothing orders the two inputs): a rule that arrives late alerts, through
``ctx.apply_to_keyed_state``, every account already over it, so each (account, category)
that ends over its limit alerts exactly once whatever the interleaving. Alerts go to a
buffering sink that collects them in operator ListState ``buffer`` (even-split on rescale)
and writes them in batches of ``--batch`` lines.

Operator uids: ``rules``, ``payments``, ``limits``, ``alert-sink``.

Run it::

    statekit run -p 2 --checkpoint-dir /tmp/chk examples/alerts.py --payments 5000 --output /tmp/alerts.txt
"""

from __future__ import annotations

import argparse
import os
import threading
from typing import Any

from statekit.runtime import (
    CheckpointedFunction,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedBroadcastProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    RuntimeContext,
    SinkFunction,
    get_execution_environment,
)

LIMITS = MapStateDescriptor("limits", "int", key_type="string")
SPENT = MapStateDescriptor("spent", "int", key_type="string")
RULES = [("food", 300), ("travel", 1200), ("games", 100), ("books", 250)]


def payment(index: int) -> tuple[str, str, int]:
    """The ``index``-th payment of the synthetic stream (deterministic)."""
    account = f"acct-{(index * 2654435761) % 50:02d}"
    category = RULES[(index * 13) % len(RULES)][0]
    return account, category, 5 + (index * 37) % 60


class SpendingLimits(KeyedBroadcastProcessFunction):
    """Tracks spending per account and category; alerts when a broadcast limit is crossed."""

    def open(self, ctx: RuntimeContext) -> None:
        self.spent = ctx.get_map_state(SPENT)

    def process_broadcast_element(self, value: tuple[str, int], ctx: Any, out: Any) -> None:
        category, limit = value
        limits = ctx.get_broadcast_state(LIMITS)
        known = limits.get(category)
        limits.put(category, limit)
        if known is not None:
            return  # a replayed or changed rule does not alert again

        def alert_if_over(account: str, spent: Any) -> None:
            total = spent.get(category)
            if total is not None and total > limit:
                out.collect(f"{account}\t{category}\t{total}\t{limit}")

        ctx.apply_to_keyed_state(SPENT, alert_if_over)

    def process_element(self, value: tuple[str, str, int], ctx: Any, out: Any) -> None:
        account, category, amount = value
        before = self.spent.get(category) or 0
        after = before + amount
        self.spent.put(category, after)
        limit = ctx.get_broadcast_state(LIMITS).get(category)
        if limit is not None and before <= limit < after:
            out.collect(f"{account}\t{category}\t{after}\t{limit}")


class BufferingSink(SinkFunction, CheckpointedFunction):
    """Appends alerts to one file in batches; unwritten alerts live in operator ListState."""

    def __init__(self, path: str, batch: int) -> None:
        self.path = path
        self.batch = batch
        self.buffer: list[str] = []

    def initialize_state(self, ctx: FunctionInitializationContext) -> None:
        self.state = ctx.operator_state_store.get_list_state(ListStateDescriptor("buffer", "string"))
        self.buffer = list(self.state.get())

    def snapshot_state(self, ctx: FunctionSnapshotContext) -> None:
        self.state.update(self.buffer)

    def invoke(self, value: str) -> None:
        self.buffer.append(value)
        if len(self.buffer) >= self.batch:
            self.finish()

    def finish(self) -> None:
        if self.buffer:
            with _FILE_LOCK, open(self.path, "a", encoding="utf-8") as out:
                out.write("".join(line + "\n" for line in self.buffer))
            self.buffer = []


_FILE_LOCK = threading.Lock()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--payments", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--output", default=os.devnull, help="file the alerts are appended to")
    args = parser.parse_args(argv)

    env = get_execution_environment()
    rules = env.from_collection(RULES, "rules").uid("rules").set_parallelism(1).broadcast(LIMITS)
    payments = env.from_sequence(0, args.payments - 1, "payment ids").uid("payments").map(payment).uid("payment")
    (
        payments.key_by(lambda p: p[0])
        .connect(rules)
        .process(SpendingLimits(), "limits").uid("limits")
        .sink_to(BufferingSink(args.output, args.batch), "alerts").uid("alert-sink")
    )
    env.execute("alerts")


if __name__ == "__main__":
    main()
