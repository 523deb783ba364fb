"""Bounded channels (backpressure), mails, buffers and key-group routing."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekit.runtime.checkpoint.barriers import Barrier
from statekit.runtime.exchange.input_gate import MAIL, InputGate, TaskCancelled
from statekit.runtime.exchange.partitioning import Partitioning
from statekit.runtime.exchange.record_writer import ChannelTarget, RecordWriter
from statekit.statefmt.keygroups import assign_to_key_group, compute_operator_index_for_key_group
from statekit.statefmt.serializers import get_serializer


def test_a_full_gate_blocks_its_producer_until_the_consumer_takes() -> None:
    gate = InputGate(capacity=2)
    gate.put((0, [1]))
    gate.put((0, [2]))
    done = threading.Event()

    def produce() -> None:
        gate.put((0, [3]))
        done.set()

    threading.Thread(target=produce, daemon=True).start()
    assert not done.wait(0.2)  # backpressure: the third buffer waits
    gate.put_mail("notify")  # mails bypass the bound (and are queued behind the data)
    assert gate.take(1) == (0, [1])
    assert gate.take(1) == (0, [2])
    assert done.wait(1)
    assert [gate.poll() for _ in range(3)] == [(MAIL, "notify"), (0, [3]), None]


def test_cancelling_a_gate_releases_blocked_producers() -> None:
    gate = InputGate(capacity=1)
    gate.put((0, []))
    failure: list[BaseException] = []

    def produce() -> None:
        try:
            gate.put((0, []))
        except TaskCancelled as exc:
            failure.append(exc)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    time.sleep(0.05)
    gate.cancel()
    thread.join(1)
    assert failure and isinstance(failure[0], TaskCancelled)


def test_keyed_exchange_routes_by_key_group_in_buffers() -> None:
    gates = [InputGate(100) for _ in range(3)]
    writer = RecordWriter([ChannelTarget(g, 5) for g in gates], Partitioning.HASH, key_selector=lambda r: r[0],
                          max_parallelism=128, buffer_size=4)
    records = [(f"k{i % 10}", i) for i in range(40)]
    for record in records:
        writer.emit(record)
    writer.broadcast_event(Barrier(1, 0))
    pack = get_serializer("msgpack").serialize
    for index, gate in enumerate(gates):
        items = []
        while (item := gate.poll()) is not None:
            items.append(item)
        assert all(channel == 5 for channel, _ in items)
        *buffers, (_, barrier) = items
        assert isinstance(barrier, Barrier)  # after every record of this channel
        assert all(1 <= len(b) <= 4 for _, b in buffers)
        received = [r for _, b in buffers for r in b]
        expected = [r for r in records
                    if compute_operator_index_for_key_group(128, 3, assign_to_key_group(pack(r[0]), 128)) == index]
        assert received == expected


_KEYS = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
    | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


@given(keys=st.lists(_KEYS, min_size=1, max_size=20), max_parallelism=st.sampled_from([1, 7, 128, 32768]))
@settings(max_examples=150, deadline=None)
def test_the_keyed_exchange_routes_every_key_where_the_snapshot_format_puts_it(
        keys: list[object], max_parallelism: int) -> None:
    """The writer's own msgpack Packer gives the key bytes of the key serializer, so a record
    goes to the subtask whose state file holds its key group (also after a packing error)."""
    writer = RecordWriter([ChannelTarget(InputGate(10), 0) for _ in range(3)], Partitioning.HASH,
                          key_selector=lambda r: r, max_parallelism=max_parallelism)
    pack = get_serializer("msgpack").serialize
    for key in keys:
        with pytest.raises(TypeError):
            writer.channel_for_key(object())  # a failed pack leaves nothing behind in the buffer
        expected = compute_operator_index_for_key_group(
            max_parallelism, 3, assign_to_key_group(pack(key), max_parallelism))
        assert writer.channel_for_key(key) == expected


@pytest.mark.parametrize("partitioning", [Partitioning.REBALANCE, Partitioning.BROADCAST])
def test_rebalance_and_broadcast(partitioning: Partitioning) -> None:
    gates = [InputGate(100) for _ in range(2)]
    writer = RecordWriter([ChannelTarget(g, 0) for g in gates], partitioning, buffer_size=100)
    for i in range(6):
        writer.emit(i)
    writer.flush()
    got = [gate.poll() for gate in gates]
    if partitioning is Partitioning.REBALANCE:
        assert got == [(0, [0, 2, 4]), (0, [1, 3, 5])]
    else:
        assert got == [(0, list(range(6))), (0, list(range(6)))]
