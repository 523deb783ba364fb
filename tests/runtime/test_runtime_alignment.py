"""Checkpoint barrier alignment: unit behaviour and consistent snapshots of a running job."""

from __future__ import annotations

import glob
import os
import time
from typing import Any

from statekit.readers.savepoint_reader import SavepointReader
from statekit.runtime.channels import Barrier
from statekit.runtime.environment import StreamEnvironment
from statekit.runtime.task import BarrierAligner


def barrier(checkpoint_id: int) -> Barrier:
    return Barrier(checkpoint_id, 0)


def drive(aligner: BarrierAligner, items: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
    """Feed items like a task loop; return what was processed, snapshots as ('snap', id)."""
    processed: list[tuple[int, Any]] = []
    queue = list(items)
    while queue or aligner.pending:
        channel, payload = aligner.pending.popleft() if aligner.pending else queue.pop(0)
        if channel in aligner.stash:
            aligner.stash[channel].append((channel, payload))
        elif isinstance(payload, Barrier):
            aligner.on_barrier(channel, payload)
        elif payload == "eop":
            aligner.on_end_of_partition(channel)
        else:
            processed.append((channel, payload))
    return processed


def test_inputs_behind_a_barrier_wait_until_every_channel_delivered_it() -> None:
    events: list[Any] = []
    aligner = BarrierAligner(2, lambda b: events.append(("snap", b.checkpoint_id)))
    items = [(0, "a1"), (0, barrier(1)), (0, "a2"), (1, "b1"), (0, "a3"), (1, "b2"), (1, barrier(1)), (1, "b3")]
    processed: list[Any] = []
    queue = list(items)
    while queue or aligner.pending:
        channel, payload = aligner.pending.popleft() if aligner.pending else queue.pop(0)
        if channel in aligner.stash:
            aligner.stash[channel].append((channel, payload))
        elif isinstance(payload, Barrier):
            aligner.on_barrier(channel, payload)
            if not aligner.stash and aligner.aligning is None:
                events.append("aligned")
        else:
            events.append(payload)
            processed.append(payload)
    # a2 and a3 arrived behind channel 0's barrier: processed only after the snapshot
    assert events == ["a1", "b1", "b2", ("snap", 1), "aligned", "a2", "a3", "b3"]


def test_stashed_items_keep_their_order_and_next_barriers_align_again() -> None:
    snaps: list[int] = []
    aligner = BarrierAligner(2, lambda b: snaps.append(b.checkpoint_id))
    items = [(0, barrier(1)), (0, "a1"), (0, barrier(2)), (0, "a2"), (1, "b1"), (1, barrier(1)),
             (1, "b2"), (1, barrier(2)), (1, "b3")]
    processed = drive(aligner, items)
    assert snaps == [1, 2]
    assert [p for _, p in processed] == ["b1", "a1", "b2", "a2", "b3"]


def test_finished_channel_no_longer_blocks_alignment_and_stale_barriers_are_ignored() -> None:
    snaps: list[int] = []
    aligner = BarrierAligner(3, lambda b: snaps.append(b.checkpoint_id))
    drive(aligner, [(0, barrier(1)), (1, barrier(1)), (2, "eop")])
    assert snaps == [1]
    drive(aligner, [(0, barrier(3)), (1, barrier(2))])  # 3 overtook 2: 2 is abandoned
    assert snaps == [1] and aligner.aligning is not None and aligner.aligning.checkpoint_id == 3
    drive(aligner, [(1, barrier(3))])
    assert snaps == [1, 3]


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
