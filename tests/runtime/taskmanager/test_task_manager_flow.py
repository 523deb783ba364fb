"""Credit-based flow control between TaskManager processes: a source subtask whose only output
channel crosses processes is held back by its credits alone (no local gate of its own fills), so a
slow consumer backpressures it and its records in flight stay within credits x buffer records."""

from __future__ import annotations

import pickle
import time
from pathlib import Path

import msgpack
import pytest
from tm_support import RunningJob

from statekit.runtime import RunOptions
from statekit.runtime.exchange.network import INITIAL_CREDITS
from statekit.runtime.exchange.record_writer import MAX_BUFFER_RECORDS
from statekit.statefmt.keygroups import assign_key_to_parallel_operator, compute_default_max_parallelism

pytestmark = pytest.mark.slow

COUNT = 400_000
BUFFER_BYTES = 32 * 1024  # the default --buffer-size


def test_credits_alone_backpressure_a_source_whose_only_channel_is_remote(tmp_path: Path) -> None:
    # --keys 1: every record has key 0, which one subtask of the sum owns (the runtime's routing:
    # msgpack key bytes, murmur3 key group, key group range of the default max parallelism). Slot i
    # runs subtask i of every vertex on TaskManager i of 2, so the other source subtask's records
    # all cross processes: its local channel (into the idle sum subtask) never carries a record.
    owner = assign_key_to_parallel_operator(msgpack.packb(0), compute_default_max_parallelism(2), 2)
    remote_only = 1 - owner
    options = RunOptions(job_args=("--count", str(COUNT), "--keys", "1", "--latency", str(tmp_path / "latency"),
                                   "--slow-sink", "0.002"),
                         executor="processes", parallelism=2, task_managers=2, slots=1, latency_interval_ms=0)
    samples = []
    with RunningJob(options) as job:
        job.wait_for(lambda: len(job.handle.task_manager_pids()) == 2, "no 2 TaskManagers")
        for _ in range(3):
            time.sleep(1.5)
            samples.append(job.handle.task_metrics())
    now = int(time.time() * 1000)
    wire_bytes = len(pickle.dumps([(n, now) for n in range(COUNT - 1000, COUNT)], protocol=5)) / 1000
    buffer_records = min(MAX_BUFFER_RECORDS, int(BUFFER_BYTES / wire_bytes))
    for figures in samples:
        sources = {t.report.subtask: t for t in figures if t.report.source}
        sums = {t.report.subtask: t for t in figures if t.report.sink}  # the sum, chained with the sink
        assert set(sources) == set(sums) == {0, 1}, [t.report.name for t in figures]
        assert sums[remote_only].report.records_in == 0 and sums[owner].report.records_in > 0, \
            "the routing helpers name another owner of key 0 than the job's own routing"
        source = sources[remote_only]
        consumed = sums[owner].report.records_in  # of both sources: at most what came off the remote channel
        # all but what the consumer took sits in credits (sent, not yet taken) or in the writer's
        # current buffer and backlog (one buffer: a source overdraws by one poll at most)
        assert source.report.records_out - consumed <= (INITIAL_CREDITS + 2) * buffer_records, \
            (source.report.records_out, consumed, buffer_records)
        assert source.report.records_out < COUNT // 4, "the source ran far ahead of its slow consumer"
    last = {t.report.subtask: t for t in samples[-1] if t.report.source}[remote_only]
    assert last.backpressure == "high", (last.report.name, last.backpressured_ratio)
