"""Network buffers of ``--buffer-size`` bytes: a record writer whose channel crosses to another
process fits the records a buffer holds to the bytes its records take on the wire, between one
record a buffer and :data:`MAX_BUFFER_RECORDS`; the records arrive whole and in order."""

from __future__ import annotations

import pickle
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekit.runtime.exchange.batch_path import emit_all_of
from statekit.runtime.exchange.input_gate import InputGate
from statekit.runtime.exchange.network import NetworkEndpoint, OutboundLink
from statekit.runtime.exchange.partitioning import Partitioning
from statekit.runtime.exchange.record_writer import (
    MAX_BUFFER_RECORDS,
    PROBE_BUFFER_RECORDS,
    ChannelTarget,
    RecordWriter,
)

TOKEN = b"t" * 32


@pytest.fixture
def remote() -> Iterator[tuple[InputGate, OutboundLink]]:
    """A consumer's gate behind a network endpoint, and a link to it from 'another host'."""
    with tempfile.TemporaryDirectory() as run_dir:
        endpoint = NetworkEndpoint(str(Path(run_dir) / "tm0.sock"), TOKEN)
        gate = InputGate(1000, 1)
        endpoint.serve({(1, 0): gate})
        link = OutboundLink(str(Path(run_dir) / "tm0.sock"), TOKEN, "tm0")
        try:
            yield gate, link
        finally:
            link.close()
            endpoint.close()


def _send_and_receive(writer: RecordWriter, gate: InputGate, records: list[Any]) -> list[list[Any]]:
    """Emit ``records``, flush, and take every buffer the gate receives (credits flow back as taken)."""
    for record in records:
        writer.emit(record)
    writer.flush()
    buffers: list[list[Any]] = []
    deadline = time.monotonic() + 20
    while sum(map(len, buffers)) < len(records):
        assert time.monotonic() < deadline, f"{sum(map(len, buffers))} of {len(records)} records arrived"
        writer.deliver()
        item = gate.take(0.05)
        if item is not None:
            buffers.append(list(item[1]))
    return buffers


@pytest.mark.parametrize("buffer_bytes", [2048, 32 * 1024])
def test_buffers_hold_as_many_records_as_fit_in_buffer_size_bytes(
        remote: tuple[InputGate, OutboundLink], buffer_bytes: int) -> None:
    gate, link = remote
    writer = RecordWriter([link.gate(1, 0).target(0)], Partitioning.FORWARD, buffer_size=512,
                          buffer_bytes=buffer_bytes)
    records = [f"user-{i:06d}-clicked" for i in range(20_000)]
    buffers = _send_and_receive(writer, gate, records)
    assert [r for b in buffers for r in b] == records
    assert len(buffers[0]) == PROBE_BUFFER_RECORDS  # the first buffer probes the bytes a record takes
    full = buffers[2:-1]
    wire = [len(pickle.dumps(b, protocol=5)) for b in full]
    assert full and all(0.85 * buffer_bytes <= n <= 1.15 * buffer_bytes for n in wire), wire
    assert writer.buffer_records == len(full[0])


def test_a_buffer_holds_one_record_at_least(remote: tuple[InputGate, OutboundLink]) -> None:
    gate, link = remote
    big = RecordWriter([link.gate(1, 0).target(0)], Partitioning.FORWARD, buffer_size=4, buffer_bytes=1024)
    records = [b"x" * 5000 + bytes([i]) for i in range(12)]
    buffers = _send_and_receive(big, gate, records)
    assert [r for b in buffers for r in b] == records
    assert len(buffers[0]) == 4 and all(len(b) == 1 for b in buffers[1:])


