"""Checkpoint barrier alignment: unit behaviour and consistent snapshots of a running job."""

from __future__ import annotations

import glob
import os
import time
from typing import Any

from statekit.readers.savepoint_reader import SavepointReader
from statekit.runtime.api.checkpoint_config import Alignment
from statekit.runtime.checkpoint.barriers import Barrier, CheckpointOptions, PriorityBarrier
from statekit.runtime.dataflow.environment import StreamEnvironment
from statekit.runtime.exchange.input_gate import InputGate
from statekit.runtime.task.barrier_handler import CheckpointBarrierHandler


class Recorder:
    """Callbacks of a barrier handler that log what the task would do."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def snapshot(self, barrier: Barrier, *, unaligned: bool, alignment_ms: int) -> None:
        self.events.append(("snap", barrier.checkpoint_id))

    def input_done(self, barrier: Barrier) -> None:
        pass

    def decline(self, barrier: Barrier, reason: str) -> None:
        self.events.append(("decline", barrier.checkpoint_id))

    def record_inflight(self, barrier: Barrier, channel: int, records: list[Any]) -> None:
        self.events.append(("inflight", channel, list(records)))


def barrier(checkpoint_id: int) -> Barrier:
    return Barrier(checkpoint_id, 0)


def handler(channels: int) -> tuple[CheckpointBarrierHandler, Recorder]:
    recorder = Recorder()
    return CheckpointBarrierHandler(channels, InputGate(16, channels), recorder), recorder


def drive(aligner: CheckpointBarrierHandler, items: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
    """Feed items like a task loop; return what was processed (snapshots land in the recorder)."""
    processed: list[tuple[int, Any]] = []
    queue = list(items)
    while queue or aligner.pending:
        channel, payload = aligner.pending.popleft() if aligner.pending else queue.pop(0)
        if payload == "eop":
            aligner.on_end_of_partition(channel)
        elif aligner.on_item(channel, payload):
            processed.append((channel, payload))
    return processed


def test_inputs_behind_a_barrier_wait_until_every_channel_delivered_it() -> None:
    aligner, recorder = handler(2)
    items = [(0, ["a1"]), (0, barrier(1)), (0, ["a2"]), (1, ["b1"]), (0, ["a3"]), (1, ["b2"]), (1, barrier(1)),
             (1, ["b3"])]
    order: list[Any] = []
    queue = list(items)
    while queue or aligner.pending:
        channel, payload = aligner.pending.popleft() if aligner.pending else queue.pop(0)
        before = len(recorder.events)
        if aligner.on_item(channel, payload):
            order.append(payload[0])
        order.extend(recorder.events[before:])
    # a2 and a3 arrived behind channel 0's barrier: processed only after the snapshot
    assert order == ["a1", "b1", "b2", ("snap", 1), "a2", "a3", "b3"]


def test_stashed_items_keep_their_order_and_next_barriers_align_again() -> None:
    aligner, recorder = handler(2)
    items = [(0, barrier(1)), (0, ["a1"]), (0, barrier(2)), (0, ["a2"]), (1, ["b1"]), (1, barrier(1)),
             (1, ["b2"]), (1, barrier(2)), (1, ["b3"])]
    processed = drive(aligner, items)
    assert recorder.events == [("snap", 1), ("snap", 2)]
    assert [p[0] for _, p in processed] == ["b1", "a1", "b2", "a2", "b3"]


def test_finished_channel_no_longer_blocks_alignment_and_stale_barriers_are_ignored() -> None:
    aligner, recorder = handler(3)
    drive(aligner, [(0, barrier(1)), (1, barrier(1)), (2, "eop")])
    assert recorder.events == [("snap", 1)]
    drive(aligner, [(0, barrier(3)), (1, barrier(2))])  # 3 overtook 2: 2 is abandoned
    assert recorder.events == [("snap", 1)] and aligner.current is not None and aligner.current.checkpoint_id == 3
    drive(aligner, [(1, barrier(3))])
    assert recorder.events == [("snap", 1), ("snap", 3)]


UNALIGNED = Barrier(1, 0, CheckpointOptions(alignment=Alignment.UNALIGNED))


def unaligned_gate(items: list[tuple[int, Any]]) -> tuple[InputGate, Recorder, CheckpointBarrierHandler]:
    """A gate of two channels holding ``items``, and its barrier handler."""
    gate = InputGate(16, 2)
    for item in items:
        assert gate.offer(item)
    recorder = Recorder()
    return gate, recorder, CheckpointBarrierHandler(2, gate, recorder)


def test_an_unaligned_barrier_taken_between_slices_stores_the_rest_of_the_buffer_first() -> None:
    """The task is in the middle of channel 0's buffer [a1..a4] (a1, a2 handled) when channel 1's
    unaligned barrier overtakes its data: the snapshot holds a1 and a2, so a3 and a4 are in flight
    on channel 0, before a5 queued behind them; channel 1's queued b1 is in flight before its barrier."""
    gate, recorder, aligner = unaligned_gate([(0, ["a1", "a2", "a3", "a4"]), (0, ["a5"]), (1, ["b1"])])
    channel, buffer = gate.poll()
    assert aligner.on_item(channel, buffer)
    aligner.in_hand = (0, buffer[2:])
    aligner.on_priority(1, PriorityBarrier(UNALIGNED, sent=1))
    aligner.in_hand = None
    assert recorder.events == [("snap", 1), ("inflight", 0, ["a3", "a4"]), ("inflight", 1, ["b1"])]
    # channel 0 is still in flight until its own barrier: a5, when the task takes it, is stored too
    channel, buffer = gate.poll()
    assert aligner.on_item(channel, buffer)
    assert recorder.events[-1] == ("inflight", 0, ["a5"])
    aligner.on_priority(0, PriorityBarrier(UNALIGNED, sent=2))
    assert aligner.current is None  # every channel delivered the barrier: the input side is complete


def test_a_buffer_in_hand_of_a_channel_already_in_flight_is_not_stored_twice() -> None:
    """An unaligned checkpoint already running stored the whole buffer when the task took it; a
    barrier between its slices adds only what is queued."""
    gate, recorder, aligner = unaligned_gate([])
    aligner.on_priority(1, PriorityBarrier(UNALIGNED, sent=0))
    for item in [(0, ["a1", "a2", "a3"]), (0, ["a4"])]:
        assert gate.offer(item)
    channel, buffer = gate.poll()
    assert aligner.on_item(channel, buffer)
    aligner.in_hand = (0, buffer[1:])
    aligner.on_priority(0, PriorityBarrier(UNALIGNED, sent=2))
    aligner.in_hand = None
    assert recorder.events == [("snap", 1), ("inflight", 0, ["a1", "a2", "a3"]), ("inflight", 0, ["a4"])]


class SlowDown:
    """Identity that yields now and then, so that checkpoints land mid-stream."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, value: int) -> int:
        self.n += 1
        if self.n % 200 == 0:
            time.sleep(0.002)
        return value


def test_every_checkpoint_is_consistent_with_the_source_offsets(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Keyed sums in each checkpoint equal the sums of exactly the numbers the sources had
    emitted before the barrier — alignment across both channels of each sum subtask."""
    n = 40_000
    env = StreamEnvironment().set_parallelism(2)
    env.enable_checkpointing(30, num_retained=1000, checkpoint_storage=str(tmp_path / "chk"))
    (env.from_sequence(1, n).uid("numbers")
        .map(SlowDown()).uid("slow")
        .key_by(lambda v: v % 7)
        .sum().uid("sums").disable_chaining()
        .sink_to(lambda v: None).uid("sink"))
    result = env.execute("alignment")
    checkpoints = sorted(glob.glob(str(tmp_path / "chk" / result.job_id / "chk-*")))
    assert len(checkpoints) >= 3
    for path in checkpoints:
        reader = SavepointReader.read(path)
        emitted: list[int] = []
        subtask_ranges = [(1, n // 2), (n // 2 + 1, n)]
        splits = reader.read_operator_state_per_subtask("numbers", "splits")
        for (first, last), remaining in zip(subtask_ranges, splits):
            next_value = remaining[0]["next"] if remaining else last + 1
            emitted.extend(range(first, next_value))
        expected: dict[int, int] = {}
        for value in emitted:
            expected[value % 7] = expected.get(value % 7, 0) + value
        sums = {e.key: e.value for e in reader.read_keyed_state("sums", "reduce")}
        assert sums == expected, os.path.basename(path)