def test_a_buffer_holds_max_buffer_records_at_most(remote: tuple[InputGate, OutboundLink]) -> None:
    gate, link = remote
    tiny = RecordWriter([link.gate(1, 0).target(0)], Partitioning.FORWARD, buffer_size=512,
                        buffer_bytes=1 << 24)
    records = list(range(3 * MAX_BUFFER_RECORDS))
    buffers = _send_and_receive(tiny, gate, records)
    assert [r for b in buffers for r in b] == records
    assert [len(b) for b in buffers] == ([PROBE_BUFFER_RECORDS] + [MAX_BUFFER_RECORDS] * 2
                                        + [MAX_BUFFER_RECORDS - PROBE_BUFFER_RECORDS])


def test_large_records_make_no_frame_far_beyond_the_buffer_bytes(remote: tuple[InputGate, OutboundLink]) -> None:
    """Before anything crossed, a writer does not know a record's size: its first buffer is a probe
    of a few records, not buffer_size records of whatever size (512 records of 4 KiB would be a
    2 MiB frame for a 32 KiB buffer)."""
    gate, link = remote
    writer = RecordWriter([link.gate(1, 0).target(0)], Partitioning.FORWARD, buffer_size=512,
                          buffer_bytes=32 * 1024)
    records = [f"{i:06d}".encode() + b"x" * 4096 for i in range(600)]
    buffers = _send_and_receive(writer, gate, records)
    assert [r for b in buffers for r in b] == records
    wire = [len(pickle.dumps(b, protocol=5)) for b in buffers]
    assert len(buffers[0]) == PROBE_BUFFER_RECORDS and wire[0] < 70_000  # not 512 records: 2.1 MB
    assert max(wire[1:]) <= 32 * 1024, wire
    assert all(len(b) == 7 for b in buffers[1:-1]), [len(b) for b in buffers]  # 32 KiB / 4.1 KiB


def test_a_writer_with_only_local_channels_starts_at_its_record_count() -> None:
    """The probe is for remote channels: a local gate measures nothing, so a local writer's buffers
    keep buffer_size records."""
    gate = InputGate(1000, 1)
    writer = RecordWriter([ChannelTarget(gate, 0)], Partitioning.FORWARD, buffer_size=512, buffer_bytes=32 * 1024)
    assert writer.buffer_records == 512


def test_a_writer_without_buffer_bytes_keeps_its_record_count(remote: tuple[InputGate, OutboundLink]) -> None:
    gate, link = remote
    writer = RecordWriter([link.gate(1, 0).target(0)], Partitioning.FORWARD, buffer_size=100)
    buffers = _send_and_receive(writer, gate, list(range(1000)))
    assert [len(b) for b in buffers] == [100] * 10


def test_a_keyed_writer_resizes_its_emitters_buffers_too(remote: tuple[InputGate, OutboundLink]) -> None:
    """The hash emitter (and its whole-poll variant) keep the buffer size in a closure: it follows."""
    gate, link = remote
    local = InputGate(10_000, 1)
    writer = RecordWriter([link.gate(1, 0).target(0), ChannelTarget(local, 0)], Partitioning.HASH,
                          key_selector=lambda record: record, buffer_size=512, buffer_bytes=2048)
    remote_records = [r for r in (f"k{i:05d}" for i in range(40_000)) if writer.channel_for_key(r) == 0]
    buffers = _send_and_receive(writer, gate, remote_records[:600])  # the probe, then fitted buffers
    size = writer.buffer_records
    assert size != 512 and 0.85 * 2048 <= len(pickle.dumps(remote_records[:size], protocol=5)) <= 1.15 * 2048
    emit_all = emit_all_of(writer.emit)
    assert emit_all is not None
    emit_all(remote_records[600:600 + 3 * size])
    received: list[list[Any]] = []
    deadline = time.monotonic() + 20
    while len(received) < 3:
        assert time.monotonic() < deadline
        writer.deliver()
        item = gate.take(0.05)
        if item is not None:
            received.append(list(item[1]))
    assert [len(b) for b in received] == [size] * 3
    assert [r for b in buffers + received for r in b] == remote_records[:600 + 3 * size]
